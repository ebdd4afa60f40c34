"""The task pool paper's clustering planner: level choice, server roles, clients, layer split, links."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.config import ConfigError
from labkit.plan.cluster import (
    choose_level,
    cluster_levels,
    even_links,
    layer_split,
    llama_33b,
    plan_cluster,
)
from labkit.plan.network import Device, NetworkScenario
from labkit.plan.plan import Plan
from labkit.plan.presets import preset
from labkit.plan.workload import Workload


def _eq2_eq3_time(scenario: NetworkScenario, workload: Workload, groups: list[list[int]]) -> float:
    """The task pool paper's Eq. 2 with DT_k from Eq. 3, priced from the scenario's raw matrices by plain loops."""
    t, d, p = workload.minibatch_bytes(), workload.minibatches(), len(groups)
    compute = sum(scenario.devices[i].flops for g in groups for i in g)
    dt = workload.batch_flops() / (d * p * compute)  # Eq. 3: B|H| / (d p sum C_s)

    def hop(src: list[int], dst: list[int]) -> float:  # mean alpha + t/beta from one stage's devices to another's
        pairs = [(i, j) for i in src for j in dst]
        return sum(scenario.delay[i, j] + t / scenario.bandwidth[i, j] for i, j in pairs) / len(pairs)

    terms = [(hop(groups[k - 1], g) if k > 0 else 0.0) + (hop(groups[k + 1], g) if k + 1 < p else 0.0) + dt
             for k, g in enumerate(groups)]
    return d * max(terms)


def _server_groups(scenario: NetworkScenario, plan: Plan) -> list[list[int]]:
    """Device indices of each stage's parameter servers (every role but client), in pipeline order."""
    index = {n: i for i, n in enumerate(scenario.names())}
    return [[index[n] for n, r in zip(st.devices, st.roles) if r != "client"] for st in plan.stages]


@pytest.mark.parametrize("name", ["ps_case1", "ps_case2", "ps_case3", "ps_case4", "ps_realworld"])
def test_chosen_level_minimizes_the_time_model_over_levels_tried(name: str) -> None:
    """The plan's servers, priced by Eq. 2/3 here, cost the least of every level up to the first worse one."""
    s = preset(name)
    workload = llama_33b(int(s.extra.get("bytes_per_value", 2)))
    plan = plan_cluster(s, max_stages=8)
    recorded = [lv["time"] for lv in plan.meta["levels"]]
    priced = [_eq2_eq3_time(s, workload, lv["groups"]) for lv in cluster_levels(s, workload, 8)]
    assert recorded == pytest.approx(priced, rel=1e-9)
    k = plan.meta["chosen"] - 1  # levels hold 1, 2, ... stages
    assert len(plan.stages) == plan.meta["chosen"]
    assert _eq2_eq3_time(s, workload, _server_groups(s, plan)) == pytest.approx(priced[k], rel=1e-9)
    assert all(priced[k] <= priced[j] for j in range(k))  # no earlier level is cheaper
    if k + 1 < len(priced):  # the search stopped because the next level is worse
        assert priced[k + 1] > priced[k]


def _three_sites(ratio: float) -> tuple[NetworkScenario, Workload, float]:
    """Three sites of two V100s; a hop between sites costs `ratio` x T, within a site 1e-6 x that.

    T = B|H| / (d sum C), the per-minibatch compute of one stage holding every device (Eq. 3, p = 1).
    """
    workload = Workload(d_model=256, n_layer=12, seq_len=128, batch=64, microbatch=4)
    devices = tuple(Device(name=f"{site}{k}", region=site) for site in "abc" for k in range(2))
    big_t = workload.batch_flops() / (workload.minibatches() * sum(dev.flops for dev in devices))
    site = [dev.region for dev in devices]
    hop = np.array([[ratio * big_t * (1.0 if a != b else 1e-6) for b in site] for a in site])
    delay = hop / 2  # half of each hop is latency, half is t / bandwidth
    bandwidth = workload.minibatch_bytes() / (hop / 2)
    return NetworkScenario(name=f"sites-{ratio}", devices=devices, delay=delay, bandwidth=bandwidth), workload, big_t


# By hand (Eq. 2 with Eq. 3; PT in units of d x T): one stage costs 1; two stages (one site | two sites)
# cost ratio + 1/2 (each stage has one inter-site neighbour); three stages (one site each) cost 2 ratio + 1/3
# (the middle site hears from both sides). ratio 1: 1 < 1.5, keep 1 stage. ratio 1/4: 1 > 0.75 < 0.833, keep
# 2. ratio 1/10 with at most 3 stages: 1 > 0.6 > 0.533, keep 3.
@pytest.mark.parametrize(("ratio", "max_stages", "expected", "times"), [
    (1.0, 16, 1, [1.0, 1.5]),
    (0.25, 16, 2, [1.0, 0.75, 0.5 + 1 / 3]),
    (0.1, 3, 3, [1.0, 0.6, 0.2 + 1 / 3]),
])
def test_planner_picks_the_stage_count_worked_out_by_hand_on_three_sites(
        ratio: float, max_stages: int, expected: int, times: list[float]) -> None:
    """On three well-separated sites the planner keeps the level that Eq. 2/3 by hand says, never splitting a site."""
    s, workload, big_t = _three_sites(ratio)
    plan = plan_cluster(s, workload, max_stages=max_stages)
    d = workload.minibatches()
    assert [lv["time"] for lv in plan.meta["levels"][: len(times)]] == pytest.approx([d * big_t * x for x in times],
                                                                                      rel=1e-6)
    assert plan.meta["chosen"] == len(plan.stages) == expected
    groups = _server_groups(s, plan)
    regions = [{s.devices[i].region for i in g} for g in groups]
    assert sum(len(r) for r in regions) == 3  # no site is spread over two stages ...
    assert all(len(g) == 2 * len(r) for g, r in zip(groups, regions))  # ... and each stage holds whole sites


def test_choose_level_stops_at_the_first_increase() -> None:
    times = [9.0, 7.0, 8.0, 1.0]
    assert choose_level([{"time": t} for t in times]) == 1


def test_realworld_plan_structure() -> None:
    s = preset("ps_realworld")
    plan = plan_cluster(s, stages=3)
    assert sum(plan.layer_split) == 60
    unreliable = {d.name for d in s.devices if not d.reliable}
    clients = {d for st in plan.stages for d in st.with_role("client")}
    assert clients == unreliable
    for st in plan.stages:  # every multi-server stage has both a frontal and a backward server
        servers = [r for r in st.roles if r != "client"]
        if len(servers) > 1:
            assert "frontal" in servers and "backward" in servers
    assert {d.region for d in s.devices if d.name in plan.stages[1].devices} <= {"campus", "cloud", "isp"}
    assert plan.time == pytest.approx(plan.parts["pp"] + plan.parts["compute"])


def test_even_links_follow_the_papers_example() -> None:
    links = even_links(("b1", "b2"), ("f1", "f2", "f3"))
    assert [(a, b) for a, b, _ in links] == [("b1", "f1"), ("b1", "f2"), ("b2", "f2"), ("b2", "f3")]
    assert [s for _, _, s in links] == pytest.approx([1 / 3, 1 / 6, 1 / 6, 1 / 3])


def test_layer_split_is_proportional_and_complete() -> None:
    assert layer_split([2.0, 1.0, 1.0], 8) == (4, 2, 2)
    assert sum(layer_split([5.0, 1.0, 0.1], 60)) == 60 and min(layer_split([5.0, 1.0, 0.1], 60)) >= 1
    with pytest.raises(ConfigError, match="at most the model's 2 layers"):
        layer_split([1.0, 1.0, 1.0], 2)


def test_unreachable_level_is_rejected() -> None:
    with pytest.raises(ConfigError, match="stages=20 is not allowed: a level the hierarchy reaches: 1..8"):
        plan_cluster(preset("ps_realworld"), stages=20)


def test_annealing_finds_the_exact_open_path_on_small_graphs() -> None:
    import numpy as np

    from labkit.kernels.plan_cost import open_tsp_exact
    from labkit.plan.cluster import anneal_open_tsp

    rng = np.random.default_rng(7)
    for k in (3, 5, 6):
        c = rng.random((k, k))
        c = c + c.T
        order = anneal_open_tsp(c, np.random.default_rng(0))
        assert sorted(order) == list(range(k))
        assert sum(c[order[i], order[i + 1]] for i in range(k - 1)) == pytest.approx(open_tsp_exact(c)[0])
