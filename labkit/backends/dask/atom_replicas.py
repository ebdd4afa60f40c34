"""ATOM's replicas on a Dask cluster: the Dask `ReplicaHost`, and `launch` for executor='atom'.

The run itself — ledger, global-batch step, events — stays in the driver's run handle; each
replica is a `ReplicaActor` on a worker of its own (GPU workers first), its heartbeat in the
run's hivemind DHT. A replica whose worker leaves the cluster (seen by asking the scheduler every
`WORKER_CHECK` seconds) is lost: every call waiting on it fails at once with `ReplicaLost`, and the
run drops it and has its microbatches computed again by the others.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.backends.dask.atom_actor import ReplicaActor
from labkit.backends.dask.connect import connect
from labkit.backends.dask.dht import DhtNode, StageDirectory, host_toward, join, release
from labkit.backends.dask.fleet import WORKER_CHECK, NoFreeWorker
from labkit.backends.dask.placement import peer_worker
from labkit.backends.dask.remote import START_TIMEOUT
from labkit.backends.dask.workers import cluster_workers
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.runtime.atom.engine import swap_event
from labkit.runtime.atom.ports import ReplicaLost, ReplicaPort
from labkit.runtime.atom.run import launch as launch_atom
from labkit.runtime.core_run import CoreRun
from labkit.runtime.atom.swap import Interrupted
from labkit.swarm.ledger import Task


class RemoteReplica:
    """A `ReplicaPort` on the replica actor `key` on `worker`. Once the replica is interrupted
    or its worker is gone (`crashed`), a call waiting on it stops waiting at once."""

    def __init__(self, name: str, worker: str, key: str, owner: Any, emit: Callable[[events.Event], None],
                 clock: Callable[[], float], on_close: Callable[[RemoteReplica], None]) -> None:
        self.name, self.worker, self.key, self._owner = name, worker, key, owner
        self.actor = owner.result(START_TIMEOUT)
        self._emit, self._clock, self._on_close = emit, clock, on_close
        self._gone, self._interrupted = threading.Event(), threading.Event()

    def _call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the actor. A broken wire (the worker died, perhaps before the
        scheduler noticed) is `ReplicaLost`; an error the replica raised is raised here."""
        try:
            future = getattr(self.actor, method)(*args)
            while not future.done():
                if self._gone.wait(0.02):
                    raise ReplicaLost(f"{self.name}: its Dask worker {self.worker} left the cluster")
                if self._interrupted.is_set() and method == "iteration":
                    raise Interrupted(self.name)
            return future.result()
        except Exception as exc:
            if not wire_broke(exc):
                raise
            raise ReplicaLost(f"{self.name}: its Dask worker {self.worker} cannot be reached "
                              f"({type(exc).__name__}: {exc})") from None

    def crashed(self) -> None:
        self._gone.set()

    def iteration(self, tasks: Sequence[Task]) -> list[float]:
        losses, spans = self._call("iteration", list(tasks))
        for span in spans:
            self._emit(swap_event(self._clock(), self.name, span))
        return losses

    def gradients(self) -> list[torch.Tensor]:
        return self._call("gradients")

    def apply(self, total: Sequence[torch.Tensor], step: int) -> None:
        self._call("apply", list(total), step)

    def state(self) -> dict[str, Any]:
        return self._call("state")

    def interrupt(self) -> None:
        self._interrupted.set()
        try:
            self.actor.interrupt()
        except Exception as exc:
            if not wire_broke(exc):
                raise

    def close(self) -> None:
        """Release the actor (after its own clean-up, if its worker still answers) and its worker."""
        try:
            if not self._gone.is_set():
                self.actor.close().result(30)
        except Exception:  # its worker died meanwhile: nothing left to close
            pass
        self._owner = None
        self._on_close(self)


class DaskReplicas:
    """A `ReplicaHost` whose replicas are actors on the workers of a Dask cluster (the one at
    `scheduler`, or an embedded `LocalCluster` of `atom.replicas` + 1 worker processes on `host`)."""

    def __init__(self, cfg: RunConfig, corpus: Corpus, params: Mapping[str, Any], emit: Callable[[events.Event], None],
                 clock: Callable[[], float], *, scheduler: str | None, host: str) -> None:
        self.cfg, self.emit, self.clock, self.t0_wall = cfg, emit, clock, _wall_zero(clock)
        self.client, self.cluster = connect(scheduler, cfg, host)
        self.run_id = uuid.uuid4().hex[:12]
        # the run's first DHT node: here, on the interface that reaches the scheduler (and so the workers)
        self.directory = StageDirectory(DhtNode([], host_toward(self.client.scheduler.address)), self.run_id, 1)
        self.dht_peers = self.directory.node.maddrs()
        self.client.run(join, self.run_id, self.dht_peers)  # every worker joins the DHT now, in parallel
        self._placed: dict[str, RemoteReplica | None] = {}  # worker address -> its replica (None: starting)
        self._initial = set(cluster_workers(self.client))
        self._closed = threading.Event()
        threading.Thread(target=self._watch_workers, name="labkit-atom-workers", daemon=True).start()

    def spawn(self, name: str, state: Mapping[str, Any] | None, source: ReplicaPort | None, step: int) -> RemoteReplica:
        """Start replica `name` on a free worker (one that joined mid-run first, then GPU workers);
        a joiner downloads its state from `source`'s actor, worker to worker."""
        workers = cluster_workers(self.client)
        worker = peer_worker(workers, self._placed, self._initial)
        if worker is None:
            raise NoFreeWorker(f"no free Dask worker for a new replica: all {len(workers)} workers host one; start "
                               f"another `dask worker` (with --resources GPU=1 on a GPU host) or use fewer replicas")
        self._placed[worker] = None
        key = f"labkit-atom-{self.run_id}-{name}-{uuid.uuid4().hex[:8]}"
        origin = None if source is None else (source.worker, source.key)
        try:
            owner = self.client.submit(ReplicaActor, self.run_id, key, name, self.cfg, None if source else dict(state),
                                       origin, step, self.dht_peers, self.t0_wall, key=key, actor=True,
                                       workers=[worker], allow_other_workers=False)
            replica = RemoteReplica(name, worker, key, owner, self.emit, self.clock, self._free)
            plan = replica.actor.describe().result(START_TIMEOUT)
        except Exception:
            del self._placed[worker]
            raise
        self._placed[worker] = replica
        self.emit(events.setting(self.clock(), name="atom_partition", value=plan))
        return replica

    def _free(self, replica: RemoteReplica) -> None:
        if self._placed.get(replica.worker) is replica:
            del self._placed[replica.worker]

    def heartbeats(self, replicas: Mapping[str, ReplicaPort], step: int) -> dict[str, int]:
        """Each replica's count of samples processed in `step`, as its last DHT heartbeat says."""
        try:
            found = self.directory.discover()
        except Exception:  # a DHT hiccup: nothing read this time
            return {}
        return {name: info["samples"] for name, info in found.items() if name in replicas and info["step"] == step}

    def _watch_workers(self) -> None:
        """A replica whose worker left the cluster (a SIGKILLed process is removed within about a
        second) is crashed: calls waiting on it fail now."""
        while not self._closed.wait(WORKER_CHECK):
            try:
                workers = cluster_workers(self.client)
            except Exception:  # the scheduler is busy: ask again
                continue
            for worker, replica in list(self._placed.items()):
                if worker not in workers and replica is not None:
                    replica.crashed()
                    self._free(replica)

    def close(self) -> None:
        """Stop watching, shut down every DHT node of the run, and release the cluster."""
        self._closed.set()
        for call in (partial(self.client.run, release, self.run_id), self.directory.node.shutdown,
                     self.client.close, *([self.cluster.close] if self.cluster is not None else [])):
            try:
                call()
            except Exception:  # already gone: nothing to release
                pass


def wire_broke(exc: BaseException) -> bool:
    """Whether `exc` says the actor's worker cannot be reached (not an error the actor raised):
    a comm error (CommClosedError is an OSError) or distributed's plain RuntimeError for an
    actor whose worker was lost."""
    return isinstance(exc, OSError) or (type(exc) is RuntimeError and "Worker holding Actor was lost" in str(exc))


def _wall_zero(clock: Callable[[], float]) -> float:
    """The wall-clock time at which `clock` (seconds of the run, on the wall clock) read zero."""
    return time.time() - clock()


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> CoreRun:
    """Start an ATOM run whose replicas are actors on a Dask cluster; returns its handle at once."""
    return launch_atom(cfg, run_dir=run_dir, resume=resume, trace=trace,
                       hosts=partial(DaskReplicas, scheduler=scheduler, host=host))

