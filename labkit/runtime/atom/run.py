"""The ATOM run behind the one run handle: profile the model, search a partition that fits the
device budget, start the replicas, and leave the same record a SWARM run leaves.

Verbs that make sense for whole-model replicas work (state, stop, kill_peer and add_peer on
replicas, peer_state, snapshot and checkpoint, wait and wait_for); the stage verbs raise one
error saying why. A checkpoint holds one stage, the whole model, so a one-stage SWARM run (or
another ATOM run) resumes it.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import build_stage, init_full_state
from labkit.plan.atom_partition import least_budget, partition
from labkit.plan.atom_profile import LayerCost
from labkit.runtime.atom.profile import flow_bytes, measure_profile
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


def one_stage(cfg: RunConfig) -> RunConfig:
    """`cfg` as one stage holding the whole model: how an ATOM run evaluates and checkpoints."""
    return cfg.replace(stages=1, peers=1)


def accumulation(cfg: RunConfig) -> int:
    """C in effect: an iteration never takes more microbatches than a step has."""
    return min(cfg.atom.accumulation, cfg.microbatches_per_step)


def device_budget(cfg: RunConfig, profile: tuple[LayerCost, ...]) -> tuple[int, int]:
    """(the device budget in bytes, the part of it left for sub-models after the activations in
    flight): `budget_mb`, or the least budget in which some partition works at this C."""
    c = accumulation(cfg)
    flow = math.ceil(flow_bytes(profile, c, target_bytes=cfg.microbatch * cfg.model.seq_len * 8))  # int64 targets
    least = math.ceil(least_budget(profile, c, together=True))
    if cfg.atom.budget_mb is None:
        return flow + least, least
    budget = int(cfg.atom.budget_mb * 1e6)
    if budget < flow + least:
        raise ValueError(f"atom.budget_mb={cfg.atom.budget_mb} is not allowed: at accumulation={c} "
                         f"and microbatch={cfg.microbatch} the activations in flight need {flow / 1e6:.3f} MB and the "
                         f"smallest partition of this profile {least / 1e6:.3f} MB more: budget_mb >= "
                         f"{(flow + least) / 1e6:.3f} works (or None, that least budget)")
    return budget, budget - flow


class AtomRun(RunHandle):
    """A live ATOM run whose replicas are threads of this process."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
                 trace: bool = False) -> None:
        if cfg.atom.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("atom.device='cuda' is not allowed here: torch.cuda.is_available() is False (a CPU "
                             "build of torch, or no GPU visible); use 'cpu'")
        try:
            self._resume = None if resume is None else load_checkpoint(resume, one_stage(cfg))
        except ValueError as exc:
            raise ValueError(f"executor='atom' resumes a one-stage checkpoint (the whole model, as ATOM and "
                             f"one-stage SWARM runs write): {exc}") from None
        if cfg.threads:  # process-wide, as the in-process SWARM backend sets it
            torch.set_num_threads(cfg.threads)
        self.config = cfg
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self._totals = RunTotals(1)
        self.events.listeners.append(self._totals.add)
        self._replicas: AtomReplicas | None = None
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        threading.Thread(target=self._main, name="atom-run", daemon=True).start()

    def _clock(self) -> float:
        return time.perf_counter() - self._started

    def _main(self) -> None:
        cfg = self.config
        try:
            corpus = load_corpus(cfg.data)
            resume = self._resume
            params = resume["stages"][0]["params"] if resume else init_full_state(cfg.model, cfg.seed)
            profile = measure_profile(build_stage(cfg.model, 0, cfg.model.n_layer, params), cfg.atom.device,
                                      cfg.microbatch)
            budget, for_submodels = device_budget(cfg, profile)
            plan = partition(profile, for_submodels, accumulation(cfg), together=True)
            self.events.emit(events.setting(self._clock(), name="atom_partition", value={
                "sizes": list(plan.sizes), "budget_bytes": budget, "model_bytes": int(sum(x.memory for x in profile)),
                "layers": [layer.name for layer in profile]}))
            sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
            replicas = AtomReplicas(cfg, sampler, self.events.emit, self._clock, params, plan.sizes, budget,
                                    step=resume["step"] if resume else 0)
            if resume and resume["stages"][0]["optimizer"] is not None:
                for replica in replicas.live():
                    replica.optimizer.load_state_dict(copy.deepcopy(resume["stages"][0]["optimizer"]))
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
            self.events.close()
            self._done.set()

    def _eval(self, replicas: AtomReplicas) -> None:
        one = one_stage(self.config)
        loss = self._evaluate(one, [replicas.live()[0].model.state_dict()])
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
        self._summary = ended_summary(status, replicas.ledger.step, self._totals, time.perf_counter() - self._started,
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
