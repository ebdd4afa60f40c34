"""A hung worker under ATOM, the task pool and the synchronous pipeline on Dask: SIGSTOP, not
SIGKILL, so its sockets stay open and nothing fails; it only never answers. The fleet sees its
heartbeats to the scheduler stop, checks it directly, and loses it as if it had left (or, under
ATOM, the run may first drop the replica whose DHT heartbeat went silent): calls
waiting on it fail, the executor drops it (the pipeline waits for add_peer), and training still
equals the single-process loop (float64). SWARM's hung peers and trainers: test_dask_faults.py.

Bound: the worker is silent `SUSPECT_AFTER` longer than the typical worker (seen within a
`WORKER_CHECK`), then the direct check waits at most `BOUNDARY_FLOOR`; plus slack for a loaded machine.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
from distributed import Client

import labkit
from labkit import AtomConfig, ModelConfig, RunConfig, TaskPoolConfig
from labkit.backends.dask.actor_fleet import WORKER_CHECK
from labkit.backends.dask.liveness import SUSPECT_AFTER
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference
from labkit.swarm.deadline import BOUNDARY_FLOOR
from tests.integration.test_pipeline_run import CFG as PIPELINE

pytestmark = pytest.mark.slow
HUNG_WORKER_SECONDS = SUSPECT_AFTER + WORKER_CHECK + BOUNDARY_FLOOR + 5.0
NANO64 = ModelConfig(size="nano", seq_len=32, dtype="float64")
CASES = {  # executor -> (its run, the peer whose worker hangs)
    "atom": (RunConfig(model=NANO64, global_batch=16, microbatch=2, steps=500, eval_every=0, threads=1,
                       executor=AtomConfig(replicas=3, accumulation=2)), "r1"),
    "taskpool": (RunConfig(model=NANO64, stages=2, peers=2, global_batch=16, microbatch=4, steps=500, eval_every=0,
                           threads=1, executor=TaskPoolConfig(grace=600.0)), "s0c1"),  # not lost as overdue first
    "pipeline": (PIPELINE.replace(steps=500), "s1p1"),
}


@pytest.mark.parametrize("executor", sorted(CASES))
def test_a_hung_worker_is_lost_within_its_bound_and_training_stays_exact(own_cluster, tmp_path: Path,
                                                                         executor: str) -> None:
    cfg, victim = CASES[executor]
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    try:
        run.wait_for(step=1, timeout=180)
        worker = next(p["worker"] for s in run.state()["stages"] for p in s["peers"] if p["peer"] == victim)
        with Client(own_cluster.scheduler_address) as client:
            pid = client.run(os.getpid, workers=[worker])[worker]
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            event = run.wait_for(event={"type": "peer", "peer": victim, "state": "killed"}, timeout=120)
            lost = time.monotonic() - stopped
            if executor == "pipeline":  # its slot stays empty until a peer takes it
                run.add_peer(int(victim[1]))
            run.wait_for(step=run.state()["step"] + 2, timeout=120)
        finally:
            os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    # ATOM may find it first by its heartbeats: a hung replica's DHT record expires (ANNOUNCE_TTL) or goes unread (silent)
    found = ("(hung)", "(silent)") if executor == "atom" else ("(hung)",)
    assert event["reason"].endswith(found) and lost < HUNG_WORKER_SECONDS, (round(lost, 1), event["reason"])
    if executor == "atom":  # and no healthy replica was taken for silent
        assert [e["peer"] for e in run.events.history("peer") if e["state"] == "killed"] == [victim]
    stages = 1 if executor == "atom" else cfg.stages  # ATOM's replicas hold the whole model
    for step in run.events.history("step"):  # every step summed the global batch at every stage
        assert step.get("stage_samples", [step["samples"]]) == [cfg.global_batch] * stages, step
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed),
                               steps=checkpoint["step"])
    got = assemble([s["params"] for s in checkpoint["stages"]])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10
    print(f"{executor}: hung {victim} lost {lost:.2f} s after SIGSTOP ({event['reason']})")
