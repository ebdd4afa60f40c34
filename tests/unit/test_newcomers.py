"""Which workers that join a Dask run mid-run get a SWARM peer (`dask_joins.Newcomers`), against a
fake fleet (the scheduler's worker table, with each worker's nanny) and a fake coordinator."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from labkit.executors.swarm.dask_joins import Newcomers
from tests.waiting import wait_until


class FakeFleet:
    """A worker table (address -> nanny) and the workers the run placed something on."""

    def __init__(self, workers: dict[str, str], initial: set[str]) -> None:
        self.table, self.initial, self.placed = dict(workers), set(initial), set(initial)

    def workers(self) -> dict[str, dict[str, str]]:
        return {w: {"nanny": n} for w, n in self.table.items()}

    def newcomers(self) -> list[str]:
        return [w for w in self.table if w not in self.initial and w not in self.placed]

    def join_dht(self, workers: list[str]) -> None:
        pass

    def keep_spare(self, worker: str) -> None:
        self.initial.add(worker)

    def restart(self, worker: str, new: str) -> None:
        """`worker`'s nanny brings it back as `new`."""
        self.table[new] = self.table.pop(worker)
        self.placed.discard(worker)


class FakeCoordinator:
    """Peers by name (each on a worker); `add_peer` places a new one on a free newcomer (as the
    fleet's placement does: one that joined mid-run before one the run started with)."""

    def __init__(self, fleet: FakeFleet, peers: dict[str, str]) -> None:
        self.fleet, self.emitted = fleet, []
        self.stopped = threading.Event()
        self.members = SimpleNamespace(peers={n: SimpleNamespace(worker=w) for n, w in peers.items()},
                                       add_peer=self.add_peer)

    def add_peer(self, stage: int | None) -> str:
        worker = self.fleet.newcomers()[0]
        self.fleet.placed.add(worker)
        name = f"s0p{len(self.members.peers)}"
        self.members.peers[name] = SimpleNamespace(worker=worker)
        return name

    def emit(self, event: dict) -> None:
        self.emitted.append(event)

    def clock(self) -> float:
        return 0.0


def test_a_worker_back_without_a_peer_to_take_back_stays_free_and_others_take_peers() -> None:
    fleet = FakeFleet({"A": "nanny-a", "B": "nanny-b", "C": "nanny-c"}, initial={"A", "B", "C"})
    coordinator = FakeCoordinator(fleet, {"s0p0": "A"})  # B hosts a trainer, C nothing (a spare)
    newcomers = Newcomers(fleet, coordinator)
    newcomers.use()  # the first look: who hosts a peer

    fleet.restart("B", "B2")  # the trainer's worker, back (its trainer restarted elsewhere)
    fleet.restart("C", "C2")  # the spare, back
    newcomers.use()
    assert sorted(e["value"].split()[0] for e in coordinator.emitted if e["name"] == "worker_spare") == ["B2", "C2"]
    assert len(coordinator.members.peers) == 1

    fleet.restart("A", "A2")  # the peer's worker, back: it takes a peer
    del coordinator.members.peers["s0p0"]
    fleet.table["D"] = "nanny-d"  # a new machine: it takes a peer
    newcomers.use()
    wait_until(lambda: sum(e["name"] == "worker_joined" for e in coordinator.emitted) == 2, 10, "two peers started")
    assert sorted(p.worker for p in coordinator.members.peers.values()) == ["A2", "D"]
    newcomers.use()  # the spares are never asked again
    assert sum(e["name"] == "worker_spare" for e in coordinator.emitted) == 2
