"""Seed 002's clustering planner: level choice, server roles, clients, layer split, links."""

from __future__ import annotations

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
from labkit.plan.presets import preset


@pytest.mark.parametrize("name", ["ps_case1", "ps_case2", "ps_case3", "ps_case4", "ps_realworld"])
def test_chosen_level_minimizes_the_time_model_over_levels_tried(name: str) -> None:
    s = preset(name)
    levels = cluster_levels(s, llama_33b(int(s.extra.get("bytes_per_value", 2))), 8)
    chosen = choose_level(levels)
    tried = levels[: chosen + 2]  # the rule looks one level past the one it keeps
    assert levels[chosen]["time"] == min(lv["time"] for lv in tried)
    assert plan_cluster(s, max_stages=8).meta["chosen"] == levels[chosen]["stages"]


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
