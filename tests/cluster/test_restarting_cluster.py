"""A worker that dies again and again is restarted by its nanny every time (the embedded cluster,
the chaos benchmark's and the tests' clusters), not given up on after `lost-worker-timeout`."""

from __future__ import annotations

import os
import signal
import time

from distributed import Client

from labkit.backends.dask.connect import restarting_cluster

GIVE_UP_AFTER = 15.0  # Dask's default lost-worker-timeout, seconds: what a plain LocalCluster does


def _worker_pid(cluster) -> int | None:
    """The pid of the one worker's live process, or None (dead, restarting, or its nanny closed)."""
    nannies = list(cluster.workers.values())
    process = nannies[0].process.process if nannies and nannies[0].process is not None else None
    return process.pid if process is not None and process.is_alive() else None


def _kill(pid: int) -> int:
    """SIGKILL pid: 1 if it was alive, 0 if it had died and been reaped since it was seen (the
    nanny's own watcher reaps a dead worker at any moment, so a pid seen alive may be gone)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return 0
    return 1


def test_a_worker_dying_around_the_lost_worker_timeout_is_still_restarted() -> None:
    """Its first death at t0, then killed at each restart from t0 + 14 s to t0 + 16 s, so that no
    worker of its name is registered when Dask's 15 s check of the first death runs (on a plain
    LocalCluster the nanny is then closed for good: CI's "Only 7/8 workers arrived")."""
    with restarting_cluster(1, dashboard_address=None) as cluster, Client(cluster) as client:
        os.kill(_worker_pid(cluster), signal.SIGKILL)
        t0 = time.monotonic()
        client.wait_for_workers(1, timeout=30)
        time.sleep(t0 + GIVE_UP_AFTER - 1 - time.monotonic())
        killed = 0
        while time.monotonic() < t0 + GIVE_UP_AFTER + 1:
            pid = _worker_pid(cluster)
            if pid is not None:
                killed += _kill(pid)
            time.sleep(0.05)
        assert killed >= 1
        assert len(cluster.workers) == 1, "the nanny was closed: the cluster gave the worker up"
        client.wait_for_workers(1, timeout=60)
