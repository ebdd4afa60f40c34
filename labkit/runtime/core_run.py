"""The run handle around a run core that lives in this process: ATOM's replicas and the task pool paper's
task pool both run behind it.

A core owns the work (threads, or actors it drives from here) and its lock; this handle loads the
corpus and the starting state, evaluates, serves snapshots at step boundaries, forwards the verbs
that make sense for the executor (the others raise one error saying why) and, at the end, leaves
the same record a SWARM run leaves: events, summary and a checkpoint that the other executors
resume where the shapes agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, load_corpus
from labkit.model.assembly import initial_states
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.evaluate import Validation
from labkit.runtime.handle import JOIN_SECONDS, RunHandle, Snapshot, ended_summary, leave_record, open_record
from labkit.runtime.totals import RunTotals


class RunCore(Protocol):
    """What the handle needs of a core: its lock and flags, its step, its verbs and its state."""

    cond: threading.Condition
    stopping: bool
    finished: threading.Event
    error: BaseException | None
    diverged: str | None
    step_hooks: list[Callable[[int], None]]
    step: int

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> None: ...
    def stage_states(self) -> list[dict[str, Any]]: ...
    def state(self) -> dict[str, Any]: ...
    def kill(self, name: str) -> None: ...
    def add(self, stage: int | None) -> str: ...
    def peer_state(self, name: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


def fail_core(core: Any, exc: BaseException) -> None:
    """End `core`'s run on an unexpected error (a bug, not a fault), with the error in one `run`
    `failed` event; what ATOM's replicas and the task pool both do."""
    with core.cond:
        if core.error is None:
            core.error = exc
            core.emit(events.run(core.clock(), state="failed", reason=f"{type(exc).__name__}: {exc}"))
        core.stopping = True
        core.cond.notify_all()


# (config, corpus, starting stage states, starting step, emit, clock) -> the core, not started yet
CoreFactory = Callable[[RunConfig, Corpus, Sequence[Mapping[str, Any]], int, Callable[[events.Event], None],
                        Callable[[], float]], RunCore]


class CoreRun(RunHandle):
    """A live run whose core `build` makes; its checkpoints have the stages of the executor's
    record config (ATOM's: one, the whole model), and the verbs its spec refuses raise one error."""

    def __init__(self, cfg: RunConfig, build: CoreFactory, *, run_dir: str | Path | None = None,
                 resume: str | Path | None = None, trace: bool = False) -> None:
        record_cfg = cfg.spec.record(cfg)
        self._resume = None if resume is None else load_checkpoint(resume, record_cfg)
        if cfg.threads:  # process-wide, as the in-process SWARM backend sets it
            torch.set_num_threads(cfg.threads)
        self.config, self._build, self._executor, self._record_cfg = cfg, build, cfg.spec.name, record_cfg
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self._totals = RunTotals(record_cfg.stages)
        self.events.listeners.append(self._totals.add)
        self._core: RunCore | None = None
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []
        self._lock = threading.Lock()
        self._started = time.time()  # the wall clock, which a core's remote workers share
        self._start_thread(self._main, f"{executor}-run")

    def _clock(self) -> float:
        return time.time() - self._started

    def _main(self) -> None:
        core = None
        try:
            corpus = load_corpus(self.config.data)
            resume = self._resume
            states = resume["stages"] if resume else initial_states(self._record_cfg)
            core = self._build(self.config, corpus, states, resume["step"] if resume else 0, self.events.emit,
                               self._clock)
            self._evaluate = Validation(corpus.val)
            core.step_hooks.append(self._on_step)
            self._core = core
            self._ready.set()
            self.events.emit(events.run(self._clock(), state="started", reason=corpus.describe()))
            self._eval(core)
            if not self._stop.is_set():  # a stop asked while starting counts too
                core.start()
            while not core.stopping and not self._stop.is_set():
                with core.cond:
                    core.cond.wait(timeout=0.2)
            core.stop()
            core.join(JOIN_SECONDS)
            self._finish(core, corpus.describe())
        except Exception as exc:
            self._summary = {"status": "failed", **self._totals.summary(None), "error": f"{type(exc).__name__}: {exc}"}
            self.events.emit(events.run(self._clock(), state="failed", reason=self._summary["error"]))
            self._ready.set()
        finally:
            if core is not None:
                core.close()
            self.events.close()
            self._done.set()

    def _eval(self, core: RunCore) -> None:
        loss = self._evaluate(self._record_cfg, [s["params"] for s in core.stage_states()])
        self.events.emit(events.evaluation(self._clock(), step=core.step, val_loss=loss))

    def _on_step(self, step: int) -> None:
        """Step hook (lock held): evaluate when due, and serve snapshot requests."""
        every = self.config.eval_every
        if (every and step % every == 0) or step == self.config.steps:
            self._eval(self._core)
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        for future in pending:
            future.set_result(self._capture())

    def _capture(self) -> Snapshot:
        """The committed state as a checkpoint of `record_cfg`'s stages."""
        return Snapshot(self._record_cfg, self._core.step, self._core.stage_states())

    def _finish(self, core: RunCore, corpus: str) -> None:
        status = ("failed" if core.error is not None else "diverged" if core.diverged
                  else "finished" if core.finished.is_set() else "stopped")
        with core.cond:
            if status != "failed" and self._totals.val_step != core.step:
                self._eval(core)
            snapshot = self._capture()
        self._summary = ended_summary(status, core.step, self._totals, time.time() - self._started, corpus,
                                      core.error, core.diverged, executor=self._executor)
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        leave_record(self.run_dir, self._summary, snapshot, pending)
        self.events.emit(events.run(self._clock(), state=status, reason=self._summary.get("error") or
                                    self._summary.get("reason", "")))

    def _core_or_raise(self) -> RunCore:
        self._ready.wait()
        if self._core is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        return self._core

    # -- the contract --------------------------------------------------------------------------
    def _verb(self, name: str, *args: Any) -> Any:
        if refusal := self.config.spec.refusal(name):
            raise ValueError(refusal)
        if name == "stop":
            self._stop.set()
            if self._core is not None:
                self._core.stop()
            return None
        core = self._core_or_raise()
        if self.done:
            raise RuntimeError(f"{name} needs a live run; this one has ended ({self._summary.get('status')})")
        if name == "kill_peer":
            return core.kill(*args)
        if name == "add_peer":
            return core.add(*(args or (None,)))
        if name == "peer_state":
            return core.peer_state(*args)
        if name == "set_peer_delay":
            return core.set_delay(*args)
        raise ValueError(f"verb={name!r} is not allowed")

    def snapshot(self) -> Future:
        future: Future = Future()
        core = self._core_or_raise()
        with core.cond:
            if self.done or core.stopping:
                future.set_result(self._capture())
            else:
                with self._lock:
                    self._snapshots.append(future)
        return future

    def state(self) -> dict[str, Any]:
        if self._core is None:
            return {"status": "failed" if self.done else "starting", "step": 0, "stages": [], "executor": self._executor}
        status = self._summary.get("status", "failed") if self.done else "running"
        return {"status": status, "steps": self.config.steps, "executor": self._executor, **self._core.state()}
