"""Tabu search over partitions: priced like the full cost model, never worse than its start, off plateaus."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.kernels.plan_cost import comm_cost
from labkit.kernels.plan_tabu import device_classes, tabu_search
from labkit.plan.dtfm import CostModel, plan_dtfm, random_partition
from labkit.plan.presets import dtfm_paper_case


def _spot16() -> tuple:
    scenario, work = dtfm_paper_case("dtfm_spot", n=16)  # devices 0-7 on two 4-GPU machines, 8-15 alone
    return scenario, work, CostModel.build(scenario, 4, work)


def test_interchangeable_devices_share_a_class() -> None:
    cost = _spot16()[2]
    cls = device_classes(cost.w_dp, cost.w_pp)
    assert len(set(cls[:4])) == 1 and len(set(cls[4:8])) == 1 and len(set(cls[8:])) == 1
    assert len(set(cls)) == 3


@pytest.mark.parametrize("sample", [0, 40])
def test_tabu_returns_a_partition_priced_like_the_cost_model_and_no_worse(sample: int) -> None:
    cost = _spot16()[2]
    rng = np.random.default_rng(3)
    for seed in range(3):
        start = random_partition(16, 4, rng)
        g, c = tabu_search(start, cost.w_dp, cost.w_pp, cost.classes, 50, 20, 3, 0.3, seed, sample)
        assert sorted(g.ravel()) == list(range(16)) and g.shape == (4, 4)
        assert c == pytest.approx(sum(comm_cost(g, cost.w_dp, cost.w_pp)))
        assert c <= cost(start) + 1e-12


def test_default_planner_finds_the_hand_built_spot_plan() -> None:
    """Every random spot partition costs the same; the best puts the 8 machine GPUs in two stages, two
    GPUs of each machine in each, so that boundary is matched inside machines."""
    scenario, work, cost = _spot16()
    hand = np.array([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]])
    assert cost(hand) < cost(random_partition(16, 4, np.random.default_rng(0))) - 0.1
    assert plan_dtfm(scenario, 4, work).time <= cost(hand) + 1e-9
