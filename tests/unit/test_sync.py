"""Sync rules (pure) and DiLoCo's outer step against a hand-computed example."""

from __future__ import annotations

import pytest
import torch

from labkit.config import ConfigError, SyncConfig
from labkit.runtime.diloco import OuterState
from labkit.swarm.sync import SyncSchedule, sample_weights


def test_diloco_schedule_outer_every_h_and_switches_only_there() -> None:
    schedule = SyncSchedule(SyncConfig(mode="diloco", inner_steps=3))
    outer = [schedule.boundary().outer for _ in range(6)]
    assert outer == [False, False, True, False, False, True]
    schedule.boundary()
    schedule.request(SyncConfig(mode="allreduce"))
    assert schedule.boundary().switch_to is None  # inner step 2 of 3: not yet
    decision = schedule.boundary()
    assert decision.outer and decision.switch_to.mode == "allreduce"
    assert schedule.boundary().allreduce


def test_allreduce_switches_at_the_next_step() -> None:
    schedule = SyncSchedule(SyncConfig())
    schedule.request(SyncConfig(mode="diloco", inner_steps=2))
    first = schedule.boundary()
    assert first.allreduce and first.switch_to.mode == "diloco"
    assert [schedule.boundary().outer for _ in range(2)] == [False, True]


def test_sample_weights() -> None:
    assert sample_weights({"a": 8, "b": 24}) == {"a": 0.25, "b": 0.75}
    assert sample_weights({"a": 0, "b": 0}) == {"a": 0.5, "b": 0.5}


def test_outer_step_by_hand() -> None:
    """Nesterov SGD fed g = -delta: buf = mu*buf + g, theta -= lr*(g + mu*buf).
    Step 1: buf = -d1, so theta += 0.7 * 1.9 * d1."""
    local = [torch.nn.Parameter(torch.tensor([2.0, 4.0], dtype=torch.float64))]
    outer = OuterState([torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))], SyncConfig(mode="diloco"))
    delta = outer.pseudo_gradient(local)
    assert torch.equal(delta[0], torch.tensor([1.0, 2.0], dtype=torch.float64))
    outer.outer_step(delta, local)
    expected = torch.tensor([1.0 + 0.7 * 1.9 * 1.0, 2.0 + 0.7 * 1.9 * 2.0], dtype=torch.float64)
    assert torch.allclose(outer.global_params[0].detach(), expected, atol=1e-12)
    assert torch.equal(local[0].detach(), outer.global_params[0].detach())  # peers restart from global
    # step 2 with delta2 = [1, 0]: buf = 0.9*(-d1) - d2; update = -d2 + 0.9*buf
    with torch.no_grad():
        local[0].add_(torch.tensor([1.0, 0.0], dtype=torch.float64))
    outer.outer_step(outer.pseudo_gradient(local), local)
    d1, d2 = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)
    buf = 0.9 * (-d1) - d2
    expected = expected - 0.7 * (-d2 + 0.9 * buf)
    assert torch.allclose(outer.global_params[0].detach(), expected, atol=1e-12)


def test_bad_sync_config() -> None:
    with pytest.raises(ConfigError, match=r"SyncConfig\.inner_steps=0 is not allowed"):
        SyncConfig(inner_steps=0)
    with pytest.raises(ConfigError, match=r"SyncConfig\.mode='gossip' is not allowed: one of \['allreduce', 'diloco'\]"):
        SyncConfig(mode="gossip")


def test_sum_over_peers_adds_every_parameter_in_peer_order() -> None:
    from labkit.swarm.sync import sum_over_peers

    assert sum_over_peers([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]]) == [111.0, 222.0]
    assert sum_over_peers([[3.0]]) == [3.0]


def test_weighted_average_weights_pseudo_gradients_by_samples() -> None:
    from labkit.swarm.sync import weighted_average

    assert weighted_average({"a": [4.0, 0.0], "b": [0.0, 8.0]}, {"a": 3, "b": 1}) == [3.0, 2.0]
    assert weighted_average({"a": [2.0], "b": [4.0]}, {"a": 0, "b": 0}) == [3.0]  # none processed: equal weights
