"""A run whose coordinator lives in this process: the in-process handle, and the run a Dask
coordinator actor hosts on its worker (there the factory puts the peers on other workers).

It owns what a run leaves behind: the event log (and `run_dir/events.jsonl`), the running
totals, snapshots at step boundaries, the summary and the final checkpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, load_corpus
from labkit.model.assembly import initial_states
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.coordinator import Coordinator
from labkit.runtime.evaluate import Validation
from labkit.runtime.handle import RunHandle, Snapshot, ended_summary, leave_record, open_record
from labkit.runtime.ports import PeerFactory
from labkit.runtime.totals import RunTotals

FactoryBuilder = Callable[[RunConfig, Corpus], PeerFactory]
MEMBERSHIP_VERBS = ("kill_peer", "add_peer", "move_peer", "rebalance")  # served by the coordinator's membership


def resumed_config(cfg: RunConfig, checkpoint: dict[str, Any] | None) -> RunConfig:
    """`cfg` continuing with the layer split and sync mode the checkpointed run had."""
    if checkpoint is None:
        return cfg
    saved = RunConfig.from_dict(checkpoint["config"])
    return cfg.replace(layer_split=saved.layer_split, sync=saved.sync)


class LocalRun(RunHandle):
    """A live run coordinated from this process; `peers(cfg, corpus)` builds its peer factory."""

    def __init__(self, cfg: RunConfig, peers: FactoryBuilder, *, run_dir: str | Path | None = None,
                 resume: str | Path | dict | None = None, trace: bool = False) -> None:
        self._resume = resume if isinstance(resume, dict) or resume is None else load_checkpoint(resume, cfg)
        self.config = cfg = resumed_config(cfg, self._resume)
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self._totals = RunTotals(cfg.stages)
        self.events.listeners.append(self._totals.add)
        self._peers = peers
        self._coordinator: Coordinator | None = None
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []  # snapshot() requests, served at the next step boundary
        self._final = False  # the run has ended: snapshots are taken at once, of the final state
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._start_thread(self._main, "labkit-run")

    # -- life cycle ----------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            corpus = load_corpus(self.config.data)
            resume = self._resume
            states = [dict(s) for s in resume["stages"]] if resume else initial_states(self.config)
            c = Coordinator(self.config, self.events, self._peers(self.config, corpus), states,
                            step=resume["step"] if resume else 0, evaluate=Validation(corpus.val))
            c.step_hooks.append(self._on_step)
            self._coordinator = c
            self._ready.set()
            c.start(corpus.describe())
            while not c.stopped.wait(0.2) and not self._stop.is_set():
                pass
            c.stop()
            c.join()
            self._finish(c, corpus.describe())
        except Exception as exc:
            self._summary = {"status": "failed", **self._totals.summary(None), "error": f"{type(exc).__name__}: {exc}"}
            self.events.emit(events.run(time.perf_counter() - self._started, state="failed",
                                        reason=self._summary["error"]))
            self._ready.set()
        finally:
            self.events.close()
            self._done.set()

    def _on_step(self, step: int) -> None:
        """Step hook (lock held): serve snapshot requests at this consistent boundary (with
        DiLoCo, at an outer-step boundary, where every peer holds the global parameters)."""
        if self._coordinator.schedule.inner != 0:
            return
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        for future in pending:
            future.set_result(self._capture())

    def _capture(self) -> Snapshot:
        """The committed state, with the layer split and sync mode in force."""
        c = self._coordinator
        return Snapshot(c.cfg.replace(sync=c.schedule.cfg), c.ledger.step, list(c.snapshots))

    def _status(self, c: Coordinator) -> str:
        """How the run ended: failed (an error), diverged (a non-finite loss), finished or stopped."""
        if c.error is not None:
            return "failed"
        if self._totals.diverged is not None:
            return "diverged"
        return "finished" if c.finished.is_set() else "stopped"

    def _finish(self, c: Coordinator, corpus: str) -> None:
        status = self._status(c)
        if status != "failed" and self._totals.val_step != c.ledger.step:
            c.evaluate()  # stopped (or diverged) between evaluations: measure the state it ends with
        self._summary = ended_summary(status, c.ledger.step, self._totals, time.perf_counter() - self._started, corpus,
                                      c.error, self._totals.diverged if status == "diverged" else None)
        with self._lock:  # requests no boundary will serve any more get the final state
            pending, self._snapshots, self._final = self._snapshots, [], True
        leave_record(self.run_dir, self._summary, self._capture(), pending)
        reason = self._summary.get("error") or self._summary.get("reason", "")
        self.events.emit(events.run(c.clock(), state=status, reason=reason))

    def coordinator(self) -> Coordinator:
        """The run's coordinator, once it exists (raises if the run failed to start)."""
        self._ready.wait()
        if self._coordinator is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        return self._coordinator

    # -- the contract --------------------------------------------------------------------------
    def _verb(self, name: str, *args: Any) -> Any:
        if name == "stop":
            self._stop.set()
            if self._coordinator is not None:
                self._coordinator.stop()
            return None
        c = self.coordinator()
        return getattr(c.members if name in MEMBERSHIP_VERBS else c, name)(*args)

    def snapshot(self) -> Future:
        """The committed state at the next step boundary (the final state once the run ended)."""
        future: Future = Future()
        self.coordinator()
        with self._lock:
            if self._final:
                future.set_result(self._capture())
            else:
                self._snapshots.append(future)
        return future

    def state(self) -> dict[str, Any]:
        if not self._ready.is_set() or self._coordinator is None:
            return {"status": "failed" if self._done.is_set() else "starting", "step": 0, "stages": []}
        state = self._coordinator.state()
        if self._done.is_set():
            state["status"] = self._summary.get("status", "failed")
        return state
