"""Simulator physics: conservation, closed-form throughput, granularities agreeing, rebalancing."""

import dataclasses
import itertools

import numpy as np
import pytest

from labkit.kernels.fluid import balanced_stages
from labkit.sim import ChurnModel, SimScenario, simulate
from labkit.sim.presets import even_peers, table5
from labkit.sim.result import SimResult
from labkit.sim.scenario import PeerGroup
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


@pytest.mark.parametrize("mbps", [20.0, 2000.0])  # payload longer than compute, then shorter
def test_streamed_payloads_hide_transfer_behind_compute(mbps: float):
    """In c chunks a hop takes the round trip plus max(payload/c + compute, payload + compute/c), not their sum."""
    c = 4
    s = _equal(trainers=1, window=1, rtt_ms=20.0, bandwidth_mbps=mbps, stream_chunks=c, duration=1200.0,
               bin_seconds=60.0)
    w = build_world(s)
    p = w.hop_seconds[0] - w.hop_rtt[0]
    trip = 2 * s.stages * w.hop_rtt[0] + sum(max(p / c + x, p + x / c) for x in np.r_[w.fwd[0], w.bwd[0]])
    assert trip < 2 * s.stages * w.hop_seconds[0] + (w.fwd[0] + w.bwd[0]).sum()
    r = simulate(s, "events")
    assert r.work.sum() / s.duration == pytest.approx(1 / trip, rel=0.02)
    assert r.stage_busy.sum() == pytest.approx(r.work.sum() * (w.fwd[0] + w.bwd[0]).sum(), rel=0.02)


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


# Two stages of "small" (GPT-2 small: d = 768, 12 blocks, 6 per stage) on identical T4s, 2 peers on stage 0 and 5 on
# stage 1, no churn, no all-reduce, a fast network and 16 x 16 microbatches in flight, so compute is the limit.
# One microbatch costs a peer s = 6 blocks x 2048 tokens x (6(12d^2 + 13d) + 12 x 512 x d) FLOPs / (0.3 x 65e12 FLOP/s)
# = 29.8 ms at either stage. Stage 0 serves 2/s = 67.2 microbatches per second and caps the pipeline; the same 7
# peers balanced 4 + 3 would serve 3/s. So: % of optimal = 100 x 2/3 = 66.7; stage 0 is busy all the time, stage 1 a
# fraction (2/s) / (5/s) = 0.4 of it; device utilisation = (2 x 1 + 5 x 0.4) / 7 = 4/7 = 0.571. Queueing keeps the
# simulated rate a little under capacity (M/G/1 with 256 microbatches in flight: about 0.5 %) and the run starts
# empty, hence the tolerances: 1 % of throughput, 1 point of % of optimal, 0.01 of utilisation. A stage cannot be busy
# longer than it serves, but for one microbatch per peer running past the end (0.03 s of 600 s = 5e-5; 5e-4 allowed).

@pytest.mark.parametrize("mode", ["fluid", "events"])
def test_percent_of_optimal_and_utilization_match_a_hand_computed_bottleneck(mode: str) -> None:
    """A stage with 2 of 7 identical peers caps the pipeline at 2/3 of the balanced optimum and 4/7 utilisation."""
    peers = (PeerGroup(device="T4", count=2, stage=0), PeerGroup(device="T4", count=5, stage=1))
    s = SimScenario(model="small", stages=2, peers=peers, trainers=16, window=16, rtt_ms=1.0,
                    bandwidth_mbps=100_000.0, service_cv=0.0, duration=600.0, bin_seconds=60.0)
    d, tokens = 768, 4 * 512
    service = 6 * tokens * (6 * (12 * d * d + 13 * d) + 12 * 512 * d) / (0.3 * 65e12)
    summary = summarize(simulate(s, mode))
    stages = summary["stages"]
    assert summary["samples_per_s"] == pytest.approx(4 * 2 / service, rel=0.01)  # 4 samples per microbatch
    assert summary["percent_of_optimal"] == pytest.approx(100 * 2 / 3, abs=1.0)
    assert summary["device_utilization"] == pytest.approx(4 / 7, abs=0.01)
    assert [st["mean_peers"] for st in stages] == pytest.approx([2.0, 5.0])
    assert [st["utilization"] for st in stages] == pytest.approx([1.0, 0.4], abs=0.01)
    assert all(st["utilization"] <= 1.0 + 5e-4 for st in stages)


def test_percent_of_optimal_is_work_over_optimal_on_given_arrays() -> None:
    """Arithmetic of percent_of_optimal on given bins: 100 x sum(work) / sum(optimal) over the bins of [start, end)."""
    zeros = np.zeros((4, 1))
    r = SimResult(mode="fluid", bin_seconds=10.0, samples_per_microbatch=1, work=np.array([1.0, 2.0, 3.0, 4.0]),
                  optimal=np.array([4.0, 4.0, 4.0, 8.0]), stage_busy=zeros, peer_seconds=zeros)
    assert percent_of_optimal(r) == pytest.approx(100 * 10 / 20)
    assert percent_of_optimal(r, 10.0, 30.0) == pytest.approx(100 * 5 / 8)
    assert percent_of_optimal(r, 30.0) == pytest.approx(100 * 4 / 8)


def test_spreading_time_over_bins_of_an_inexact_width_ends() -> None:
    """Bin edges that `a / width` rounds to just below their index (here 6.8233.../20) neither
    stall the loop nor lose time: every second lands in some bin."""
    from labkit.sim.events_sim import _spread

    duration = 6.823352172999876
    bins, width, a = np.zeros(20), duration / 20, 0.0
    for k in range(1, 21):
        _spread(bins, 1.0, a, k * width, width)
        a = k * width
    _spread(bins, 1.0, a, duration, width)
    assert bins.sum() == pytest.approx(duration)


def test_a_step_barrier_holds_trainers_for_the_steps_last_microbatch_and_the_boundary():
    """6 slots, 4 microbatches a step (4 peers a stage: no queueing): each step is one trip of 4
    microbatches at once, then the boundary, so steps come every trip + boundary seconds."""
    s = _equal(per_stage=4, trainers=2, window=3, rtt_ms=80.0, global_batch=16, boundary_seconds=0.5)
    w = build_world(s)
    trip = 2 * s.stages * w.hop_seconds[0] + (w.fwd[0] + w.bwd[0]).sum()
    r = simulate(s, "events")
    steps = [e["t"] for e in r.events if e["type"] == "step"]
    assert len(steps) > 10
    assert np.diff(steps) == pytest.approx(trip + 0.5, rel=1e-6)
    assert 0 <= r.counters["finished"] - 4 * len(steps) < 4 and r.counters["in_flight"] <= 4
    churn = simulate(_equal(per_stage=4, trainers=4, window=4, global_batch=32, boundary_seconds=0.5, duration=600.0,
                            trace=((100.0, -3), (200.0, 4), (350.0, -2)), rebalance_period=30.0, service_cv=0.3),
                     "events").counters
    assert churn["lost"] > 0 and churn["entered"] == churn["finished"] + churn["in_flight"]  # lost ones are redone


def test_relayed_hops_count_the_runtimes_round_trips_and_payloads():
    """As the runtime's trainers relay: 2S - 1 round trips (the last stage's is one request) and
    4S - 4 payloads (a middle stage's answer comes back; stage 0 sends tokens up, no gradient down)."""
    s = _equal(trainers=1, window=1, rtt_ms=80.0, bandwidth_mbps=200.0, relay=True)
    w = build_world(s)
    payload = w.hop_seconds[0] - w.hop_rtt[0]
    trip = (2 * s.stages - 1) * w.hop_rtt[0] + (4 * s.stages - 4) * payload + (w.fwd[0] + w.bwd[0]).sum()
    assert simulate(s, "events").work.sum() / s.duration == pytest.approx(1 / trip, rel=0.02)


def test_the_last_stages_loss_request_holds_its_peer_from_forward_to_backward():
    """As the runtime's last stage serves one loss request at a time: two microbatches reaching the
    last stage's one peer together are served one whole request after the other (the second waits
    the first's forward and backward), never the second's forward between the first's forward and
    backward; and the last stage makes no backward hop of its own."""
    from labkit.sim.events_sim import run_events

    peers = (PeerGroup(device="T4", count=2, stage=0), PeerGroup(device="T4", count=1, stage=1))
    s = SimScenario(model="small", stages=2, peers=peers, trainers=2, window=1, routers="trainer", relay=True,
                    rtt_ms=10.0, bandwidth_mbps=1000.0, duration=20.0, bin_seconds=5.0, service_cv=0.0)
    w = build_world(s)
    hops = [e for e in run_events(s).events if e["type"] == "hop" and e["stage"] == 1]
    assert {e["direction"] for e in hops} == {"forward"}
    request = w.hop_seconds[2] + (w.hop_seconds[2] - w.hop_rtt[2]) + w.fwd[2, 1] + w.bwd[2, 1]
    first, second = sorted(e["seconds"] for e in hops[:2])
    assert first == pytest.approx(request) and second == pytest.approx(request + w.fwd[2, 1] + w.bwd[2, 1])


def test_load_events_come_every_bin_and_change_nothing_else():
    from labkit.sim.events_sim import run_events

    s = _equal(per_stage=2, trainers=4, window=2, duration=30.0, bin_seconds=5.0)
    plain, with_loads = run_events(s), run_events(s, loads=True)
    loads = [e for e in with_loads.events if e["type"] == "load"]
    assert sorted({e["t"] for e in loads}) == [5.0, 10.0, 15.0, 20.0, 25.0]
    assert len(loads) == 5 * 8 and max(e["queue"] for e in loads) >= 1
    assert plain.counters == with_loads.counters
    assert [e for e in with_loads.events if e["type"] != "load"] == plain.events


def test_peers_sharing_a_hosts_cores_slow_each_other_down():
    """Capacity-bound, 12 peers with work always waiting, on a host of 2 cores: the host computes 2
    at a time, so the swarm does a sixth of what 12 devices would."""
    own = _equal(trainers=16, window=16, rtt_ms=1.0, bandwidth_mbps=100_000.0)
    shared = dataclasses.replace(own, host_cores=2)
    rate = [r.work[2:].sum() / (len(r.work[2:]) * own.bin_seconds) for r in map(lambda s: simulate(s, "events"), (own, shared))]
    assert rate[1] == pytest.approx(rate[0] / 6, rel=0.05)
