"""labkit's task-pool executor in virtual time (`labkit.sim.taskpool_world`): a task's price from the
world's device and link, a lone client's step as the sum of its tasks, and the world's churn."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.sim.hardware import stage_costs
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import device_table
from labkit.sim.taskpool_world import TOKEN_BYTES, TaskCosts, seat, task_costs, taskpool_steps
from labkit.sim.world import GRAD_BYTES


def world(per_stage: int = 2, stages: int = 2, **more: Any) -> SimScenario:
    """`per_stage` GTX1080Tis a stage in eu, the servers in eu too, 10 ms and 1 Gb/s apart."""
    return SimScenario.from_dict({
        "name": "pool", "model": "small", "stages": stages, "microbatch": 4, "seq_len": 256, "trainer_region": "eu",
        "peers": [{"device": "GTX1080Ti", "count": per_stage, "stage": s, "region": "eu"} for s in range(stages)],
        "links": [{"a": "eu", "b": "eu", "rtt_ms": 10.0, "bandwidth_mbps": 1000.0}], "service_cv": 0.0} | more)


def test_a_task_costs_its_round_trip_its_bytes_and_its_compute() -> None:
    c = TaskCosts(forward=0.5, backward=1.0, rtt=0.1, rate=100.0, input_bytes=2.0, activation_bytes=10.0,
                  param_bytes=1000.0, first_stage=False)
    assert c.seconds("forward", 3, False) == pytest.approx(0.1 + (3 * 2 + 3 * 10) / 100 + 3 * 0.5)
    assert c.seconds("forward", 3, True) == pytest.approx(0.1 + (1000 + 3 * 2 + 3 * 10) / 100 + 3 * 0.5)
    assert c.seconds("backward", 2, False) == pytest.approx(0.1 + (2 * 10 + 2 * 10 + 1000) / 100 + 2 * 1.0)
    assert c.seconds("recompute", 2, False) == pytest.approx(0.1 + (2 * 12 + 2 * 10 + 1000) / 100 + 2 * 1.5)
    first = TaskCosts(**{**c.__dict__, "first_stage": True})
    assert first.seconds("backward", 2, False) == pytest.approx(0.1 + (2 * 10 + 1000) / 100 + 2 * 1.0)  # no input grads
    assert c.speed() == pytest.approx(1 / (0.5 + 12 / 100))


def test_a_client_takes_its_seats_device_and_its_link_to_the_servers() -> None:
    s = world(join_device="A100", peers=[
        {"device": "GTX1080Ti", "count": 1, "stage": 0, "region": "eu"},
        {"device": "T4", "count": 1, "stage": 1, "region": "us"}],
        links=[{"a": "eu", "b": "us", "rtt_ms": 100.0, "bandwidth_mbps": 80.0}])
    assert seat("s1c0") == "s1p0" and seat("s0c12") == "s0p12"
    costs = stage_costs(model="small", stages=2, microbatch=4, seq_len=256, checkpointing=False)
    far = task_costs(s, "s1c0", 1)
    forward, backward = device_table(s, "T4")
    assert far == TaskCosts(forward=forward[1] / 4, backward=backward[1] / 4, rtt=0.1, rate=1e7,
                            input_bytes=costs.activation_bytes / 4, activation_bytes=costs.activation_bytes / 4,
                            param_bytes=costs.stage_params[1] * GRAD_BYTES, first_stage=False)
    near = task_costs(s, "s0c0", 0)
    assert near.input_bytes == TOKEN_BYTES * 256 and near.first_stage
    assert (near.rtt, near.rate) == (0.05, 62.5e6)  # eu-eu is not in the file's links: the scenario's default
    assert task_costs(s, "s0c1", 0).forward == device_table(s, "A100")[0][0] / 4  # a joiner: the join device


def test_a_lone_clients_step_is_the_sum_of_its_tasks() -> None:
    s = world(per_stage=1, stages=1)
    c = task_costs(s, "s0c0", 0)
    step = 3 * (c.seconds("forward", 4, False) + c.seconds("backward", 4, False))
    reload = c.param_bytes / c.rate  # every pass but the first (a client starts with the servers' parameters)
    times = taskpool_steps(s, steps=3, microbatches=3, samples=4)
    assert times == pytest.approx([step, 2 * step + reload, 3 * step + 2 * reload], rel=1e-9)


def test_churn_is_replayed_and_a_kill_costs_time_but_never_a_stages_last_client() -> None:
    clean = taskpool_steps(world(), steps=3, microbatches=4, samples=4)
    churned = taskpool_steps(world(trace=[[0.05, -1], [0.1, -1], [0.15, -1], [0.2, 1]], seed=1), steps=3,
                             microbatches=4, samples=4)
    assert len(churned) == 3 and churned[-1] > clean[-1]  # a stage's last client is never killed: it still ends
    with pytest.raises(ValueError, match="need steps, microbatches and samples >= 1"):
        taskpool_steps(world(), steps=0, microbatches=4, samples=4)
