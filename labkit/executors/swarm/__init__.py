"""SWARM parallelism (Ryabinin et al., 2023): stages of peers, trainers routing each microbatch
through one peer per stage by Algorithm 1, peers moved between stages by Algorithm 2."""

from __future__ import annotations

from typing import Any

from labkit.executors.spec import ExecutorSpec
from labkit.executors.swarm.config import SwarmConfig


def stage_copies(run: Any, extra: int = 0) -> list[tuple[int, int]]:
    """(parameters, copies held) of every stage: its peers, plus `extra` copies (a task pool's servers)."""
    out, first = [], 0
    for stage, count in enumerate(run.layer_split):
        out.append((run.model.stage_params(first, count), run.peers_per_stage[stage] + extra))
        first += count
    return out


SPEC = ExecutorSpec(
    name=SwarmConfig.name,
    title="SWARM: a pipeline of stages, each a swarm of peers; trainers route microbatches stochastically",
    config=SwarmConfig,
    launch={"inprocess": "labkit.executors.swarm.inprocess:launch", "dask": "labkit.executors.swarm.dask:launch"},
    charts=("routing", "loads", "router", "timeline", "throughput", "loss", "traffic"),
    run_fields=("stages", "peers", "layer_split", "trainers", "compression.codec", "compression.boundary",
                "compression.factor", "sync.mode", "sync.inner_steps", "sync.outer_lr", "sync.outer_momentum",
                "rebalance_period", "world"),
    shape=lambda run: f"{run.stages} stages x {list(run.peers_per_stage)} peers, {run.trainers} trainers",
    workers=lambda run: sum(run.peers_per_stage) + run.trainers,
    held=stage_copies,
    in_flight=lambda run: run.trainers * run.inflight,
    whatif=True,
)
