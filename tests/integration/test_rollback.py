"""No per-step snapshot: a stage that loses every peer rolls the run back to the peers' last
checkpoint, exactly (in-process; the Dask twin is tests/cluster/test_rollback_dask.py)."""

from __future__ import annotations

from pathlib import Path

import labkit
from labkit.config import RunConfig
from tests.rollback import check_kill_during_a_checkpoint, check_rollback, replay_config, rollback_config, \
    slow_shard_writes, start_checkpoint_config, unslow_shard_writes


def test_a_stage_losing_every_peer_rolls_the_run_back_exactly(small_run: RunConfig) -> None:
    cfg = replay_config(small_run)
    check_rollback(labkit.launch(cfg), cfg, timeout=120)


def test_a_stage_emptied_before_the_first_periodic_checkpoint_rolls_back_to_the_start_exactly(
        small_run: RunConfig) -> None:
    """The start's checkpoint has no optimizer state: each peer goes back to a fresh optimizer (it
    kept its Adam moments and step count before, and the run was 9e-3 off single-process training)."""
    cfg = start_checkpoint_config(small_run)
    check_rollback(labkit.launch(cfg), cfg, timeout=120, kill_after=1, to=0)


def test_a_peer_killed_while_writing_its_shard_leaves_the_last_checkpoint_whole(small_run: RunConfig,
                                                                                tmp_path: Path) -> None:
    cfg = rollback_config(small_run)
    slow_shard_writes()
    try:
        run = labkit.launch(cfg, run_dir=tmp_path)
        check_kill_during_a_checkpoint(run, cfg, tmp_path, lambda: run.kill_peer("s1p0"), timeout=120)
    finally:
        unslow_shard_writes()
