"""A Plan drives a run: stage count, devices as peers, layer split rescaled to the model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.config import ConfigError, ModelConfig, RunConfig
from labkit.plan.plan import Plan, PlanStage, rescale_split


@given(st.lists(st.integers(1, 60), min_size=1, max_size=12), st.integers(12, 48))
def test_rescaled_split_keeps_depth_and_every_stage(split: list[int], n_layer: int) -> None:
    out = rescale_split(tuple(split), n_layer)
    assert sum(out) == n_layer and len(out) == len(split) and min(out) >= 1
    if len(set(split)) == 1 and n_layer % len(split) == 0:
        assert len(set(out)) == 1  # equal stages stay equal


def test_run_config_follows_the_plan() -> None:
    plan = Plan(method="cluster", scenario="t", stages=(PlanStage(devices=("a", "b", "c"), layers=18),
                                                       PlanStage(devices=("d",), layers=6)),
                links=((("b", "d", 1.0),),), time=1.0, parts={"dp": 0.0, "pp": 0.5, "compute": 0.5})
    cfg = plan.run_config(RunConfig(model=ModelConfig(size="nano")), max_peers_per_stage=2)
    assert (cfg.stages, cfg.peers_per_stage, cfg.layer_split) == (2, (2, 1), (3, 1))
    assert Plan.from_json(plan.to_json()).run_config(RunConfig()).peers_per_stage == (3, 1)
    with pytest.raises(ConfigError, match="at most the model's 4 layers"):
        rescale_split((1,) * 5, 4)


def test_a_task_pool_run_takes_its_servers_and_clients_from_the_plans_roles() -> None:
    stages = (PlanStage(devices=("f", "b1", "b2", "c1", "c2", "c3"), layers=3,
                        roles=("frontal", "backward", "backward", "client", "client", "client")),
              PlanStage(devices=("f2", "g", "d"), layers=1, roles=("frontal", "backward", "client")))
    plan = Plan(method="cluster", scenario="t", stages=stages, links=((("c1", "d", 1.0),),), time=1.0,
                parts={"dp": 0.0, "pp": 0.5, "compute": 0.5})
    cfg = plan.run_config(RunConfig(model=ModelConfig(size="nano"), executor="taskpool"), max_peers_per_stage=2)
    assert (cfg.stages, cfg.peers_per_stage, cfg.layer_split) == (2, (2, 1), (3, 1))
    assert (cfg.executor.frontal, cfg.executor.backward) == ((1, 1), (2, 1))
    assert [cfg.executor.servers(s) for s in range(2)] == [(1, 2), (1, 1)]
    no_clients = Plan(method="dtfm", scenario="t", stages=(PlanStage(devices=("a",), layers=4),), links=(),
                      time=1.0, parts={"dp": 0.0, "pp": 0.5, "compute": 0.5})
    with pytest.raises(ConfigError, match="no frontal device in stage 0.*labkit plan --method cluster"):
        no_clients.run_config(RunConfig(model=ModelConfig(size="nano"), stages=1, peers=1, executor="taskpool"))
    with pytest.raises(ConfigError, match=r"taskpool.frontal=\(1, 1\) is not allowed: one number, or one per stage \(3\)"):
        RunConfig(model=ModelConfig(size="nano"), stages=3, executor=cfg.executor)
