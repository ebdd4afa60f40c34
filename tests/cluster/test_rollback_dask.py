"""No per-step snapshot, on Dask: a stage that loses every peer rolls the run back to the last
checkpoint its peers wrote, exactly (the in-process twin is tests/integration/test_rollback.py)."""

from __future__ import annotations

from pathlib import Path

import labkit
from labkit.config import RunConfig
from tests.rollback import check_rollback, rollback_config


def test_a_stage_losing_every_peer_rolls_the_run_back_exactly_on_dask(cluster, small_run: RunConfig,
                                                                       tmp_path: Path) -> None:
    cfg = rollback_config(small_run)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    check_rollback(run, cfg, timeout=240)
