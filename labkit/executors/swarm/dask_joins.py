"""A Dask run keeps its size through worker churn, and grows with each new machine.

A worker that joins the cluster mid-run on a new machine (a `dask worker` started mid-run: a
nanny the run never saw) gets a peer, and the run's size grows by one. A worker its nanny
restarted replaces a peer a fault took, if the run is short of its size (`Membership.refill`,
counting peers still starting); else it stays a spare, as a worker beyond the run's needs at its
start does, and the next restarted trainer takes it. While the run is short, a spare takes a peer.
Before, every restart added a peer (a trainer's worker too), and a run under churn grew past its
size: on one machine's 2 cores, 7 and 8 peers stepped 15 and 13 times a second against 16-18 with
6 (docs/benchmarks.md, the chaos runs of 2026-11-27). Peers joining at once spread over the stages
(`join_stage` counts those starting)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from labkit import events
from labkit.backends.dask.actor_fleet import ActorFleet

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator

JOIN_TRIES = 3  # a worker that joined mid-run but failed this often to start a peer is left alone
ANY_SPARE = ""  # a refill on whichever free worker the fleet picks, not one that just joined
ACTOR_MODULES = ("labkit.backends.dask.peer_actor", "labkit.backends.dask.trainer_actor")  # imported as a worker joins


class Newcomers:
    """Gives workers that join `fleet`'s cluster mid-run peers of `coordinator`'s run, as above."""

    def __init__(self, fleet: ActorFleet, coordinator: Coordinator) -> None:
        self.fleet, self.coordinator = fleet, coordinator
        self._nannies = {info.get("nanny") for info in fleet.workers().values()}  # every nanny seen so far
        self._new: set[str] = set()  # workers that joined on a new machine
        self._joining: set[str] = set()  # workers a peer is starting on (ANY_SPARE: a refill on a spare)
        self._failures: dict[str, int] = {}  # workers whose peer failed to start: how often

    def use(self) -> None:
        """Start a peer on each worker that joined, and on a spare while the run is short, each on a
        thread of its own: a start takes seconds, and the caller (the run's watch) must go on meanwhile."""
        try:
            workers = self.fleet.workers()
            joined, spares = self.fleet.unused(workers)
        except Exception:
            return
        for worker in joined:
            if worker in self._joining or self._failures.get(worker, 0) >= JOIN_TRIES:
                continue
            if workers.get(worker, {}).get("nanny") not in self._nannies - {None}:
                self._new.add(worker)
            self._start(worker)
        self._nannies |= {info.get("nanny") for info in workers.values()}
        spares_fail = self._failures.get(ANY_SPARE, 0) >= JOIN_TRIES
        if spares and not self._joining and not spares_fail and self.coordinator.members.short():
            self._start(ANY_SPARE)

    def _start(self, worker: str) -> None:
        self._joining.add(worker)
        threading.Thread(target=self._use, args=(worker,), name="labkit-join", daemon=True).start()

    def _use(self, worker: str) -> None:
        c = self.coordinator
        try:
            if c.stopped.is_set():
                return
            if worker != ANY_SPARE:  # the worker imports torch and joins the DHT (seconds), then a peer starts
                if hung := self.fleet.join_dht([worker], warm=ACTOR_MODULES):  # it hosts nothing of the run now
                    c.emit(events.worker_unused(c.clock(), worker, hung[worker]))
                    return
            name = c.members.add_peer(None) if worker in self._new else c.members.refill()
        except Exception as exc:  # e.g. the worker left again before the peer started
            self._failures[worker] = self._failures.get(worker, 0) + 1
            c.emit(events.worker_unused(c.clock(), worker or "a spare", f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._joining.discard(worker)
        self._failures.pop(worker, None)
        self._new.discard(worker)  # it is placed or kept spare: never a newcomer again
        self._failures.pop(ANY_SPARE, None)  # spares were tried 3 times in a row at most: any success tries them again
        if name is not None:
            c.emit(events.setting(c.clock(), name="worker_joined", value=f"{worker or 'a spare'} serves {name}"))
        elif worker != ANY_SPARE:
            self.fleet.keep_spare(worker)
            c.emit(events.setting(c.clock(), name="worker_spare", value=f"{worker} came back (its nanny restarted it) "
                                  f"with no peer to replace: it stays free for a restarted trainer"))
