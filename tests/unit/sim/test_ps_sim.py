"""The task pool paper's task pool and SWARM in virtual time: a hand-computed undisturbed batch, and under
disconnections the pool redoes only the lost slices and beats SWARM, as the paper claims."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.plan.network import Device, NetworkScenario
from labkit.plan.plan import Plan, PlanStage
from labkit.plan.workload import Workload
from labkit.sim.ps_compare import batch_stats, with_unreliable
from labkit.sim.ps_swarm import swarm_batch
from labkit.sim.ps_taskpool import taskpool_batch
from labkit.sim.ps_world import ps_world


def _network(reliable: list[bool], delay: float = 0.01, bandwidth: float = 1e9, flops: float = 1e12) -> NetworkScenario:
    n = len(reliable)
    devices = tuple(Device(name=f"d{i}", flops=flops, reliable=r) for i, r in enumerate(reliable))
    return NetworkScenario(name="toy", devices=devices, delay=np.full((n, n), delay), bandwidth=np.full((n, n), bandwidth))


def _plan(stages: list[list[str]]) -> Plan:
    """Stages of one server (first) and clients, one layer each, servers linked in a chain."""
    return Plan(method="cluster", scenario="toy", time=0.0, parts={"dp": 0.0, "pp": 0.0, "compute": 0.0},
                stages=tuple(PlanStage(devices=tuple(s), layers=1, roles=("frontal",) + ("client",) * (len(s) - 1))
                             for s in stages), links=tuple(((a[0], b[0], 1.0),) for a, b in zip(stages, stages[1:])))


def test_one_microbatch_through_two_stages_takes_the_hand_computed_time() -> None:
    """One device per stage, one microbatch: f + h + f + 2f + h + 2f for both methods."""
    work = Workload(d_model=64, n_layer=2, seq_len=8, batch=1, microbatch=1)
    world = ps_world(_network([True, True]), _plan([["d0"], ["d1"]]), work)
    f = 8 * work.layer_flops_per_token() / 3.0 / 1e12  # forward of 8 tokens through one layer
    h = 0.01 + 8 * 64 * 2 / 1e9  # the boundary hop of 8 tokens' fp16 activations
    assert taskpool_batch(world).seconds == pytest.approx(6 * f + 2 * h)
    assert swarm_batch(world).seconds == pytest.approx(6 * f + 2 * h)


def test_one_stage_relays_only_token_ids_and_turns_the_loss_around_on_the_client() -> None:
    """One stage (it is stage 0 and the last): a client 50 ms from its server fetches its half of the
    microbatch's token ids once, then runs forward, loss and backward with no relay through the BS."""
    work = Workload(d_model=64, n_layer=1, seq_len=8, batch=1, microbatch=1)
    network = _network([True, False], delay=0.05, bandwidth=1e18)  # latency only
    world = ps_world(network, _plan([["d0", "d1"]]), work)
    f = 4 * work.layer_flops_per_token() / 3.0 / 1e12  # forward of each device's 4 tokens
    assert taskpool_batch(world).seconds == pytest.approx(0.05 + 3 * f)  # was 4 hops: 0.2 + 3f


def test_swarm_sends_stage_zero_token_ids_not_activations() -> None:
    """The data source (the slow server) hands the microbatch to the fast peer as 8-byte token ids."""
    work = Workload(d_model=4096, n_layer=1, seq_len=1024, batch=1, microbatch=1)
    devices = (Device(name="d0", flops=1e6), Device(name="d1", flops=1e12))
    network = NetworkScenario(name="toy", devices=devices, delay=np.full((2, 2), 0.01), bandwidth=np.full((2, 2), 1e8))
    world = ps_world(network, _plan([["d0", "d1"]]), work)
    f = 1024 * work.layer_flops_per_token() / 3.0 / 1e12
    assert swarm_batch(world).seconds == pytest.approx(0.01 + 1024 * 8 / 1e8 + 3 * f)  # fp16 activations: +84 ms


def _churny_world():
    work = Workload(d_model=64, n_layer=2, seq_len=16, batch=64, microbatch=4)
    network = _network([True, False, False, True, False, False], delay=1e-4, bandwidth=1e10, flops=1e8)
    return ps_world(network, _plan([["d0", "d1", "d2"], ["d3", "d4", "d5"]]), work, grace=0.01)  # compute-bound


def test_disconnections_cost_the_pool_only_the_lost_slices() -> None:
    world = _churny_world()
    clean = taskpool_batch(world)
    assert clean.lost == clean.repeated_beyond_lost == 0 and clean.forward_runs == 64 * 16 * 2
    drops = {1: 0.3 * clean.seconds, 4: 0.6 * clean.seconds}
    pool = taskpool_batch(world, drops)
    assert pool.lost > 0 and pool.repeated_beyond_lost == 0
    assert pool.forward_runs == clean.forward_runs + pool.lost  # every extra forward run is a lost one
    swarm = swarm_batch(world, {i: t * swarm_batch(world).seconds / clean.seconds for i, t in drops.items()})
    assert swarm.repeated_beyond_lost > 0  # SWARM reruns other stages' forwards too


def test_under_disconnections_the_pool_beats_swarm_as_the_paper_says() -> None:
    world = _churny_world()
    pool, swarm = (batch_stats(world, m, rate=0.9, batches=3) for m in ("taskpool", "swarm"))
    assert pool["repeated_beyond_lost"] == 0 < swarm["repeated_beyond_lost"]
    assert swarm["seconds"] / swarm["clean_seconds"] > pool["seconds"] / pool["clean_seconds"]
    assert swarm["seconds"] > pool["seconds"]


def test_with_unreliable_marks_the_slowest_devices_first() -> None:
    devices = (Device(name="fast", flops=2e12), Device(name="slow", flops=1e12), Device(name="mid", flops=1.5e12))
    network = NetworkScenario(name="n", devices=devices, delay=np.zeros((3, 3)), bandwidth=np.ones((3, 3)))
    assert [d.reliable for d in with_unreliable(network, 2).devices] == [True, False, False]
