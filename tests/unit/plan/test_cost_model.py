"""DT-FM's cost model (the DT-FM paper, Eq. 2-4) against costs computed by hand for N = 4, 6, 8."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.config import ModelConfig
from labkit.kernels.plan_cost import assignment_cost, comm_cost
from labkit.plan.dtfm import CostModel
from labkit.plan.network import Device, NetworkScenario
from labkit.plan.workload import Workload
from tests.unit.plan.helpers import scenario_with_costs, symmetric, workload_for


def test_n4_from_delay_and_bandwidth_with_asymmetric_links() -> None:
    # groups {0,1} and {2,3}; delay 0.01 s; c_DP = 100, c_PP = 200 bytes, D_DP = 2
    bw = symmetric(4, {(0, 1): 100, (2, 3): 50, (0, 2): 10, (0, 3): 20, (1, 2): 40, (1, 3): 5}, 1.0)
    bw[0, 2], bw[2, 0] = 5.0, 15.0  # asymmetric, averages to 10
    delay = np.full((4, 4), 0.01)
    np.fill_diagonal(delay, 0)
    s = NetworkScenario(name="n4", devices=tuple(Device(name=f"d{i}") for i in range(4)), delay=delay, bandwidth=bw)
    cost = CostModel.build(s, 2, Workload(n_layer=2, c_dp_given=100.0, c_pp_given=200.0))
    groups = np.array([[0, 1], [2, 3]])
    dp, pp = cost.parts(groups)
    # DP: {0,1}: 2(0.01 + 100/(2·100)) = 1.02; {2,3}: 2(0.01 + 100/(2·50)) = 2.02 -> max 2.02
    assert dp == pytest.approx(2.02)
    # PP: {0-2: 40.02, 1-3: 80.02} max 80.02 vs {0-3: 20.02, 1-2: 10.02} max 20.02 -> 20.02
    assert pp == pytest.approx(20.02)
    # the random-assignment cost keeps replica rows as given: 0->2 and 1->3
    dp2, pp2 = assignment_cost(np.array([[0, 2], [1, 3]]), cost.w_dp, cost.w_pp)
    assert (dp2, pp2) == pytest.approx((2.02, 80.02))


def test_n6_three_stages_needs_the_open_loop_order() -> None:
    w = symmetric(6, {(0, 1): 1, (2, 3): 2, (4, 5): 3,
                      (0, 2): 4, (0, 3): 9, (1, 2): 9, (1, 3): 5,     # A-B bottleneck 5
                      (0, 4): 7, (0, 5): 8, (1, 4): 6, (1, 5): 9,     # A-C bottleneck 8
                      (2, 4): 2, (2, 5): 10, (3, 4): 10, (3, 5): 3})  # B-C bottleneck 3
    cost = CostModel.build(scenario_with_costs(w), 3, workload_for(2))
    dp, pp = cost.parts(np.array([[0, 1], [2, 3], [4, 5]]))
    assert dp == pytest.approx(3.0)  # slowest group {4,5}
    assert pp == pytest.approx(8.0)  # best path A-B-C = 5 + 3 (not B-A-C = 13, A-C-B = 11)


def test_n8_two_stages_of_four() -> None:
    entries = {(0, 1): 1, (0, 2): 2, (0, 3): 3, (1, 2): 1, (1, 3): 1, (2, 3): 1,
               (4, 5): 4, (4, 6): 2, (4, 7): 2, (5, 6): 2, (5, 7): 2, (6, 7): 2}
    cross = [[1, 9, 9, 9], [9, 9, 2, 7], [9, 3, 9, 9], [9, 9, 6, 4]]
    entries |= {(i, 4 + j): cross[i][j] for i in range(4) for j in range(4)}
    cost = CostModel.build(scenario_with_costs(symmetric(8, entries)), 2, workload_for(4))
    dp, pp = cost.parts(np.array([[0, 1, 2, 3], [4, 5, 6, 7]]))
    assert dp == pytest.approx(8.0)  # device 4: 4 + 2 + 2
    assert pp == pytest.approx(4.0)  # 0->4, 2->5 forced, then 1->6, 3->7


def test_compiled_cost_matches_plain_python_twin() -> None:
    rng = np.random.default_rng(3)
    w = rng.random((12, 12))
    w = w + w.T
    for _ in range(5):
        g = rng.permutation(12).reshape(3, 4)
        assert comm_cost(g, w, w) == pytest.approx(comm_cost.py_func(g, w, w))


def test_workload_bytes_from_a_model_config() -> None:
    model = ModelConfig(size="small", seq_len=64)  # 12 layers, d = 768
    work = Workload.from_model(model, batch=32)
    assert work.block_params() == model.block_params()
    assert work.layer_flops_per_token() == model.block_flops_per_token()
    assert work.c_dp(stages=4) == 3 * model.block_params() * 2  # 3 fp16 blocks per stage
    assert work.c_dp(stages=5) == 3 * model.block_params() * 2  # the deepest stage of 3,3,2,2,2
    assert work.c_pp(replicas=2) == 16 * 64 * 768 * 2  # 16 sequences of 64 tokens, fp16
    assert Workload(c_pp_given=5.0, c_dp_given=7.0).c_pp(8) == 5.0
