"""No per-step snapshot, on Dask: a stage that loses every peer rolls the run back to the last
checkpoint its peers wrote, exactly (the in-process twins are in tests/integration/test_rollback.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from distributed import Client

import labkit
from labkit.config import RunConfig
from tests.rollback import check_kill_during_a_checkpoint, check_rollback, replay_config, rollback_config, \
    slow_shard_writes, start_checkpoint_config, unslow_shard_writes


def test_a_stage_losing_every_peer_rolls_the_run_back_exactly_on_dask(cluster, small_run: RunConfig,
                                                                       tmp_path: Path) -> None:
    cfg = replay_config(small_run)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    check_rollback(run, cfg, timeout=240)


def test_a_stage_emptied_before_the_first_periodic_checkpoint_rolls_back_to_the_start_exactly_on_dask(
        cluster, small_run: RunConfig, tmp_path: Path) -> None:
    cfg = start_checkpoint_config(small_run)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    check_rollback(run, cfg, timeout=240, kill_after=1, to=0)


def test_a_peer_worker_killed_while_writing_its_shard_leaves_the_last_checkpoint_whole(
        cluster, small_run: RunConfig, tmp_path: Path) -> None:
    """As the fault comes: stage 1's worker is SIGKILLed in the middle of its shard's write (every
    worker's writes slowed from before the start; its restart by the nanny is a fresh process)."""
    cfg = rollback_config(small_run)
    with Client(cluster.scheduler_address) as client:
        client.run(slow_shard_writes)
        try:
            run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
            run.wait_for(step=1, timeout=240)
            worker = next(p["worker"] for s in run.state()["stages"] for p in s["peers"] if p["peer"] == "s1p0")
            pid = client.run(os.getpid, workers=[worker])[worker]
            check_kill_during_a_checkpoint(run, cfg, tmp_path, lambda: os.kill(pid, signal.SIGKILL), timeout=240)
        finally:
            client.run(unslow_shard_writes)
