"""ATOM's replicas side by side, made one run by the global-batch rule (seed 004 §III-E).

Every replica trains the whole model through its own `SwapReplica`, taking C microbatches of the
step at a time from a one-stage `StepLedger` (the SWARM ledger: each microbatch is credited to the
replica that accumulated its gradient). The credited samples are the replicas' heartbeat counts;
when they reach the global batch, the replicas' gradients are summed and every replica takes the
same optimizer step, so all stay bit-identical. A replica that leaves loses its credits and its
microbatches are computed again by the others; a joiner copies a live replica's parameters and
optimizer state.
"""

from __future__ import annotations

import copy
import itertools
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.model import Stage, build_stage
from labkit.runtime.atom.swap import Interrupted, SwapReplica, SwapSpan
from labkit.runtime.optim import apply_step, make_optimizer
from labkit.swarm.ledger import StepLedger, Task


@dataclass
class Replica:
    """One whole-model replica: its host model and optimizer, its swapper, its thread."""

    name: str
    model: Stage
    optimizer: torch.optim.Optimizer
    swap: SwapReplica
    alive: bool = True
    samples: int = 0  # samples it has processed, all steps (its heartbeat count)
    tasks: list[Task] = field(default_factory=list)  # the microbatches it works on now
    thread: threading.Thread | None = field(default=None, repr=False)


class AtomReplicas:
    """The replicas of one ATOM run, their ledger and the global-batch step."""

    def __init__(self, cfg: RunConfig, sampler: WindowSampler, emit: Callable[[events.Event], None],
                 clock: Callable[[], float], params: Mapping[str, torch.Tensor], sizes: tuple[int, ...],
                 budget: int, step: int = 0) -> None:
        self.cfg, self.sampler, self.emit, self.clock = cfg, sampler, emit, clock
        self.sizes, self.budget = sizes, budget
        self.ledger = StepLedger(1, cfg.microbatches_per_step, cfg.microbatch, step=step)
        self.cond = threading.Condition()
        self.replicas: dict[str, Replica] = {}
        self.stopping = False
        self.finished = threading.Event()  # the last step was committed
        self.last_loss: float | None = None
        self.diverged: str | None = None  # why the run stopped on a non-finite step, if it did
        self.error: BaseException | None = None
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self.started = False  # start() was called: a joiner's thread starts at once
        self._boundary: threading.Thread | None = None
        self._numbers = itertools.count()
        self._scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
        for _ in range(cfg.atom.replicas):
            self._spawn(params, None)

    # -- membership ----------------------------------------------------------------------------
    def _spawn(self, params: Mapping[str, torch.Tensor], optimizer_state: dict[str, Any] | None) -> Replica:
        cfg = self.cfg
        name = f"r{next(self._numbers)}"
        model = build_stage(cfg.model, 0, cfg.model.n_layer, params)
        optimizer = make_optimizer(model.parameters(), cfg)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)

        def on_span(span: SwapSpan) -> None:
            self.emit(events.swap(self.clock(), replica=name, submodel=span.submodel, phase=span.phase,
                                  load_start=span.load_start, load_end=span.load_end,
                                  compute_start=span.compute_start, compute_end=span.compute_end))
        swap = SwapReplica(model, self.sizes, cfg.atom.device, self.budget, cfg.atom.prefetch, self.clock, on_span)
        replica = Replica(name, model, optimizer, swap)
        self.replicas[name] = replica
        self.emit(events.peer(self.clock(), peer=name, stage=0, state="joined", queue=0))
        return replica

    def _run(self, replica: Replica) -> None:
        replica.thread = threading.Thread(target=self._work, args=(replica,), name=f"atom-{replica.name}", daemon=True)
        replica.thread.start()

    def start(self) -> None:
        """Start every replica's thread and the step's; a replica added earlier starts now."""
        with self.cond:
            self.started = True
            for replica in self.live():
                self._run(replica)
            self._boundary = threading.Thread(target=self._boundary_loop, name="atom-boundary", daemon=True)
            self._boundary.start()

    def join(self, timeout: float) -> None:
        """Wait for the replicas' threads (their iterations interrupted by `stop`) and the step's."""
        threads = [r.thread for r in self.replicas.values() if r.thread is not None] + [self._boundary]
        for thread in threads:
            if thread is not None:
                thread.join(timeout)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.alive]

    def kill(self, name: str) -> None:
        """A replica leaves: its credits are withdrawn and its microbatches done again by others."""
        with self.cond:
            replica = self.replicas.get(name)
            if replica is None or not replica.alive:
                raise ValueError(f"peer={name!r} is not allowed: one of the live replicas {[r.name for r in self.live()]}")
            if len(self.live()) == 1:
                raise ValueError(f"peer={name!r} is the last live replica: add_peer() another before it leaves")
            replica.alive = False
            replica.swap.interrupt()
            for task in replica.tasks:  # its thread may still be computing them: they go to others now
                self.ledger.finish(task, {})
            replica.tasks = []
            lost = self.ledger.peer_lost(name)
            self.emit(events.peer(self.clock(), peer=name, stage=0, state="killed", queue=0))
            self.emit(events.setting(self.clock(), name="recompute", value=f"{name}: {lost} samples"))
            self.cond.notify_all()

    def add(self) -> str:
        """A replica joins: it copies a live replica's parameters and optimizer state, which only
        change at a step (taken under this lock), so it starts bit-identical."""
        with self.cond:
            source = self.live()[0]
            params = {k: v.detach().clone() for k, v in source.model.state_dict().items()}
            replica = self._spawn(params, copy.deepcopy(source.optimizer.state_dict()))
            if self.started:
                self._run(replica)
            return replica.name

    def peer_state(self, name: str) -> dict[str, Any]:
        """A copy of one replica's parameters and optimizer state (to compare replicas)."""
        with self.cond:
            replica = self.replicas.get(name)
            if replica is None or not replica.alive:
                raise ValueError(f"peer={name!r} is not allowed: one of the live replicas {[r.name for r in self.live()]}")
            return {"params": {k: v.detach().clone() for k, v in replica.model.state_dict().items()},
                    "optimizer": copy.deepcopy(replica.optimizer.state_dict())}

    # -- the work ------------------------------------------------------------------------------
    def _work(self, replica: Replica) -> None:
        """Take up to C microbatches, run them through the swapper, credit them; until stopped."""
        try:
            while True:
                with self.cond:
                    while not (self.stopping or not replica.alive) and (tasks := self._take()) == []:
                        self.cond.wait(timeout=0.5)
                    if self.stopping or not replica.alive:
                        return
                    replica.tasks = tasks
                batches = [self.sampler.batch(t.step, t.microbatch, self.cfg.microbatch) for t in tasks]
                losses = replica.swap.iteration(batches, self._scale)
                with self.cond:
                    if not replica.alive:  # killed meanwhile: its microbatches were handed out again
                        return
                    for task, loss in zip(tasks, losses):
                        self.ledger.finish(task, {0: replica.name}, loss)
                    replica.tasks = []
                    replica.samples += len(tasks) * self.cfg.microbatch
                    self.cond.notify_all()
        except Interrupted:  # stopped or killed mid-iteration: that work is void
            pass
        except Exception as exc:  # a bug, not a fault: stop the run loudly
            self.fail(exc)
        finally:
            replica.swap.close()

    def _take(self) -> list[Task]:
        tasks = []
        while len(tasks) < self.cfg.atom.accumulation and (task := self.ledger.next_task()) is not None:
            tasks.append(task)
        return tasks

    def fail(self, exc: BaseException) -> None:
        """End the run on an unexpected error, with the error in a `run` `failed` event."""
        with self.cond:
            if self.error is None:
                self.error = exc
                self.emit(events.run(self.clock(), state="failed", reason=f"{type(exc).__name__}: {exc}"))
            self.stopping = True
            self.cond.notify_all()

    def stop(self) -> None:
        """Hand out no more work and interrupt the iterations under way."""
        with self.cond:
            self.stopping = True
            for replica in self.replicas.values():
                replica.swap.interrupt()
            self.cond.notify_all()

    # -- the global-batch step -----------------------------------------------------------------
    def _boundary_loop(self) -> None:
        with self.cond:
            while not self.stopping:
                if not self.ledger.ready():
                    self.cond.wait(timeout=0.5)
                    continue
                try:
                    self._step()
                except Exception as exc:  # a broken invariant ends the run loudly
                    self.fail(exc)
                self.cond.notify_all()

    def _step(self) -> None:
        """Sum the credited replicas' gradients; every live replica applies the same step."""
        credited = self.ledger.samples(0)
        sources = [self.replicas[name] for name in sorted(credited)]
        total = [torch.zeros_like(p) for p in sources[0].model.parameters()]
        for replica in sources:
            for acc, p in zip(total, replica.model.parameters()):
                acc.add_(p.grad)
        loss, step = self.ledger.loss(), self.ledger.step
        if not math.isfinite(loss):
            self.diverged = f"step {step}: the loss is {loss}"
            self.emit(events.run(self.clock(), state="diverged", reason=self.diverged))
            self.stopping = True
            return
        for replica in self.live():
            for p, g in zip(replica.model.parameters(), total):
                p.grad = g.clone()
            apply_step(replica.optimizer, step, self.cfg)
            replica.optimizer.zero_grad(set_to_none=True)
            replica.swap.release_all()
        self.ledger.advance()
        self.last_loss = loss
        samples = sum(credited.values())
        self.emit(events.step(self.clock(), step=step + 1, loss=loss, samples=samples,
                              tokens=samples * self.cfg.model.seq_len))
        for hook in self.step_hooks:
            hook(step + 1)
        if self.ledger.step >= self.cfg.steps:
            self.finished.set()
            self.stopping = True

    def state(self) -> dict[str, Any]:
        with self.cond:
            credited = self.ledger.samples(0)
            peers = [{"peer": r.name, "queue": 0, "samples": r.samples, "delay": 0.0, "worker": None,
                      "credited": credited.get(r.name, 0)} for r in self.live()]
            return {"step": self.ledger.step, "loss": self.last_loss, "paused_stages": [],
                    "stages": [{"stage": 0, "layers": list(range(self.cfg.model.n_layer)), "peers": peers}]}
