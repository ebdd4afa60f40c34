"""ATOM's replicas side by side, made one run by the global-batch rule (the ATOM paper, §III-E).

Every replica trains the whole model (a `ReplicaEngine`, in this process or on a Dask worker),
taking C microbatches of the step at a time from a one-stage `StepLedger` (the SWARM ledger: each
microbatch is credited to the replica that accumulated its gradient). Replicas publish heartbeats
with their processed-sample counts (on Dask, to the hivemind DHT); when the counts reach the
global batch and agree with the ledger, the replicas' gradients are summed (the sync policy's
reduction) and every replica takes the same optimizer step, so all stay bit-identical. A replica
that leaves loses its credits and its microbatches are computed again by the others; a joiner
starts from a live replica's parameters and optimizer state.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.executors.atom.heartbeats import HeartbeatCheck, Silent
from labkit.executors.atom.ports import ReplicaHost, ReplicaLost, ReplicaPort
from labkit.executors.atom.swap import Interrupted
from labkit.runtime.core import fail_core, live_worker
from labkit.swarm.ledger import StepLedger, Task
from labkit.swarm.sync import sum_over_peers


@dataclass
class Replica:
    """One whole-model replica: its engine and the thread that feeds it."""

    name: str
    engine: ReplicaPort
    alive: bool = True
    samples: int = 0  # samples it has processed, all steps
    tasks: list[Task] = field(default_factory=list)  # the microbatches it works on now
    thread: threading.Thread | None = field(default=None, repr=False)


class AtomReplicas:
    """The replicas of one ATOM run, their ledger and the global-batch step."""

    writes_checkpoints = False  # the run shell writes what `committed()` gives

    def __init__(self, cfg: RunConfig, host: ReplicaHost, emit: Callable[[events.Event], None],
                 clock: Callable[[], float], state: Mapping[str, Any], step: int = 0) -> None:
        self.cfg, self.host, self.emit, self.clock = cfg, host, emit, clock
        self.ledger = StepLedger(1, cfg.microbatches_per_step, cfg.microbatch, step=step)
        self.cond = threading.Condition()
        self.replicas: dict[str, Replica] = {}
        self.stopping = False
        self.finished = threading.Event()  # the last step was committed
        self.last_loss: float | None = None
        self.diverged: str | None = None  # why the run stopped on a non-finite step, if it did
        self.error: BaseException | None = None
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self.dashboard = host.dashboard  # where the replicas' workers are watched, if anywhere
        self.started = False  # start() was called: a joiner's thread starts at once
        self._boundary: threading.Thread | None = None
        self._numbers = itertools.count()
        self._beats = HeartbeatCheck(ceiling=cfg.peer_timeout)  # the published counts against the ledger
        host.watch(self.lost)  # a replica hung between iterations is found by its worker, not its silence
        for _ in range(cfg.executor.replicas):
            self._spawn(state, None)

    # -- membership ----------------------------------------------------------------------------
    def _spawn(self, state: Mapping[str, Any] | None, source: Replica | None) -> Replica:
        name = f"r{next(self._numbers)}"
        engine = self.host.spawn(name, state, None if source is None else source.engine, self.ledger.step)
        replica = Replica(name, engine)
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
        for thread in [r.thread for r in self.replicas.values()] + [self._boundary]:
            if thread is not None:
                thread.join(timeout)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.alive]

    def _named(self, name: str) -> Replica:
        return live_worker(self.replicas, name, "replicas")

    def kill_peer(self, name: str) -> None:
        """A replica leaves: its credits are withdrawn and its microbatches done again by others."""
        with self.cond:
            self._named(name)
            if len(self.live()) == 1:
                raise ValueError(f"peer={name!r} is the last live replica: add_peer() another before it leaves")
            self._drop(name, "killed")

    def lost(self, name: str, reason: str) -> None:
        """A replica's process is gone (`reason`); with the last one goes the model, and the run fails."""
        with self.cond:
            replica = self.replicas.get(name)
            if replica is None or not replica.alive:
                return
            self._drop(name, reason)
            if not self.live():
                self.fail(ReplicaLost(f"the last replica, {name}, was lost ({reason}): no live replica holds the model"))

    def _drop(self, name: str, reason: str) -> None:
        """Take replica `name` out (lock held): withdraw its credits, free its microbatches."""
        replica = self.replicas[name]
        replica.alive = False
        self._beats.reset()  # its credits go: a disagreement under way no longer holds
        replica.engine.interrupt()
        for task in replica.tasks:  # its thread may still be computing them: they go to others now
            self.ledger.finish(task, {})
        replica.tasks = []
        lost = self.ledger.peer_lost(name)
        self.emit(events.peer(self.clock(), peer=name, stage=0, state="killed", queue=0)
                  | {"reason": reason, "lost_samples": lost})
        self.cond.notify_all()

    def add_peer(self, stage: int | None = None) -> str:
        """A replica joins: it copies a live replica's parameters and optimizer state, which only
        change at a step (taken under this lock), so it starts bit-identical."""
        if stage not in (None, 0):
            raise ValueError(f"stage={stage!r} is not allowed with executor='atom': None (replicas have no stages)")
        with self.cond:
            replica = self._spawn(None, self.live()[0])
            if self.started:
                self._run(replica)
            return replica.name

    @property
    def step(self) -> int:
        return self.ledger.step

    def committed(self) -> tuple[RunConfig, list[dict[str, Any]]]:
        """The committed state as one stage holding the whole model: a live replica's parameters
        and optimizer state (they change only at a step, under this lock)."""
        with self.cond:
            return self.cfg.spec.record(self.cfg), [self.live()[0].engine.state()]

    def consistent(self) -> bool:
        """Every replica holds the committed state after every step."""
        return True

    def close(self) -> None:
        """Release where the replicas lived (a Dask cluster, its DHT nodes)."""
        self.host.close()

    def peer_state(self, name: str) -> dict[str, Any]:
        """A copy of one replica's parameters and optimizer state (to compare replicas)."""
        with self.cond:
            return self._named(name).engine.state()

    # -- the work ------------------------------------------------------------------------------
    def _work(self, replica: Replica) -> None:
        """Take up to C microbatches, run them through the replica, credit them; until stopped."""
        try:
            while True:
                with self.cond:
                    while not (self.stopping or not replica.alive) and (tasks := self._take()) == []:
                        self.cond.wait(timeout=0.5)
                    if self.stopping or not replica.alive:
                        return
                    replica.tasks = tasks
                losses = replica.engine.iteration(tasks)
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
        except ReplicaLost as exc:
            self.lost(replica.name, str(exc))
        except Exception as exc:  # a bug, not a fault: stop the run loudly
            self.fail(exc)
        finally:
            replica.engine.close()

    def _take(self) -> list[Task]:
        tasks = []
        while len(tasks) < self.cfg.executor.accumulation and (task := self.ledger.next_task()) is not None:
            tasks.append(task)
        return tasks

    def fail(self, exc: BaseException) -> None:
        """End the run on an unexpected error, with the error in a `run` `failed` event."""
        fail_core(self, exc)

    def stop(self) -> None:
        """Hand out no more work and interrupt the iterations under way."""
        with self.cond:
            self.stopping = True
            for replica in self.replicas.values():
                replica.engine.interrupt()
            self.cond.notify_all()

    # -- the global-batch step -----------------------------------------------------------------
    def _boundary_loop(self) -> None:
        with self.cond:
            while not self.stopping:
                if not self.ledger.ready() or not self._heartbeats_agree():
                    self.cond.wait(timeout=0.5 if not self.ledger.ready() else 0.05)
                    continue
                try:
                    self._step()
                except ReplicaLost:  # a credited replica died while its gradient was fetched: recompute
                    pass
                except Exception as exc:  # a broken invariant ends the run loudly
                    self.fail(exc)
                self.cond.notify_all()

    def _heartbeats_agree(self) -> bool:
        """Whether the replicas' published counts allow the step (`HeartbeatCheck`); a disagreement
        outlasting its patience drops the replicas gone silent, or else fails the run."""
        counts = self.host.heartbeats({r.name: r.engine for r in self.live()}, self.ledger.step)
        try:
            return self._beats.agree(self.ledger.step, self.ledger.samples(0), counts)
        except Silent as silent:  # their credits are withdrawn and their microbatches done again
            for name in silent.replicas:
                self.lost(name, silent.reason)
        except RuntimeError as exc:
            self.fail(exc)
        return False

    def _step(self) -> None:
        """Sum the credited replicas' gradients (in a world, then wait for their ring over its links,
        the lock released); every live replica applies the same step. A credited replica lost while
        its gradient is fetched or the ring runs abandons the step (its samples are recomputed);
        one lost while the step is applied is dropped and the others go on."""
        credited = self.ledger.samples(0)
        grads = []
        for name in sorted(credited):
            try:
                grads.append(self.replicas[name].engine.gradients())
            except ReplicaLost as exc:
                self._drop(name, str(exc))
                raise
        total = sum_over_peers(grads)
        loss, step = self.ledger.loss(), self.ledger.step
        if not math.isfinite(loss):
            self.diverged = f"step {step}: the loss is {loss}"
            self.emit(events.run(self.clock(), state="diverged", reason=self.diverged))
            self.stopping = True
            return
        if (ring := self.host.exchange_seconds([r.name for r in self.live()])) and (  # a world's: the lock is free
                self.cond.wait_for(lambda: self.stopping, ring) or self.ledger.samples(0) != credited):
            return  # stopped during the ring, or a credited replica left: its samples are done again
        for replica in self.live():
            try:
                replica.engine.apply(total, step)
            except ReplicaLost as exc:
                self._drop(replica.name, str(exc))
        if not self.live():
            self.fail(ReplicaLost(f"every replica was lost while step {step + 1} was applied"))
            return
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
        """Step, loss and live replicas: samples processed, ledger credit, published heartbeat count."""
        with self.cond:
            credited, step, live = self.ledger.samples(0), self.ledger.step, self.live()
        beats = self.host.heartbeats({r.name: r.engine for r in live}, step)  # outside the lock: a DHT read
        peers = [{"peer": r.name, "queue": 0, "samples": r.samples, "delay": 0.0, "credited": credited.get(r.name, 0),
                  "heartbeat": beats.get(r.name), "worker": getattr(r.engine, "worker", None)} for r in live]
        return {"step": step, "loss": self.last_loss, "paused_stages": [],
                "stages": [{"stage": 0, "layers": list(range(self.cfg.model.n_layer)), "peers": peers}]}
