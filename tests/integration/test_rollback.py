"""No per-step snapshot: a stage that loses every peer rolls the run back to the peers' last
checkpoint, exactly (in-process; the Dask twin is tests/cluster/test_rollback_dask.py)."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig
from tests.rollback import check_rollback, rollback_config


def test_a_stage_losing_every_peer_rolls_the_run_back_exactly(small_run: RunConfig) -> None:
    cfg = rollback_config(small_run)
    check_rollback(labkit.launch(cfg), cfg, timeout=120)
