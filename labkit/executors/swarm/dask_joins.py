"""Workers that join a Dask run's cluster mid-run (a nanny's restart too) each get a SWARM peer,
on the stage Algorithm 2's join rule picks."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from labkit import events
from labkit.backends.dask.actor_fleet import ActorFleet

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator

JOIN_TRIES = 3  # a worker that joined mid-run but failed this often to start a peer is left alone


class Newcomers:
    """Gives each worker that joined `fleet`'s cluster after the start a peer of `coordinator`'s run."""

    def __init__(self, fleet: ActorFleet, coordinator: Coordinator) -> None:
        self.fleet, self.coordinator = fleet, coordinator
        self._joining: set[str] = set()  # workers a peer is starting on
        self._failures: dict[str, int] = {}  # workers whose peer failed to start: how often

    def use(self) -> None:
        """Start a peer on each new worker, each on a thread of its own: a start takes seconds,
        and the caller (the run's watch) must go on meanwhile."""
        try:
            joined = [w for w in self.fleet.newcomers() if w not in self._joining]
        except Exception:
            return
        for worker in joined:
            if self._failures.get(worker, 0) < JOIN_TRIES:
                self._joining.add(worker)
                threading.Thread(target=self._use, args=(worker,), name="labkit-join", daemon=True).start()

    def _use(self, worker: str) -> None:
        c = self.coordinator
        try:
            if c.stopped.is_set():
                return
            # the worker imports torch and joins the DHT (seconds), then a peer starts on it
            self.fleet.join_dht([worker])
            name = c.members.add_peer(None)
        except Exception as exc:  # e.g. the worker left again before the peer started
            self._failures[worker] = self._failures.get(worker, 0) + 1
            c.emit(events.setting(c.clock(), name="worker_unused", value=f"{worker}: {type(exc).__name__}: {exc}"))
            return
        finally:
            self._joining.discard(worker)
        c.emit(events.setting(c.clock(), name="worker_joined", value=f"{worker} serves {name}"))
