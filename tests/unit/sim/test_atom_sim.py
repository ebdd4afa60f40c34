"""ATOM's swap schedule and the GPipe / PipeDream baselines in virtual time (the ATOM paper, Figures
12, 14-16): hand-worked small cases, the pipeline bubble, and invariants of every timeline."""

import math
from itertools import pairwise

import pytest

from labkit.config import ConfigError
from labkit.plan.atom_profile import LayerCost
from labkit.plan.atom_partition import partition
from labkit.sim.atom import (
    Overheads,
    analytic_profile,
    atom_timeline,
    boundary_bytes,
    resident_bytes,
    stash_bytes,
    submodel_bytes,
    swap_events,
)
from labkit.sim.pipelines import (
    balanced_stages,
    global_batch_time,
    gpipe_timeline,
    pipedream_timeline,
    ring_allreduce_s,
)


def _layer(i: int, fwd: float = 1.0, bwd: float = 2.0, load: float = 3.0, memory: float = 1.0,
           out: float = 0.0) -> LayerCost:
    return LayerCost(f"block{i}", "block", memory, 1.0, fwd, bwd, load, out)


def _uniform(n: int, **kw) -> list[LayerCost]:
    return [_layer(i, **kw) for i in range(n)]


def _compute(t, device: int = 0):
    return sorted((iv for iv in t.intervals if iv.kind == "compute" and iv.device == device), key=lambda iv: iv.start)


def test_two_submodels_whose_load_outlasts_their_run_idle_the_gpu():
    """fwd 1, bwd 2, load 4 per sub-model, C = 1. Runs alternate [F1, B1] (3 s) and [B0, F0]
    (3 s), each covering a 4 s load of the other: 1 s idle per run, iteration 8 s, 6 s of compute."""
    t = atom_timeline(_uniform(2, load=4.0), (1, 1), 1, iterations=2)
    assert t.per_minibatch_s == pytest.approx(8.0)
    assert t.utilization == (pytest.approx(0.75),)
    assert t.window == (pytest.approx(14.0), pytest.approx(22.0))  # cold load 0-4, F0 4-5, [F1 B1] 8-11, B0 12-14


def test_three_submodels_by_hand():
    """fwd 1, bwd 2, load 3, budget two sub-models, C = 1. Steady iteration from B0's end at 17:
    F0 17-18, load 1 15-18, F1 18-19, load 2 18-21 (idle 19-21), F2 21-22, B2 22-24 (sub-model 1
    reloads 21-24 meanwhile), B1 24-26, load 0 24-27 (idle 26-27), B0 27-29. 9 s of compute in 12."""
    t = atom_timeline(_uniform(3), (1, 1, 1), 1, budget_bytes=2.0, iterations=2)
    assert t.window == (pytest.approx(17.0), pytest.approx(29.0))
    assert t.per_minibatch_s == pytest.approx(12.0)
    assert t.utilization == (pytest.approx(0.75),)
    loads = [(iv.unit, iv.start, iv.end) for iv in t.intervals if iv.kind == "load" and 15.0 <= iv.start < 29.0]
    assert loads == [(1, 15.0, 18.0), (2, 18.0, 21.0), (1, 21.0, 24.0), (0, 24.0, 27.0)]
    assert t.peak_memory == 2.0


def test_enough_accumulation_hides_every_load():
    """Same model at C = 3: a forward run (3 s) covers a 3 s load, so the GPU never waits and an
    iteration is 3 x (1 + 2) x 3 sub-models = 27 s, 9 s per minibatch."""
    t = atom_timeline(_uniform(3), (1, 1, 1), 3, budget_bytes=2.0)
    assert t.utilization == (pytest.approx(1.0),)
    assert t.per_minibatch_s == pytest.approx(9.0)


def test_no_room_for_the_next_submodel_serializes_loads():
    """Budget 1.5 sub-models: every load waits for the current run to end. Steady iteration:
    load 1 (3) + [F1 B1] (3) + load 0 (3) + [B0 F0] (3) = 12 s, half of it compute."""
    t = atom_timeline(_uniform(2), (1, 1), 1, budget_bytes=1.5)
    assert t.per_minibatch_s == pytest.approx(12.0)
    assert t.utilization == (pytest.approx(0.5),)
    assert t.peak_memory == 1.0


def test_one_submodel_loads_once():
    t = atom_timeline(_uniform(3), (3,), 2)
    assert [iv.kind for iv in t.intervals].count("load") == 1
    assert t.utilization == (pytest.approx(1.0),)
    assert t.per_minibatch_s == pytest.approx(3 * 3.0)


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigError, match="budget_bytes"):
        atom_timeline(_uniform(2), (1, 1), 1, budget_bytes=0.5)
    with pytest.raises(ConfigError, match="sizes"):
        atom_timeline(_uniform(3), (1, 1), 1)
    with pytest.raises(ConfigError, match="accumulation"):
        atom_timeline(_uniform(2), (1, 1), 0)
    with pytest.raises(ConfigError, match="bandwidth_bps"):
        gpipe_timeline(_uniform(2), (1, 1), 2, 0.0)
    with pytest.raises(ConfigError, match="device"):
        analytic_profile("gpt3-small", "TPU", 1, 128)


def _check_atom_invariants(t, profile, sizes, accumulation, budget, stash_on):
    computes = _compute(t)
    busy = sorted((iv for iv in t.intervals if iv.kind in ("compute", "overhead")), key=lambda iv: iv.start)
    for a, b in pairwise(busy):
        assert a.end <= b.start + 1e-9, "two spans of the compute stream overlap"
    loads = sorted((iv for iv in t.intervals if iv.kind == "load"), key=lambda iv: iv.start)
    for a, b in pairwise(loads):
        assert a.end <= b.start + 1e-9, "two loads overlap"
    for c in computes:  # the sub-model's latest load before it computes has ended
        latest = max((iv for iv in loads if iv.unit == c.unit and iv.start <= c.start), key=lambda iv: iv.start)
        assert latest.end <= c.start + 1e-9
    assert t.peak_memory <= budget
    floor = resident_bytes(profile, accumulation, stash_on)
    assert min(b for _, b in t.memory) >= floor
    assert [tm for tm, _ in t.memory] == sorted(tm for tm, _ in t.memory)
    assert t.peak_memory <= max(submodel_bytes(profile, sizes)) * 2 + floor
    assert 0.0 < t.utilization[0] <= 1.0 + 1e-12


@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (2, 1, 1), (2, 2), (1, 1, 2)])
@pytest.mark.parametrize("accumulation", [1, 3])
@pytest.mark.parametrize("budget", [32e9, 16e9])
@pytest.mark.parametrize("stash_on", ["host", "device"])
@pytest.mark.parametrize("overheads", [None, Overheads(12e9, 5e-4)])
def test_atom_invariants_on_an_analytic_profile(sizes, accumulation, budget, stash_on, overheads):
    profile = analytic_profile("gpt3-175b", "V100-32GB", 1, 2048, layers=2)
    t = atom_timeline(profile, sizes, accumulation, budget_bytes=budget, iterations=4, stash_on=stash_on,
                      overheads=overheads)
    _check_atom_invariants(t, profile, sizes, accumulation, budget, stash_on)


def test_overheads_by_hand():
    """Three sub-models of one layer (fwd 1, bwd 2, load 0.5: hidden; 1 byte of parameters; a cut
    moves 1 byte), C = 1, copies at 1 byte/s, 0.25 s per turn. An iteration's turns F0, F1, [F2 B2],
    B1, B0 wait 5 x 0.25 s; sub-model 1's input goes to the host before F1 and back before B1 (1 s
    each; sub-model 0's input is the tokens, not charged); every backward copies 1 byte of gradients
    out (3 x 1 s). 9 s of compute in 9 + 1.25 + 2 + 3 = 15.25 s. With the stash on the device its
    2 s of copies go."""
    profile = _uniform(3, load=0.5, out=1.0)
    host = atom_timeline(profile, (1, 1, 1), 1, iterations=2, overheads=Overheads(1.0, 0.25))
    assert host.per_minibatch_s == pytest.approx(15.25)
    assert host.utilization == (pytest.approx(9 / 15.25),)
    device = atom_timeline(profile, (1, 1, 1), 1, iterations=2, overheads=Overheads(1.0, 0.25), stash_on="device")
    assert device.per_minibatch_s == pytest.approx(13.25)
    plain = atom_timeline(profile, (1, 1, 1), 1, iterations=2)
    assert plain.utilization == (pytest.approx(1.0),) and plain.per_minibatch_s == pytest.approx(9.0)
    with pytest.raises(ConfigError, match="copy_bps"):
        Overheads(0.0)
    with pytest.raises(ConfigError, match="stash_on"):
        atom_timeline(profile, (1, 1, 1), 1, stash_on="disk")


def test_a_stash_on_the_host_lets_bigger_submodels_fit():
    """6 layers of 1 byte (fwd 1, bwd 2, load 1), cuts of 0.25 bytes, C = 2, a 6-byte device. On
    the device the stash is 2 x 5 x 0.25 = 2.5 bytes, leaving 3.5 for two neighbouring sub-models,
    so none has more than two layers. On the host only the running turn's inputs and outputs stay
    (2 x 2 x 0.25 = 1 byte), leaving 5: the search finds a three-layer sub-model, and the schedule
    prefetches it in budget, where the same cut with the stash on the device waits for room."""
    profile = _uniform(6, load=1.0, out=0.25)
    assert stash_bytes(profile, 2) == 2.5 and boundary_bytes(profile, 2) == 1.0
    on_device = partition(profile, 6.0 - resident_bytes(profile, 2, "device"), 2, together=True)
    on_host = partition(profile, 6.0 - resident_bytes(profile, 2, "host"), 2, together=True)
    assert on_device.sizes == (1, 2, 1, 2) and on_host.sizes == (1, 2, 3)
    host = atom_timeline(profile, on_host.sizes, 2, budget_bytes=6.0)
    device = atom_timeline(profile, on_host.sizes, 2, budget_bytes=6.0, stash_on="device")
    assert host.peak_memory == 6.0 and host.utilization == (pytest.approx(1.0),)
    assert device.utilization[0] < 0.9
    with pytest.raises(ConfigError, match="budget_bytes"):
        atom_timeline(profile, (4, 2), 2, budget_bytes=6.0, stash_on="device")
    assert atom_timeline(profile, (4, 2), 2, budget_bytes=6.0).peak_memory <= 6.0


def test_analytic_profile_matches_the_seed():
    """Table II's activation payload (fp32, 1 x 2048 tokens) and §III-C's embedding: big to load,
    nearly free to run; memory = parameters + gradients + activations."""
    for model, mib in (("gpt3-small", 6), ("gpt3-xl", 16), ("gpt3-13b", 40), ("gpt3-175b", 96)):
        embed, block, *_ = analytic_profile(model, "V100-32GB", 1, 2048, bytes_per_value=4, layers=1)
        assert block.out_bytes / 2**20 == pytest.approx(mib)
    embed, block, _, head = analytic_profile("gpt3-175b", "V100-32GB", 1, 2048, layers=2)
    assert embed.fwd_s < 1e-3 * block.fwd_s and embed.load_s > 0.3 * block.load_s
    assert embed.load_s == pytest.approx(head.load_s, rel=0.05)
    assert embed.param_bytes / 2 == (50257 + 2048) * 12288
    assert block.bwd_s == pytest.approx(3 * block.fwd_s)  # 2x forward + one recomputed forward
    assert block.memory > 2 * block.param_bytes
    assert block.load_s == pytest.approx(block.param_bytes / 12e9)
    assert len(analytic_profile("gpt3-small", "V100", 1, 128)) == 12 + 2


@pytest.mark.parametrize("microbatches", [1, 4, 8])
def test_gpipe_bubble_on_a_free_link(microbatches):
    """P = 4 equal stages, no link cost: every device is idle (P-1)/(M+P-1) of the iteration."""
    t = gpipe_timeline(_uniform(4, out=1e6), (1, 1, 1, 1), microbatches, math.inf)
    bubble = 3 / (microbatches + 3)
    assert t.utilization == pytest.approx([1 - bubble] * 4)
    assert t.per_minibatch_s == pytest.approx((microbatches + 3) * 3.0 / microbatches)
    assert t.gpu_s_per_minibatch == pytest.approx(4 * t.per_minibatch_s)


def test_gpipe_by_hand_with_a_link():
    """P = 2, M = 2, fwd 1, bwd 2, 0.5 s per send: F0 0-1, F1 1-2 on device 0; device 1 gets them
    at 1.5 and 2.5, runs F0 1.5-2.5, F1 2.5-3.5, B1 3.5-5.5, B0 5.5-7.5; device 0 gets the
    gradients at 6 and 8: B1 6-8, B0 8-10. 6 s of compute in 10 on each device."""
    t = gpipe_timeline(_uniform(2, out=1.0), (1, 1), 2, math.inf, latency_s=0.5)
    assert t.makespan_s == pytest.approx(10.0)
    assert t.utilization == pytest.approx([0.6, 0.6])
    assert [(iv.phase, iv.batch, iv.start) for iv in _compute(t, 0)] == [
        ("fwd", 0, 0.0), ("fwd", 1, 1.0), ("bwd", 1, 6.0), ("bwd", 0, 8.0)]


def test_pipedream_fills_the_pipeline_and_beats_gpipe():
    profile = _uniform(4, out=1e6)
    free = pipedream_timeline(profile, (1, 1, 1, 1), 32, math.inf)
    assert free.per_minibatch_s == pytest.approx(3.0)
    assert free.utilization == pytest.approx([1.0] * 4)
    for bps in (math.inf, 8e6, 4e6, 2e6):  # 1, 2 and 4 s per send
        gpipe = gpipe_timeline(profile, (1, 1, 1, 1), 4, bps)
        pipedream = pipedream_timeline(profile, (1, 1, 1, 1), 32, bps)
        assert pipedream.per_minibatch_s < gpipe.per_minibatch_s
        assert pipedream.mean_utilization > gpipe.mean_utilization


def test_pipeline_invariants():
    profile = analytic_profile("gpt3-xl", "V100-32GB", 1, 2048)
    stages = balanced_stages(profile, 4)
    for t in (gpipe_timeline(profile, stages, 4, 400e6, 1e-3), pipedream_timeline(profile, stages, 16, 400e6, 1e-3)):
        for device in range(4):
            computes = _compute(t, device)
            assert len(computes) == 2 * (4 if t.schedule == "gpipe" else 16)
            for a, b in pairwise(computes):
                assert a.end <= b.start + 1e-9
        for cut in range(3):
            for phase in ("fwd", "bwd"):
                sends = sorted((iv for iv in t.intervals if iv.kind == "send" and iv.unit == cut and iv.phase == phase),
                               key=lambda iv: iv.start)
                wire = profile[sum(stages[:cut + 1]) - 1].out_bytes * 8 / 400e6
                for a, b in pairwise(sends):  # one send at a time per direction
                    assert a.start + wire <= b.start + 1e-9


def test_slower_links_hurt_pipelines_not_atom():
    profile = analytic_profile("gpt3-175b", "V100-32GB", 1, 2048, layers=2)
    stages = (1, 1, 1, 1)
    util = {bps: (gpipe_timeline(profile, stages, 4, bps, 1e-3).mean_utilization,
                  pipedream_timeline(profile, stages, 32, bps, 1e-3).mean_utilization) for bps in (10e9, 800e6, 400e6)}
    assert util[10e9][0] > util[800e6][0] > util[400e6][0]
    assert util[10e9][1] > util[800e6][1] > util[400e6][1]
    times = {bps: global_batch_time(profile, atom_sizes=(2, 2), stages=stages, accumulation=4, microbatches=4, gpus=8,
                                    bandwidth_bps=bps, latency_s=1e-3, budget_bytes=32e9) for bps in (10e9, 400e6)}
    assert times[10e9]["atom"].compute_s == times[400e6]["atom"].compute_s
    assert times[10e9]["pipedream"].compute_s < times[400e6]["pipedream"].compute_s
    assert times[10e9]["gpipe"].compute_s < times[400e6]["gpipe"].compute_s


def test_global_batch_by_hand():
    """Two layers of 1 byte of parameters each, 4 GPUs: ATOM replicas run 256 / 4 = 64 minibatches
    (32 iterations of C = 2), all-reduce 2 bytes over 4; 2 pipelines of 2 all-reduce 1 byte over 2."""
    profile = _uniform(2, load=0.5, out=1.0)
    times = global_batch_time(profile, atom_sizes=(1, 1), stages=(1, 1), accumulation=2, microbatches=4, gpus=4,
                              bandwidth_bps=8.0, latency_s=0.25, host_optimizer_bps=1.0, device_optimizer_bps=2.0)
    atom = atom_timeline(profile, (1, 1), 2, iterations=32)
    assert times["atom"].compute_s == atom.makespan_s
    assert times["atom"].allreduce_s == pytest.approx(ring_allreduce_s(2.0, 4, 8.0, 0.25)) == pytest.approx(2 * 3 / 4 * 2.0 + 6 * 0.25)
    assert times["atom"].optimizer_s == 2.0
    assert times["gpipe"].compute_s == pytest.approx(32 * gpipe_timeline(profile, (1, 1), 4, 8.0, 0.25).makespan_s)
    assert times["pipedream"].allreduce_s == pytest.approx(1.0 + 0.5)
    assert times["pipedream"].optimizer_s == 0.5
    assert times["atom"].total_s == pytest.approx(sum((atom.makespan_s, times["atom"].allreduce_s, 2.0)))
    with pytest.raises(ConfigError, match="gpus"):
        global_batch_time(profile, atom_sizes=(1, 1), stages=(1, 1), accumulation=2, microbatches=4, gpus=3,
                          bandwidth_bps=8.0)


def test_balanced_stages_minimizes_the_slowest_stage():
    costs = [0.1, 3.0, 3.0, 3.0, 1.0]  # fwd = bwd = half of each
    profile = [_layer(i, fwd=c / 2, bwd=c / 2) for i, c in enumerate(costs)]
    assert balanced_stages(profile, 3) == (2, 1, 2)
    assert balanced_stages(profile, 5) == (1, 1, 1, 1, 1)
    assert balanced_stages(profile, 1) == (5,)


def test_timelines_are_deterministic():
    profile = analytic_profile("gpt3-large", "GTX1080Ti", 1, 2048)
    assert atom_timeline(profile, (9, 9, 8), 4, budget_bytes=11e9) == atom_timeline(profile, (9, 9, 8), 4, budget_bytes=11e9)
    assert pipedream_timeline(profile, (7, 7, 7, 5), 8, 4e8) == pipedream_timeline(profile, (7, 7, 7, 5), 8, 4e8)


def test_swap_events_replay_the_schedule_as_a_live_replica_reports_it():
    """The three-sub-model case above as swap events: every compute run is one turn, in time
    order, its load attached when the sub-model was loaded for it; the first run of an
    iteration's backward (sub-model 2, right after its forward) and the next forward of
    sub-model 0 (right after its backward) find their sub-model resident."""
    t = atom_timeline(_uniform(3), (1, 1, 1), 1, budget_bytes=2.0, iterations=2)
    turns = swap_events(t, replica="r0")
    assert len(turns) == 12 and [e["t"] for e in turns] == sorted(e["t"] for e in turns)
    second = [(e["submodel"], e["phase"], e["load_start"]) for e in turns[6:]]
    assert second == [(0, "forward", None), (1, "forward", 15.0), (2, "forward", 18.0), (2, "backward", None),
                      (1, "backward", 21.0), (0, "backward", 24.0)]
    assert all(e["type"] == "swap" and e["replica"] == "r0" for e in turns)
    with pytest.raises(ConfigError, match="an ATOM timeline"):
        swap_events(gpipe_timeline(_uniform(2), (1, 1), 2, 1e9))
