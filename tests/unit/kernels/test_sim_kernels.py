"""The simulator's numba loops against their plain-Python executions (`py_func`)."""

import dataclasses

import numpy as np
import pytest

from labkit.kernels.fluid import balanced_stages, fluid_run, optimum_rate, pipeline_rate
from labkit.sim.events_sim import _Swarm
from labkit.sim.presets import even_peers
from labkit.sim.scenario import SimScenario
from labkit.sim.world import build_world
from labkit.kernels.eventsim import run_until


def _scenario() -> SimScenario:
    return SimScenario(model="small", stages=3, peers=even_peers("T4", 2, 3), trainers=2, window=2, duration=900.0,
                       trace=((100.0, -2), (150.0, 3), (400.0, -1)), rebalance_period=60.0, service_cv=0.0,
                       global_batch=16, bin_seconds=60.0)


@pytest.mark.parametrize("draws", [np.zeros(0), np.random.default_rng(0).random(257)])
def test_fluid_kernel_matches_plain_python(draws: np.ndarray):
    s = _scenario()
    w = build_world(s)
    outs = []
    for fn in (fluid_run, fluid_run.py_func):
        logs = (np.zeros(64), np.zeros(64, np.int64), np.zeros(64, np.int64), np.zeros(64, np.int64))
        result = fn(w.stage0.copy(), w.fwd + w.bwd, w.hop_seconds, w.ev_t, w.ev_delta, w.ev_u, w.ev_v, s.stages,
                    s.trainers * s.window, w.group, w.ar_time, w.ar_rtt, s.service_cv, 60.0, True, w.move_seconds,
                    s.duration, s.bin_seconds, *logs, 1.0, draws)
        outs.append((result, logs))
    (a, la), (b, lb) = outs
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12)
    assert a[-1] > 0
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(("chunks", "relay", "routers", "cores"), [(1.0, False, "shared", 0), (8.0, False, "shared", 0),
                                                                (1.0, True, "trainer", 2)])
def test_event_kernel_matches_plain_python(chunks: float, relay: bool, routers: str, cores: int):
    s = dataclasses.replace(_scenario(), routers=routers)
    w = build_world(s)
    swarms = [_Swarm(s, w, 2000) for _ in range(2)]
    links = (w.hop_rtt / 2, w.hop_rtt / 2, w.hop_seconds - w.hop_rtt, chunks, relay)
    for sw, fn in zip(swarms, (run_until, run_until.py_func)):
        fn(60.0, s.stages, (sw.stage, sw.free_at, sw.qlen, sw.epoch), sw.router,
           (w.fwd, w.bwd, 0.0, np.zeros((cores, s.trainers * s.window, 2))), links, sw.slots, sw.heap, sw.counters,
           sw.sync, sw.out, sw.hops)
    a, b = swarms
    assert a.counters[1] > 10
    np.testing.assert_array_equal(a.counters, b.counters)
    np.testing.assert_allclose(a.ema, b.ema, rtol=1e-12)
    np.testing.assert_array_equal(a.hops[3], b.hops[3])
    np.testing.assert_allclose(a.work, b.work)


def test_per_trainer_routers_spread_their_first_microbatches_over_a_stage():
    # 4 trainers x 1 slot over stages of 2 equal peers, a step barrier: as the runtime's trainers,
    # router k skips k picks, so every stage's first four forward hops split 2-2 (not 4-0)
    s = dataclasses.replace(_scenario(), trainers=4, window=1, routers="trainer", boundary_seconds=0.1, trace=(),
                            rebalance_period=None)
    sw = _Swarm(s, build_world(s), 2000)
    sw.advance(60.0)
    t, slot, stage, peer, direction = (h[:sw.hops[-1][0]] for h in sw.hops[:5])
    for st in range(s.stages):
        first = peer[(stage == st) & (direction == 0)][:4]
        assert len(first) == 4 and sorted(np.bincount(first, minlength=peer.max() + 1)[np.unique(first)]) == [2, 2], first


def test_booking_compute_across_bins_of_an_inexact_width_ends() -> None:
    """Bin edges that `a / width` rounds to just below their index (here 6.8233.../20) neither
    stall the kernel nor lose time (the hang of a sim_vs_real run)."""
    from labkit.kernels.eventsim import _book

    width = 6.823352172999876 / 20
    busy, a = np.zeros((20, 1)), 0.0
    for k in range(1, 21):
        _book(busy, 0, a, k * width - a, width)
        a = k * width
    assert busy.sum() == pytest.approx(a)


def test_a_computation_booked_ahead_leaves_the_core_free_until_it_starts() -> None:
    """A far hop's computation waits 0.2 s for its payload: the core it books stays free before
    that (the near hops use it), and a stretch that does not fit the gap goes after it (the host
    shares 2 cores in the plain two-continents run; one booked ahead held a core from its arrival)."""
    from labkit.kernels.eventsim import _take_core

    cores = np.zeros((1, 4, 2))
    assert _take_core(cores, 0.0, 0.2, 0.01) == 0.2  # the far hop, booked when its head arrives
    assert _take_core(cores, 0.0, 0.0, 0.05) == 0.0  # a near hop, in the gap before it
    assert _take_core(cores, 0.0, 0.0, 0.05) == 0.05  # the next one queues behind that near hop
    assert _take_core(cores, 0.0, 0.12, 0.1) == pytest.approx(0.21)  # does not fit before 0.2
    assert _take_core(cores, 0.0, 0.0, 0.0) == 0.0  # no compute books nothing
    two = np.zeros((2, 4, 2))
    assert [_take_core(two, 0.0, 0.0, 0.05) for _ in range(3)] == [0.0, 0.0, 0.05]  # 2 at a time
    assert _take_core(two, 0.06, 0.06, 0.05) == 0.06, "a booking that ended by now frees its row"


def test_the_optimum_is_never_below_the_present_layout() -> None:
    """Water-filling puts the peer fast everywhere first and starves stage 1 of the two fast only
    there (0.02 microbatches/s); where they stand (those two on stage 0, it on stage 1) serves 1/s."""
    service = np.array([[1.0, 1.0], [1.0, 100.0], [1.0, 100.0]])
    present = np.array([1, 0, 0])
    args = (service, 2, 4, np.zeros(3), 0.0, 0, np.zeros(2), 0.0)
    balanced = balanced_stages(present >= 0, service, 2)
    x_balanced = pipeline_rate(balanced, balanced >= 0, *args)[0]
    x_present = pipeline_rate(present, present >= 0, *args)[0]
    assert x_balanced < 0.05 < 0.5 < x_present
    assert optimum_rate(present, *args) == x_present
    assert optimum_rate(np.array([0, 1, 1]), *args) == pytest.approx(x_balanced)  # no better layout at hand
