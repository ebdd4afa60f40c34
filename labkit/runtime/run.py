"""The one run shell: a live run of any executor, whose core lives in this process.

`Run` owns a run's life for every executor and backend: it loads the corpus and the starting
state, builds the executor's core (which puts its workers in threads here or on a Dask cluster),
evaluates when due, serves snapshots at consistent step boundaries, turns verbs into typed calls
on the core (after asking the executor's spec whether it refuses them), works out the status,
and at the end leaves the record: events, summary.json and a checkpoint.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import load_corpus
from labkit.model.assembly import initial_states
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.core import CoreFactory, RunCore, evaluation_due
from labkit.runtime.evaluate import Validation
from labkit.runtime.handle import JOIN_SECONDS, RunHandle, Snapshot, ended_summary, leave_record, open_record
from labkit.runtime.held_checkpoints import HeldCheckpoints
from labkit.runtime.ports import RunEnded
from labkit.runtime.totals import RunTotals

WAIT_SECONDS = 0.2  # how often the run's thread looks whether the core stopped by itself


def resumed_config(cfg: RunConfig, checkpoint: dict[str, Any] | None) -> RunConfig:
    """`cfg` continuing with what the checkpointed run could change mid-run and had changed: its
    layer split and sync mode, where the executor's spec does not refuse changing them."""
    if checkpoint is None:
        return cfg
    saved, spec = RunConfig.from_dict(checkpoint["config"]), cfg.spec
    changes = {"layer_split": saved.layer_split} if spec.refusal("set_layer_split") is None else {}
    if spec.refusal("set_sync") is None:
        changes["sync"] = saved.sync
    return cfg.replace(**changes)


class Run(RunHandle):
    """A live run of `cfg` whose core `build` makes; returns at once, the run goes on in a thread."""

    def __init__(self, cfg: RunConfig, build: CoreFactory, *, run_dir: str | Path | None = None,
                 resume: str | Path | None = None, trace: bool = False) -> None:
        checkpoint = None if resume is None else load_checkpoint(resume, cfg.spec.record(cfg))
        self.config = cfg = resumed_config(cfg, checkpoint)
        if cfg.threads:  # process-wide: every worker of this process computes with it
            torch.set_num_threads(cfg.threads)
        self._build, self._checkpoint = build, checkpoint
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self._totals = RunTotals(cfg.spec.record(cfg).stages)
        self.events.listeners.append(self._totals.add)
        self._core: RunCore | None = None
        self._held: HeldCheckpoints | None = None  # the checkpoints this shell writes for its core
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []  # snapshot() requests, served at the next consistent boundary
        self._final: Snapshot | None = None  # the run's final state, once it ended: what snapshots get at once
        self._lock = threading.Lock()
        self._started = time.time()  # the wall clock, which workers on other machines share
        self._start_thread(self._main, f"labkit-{cfg.spec.name}-run")

    def clock(self) -> float:
        """Seconds since the run started."""
        return time.time() - self._started

    # -- life cycle ----------------------------------------------------------------------------
    def _main(self) -> None:
        core = None
        try:
            corpus = load_corpus(self.config.data)
            cfg, checkpoint = self.config, self._checkpoint
            states = [dict(s) for s in checkpoint["stages"]] if checkpoint else initial_states(cfg.spec.record(cfg))
            step = checkpoint["step"] if checkpoint else 0
            core = self._build(cfg, corpus, states, step, self.events.emit, self.clock)
            if not core.writes_checkpoints and self.run_dir is not None:  # without one, no one could resume
                self._held = HeldCheckpoints(cfg, self.run_dir, self.events.emit, self.clock)
                self._held.write(step, cfg.spec.record(cfg), states)
            self._evaluate = Validation(corpus.val)
            core.step_hooks.append(self._on_step)
            self._core = core
            self._ready.set()
            self.events.emit(events.run(self.clock(), state="started", reason=corpus.describe()))
            with core.cond:
                self._eval(core)
            if not self._stop.is_set():  # a stop asked while starting counts too
                core.start()
            while not core.stopping and not self._stop.is_set():
                with core.cond:
                    core.cond.wait(timeout=WAIT_SECONDS)
            core.stop()
            core.join(JOIN_SECONDS)
            self._finish(core, corpus.describe())
        except Exception as exc:
            self._summary = {"status": "failed", **self._totals.summary(None), "error": f"{type(exc).__name__}: {exc}"}
            self.events.emit(events.run(self.clock(), state="failed", reason=self._summary["error"]))
            self._ready.set()
        finally:
            if core is not None:
                core.close()
            if self._held is not None:
                self._held.remove()
            self.events.close()
            self._done.set()

    def _eval(self, core: RunCore) -> None:
        """The validation loss of the committed state (lock held): a stage's global parameters
        where it keeps them apart from its peers' local ones (DiLoCo), else its parameters."""
        cfg, states = core.committed()
        loss = self._evaluate(cfg, [s.get("global_params", s["params"]) for s in states])
        self.events.emit(events.evaluation(self.clock(), step=core.step, val_loss=loss))

    def _on_step(self, step: int) -> None:
        """Step hook (lock held): evaluate when due; where the state is consistent, write the
        checkpoint due (for a core that does not write its own) and serve snapshots."""
        core = self._core
        if evaluation_due(self.config, step):
            try:
                self._eval(core)
            except TimeoutError as exc:  # a stage's peers did not answer (`StatesUnread`): nothing to evaluate
                self.events.emit(events.setting(self.clock(), name="evaluation_skipped", value=str(exc)))
        if not core.consistent():
            return
        if self._held is not None:
            self._held.after_step(step, core.committed)
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        for future in pending:
            try:
                future.set_result(self._capture(core))
            except TimeoutError as exc:
                future.set_exception(exc)

    def _capture(self, core: RunCore) -> Snapshot:
        cfg, states = core.committed()
        return Snapshot(cfg, core.step, [dict(s) for s in states])

    def _status(self, core: RunCore) -> str:
        """How the run ended: failed (an error), diverged (a non-finite step), finished or stopped."""
        if core.error is not None:
            return "failed"
        if core.diverged:
            return "diverged"
        return "finished" if core.finished.is_set() else "stopped"

    def _finish(self, core: RunCore, corpus: str) -> None:
        status = self._status(core)
        with core.cond:
            if status != "failed" and self._totals.val_step != core.step:
                self._eval(core)  # stopped (or diverged) between evaluations: measure the state it ends with
            snapshot = self._capture(core)
        self._summary = ended_summary(status, core.step, self._totals, self.clock(), corpus, core.error,
                                      core.diverged, executor=self.config.spec.name)
        with self._lock:  # requests no boundary will serve any more get the final state
            pending, self._snapshots, self._final = self._snapshots, [], snapshot
        leave_record(self.run_dir, self._summary, snapshot, pending)
        self.events.emit(events.run(self.clock(), state=status, reason=self._summary.get("error") or
                                    self._summary.get("reason", "")))

    def _live_core(self, verb: str) -> RunCore:
        """The core, for `verb`: refused with the spec's reason, or once the run has ended."""
        if refusal := self.config.spec.refusal(verb):
            raise ValueError(refusal)
        self._ready.wait()
        if self._core is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        if self.done or self._core.stopping:
            raise RunEnded(f"{verb} is not available: the run has ended ({self._summary.get('status', 'stopping')}); "
                           f"snapshot() and checkpoint() still give its final state")
        return self._core

    # -- the contract --------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the run to stop after the work in flight; returns at once."""
        self._stop.set()
        if self._core is not None:
            self._core.stop()

    def dashboard(self, timeout: float | None = None) -> str | None:
        """The address of the workers' dashboard (Dask's), once the run's workers are up (waiting
        at most `timeout` seconds; None: until then); None where there is none."""
        self._ready.wait(timeout)
        return None if self._core is None else self._core.dashboard

    def snapshot(self) -> Future:
        """The committed state at the next consistent step boundary (the final state once ended)."""
        future: Future = Future()
        self._ready.wait()
        core = self._core
        if core is None:
            future.set_exception(RuntimeError(f"the run failed to start: {self._summary.get('error')}"))
            return future
        with core.cond:
            with self._lock:
                if self._final is not None:
                    future.set_result(self._final)
                    return future
                if not core.stopping:
                    self._snapshots.append(future)
                    return future
            future.set_result(self._capture(core))
        return future

    def state(self) -> dict[str, Any]:
        core, spec = self._core, self.config.spec
        if core is None:
            return {"status": "failed" if self.done else "starting", "step": 0, "stages": [], "executor": spec.name}
        state = {"steps": self.config.steps, **core.state(), "executor": spec.name}
        if self.done:
            state["status"] = self._summary.get("status", "failed")
        state.setdefault("status", "running")
        return state
