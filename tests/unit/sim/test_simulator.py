"""Simulator physics: conservation, closed-form throughput, granularities agreeing, rebalancing."""

import itertools

import numpy as np
import pytest

from labkit.kernels.fluid import balanced_stages
from labkit.sim import ChurnModel, SimScenario, simulate
from labkit.sim.presets import even_peers, table5
from labkit.sim.summary import percent_of_optimal, summarize
from labkit.sim.world import build_world


def _equal(per_stage: int = 3, **kw) -> SimScenario:
    base = dict(model="small", stages=4, peers=even_peers("T4", per_stage, 4), duration=120.0, bin_seconds=10.0,
                service_cv=0.0)
    return SimScenario(**{**base, **kw})


def test_capacity_bound_throughput_matches_closed_form():
    s = _equal(trainers=16, window=16, rtt_ms=1.0, bandwidth_mbps=100_000.0)
    w = build_world(s)
    closed = 3 / (w.fwd[0, 0] + w.bwd[0, 0])  # 3 peers per stage, microbatches per second
    r = simulate(s, "events")
    steady = r.work[2:].sum() / (len(r.work[2:]) * s.bin_seconds)
    assert steady == pytest.approx(closed, rel=0.02)


def test_latency_bound_throughput_matches_closed_form():
    s = _equal(trainers=1, window=1, rtt_ms=80.0)
    w = build_world(s)
    trip = 2 * s.stages * w.hop_seconds[0] + (w.fwd[0] + w.bwd[0]).sum()
    r = simulate(s, "events")
    assert r.work.sum() / s.duration == pytest.approx(1 / trip, rel=0.02)
    assert simulate(s, "fluid").work.sum() / s.duration == pytest.approx(1 / trip, rel=0.02)


def test_every_microbatch_finishes_or_is_lost_and_redone():
    s = _equal(per_stage=4, trainers=4, window=4, duration=600.0, trace=((100.0, -3), (200.0, 4), (350.0, -2)),
               rebalance_period=30.0, service_cv=0.3)
    c = simulate(s, "events").counters
    assert c["lost"] > 0
    assert c["entered"] == c["finished"] + c["lost"] + c["in_flight"]
    assert c["in_flight"] == s.trainers * s.window


@pytest.mark.parametrize("period", [None, 60.0])
def test_event_and_fluid_granularities_agree(period):
    s = SimScenario(model="large", stages=4, peers=even_peers("T4", 6, 4), duration=7200.0, trainers=24, window=8,
                    bin_seconds=600.0, service_cv=0.3, rebalance_period=period, seed=3,
                    churn=ChurnModel(hours=2.0, join_per_hour=12.0, leave_per_peer_hour=0.5))
    events, fluid = simulate(s, "events"), simulate(s, "fluid")
    assert events.work.sum() == pytest.approx(fluid.work.sum(), rel=0.05)
    assert percent_of_optimal(events) == pytest.approx(percent_of_optimal(fluid), abs=4.0)
    moves = [[e["t"] for e in r.events if e.get("state") == "moved"] for r in (events, fluid)]
    assert (len(moves[0]) > 0) == (len(moves[1]) > 0) == (period is not None)


def test_rebalancing_beats_none_over_stock_traces():
    for seed in (0, 1):
        none = percent_of_optimal(simulate(table5(None, seed=seed), "fluid"))
        t300 = percent_of_optimal(simulate(table5(300.0, seed=seed), "fluid"))
        assert t300 > none + 2.0


def test_balanced_assignment_is_the_max_min_optimum_for_identical_peers():
    rng = np.random.default_rng(0)
    for _ in range(30):
        stages, n = int(rng.integers(2, 4)), int(rng.integers(2, 8))
        row = rng.uniform(0.5, 2.0, stages)
        service = np.tile(row, (n, 1))
        got = balanced_stages(np.ones(n, np.bool_), service, stages)
        cap = lambda a: min(sum(1 / row[s] for x in a if x == s) for s in range(stages))
        best = max(cap(a) for a in itertools.product(range(stages), repeat=n))
        assert cap(got) == pytest.approx(best)


def test_summary_percent_of_optimal_and_utilization():
    r = simulate(_equal(trainers=2, window=2, global_batch=64), "fluid")
    r.work[:] = 1.0
    r.optimal[:] = 4.0
    assert percent_of_optimal(r) == 25.0
    d = summarize(r)
    assert 0.0 < d["device_utilization"] < 1.0 and len(d["stages"]) == 4
