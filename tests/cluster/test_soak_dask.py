"""A soak of the Dask backend: random kills, joins and moves through the handle, on the shared
cluster. Every step sums exactly the global batch, no action stalls the run for long, and
neither this process's threads nor the cluster's processes grow."""

from __future__ import annotations

import threading

import psutil
import pytest

import labkit
from labkit.config import RunConfig
from labkit.lab.chaos import Chaos
from tests.cluster.helpers import assert_exact_accounting

pytestmark = pytest.mark.slow
SOAK_SECONDS = 60
STALL_SECONDS = 30.0


def test_churn_on_dask_keeps_accounting_and_resources(cluster, small_run: RunConfig) -> None:
    me = psutil.Process()
    processes, threads = len(me.children(recursive=True)), threading.active_count()
    cfg = small_run.replace(stages=2, peers=2, trainers=2, steps=100_000)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    try:
        run.wait_for(step=1, timeout=120)
        report = Chaos(run, seed=2, max_peers=5, step_timeout=STALL_SECONDS).run_for(SOAK_SECONDS)
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    assert sum(report["actions"].values()) >= 5, report
    assert report["longest_wait"] < STALL_SECONDS, report
    assert_exact_accounting(run, cfg)
    assert len(me.children(recursive=True)) <= processes, "the run left processes behind"
    assert threading.active_count() <= threads + 2, [t.name for t in threading.enumerate()]
