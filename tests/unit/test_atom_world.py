"""ATOM's replicas in virtual time (labkit/sim/atom_world.py) and the pacing that holds a real
replica to it (labkit/executors/atom/world.py:PacedReplica), on an engine that only counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from labkit.config import ConfigError
from labkit.executors.atom.swap import Interrupted
from labkit.executors.atom.world import PacedReplica, exchange_seconds
from labkit.sim import SimScenario
from labkit.sim.atom_world import atom_step_seconds


def test_the_ring_crosses_its_slowest_link_2_n_minus_1_times() -> None:
    ocean = SimScenario.from_dict({"model": "small", "stages": 1, "microbatch": 1, "seq_len": 512, "links": [
        {"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 1000.0},
        {"a": "eu", "b": "us", "rtt_ms": 100.0, "bandwidth_mbps": 200.0}], "peers": [
        {"device": "T4", "count": 2, "stage": 0, "region": region} for region in ("eu", "us")]})
    nbytes = 85_054_464 * 2  # SWARM's small, fp16
    # r0 eu -> r1 eu -> r2 us -> r3 us -> r0: 6 steps of a quarter of the bytes, each at the ocean's 50 ms
    assert exchange_seconds(ocean, ["r0", "r1", "r2", "r3"]) == pytest.approx(6 * (0.050 + nbytes / 4 / 25e6))
    assert exchange_seconds(ocean, ["r0", "r1"]) == pytest.approx(2 * (0.001 + nbytes / 2 / 125e6))  # eu only
    assert exchange_seconds(ocean, ["r2"]) == 0.0  # one replica sends nothing


def test_a_step_deals_its_microbatches_as_the_ledger_does() -> None:
    # C = 2, 5 microbatches, a replica of 1 s and one of 3 s a microbatch: the fast one takes 2 at 0
    # (done at 2), the slow one 2 at 0 (done at 6), the fast one the last 1 at 2 (done at 3).
    assert atom_step_seconds([1.0, 3.0], 5, 2, exchange_s=0.5) == 6.5
    assert atom_step_seconds([1.0], 5, 2, exchange_s=0.0) == 5.0  # alone: every microbatch in turn
    for bad in ({"per_microbatch": []}, {"per_microbatch": [-1.0]}, {"microbatches": 0}, {"accumulation": True},
                {"exchange_s": float("nan")}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            atom_step_seconds(**({"per_microbatch": [1.0], "microbatches": 1, "accumulation": 1, "exchange_s": 0.0}
                                 | bad))


class CountingEngine:
    """A replica engine that takes `real` seconds an iteration and returns one loss a task."""

    def __init__(self, real: float) -> None:
        self.real, self.round_samples, self.interrupted = real, 0, False

    def iteration(self, tasks: Sequence[int]) -> list[float]:
        time.sleep(self.real)
        return [1.0] * len(tasks)

    def interrupt(self) -> None:
        self.interrupted = True


def test_a_paced_replica_is_held_to_its_device_and_says_when_it_overran() -> None:
    said: list[dict] = []
    replica = PacedReplica("r0", CountingEngine(0.0), 0.05, lambda e: said.append(e), time.monotonic)
    started = time.perf_counter()
    assert replica.iteration([1, 2, 3]) == [1.0] * 3
    assert time.perf_counter() - started >= 0.15 and said == []  # 3 microbatches of 50 ms each
    slow = PacedReplica("r1", CountingEngine(0.1), 0.01, lambda e: said.append(e), time.monotonic)
    slow.iteration([1, 2])
    assert [e["name"] for e in said] == ["atom_overrun"]
    assert said[0]["value"]["replica"] == "r1" and said[0]["value"]["over_s"] > 0.05


def test_an_interrupt_ends_a_held_iteration_at_once() -> None:
    engine = CountingEngine(0.0)
    replica = PacedReplica("r0", engine, 60.0, lambda e: None, time.monotonic)
    threading.Timer(0.1, replica.interrupt).start()
    started = time.perf_counter()
    with pytest.raises(Interrupted):
        replica.iteration([1])
    assert time.perf_counter() - started < 30 and engine.interrupted
