"""A synchronous pipeline (GPipe, Huang et al., 2019, with PipeDream's 1F1B scheduling): the
baseline SWARM, DT-FM and ATOM compare against. Fixed wiring, stage-local data-parallel lanes, no
rerouting: a killed peer stalls every lane until `add_peer` replaces it."""

from __future__ import annotations

import math
from typing import Any

from labkit.executors.pipeline.config import SCHEDULES, PipelineConfig
from labkit.executors.spec import ExecutorSpec, FormField
from labkit.executors.swarm import stage_copies

REFUSED = {
    "move_peer": "the wiring is fixed: lane r is the r-th peer of every stage (kill a peer and add_peer(stage))",
    "rebalance": "the wiring is fixed: every stage has one peer per lane, whatever the loads",
    "set_layer_split": "the stages are fixed for the run",
    "set_compression": "the wire codec is fixed for the run (compression.codec)",
    "set_sync": "a stage's replicas sum their gradients every step (a synchronous pipeline)",
}


def held_microbatches(run: Any) -> int:
    """Microbatches whose activations are held at once: per lane, 1F1B holds at most one per stage
    at the first stage, GPipe every microbatch of its share."""
    lanes = run.peers_per_stage[0]
    share = math.ceil(run.microbatches_per_step / lanes)
    return lanes * (min(run.stages, share) if run.executor.schedule == "1f1b" else share)


SPEC = ExecutorSpec(
    name=PipelineConfig.name,
    title="pipeline: a synchronous GPipe pipeline with 1F1B scheduling; a lost peer stalls it until replaced",
    config=PipelineConfig,
    launch={"inprocess": "labkit.executors.pipeline.run:launch", "dask": "labkit.executors.pipeline.dask:launch"},
    refused=REFUSED,
    charts=("timeline", "throughput", "loss"),  # its peers queue nothing and route nothing; the bubble shows as gaps
    form=(FormField("schedule", "choice", SCHEDULES),),
    notice=("synchronous pipeline: fixed lanes, no rerouting; Kill, slow and Add peer work, and a killed peer stalls "
            "every lane until a replacement is added; the other verbs are greyed out (their tooltips say why)"),
    run_fields=("stages", "peers", "layer_split", "compression.codec", "compression.boundary", "compression.factor"),
    shape=lambda run: (f"{run.stages} stages x {run.peers_per_stage[0]} lanes, "
                       f"{run.executor.schedule} schedule"),
    workers=lambda run: sum(run.peers_per_stage),
    held=lambda run: stage_copies(run, extra=1),  # the driver keeps each stage's last committed state
    in_flight=held_microbatches,
)
