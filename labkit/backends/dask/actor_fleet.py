"""Actors of a run whose core stays in the driver (ATOM's replicas, the task pool's clients): one
actor per worker of a Dask cluster, a handle on each that stops waiting when its worker is gone.

`ActorFleet` connects (an embedded `LocalCluster`, or a scheduler), places each actor on a free
worker (one that joined mid-run first, then GPU workers, as SWARM peers), and asks the scheduler
every `WORKER_CHECK` seconds which workers are still there: an actor whose worker left is crashed,
so that every call waiting on it fails at once with the fleet's `lost` error.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from labkit.backends.dask.connect import connect
from labkit.backends.dask.fleet import WORKER_CHECK, NoFreeWorker
from labkit.backends.dask.placement import peer_worker
from labkit.backends.dask.remote import START_TIMEOUT
from labkit.backends.dask.workers import cluster_workers
from labkit.config import RunConfig


def wire_broke(exc: BaseException) -> bool:
    """Whether `exc` says the actor's worker cannot be reached (not an error the actor raised):
    a comm error (CommClosedError is an OSError) or distributed's plain RuntimeError for an
    actor whose worker was lost."""
    return isinstance(exc, OSError) or (type(exc) is RuntimeError and "Worker holding Actor was lost" in str(exc))


class ActorHandle:
    """The actor `key` on `worker`, started by `owner` (a Dask future the handle holds while the
    actor lives). `call` raises `lost` (an exception class) when the worker is gone."""

    def __init__(self, name: str, worker: str, key: str, owner: Any, lost: type[Exception]) -> None:
        self.name, self.worker, self.key, self._owner, self._lost = name, worker, key, owner, lost
        self.actor = owner.result(START_TIMEOUT)
        self.gone = threading.Event()  # its worker left the cluster
        self.stopped = threading.Event()  # an interruptible call waiting on it stops waiting (raises `lost`)

    def call(self, method: str, *args: Any, interruptible: bool = False) -> Any:
        """`method(*args)` on the actor. A broken wire (the worker died, perhaps before the
        scheduler noticed) raises `lost`, and so does `stopped` for an interruptible call; an
        error the actor raised is raised here."""
        try:
            future = getattr(self.actor, method)(*args)
            while not future.done():
                if self.gone.wait(0.02):
                    raise self._lost(f"{self.name}: its Dask worker {self.worker} left the cluster")
                if interruptible and self.stopped.is_set():
                    raise self._lost(f"{self.name}: stopped while {method} ran")
            return future.result()
        except Exception as exc:
            if not wire_broke(exc):
                raise
            raise self._lost(f"{self.name}: its Dask worker {self.worker} cannot be reached "
                             f"({type(exc).__name__}: {exc})") from None

    def tell(self, method: str, *args: Any) -> None:
        """Send `method(*args)` without waiting; nothing happens if the worker is gone."""
        try:
            getattr(self.actor, method)(*args)
        except Exception as exc:
            if not wire_broke(exc):
                raise

    def release(self, last: str | None = None) -> None:
        """Call `last` on the actor (its clean-up) if its worker still answers, then let it go."""
        try:
            if last is not None and not self.gone.is_set():
                getattr(self.actor, last)().result(30)
        except Exception:  # its worker died meanwhile: nothing left to clean up
            pass
        self._owner = None


class ActorFleet:
    """A Dask cluster and the actors a driver-side run placed on it, one per worker."""

    def __init__(self, cfg: RunConfig, scheduler: str | None, host: str, lost: type[Exception]) -> None:
        self.cfg, self.lost = cfg, lost
        self.client, self.cluster = connect(scheduler, cfg, host)
        self.run_id = uuid.uuid4().hex[:12]
        self._placed: dict[str, ActorHandle | None] = {}  # worker address -> its actor (None: starting)
        self._initial = set(cluster_workers(self.client))
        self._closed = threading.Event()
        self.on_gone: Callable[[ActorHandle, str], None] = lambda handle, reason: None  # told when a worker leaves
        threading.Thread(target=self._watch_workers, name="labkit-actor-workers", daemon=True).start()

    def start(self, name: str, cls: type, *args: Any) -> ActorHandle:
        """Start `cls(*args)` as actor `name` on a free worker; raises NoFreeWorker if none is."""
        workers = cluster_workers(self.client)
        worker = peer_worker(workers, self._placed, self._initial)
        if worker is None:
            raise NoFreeWorker(f"no free Dask worker for {name}: all {len(workers)} workers host one; start another "
                               f"`dask worker` (with --resources GPU=1 on a GPU host) or ask for fewer")
        self._placed[worker] = None
        key = f"labkit-{cls.__name__.lower()}-{self.run_id}-{name}-{uuid.uuid4().hex[:8]}"
        try:
            owner = self.client.submit(cls, *args, key, key=key, actor=True, workers=[worker], allow_other_workers=False)
            handle = ActorHandle(name, worker, key, owner, self.lost)
        except Exception:
            del self._placed[worker]
            raise
        self._placed[worker] = handle
        return handle

    def free(self, handle: ActorHandle) -> None:
        """`handle`'s actor left: its worker can host another."""
        if self._placed.get(handle.worker) is handle:
            del self._placed[handle.worker]

    def _watch_workers(self) -> None:
        while not self._closed.wait(WORKER_CHECK):
            try:
                workers = cluster_workers(self.client)
            except Exception:  # the scheduler is busy: ask again
                continue
            for worker, handle in list(self._placed.items()):
                if worker not in workers and handle is not None:
                    handle.gone.set()
                    self.free(handle)
                    self.on_gone(handle, f"{handle.name}: its Dask worker {worker} left the cluster")

    def close(self, *first: Callable[[], Any]) -> None:
        """Stop watching, run `first` (the caller's own clean-up), and release the cluster."""
        self._closed.set()
        for call in (*first, self.client.close, *([self.cluster.close] if self.cluster is not None else [])):
            try:
                call()
            except Exception:  # already gone: nothing to release
                pass

