"""The ATOM run behind the one run handle: profile the model, search a partition that fits the
device budget, start the replicas, and leave the same record a SWARM run leaves.

Verbs that make sense for whole-model replicas work (state, stop, kill_peer and add_peer on
replicas, peer_state, snapshot and checkpoint, wait and wait_for); the stage verbs raise one
error saying why. A checkpoint holds one stage, the whole model, so a one-stage SWARM run (or
another ATOM run) resumes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, load_corpus
from labkit.model import init_full_state
from labkit.runtime.atom.local import LocalReplicas
from labkit.runtime.atom.replicas import AtomReplicas
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.evaluate import Validation
from labkit.runtime.handle import RunHandle, Snapshot, ended_summary, leave_record, open_record
from labkit.runtime.totals import RunTotals

WHY_NOT = {
    "move_peer": "every replica holds the whole model: there is no stage to move it to",
    "rebalance": "every replica holds the whole model: there are no stages to balance",
    "set_layer_split": "sub-models are cut by the partition search, not by a layer split",
    "set_peer_delay": "replicas take work at their own pace: a slow one simply processes fewer microbatches",
    "set_compression": "replicas send nothing between layers: there is no wire codec",
    "set_sync": "replicas always average at the global batch (ATOM's rule)",
}


JOIN_SECONDS = 60.0  # how long the end of a run waits for replicas to leave their interrupted iterations

HostFactory = Callable[[RunConfig, Corpus, Mapping[str, Any], Callable[[events.Event], None], Callable[[], float]], Any]


def one_stage(cfg: RunConfig) -> RunConfig:
    """`cfg` as one stage holding the whole model: how an ATOM run evaluates and checkpoints."""
    return cfg.replace(stages=1, peers=1)


class AtomRun(RunHandle):
    """A live ATOM run: its ledger and step here, its replicas where `hosts` puts them (threads of
    this process by default; `ReplicaHost` is the port)."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
                 trace: bool = False, hosts: HostFactory = LocalReplicas) -> None:
        if hosts is LocalReplicas and cfg.atom.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("atom.device='cuda' is not allowed here: torch.cuda.is_available() is False (a CPU "
                             "build of torch, or no GPU visible); use 'cpu'")
        try:
            self._resume = None if resume is None else load_checkpoint(resume, one_stage(cfg))
        except ValueError as exc:
            raise ValueError(f"executor='atom' resumes a one-stage checkpoint (the whole model, as ATOM and "
                             f"one-stage SWARM runs write): {exc}") from None
        if cfg.threads:  # process-wide, as the in-process SWARM backend sets it
            torch.set_num_threads(cfg.threads)
        self.config, self._hosts = cfg, hosts
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self._totals = RunTotals(1)
        self.events.listeners.append(self._totals.add)
        self._replicas: AtomReplicas | None = None
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []
        self._lock = threading.Lock()
        self._started = time.time()  # the wall clock, which a Dask replica's worker shares
        threading.Thread(target=self._main, name="atom-run", daemon=True).start()

    def _clock(self) -> float:
        return time.time() - self._started

    def _main(self) -> None:
        cfg, host = self.config, None
        try:
            corpus = load_corpus(cfg.data)
            resume = self._resume
            state = {"params": resume["stages"][0]["params"] if resume else init_full_state(cfg.model, cfg.seed),
                     "optimizer": resume["stages"][0]["optimizer"] if resume else None}
            host = self._hosts(cfg, corpus, state["params"], self.events.emit, self._clock)
            replicas = AtomReplicas(cfg, host, self.events.emit, self._clock, state, step=resume["step"] if resume else 0)
            self._evaluate = Validation(corpus.val)
            replicas.step_hooks.append(self._on_step)
            self._replicas = replicas
            self._ready.set()
            self.events.emit(events.run(self._clock(), state="started", reason=corpus.describe()))
            self._eval(replicas)
            if not self._stop.is_set():  # a stop asked while starting counts too
                replicas.start()
            while not replicas.stopping and not self._stop.is_set():
                with replicas.cond:
                    replicas.cond.wait(timeout=0.2)
            replicas.stop()
            replicas.join(JOIN_SECONDS)
            self._finish(replicas, corpus.describe())
        except Exception as exc:
            self._summary = {"status": "failed", **self._totals.summary(None), "error": f"{type(exc).__name__}: {exc}"}
            self.events.emit(events.run(self._clock(), state="failed", reason=self._summary["error"]))
            self._ready.set()
        finally:
            if host is not None:
                host.close()
            self.events.close()
            self._done.set()

    def _eval(self, replicas: AtomReplicas) -> None:
        one = one_stage(self.config)
        loss = self._evaluate(one, [replicas.peer_state(replicas.live()[0].name)["params"]])
        self.events.emit(events.evaluation(self._clock(), step=replicas.ledger.step, val_loss=loss))

    def _on_step(self, step: int) -> None:
        """Step hook (lock held): evaluate when due, and serve snapshot requests."""
        every = self.config.eval_every
        if (every and step % every == 0) or step == self.config.steps:
            self._eval(self._replicas)
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        for future in pending:
            future.set_result(self._capture())

    def _capture(self) -> Snapshot:
        """The committed state as a one-stage checkpoint: the whole model and its optimizer state."""
        replicas = self._replicas
        return Snapshot(one_stage(self.config), replicas.ledger.step, [replicas.peer_state(replicas.live()[0].name)])

    def _finish(self, replicas: AtomReplicas, corpus: str) -> None:
        status = ("failed" if replicas.error is not None else "diverged" if replicas.diverged
                  else "finished" if replicas.finished.is_set() else "stopped")
        with replicas.cond:
            if status != "failed" and self._totals.val_step != replicas.ledger.step:
                self._eval(replicas)
            snapshot = self._capture()
        self._summary = ended_summary(status, replicas.ledger.step, self._totals, time.time() - self._started,
                                      corpus, replicas.error, replicas.diverged, executor="atom")
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        leave_record(self.run_dir, self._summary, snapshot, pending)
        self.events.emit(events.run(self._clock(), state=status, reason=self._summary.get("error") or
                                    self._summary.get("reason", "")))

    def _replicas_or_raise(self) -> AtomReplicas:
        self._ready.wait()
        if self._replicas is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        return self._replicas

    # -- the contract --------------------------------------------------------------------------
    def _verb(self, name: str, *args: Any) -> Any:
        if name in WHY_NOT:
            raise ValueError(f"{name} is not available with executor='atom': {WHY_NOT[name]}")
        if name == "stop":
            self._stop.set()
            if self._replicas is not None:
                self._replicas.stop()
            return None
        replicas = self._replicas_or_raise()
        if self.done:
            raise RuntimeError(f"{name} needs a live run; this one has ended ({self._summary.get('status')})")
        if name == "kill_peer":
            return replicas.kill(*args)
        if name == "add_peer":
            if args and args[0] not in (None, 0):
                raise ValueError(f"stage={args[0]!r} is not allowed with executor='atom': None (replicas have no stages)")
            return replicas.add()
        if name == "peer_state":
            return replicas.peer_state(*args)
        raise ValueError(f"verb={name!r} is not allowed")

    def snapshot(self) -> Future:
        future: Future = Future()
        replicas = self._replicas_or_raise()
        with replicas.cond:
            if self.done or replicas.stopping:
                future.set_result(self._capture())
            else:
                with self._lock:
                    self._snapshots.append(future)
        return future

    def state(self) -> dict[str, Any]:
        if self._replicas is None:
            return {"status": "failed" if self.done else "starting", "step": 0, "stages": [], "executor": "atom"}
        status = self._summary.get("status", "failed") if self.done else "running"
        return {"status": status, "steps": self.config.steps, "executor": "atom", **self._replicas.state()}


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           trace: bool = False) -> AtomRun:
    """Start an ATOM run with every replica a thread of this process; returns its handle at once."""
    return AtomRun(cfg, run_dir=run_dir, resume=resume, trace=trace)
