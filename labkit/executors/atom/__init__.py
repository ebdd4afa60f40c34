"""ATOM (Wu et al., 2023): whole-model replicas, each swapping sub-models through a device budget;
they average their gradients at every global batch."""

from __future__ import annotations

import dataclasses
from typing import Any

from labkit.executors.atom.config import DEVICES, AtomConfig
from labkit.executors.spec import ExecutorSpec, FormField, world_on_dask

REFUSED = {
    "move_peer": "every replica holds the whole model: there is no stage to move it to",
    "rebalance": "every replica holds the whole model: there are no stages to balance",
    "set_layer_split": "sub-models are cut by the partition search, not by a layer split",
    "set_peer_delay": "replicas take work at their own pace: a slow one simply processes fewer microbatches",
    "set_compression": "replicas send nothing between layers: there is no wire codec",
    "set_sync": "replicas always average at the global batch (ATOM's rule)",
}


def replicas_of_world(run: Any) -> Any:
    """A world's run as ATOM's: its one stage's peers are the replicas."""
    return run.replace(executor=dataclasses.replace(run.executor, replicas=run.peers_per_stage[0]))


def one_stage(run: Any) -> Any:
    """`run` as one stage holding the whole model: how an ATOM run evaluates and checkpoints."""
    return run.replace(stages=1, peers=1, world=None)  # its world's seats are the replicas'; the record has none


def backend_refusal(run: Any, backend: str) -> str | None:
    """On Dask each replica computes on its worker's GPU when it has one: `device` is for in-process
    runs; so are worlds (their replicas' devices and links are emulated in this process)."""
    if refusal := world_on_dask(run, backend):
        return refusal
    if backend == "dask" and run.executor.device != "cpu":
        return (f"atom.device={run.executor.device!r} is not allowed with backend='dask': 'cpu' (on Dask each "
                f"replica computes on its worker's GPU when the worker has one, as SWARM peers do)")
    return None


SPEC = ExecutorSpec(
    name=AtomConfig.name,
    title="ATOM: whole-model replicas swapping sub-models through a device memory budget",
    config=AtomConfig,
    launch={"inprocess": "labkit.executors.atom.run:launch", "dask": "labkit.executors.atom.dask:launch"},
    refused=REFUSED,
    charts=("swaps", "throughput", "loss"),  # replicas route no hops, queue nothing, send nothing
    form=(FormField("replicas", "int"), FormField("budget_mb", "optional_float"), FormField("accumulation", "int"),
          FormField("device", "choice", DEVICES), FormField("prefetch", "choice", (True, False))),
    staged=False,
    worker_word="replicas",
    notice="ATOM run of whole-model replicas: the stage verbs are greyed out (their tooltips say why)",
    shape=lambda run: (f"ATOM, {run.executor.replicas} replicas on {run.executor.device}, "
                       f"C={run.executor.accumulation}"),
    workers=lambda run: run.executor.replicas,
    held=lambda run: [(run.model.num_params(), run.executor.replicas)],
    in_flight=lambda run: run.executor.replicas * run.executor.accumulation,
    backend_refusal=backend_refusal,
    record=one_stage,
    from_world=replicas_of_world,
)
