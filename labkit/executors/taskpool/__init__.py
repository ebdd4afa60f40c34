"""The task pool paper's parameter-server pipeline: per stage, reliable frontal and backward servers
and unreliable clients (the stage's peers); a task pool takes over a vanished client's work."""

from __future__ import annotations

from labkit.executors.spec import ExecutorSpec, FormField, world_on_dask
from labkit.executors.swarm import stage_copies
from labkit.executors.taskpool.config import TaskPoolConfig

REFUSED = {
    "move_peer": "a client joins the stage it is added to: kill it and add_peer(stage) elsewhere",
    "rebalance": "the frontal servers split every microbatch by the clients' compute: there is nothing to move",
    "set_layer_split": "the servers' stages are fixed for the run",
    "set_compression": "slices cross stages through the servers as they are: there is no wire codec",
    "set_sync": "the servers aggregate every pass (the task pool paper's rule)",
}


SPEC = ExecutorSpec(
    name=TaskPoolConfig.name,
    title="task pool: per stage, servers and unreliable clients; a pool takes over a lost client's work",
    config=TaskPoolConfig,
    launch={"inprocess": "labkit.executors.taskpool.run:launch", "dask": "labkit.executors.taskpool.dask:launch"},
    refused=REFUSED,
    charts=("pool", "routing", "timeline", "throughput", "loss"),  # clients queue nothing
    form=(FormField("frontal", "ints"), FormField("backward", "ints"), FormField("slack", "float"),
          FormField("grace", "float")),
    run_fields=("stages", "peers", "layer_split"),
    worker_word="clients",
    server_roles=("frontal", "backward"),
    notice=("task-pool run: each stage's clients behind its servers; Kill, slow and Add peer work on clients, the "
            "other verbs are greyed out (their tooltips say why)"),
    shape=lambda run: f"{run.stages} stages x {list(run.peers_per_stage)} clients",
    workers=lambda run: sum(run.peers_per_stage),
    held=lambda run: stage_copies(run, extra=1),  # the servers shard one master copy between them
    in_flight=lambda run: run.trainers * run.inflight,
    backend_refusal=world_on_dask,  # its world's devices and links are emulated in-process
)
