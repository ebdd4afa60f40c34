"""ATOM's replicas in a world (`RunConfig.world`): each on its virtual device, their gradients
round the world's links.

Replica r sits where the world places stage 0's r-th peer (`s0p{r}`; a joiner where the world's
joiners sit) and computes the run's model for real, then holds each iteration until its device
would have finished the world's whole model for those microbatches (the simulator's service times
of a one-stage world, `labkit.sim.seats.device_table`; the file's `service_cv` draws no noise here).
An iteration whose real compute took longer is an overrun, reported as an `atom_overrun` setting.
At every global batch the step waits, the run's lock released, for as long as the ring all-reduce
of the world's model's fp16 gradients (not less the file's `compression`) over the live replicas'
links would take (`labkit.sim.pipelines.ring_allreduce_s`): a wait, no bytes cross an emulated link.
A one-stage run: `world_config(path, RunConfig(executor=AtomConfig()))` makes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.executors.atom.engine import ReplicaEngine
from labkit.executors.atom.local import LocalReplicas
from labkit.executors.atom.swap import Interrupted
from labkit.runtime.links import load_links
from labkit.sim.links import region_link
from labkit.sim.pipelines import ring_allreduce_s
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import device_table, peer_device, peer_region, world_costs
from labkit.sim.world import GRAD_BYTES
from labkit.swarm.ledger import Task


def place(replica: str) -> str:
    """The world's peer whose seat replica `replica` (`r{k}`) takes: stage 0's k-th (`s0p{k}`)."""
    return f"s0p{replica[1:]}"


def microbatch_seconds(scenario: SimScenario, replica: str) -> float:
    """Seconds replica `replica`'s virtual device takes for one microbatch of the world's whole model."""
    forward, backward = device_table(scenario, peer_device(scenario, place(replica)))
    return forward[0] + backward[0]


def exchange_seconds(scenario: SimScenario, replicas: Sequence[str]) -> float:
    """The ring all-reduce of the world's model's gradients over `replicas`, in that order: each of
    its 2(N - 1) steps at the ring's longest one-way latency and lowest bandwidth."""
    regions = [peer_region(scenario, place(r)) for r in replicas]
    hops = [region_link(scenario, a, b) for a, b in zip(regions, regions[1:] + regions[:1])]
    return ring_allreduce_s(world_costs(scenario).stage_params[0] * GRAD_BYTES, len(replicas),
                            8.0 * min(rate for _, rate in hops), max(rtt for rtt, _ in hops) / 2)


class PacedReplica:
    """A replica engine whose iterations take its virtual device's time: real compute, then held."""

    def __init__(self, name: str, engine: ReplicaEngine, seconds: float, emit: Callable[[events.Event], None],
                 clock: Callable[[], float]) -> None:
        self.name, self.engine, self.seconds, self.emit, self.clock = name, engine, seconds, emit, clock
        self._interrupted = threading.Event()

    @property
    def round_samples(self) -> int:
        """The engine's samples since the last step (its heartbeat count)."""
        return self.engine.round_samples

    def iteration(self, tasks: Sequence[Task]) -> list[float]:
        """The engine's iteration, then held until the device's time for `len(tasks)` microbatches;
        raises `Interrupted` if interrupted meanwhile."""
        started = time.perf_counter()
        losses = self.engine.iteration(tasks)
        left = len(tasks) * self.seconds - (time.perf_counter() - started)
        if left < 0:
            self.emit(events.setting(self.clock(), name="atom_overrun",
                                     value={"replica": self.name, "over_s": -left, "microbatches": len(tasks)}))
        elif self._interrupted.wait(left):
            raise Interrupted("interrupted while its virtual device computed")
        return losses

    def gradients(self) -> list[torch.Tensor]:
        """The engine's gradient sums (the ring's time is the step's, not this call's)."""
        return self.engine.gradients()

    def apply(self, total: Sequence[torch.Tensor], step: int) -> None:
        """The engine takes the step every replica takes."""
        self.engine.apply(total, step)

    def state(self) -> dict[str, Any]:
        """The engine's parameters and optimizer state (what a joiner starts from)."""
        return self.engine.state()

    def interrupt(self) -> None:
        """End the iteration under way, held or computing (a stop, or a kill)."""
        self._interrupted.set()
        self.engine.interrupt()

    def close(self) -> None:
        """Close the engine."""
        self.engine.close()


class WorldReplicas(LocalReplicas):
    """Replicas in this process, each on its world seat's virtual device, exchanging over its links."""

    def __init__(self, cfg: RunConfig, corpus: Corpus, params: Mapping[str, Any],
                 emit: Callable[[events.Event], None], clock: Callable[[], float]) -> None:
        super().__init__(cfg, corpus, params, emit, clock)
        self.scenario = load_links(cfg)
        names = [f"r{k}" for k in range(cfg.executor.replicas)]
        emit(events.setting(clock(), name="atom_world", value={
            "replicas": {r: {"device": peer_device(self.scenario, place(r)),
                             "microbatch_s": microbatch_seconds(self.scenario, r)} for r in names},
            "exchange_s": exchange_seconds(self.scenario, names)}))

    def spawn(self, name: str, state: Mapping[str, Any] | None, source: Any, step: int) -> PacedReplica:
        """Replica `name` (from `state`, or a copy of live replica `source`'s) on its seat's device."""
        engine = super().spawn(name, state, None if source is None else source.engine, step)
        return PacedReplica(name, engine, microbatch_seconds(self.scenario, name), self.emit, self.clock)

    def exchange_seconds(self, replicas: Sequence[str]) -> float:
        """The ring all-reduce over `replicas`' links (`exchange_seconds`), which the step waits for."""
        return exchange_seconds(self.scenario, replicas)
