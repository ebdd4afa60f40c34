"""Which workers that join a Dask run mid-run get a SWARM peer (`dask_joins.Newcomers`), against a
fake fleet (the scheduler's worker table, with each worker's nanny) and a fake membership that
keeps a size as `Membership` does (tests/integration/test_run_size.py checks the real one)."""

from __future__ import annotations

import itertools
import threading

from labkit.executors.swarm.dask_joins import Newcomers
from tests.waiting import wait_until


class FakeFleet:
    """A worker table (address -> nanny) and the workers the run placed something on."""

    def __init__(self, workers: dict[str, str], initial: set[str]) -> None:
        self.table, self.initial, self.placed = dict(workers), set(initial), set(initial)
        self.silent: set[str] = set()  # workers whose DHT join will not answer (hung)
        self.hung: set[str] = set()  # found hung: out of the table, as the real fleet's `workers()` leaves them

    def workers(self) -> dict[str, dict[str, str]]:
        return {w: {"nanny": n} for w, n in self.table.items() if w not in self.hung}

    def unused(self, workers: dict[str, dict[str, str]]) -> tuple[list[str], list[str]]:
        free = [w for w in workers if w not in self.placed]
        return [w for w in free if w not in self.initial], [w for w in free if w in self.initial]

    def join_dht(self, workers: list[str], warm: tuple[str, ...] = ()) -> dict[str, str]:
        found = {w: "it did not join the run's DHT within 60 s (hung)" for w in workers if w in self.silent}
        self.hung |= found.keys()
        return found

    def keep_spare(self, worker: str) -> None:
        self.initial.add(worker)

    def restart(self, worker: str, new: str) -> None:
        """`worker`'s nanny brings it back as `new`."""
        self.table[new] = self.table.pop(worker)
        self.placed.discard(worker)


class FakeMembers:
    """Peers by name -> worker, and the size the run keeps; a new peer goes to a worker that joined
    mid-run before a spare, as the fleet's placement does."""

    def __init__(self, fleet: FakeFleet, peers: dict[str, str]) -> None:
        self.fleet, self.peers, self.size = fleet, dict(peers), len(peers)
        self._names = (f"s0p{i}" for i in itertools.count(len(peers)))

    def short(self) -> bool:
        return len(self.peers) < self.size

    def add_peer(self, stage: int | None) -> str:
        self.size += 1
        return self._place()

    def refill(self) -> str | None:
        return self._place() if self.short() else None

    def _place(self) -> str:
        joined, spares = self.fleet.unused(self.fleet.workers())
        worker = (joined or spares)[0]
        self.fleet.placed.add(worker)
        self.peers[name := next(self._names)] = worker
        return name

    def fault(self, name: str) -> None:
        """Peer `name` is lost to a fault (evicted): the run is short of it."""
        self.fleet.placed.discard(self.peers.pop(name))


class FakeCoordinator:
    def __init__(self, fleet: FakeFleet, peers: dict[str, str]) -> None:
        self.members, self.emitted, self.stopped = FakeMembers(fleet, peers), [], threading.Event()

    def emit(self, event: dict) -> None:
        self.emitted.append(event)

    def clock(self) -> float:
        return 0.0

    def said(self, name: str) -> list[str]:
        return [e["value"] for e in self.emitted if e["name"] == name]


def _settled(newcomers: Newcomers) -> None:
    newcomers.use()
    wait_until(lambda: not newcomers._joining, 10, "the joins to end")  # noqa: SLF001 - the fake has no events to wait on


def test_restarted_workers_replace_only_what_faults_took_and_new_machines_grow_the_run() -> None:
    fleet = FakeFleet({"A": "nanny-a", "B": "nanny-b", "C": "nanny-c"}, initial={"A", "B", "C"})
    c = FakeCoordinator(fleet, {"s0p0": "A"})  # B hosts a trainer, C nothing (a spare)
    newcomers = Newcomers(fleet, c)

    fleet.restart("B", "B2")  # the trainer's worker, back (its trainer restarted elsewhere)
    fleet.restart("C", "C2")  # the spare, back
    _settled(newcomers)
    assert sorted(v.split()[0] for v in c.said("worker_spare")) == ["B2", "C2"] and c.said("worker_joined") == []

    c.members.fault("s0p0")
    fleet.restart("A", "A2")  # the peer's worker, back: it replaces the peer
    fleet.table["D"] = "nanny-d"  # a new machine: it adds a peer
    _settled(newcomers)
    assert sorted(c.members.peers.values()) == ["A2", "D"] and c.members.size == 2, c.members.peers
    _settled(newcomers)  # the spares are never asked again
    assert len(c.said("worker_spare")) == 2 and len(c.said("worker_joined")) == 2


def test_a_worker_back_before_its_peer_was_evicted_stays_spare_and_a_spare_then_refills() -> None:
    fleet = FakeFleet({"A": "nanny-a", "B": "nanny-b"}, initial={"A", "B"})
    c = FakeCoordinator(fleet, {"s0p0": "A", "s0p1": "B"})
    newcomers = Newcomers(fleet, c)
    fleet.restart("A", "A2")  # back within 0.1 s (a forkserver), before the run evicted its peer
    _settled(newcomers)
    assert c.said("worker_spare") and not c.said("worker_joined")
    c.members.fault("s0p0")  # the eviction comes
    _settled(newcomers)
    assert c.said("worker_joined") == ["a spare serves s0p2"] and c.members.peers["s0p2"] == "A2"
    _settled(newcomers)
    assert len(c.members.peers) == 2, c.members.peers


def test_a_newcomer_whose_join_never_answers_is_said_unused_once_and_never_placed() -> None:
    fleet = FakeFleet({"A": "nanny-a"}, initial={"A"})
    c = FakeCoordinator(fleet, {"s0p0": "A"})
    newcomers = Newcomers(fleet, c)
    fleet.table["D"], fleet.silent = "nanny-d", {"D"}  # a new machine, hung
    _settled(newcomers)
    _settled(newcomers)  # not asked again
    assert c.said("worker_unused") == ["D: it did not join the run's DHT within 60 s (hung)"]
    assert c.said("worker_joined") == [] and c.members.peers == {"s0p0": "A"}
