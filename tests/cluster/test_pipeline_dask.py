"""The synchronous pipeline on Dask: each peer an actor on a worker of its own. It equals the
single-process loop in float64 (1e-10, as in test_pipeline_run.py); a peer killed by the verb and
a peer whose worker is SIGKILLed each stall the pipeline until add_peer replaces it, and the run
still ends exact: the step in progress was recomputed from its start, nothing lost or doubled."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from distributed import Client

import labkit
from labkit.executors.pipeline.config import PipelineConfig
from tests.integration.test_pipeline_run import CFG, assert_equals_reference
from tests.integration.test_pipeline_world import check_pipeline_world, pipeline_world

pytestmark = pytest.mark.slow
START_SECONDS = 180  # a cold worker's first torch import and actor start, on a loaded machine


def test_the_pipeline_on_dask_equals_the_single_process_loop(cluster) -> None:
    cfg = CFG.replace(executor=PipelineConfig(schedule="1f1b"))
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    summary = run.wait(timeout=START_SECONDS + 120)
    assert summary["status"] == "finished", summary
    assert_equals_reference(run, cfg)
    workers = {p["worker"] for s in run.state()["stages"] for p in s["peers"]}
    assert len(workers) == 4 and "local" not in workers, workers  # one worker per peer


def test_the_pipeline_in_a_world_on_dask_holds_its_devices_and_links(cluster, tmp_path: Path) -> None:
    """Each peer's actor emulates its lane's device on its worker; the links stay the driver's."""
    cfg = pipeline_world(tmp_path)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    check_pipeline_world(run, cfg, START_SECONDS)


def _mid_step(run: labkit.RunHandle, victim: str) -> None:
    """Hold `victim`'s next request for 30 s and wait until the step it belongs to is under way."""
    run.set_peer_delay(victim, 30.0)
    after = run.events.latest("hop")["t"]
    run.wait_for(event=lambda e: e["type"] == "hop" and e["peer"] != victim and e["t"] > after, timeout=60)


def _stalls_until_replaced(run: labkit.RunHandle, stage: int) -> str:
    """The run pauses with no step committed until add_peer(stage); returns the replacement."""
    paused = run.wait_for(event=lambda e: e["type"] == "run" and e["state"] == "paused"
                          and e["t"] > run.events.latest("step")["t"], timeout=60)
    stalled_at = run.state()["step"]
    assert stage in run.state()["paused_stages"]
    name = run.add_peer(stage)
    resumed = run.wait_for(event=lambda e: e["type"] == "run" and e["state"] == "resumed" and e["t"] > paused["t"],
                           timeout=START_SECONDS)
    assert not [s for s in run.events.history("step") if paused["t"] < s["t"] < resumed["t"]]
    run.wait_for(step=stalled_at + 2, timeout=120)
    return name


def test_a_killed_peer_and_a_sigkilled_worker_stall_the_pipeline_until_replaced(cluster, tmp_path: Path) -> None:
    cfg = CFG.replace(steps=500)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    try:
        run.wait_for(step=1, timeout=START_SECONDS)
        _mid_step(run, "s1p1")
        run.kill_peer("s1p1")
        assert _stalls_until_replaced(run, 1) == "s1p2"
        _mid_step(run, "s0p0")
        worker = next(p["worker"] for p in run.state()["stages"][0]["peers"] if p["peer"] == "s0p0")
        with Client(cluster.scheduler_address) as client:
            pid = client.run(os.getpid, workers=[worker])[worker]
        os.kill(pid, signal.SIGKILL)
        assert _stalls_until_replaced(run, 0) == "s0p2"
    finally:
        run.stop()
    summary = run.wait(timeout=120)
    assert summary["status"] == "stopped", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["s1p1", "s0p0"], killed
    assert killed[0]["reason"] == "killed" and "Dask worker" in killed[1]["reason"], killed
    assert_equals_reference(run, cfg, steps=summary["steps"])
