"""A soak of the Dask backend: random kills, joins and moves through the handle, on the shared
cluster. Every step sums exactly the global batch, no action stalls the run for long, and
neither this process's threads nor the cluster's processes grow."""

from __future__ import annotations

import threading

import psutil
import pytest

import labkit
from labkit.backends.dask.dht import ANNOUNCE_TTL
from labkit.config import RunConfig
from labkit.lab.chaos import Chaos
from tests.cluster.helpers import assert_exact_accounting
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
SOAK_SECONDS = 25  # the suite's share; benchmarks/soak.py soaks for minutes
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
    # The coordinator runs in this process: a stopped peer's actor is let go ANNOUNCE_TTL after its
    # stop (a trainer's view of the DHT may still name it; remote.py), so those timers end by then.
    # What stays is one of each per process, reused by the next run, not a growth: distributed's
    # offload and callback threads and remote.py's stop pool.
    wait_until(lambda: threading.active_count() <= threads + 3, ANNOUNCE_TTL + 10, "the run's threads to end")
    assert threading.active_count() <= threads + 3, [t.name for t in threading.enumerate()]
