"""Workers that join a Dask run's cluster mid-run each get a SWARM peer, on the stage Algorithm 2's
join rule picks: a new machine (a `dask worker` started mid-run), and a worker its nanny restarted
where the one before hosted a peer. One restarted where the one before hosted no peer (a trainer,
which restarted elsewhere, or nothing) comes back as a spare, as a worker beyond the run's needs
at its start stays one: what the next restarted trainer takes. Before, every trainer restart
added a peer (the trainer took the spare, its old worker came back and took a peer), and a run
under churn grew past its size: on one machine's 2 cores, 7 and 8 peers stepped 15 and 13 times
a second against 16-18 with 6 (docs/benchmarks.md, the chaos runs of 2026-11-27)."""

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
        self._hosted_peer: dict[str, bool] = {}  # nanny -> whether its worker hosted a peer, at the last look

    def use(self) -> None:
        """Start a peer on each new worker, each on a thread of its own: a start takes seconds,
        and the caller (the run's watch) must go on meanwhile."""
        c = self.coordinator
        try:
            workers = self.fleet.workers()
            joined = [w for w in self.fleet.newcomers() if w not in self._joining]
        except Exception:
            return
        for worker in joined:
            if not self._hosted_peer.get(workers.get(worker, {}).get("nanny"), True):  # came back, no peer lost
                self.fleet.keep_spare(worker)
                c.emit(events.setting(c.clock(), name="worker_spare", value=f"{worker} came back (its nanny restarted "
                                      f"it) without a peer to take back: it stays free for a restarted trainer"))
            elif self._failures.get(worker, 0) < JOIN_TRIES:
                self._joining.add(worker)
                threading.Thread(target=self._use, args=(worker,), name="labkit-join", daemon=True).start()
        peer_workers = {p.worker for p in list(c.members.peers.values())}
        self._hosted_peer |= {info["nanny"]: w in peer_workers for w, info in workers.items()
                              if w not in joined and w not in self._joining and info.get("nanny")}

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
