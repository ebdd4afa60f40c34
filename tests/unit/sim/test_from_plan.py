"""The simulator runs a planner's Plan: same stages, devices, network and (rescaled) split."""

from __future__ import annotations

import pytest

from labkit.config import ConfigError
from labkit.plan.dtfm import plan_dtfm
from labkit.plan.presets import NETWORK_PRESETS
from labkit.sim import simulate
from labkit.sim.from_plan import scenario_from_plan
from labkit.sim.summary import percent_of_optimal


def test_a_dtfm_plan_runs_in_the_simulator() -> None:
    network = NETWORK_PRESETS["dtfm_regional"](n=16)
    plan = plan_dtfm(network, stages=4, generations=5, seed=1)
    scenario = scenario_from_plan(plan, network, model="small", duration=30.0)
    assert scenario.stages == 4 and sum(scenario.layer_split) == 12
    assert sum(g.count for g in scenario.peers) == 16
    for stage, planned in enumerate(plan.stages):
        assert sum(g.count for g in scenario.peers if g.stage == stage) == len(planned.devices)
    regions = {d.region for d in network.devices}
    assert len(scenario.links) == len(regions) * (len(regions) - 1) // 2
    assert all(k.rtt_ms > 0 and k.bandwidth_mbps > 0 for k in scenario.links)
    result = simulate(scenario)
    assert result.work.sum() > 0
    assert 90.0 < percent_of_optimal(result) <= 100.5  # the plan's own layout counts toward the optimum
    hops = [e for e in result.events if e["type"] == "hop"]
    assert {e["stage"] for e in hops} == {0, 1, 2, 3}


def test_unknown_plan_devices_are_refused() -> None:
    network = NETWORK_PRESETS["dtfm_regional"](n=16)
    plan = plan_dtfm(NETWORK_PRESETS["dtfm_regional"](n=32), stages=4, generations=1)
    with pytest.raises(ConfigError, match="devices of the network"):
        scenario_from_plan(plan, network)
