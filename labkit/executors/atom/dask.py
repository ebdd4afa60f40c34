"""ATOM's replicas on a Dask cluster: the Dask `ReplicaHost`, and `launch` for executor='atom'.

The run itself — ledger, global-batch step, events — stays in the driver's run handle; each
replica is a `ReplicaActor` on a worker of its own (GPU workers first), its heartbeat in the
run's hivemind DHT. The fleet (backends/dask/actor_fleet.py) connects, places and watches: a
replica whose worker leaves the cluster or hangs is lost, every call waiting on it fails at once
with `ReplicaLost`, the run is told at once (`watch`: a replica that hangs between iterations has
no call to fail), drops it and has its microbatches computed again by the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.executors.atom.dask_actor import ReplicaActor
from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.actor_handle import ActorHandle
from labkit.backends.dask.dht import StageDirectory
from labkit.backends.dask.remote import START_TIMEOUT
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.executors.atom.engine import swap_event
from labkit.executors.atom.ports import ReplicaLost, ReplicaPort
from labkit.executors.atom.run import launch as launch_atom
from labkit.runtime.run import Run
from labkit.executors.atom.swap import Interrupted
from labkit.swarm.ledger import Task


class RemoteReplica:
    """A `ReplicaPort` on a replica actor; once interrupted or its worker gone, a call waiting on
    it stops waiting at once (an iteration with `Interrupted`, the rest with `ReplicaLost`)."""

    def __init__(self, handle: ActorHandle, emit: Callable[[events.Event], None], clock: Callable[[], float],
                 on_close: Callable[[ActorHandle], None]) -> None:
        self.handle, self.worker, self.key = handle, handle.worker, handle.key
        self._emit, self._clock, self._on_close = emit, clock, on_close

    def iteration(self, tasks: Sequence[Task]) -> list[float]:
        try:
            losses, spans = self.handle.call("iteration", list(tasks), interruptible=True)
        except ReplicaLost:
            if self.handle.stopped.is_set() and not self.handle.gone.is_set():
                raise Interrupted(self.handle.name) from None
            raise
        for span in spans:
            self._emit(swap_event(self._clock(), self.handle.name, span))
        return losses

    def gradients(self) -> list[torch.Tensor]:
        return self.handle.call("gradients")

    def apply(self, total: Sequence[torch.Tensor], step: int) -> None:
        self.handle.call("apply", list(total), step)

    def state(self) -> dict[str, Any]:
        return self.handle.call("state")

    def interrupt(self) -> None:
        self.handle.stopped.set()
        self.handle.tell("interrupt")

    def close(self) -> None:
        """Release the actor (after its own clean-up, if its worker still answers) and its worker."""
        self.handle.release("close")
        self._on_close(self.handle)


class DaskReplicas:
    """A `ReplicaHost` whose replicas are actors on the workers of a Dask cluster (the one at
    `scheduler`, or an embedded `LocalCluster` of `atom.replicas` + 1 worker processes on `host`)."""

    def __init__(self, cfg: RunConfig, corpus: Corpus, params: Mapping[str, Any], emit: Callable[[events.Event], None],
                 clock: Callable[[], float], *, scheduler: str | None, host: str) -> None:
        self.cfg, self.emit, self.clock, self.t0_wall = cfg, emit, clock, time.time() - clock()
        self.fleet = ActorFleet(cfg, scheduler, host, ReplicaLost)
        self.dashboard = self.fleet.dashboard
        try:
            self.fleet.watch()
            for worker, why in self.fleet.join_dht().items():  # every worker joins now, in parallel
                emit(events.worker_unused(clock(), worker, why))
        except BaseException:
            self.fleet.close()
            raise
        self.directory = StageDirectory(self.fleet.node, self.fleet.run_id, 1)

    def spawn(self, name: str, state: Mapping[str, Any] | None, source: ReplicaPort | None, step: int) -> RemoteReplica:
        """Start replica `name` on a free worker; a joiner downloads its state from `source`'s
        actor, worker to worker."""
        origin = None if source is None else (source.worker, source.key)
        f = self.fleet
        handle = f.start(name, ReplicaActor, f.run_id, name, self.cfg, None if source else dict(state), origin, step,
                         f.dht_peers, self.t0_wall)
        try:
            plan = handle.actor.describe().result(START_TIMEOUT)
        except Exception:
            f.free(handle)
            raise
        self.emit(events.setting(self.clock(), name="atom_partition", value=plan))
        return RemoteReplica(handle, self.emit, self.clock, f.free)

    def heartbeats(self, replicas: Mapping[str, ReplicaPort], step: int) -> dict[str, int]:
        """Each replica's count of samples processed in `step`, as its last DHT heartbeat says."""
        try:
            found = self.directory.discover()
        except Exception:  # a DHT hiccup: nothing read this time
            return {}
        return {name: info["samples"] for name, info in found.items() if name in replicas and info["step"] == step}

    def watch(self, lost: Callable[[str, str], None]) -> None:
        self.fleet.watch(lambda handle, reason: lost(handle.name, f"{handle.name}: {reason}"))

    def exchange_seconds(self, replicas: Sequence[str]) -> float:
        """0: the gradients were fetched from the actors and are summed here."""
        return 0.0

    def close(self) -> None:
        """Shut down every DHT node of the run, and release the cluster."""
        self.fleet.close()


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> Run:
    """Start an ATOM run whose replicas are actors on a Dask cluster; returns its handle at once."""
    return launch_atom(cfg, run_dir=run_dir, resume=resume, trace=trace,
                       hosts=partial(DaskReplicas, scheduler=scheduler, host=host))

