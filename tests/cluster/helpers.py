"""What the Dask tests share: exact accounting, and waiting for a killed worker's restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from distributed import Client, LocalCluster

import labkit
from labkit.backends.dask.connect import restarting_cluster
from labkit.config import RunConfig

WORKERS = 8  # the shared cluster's size


def assert_exact_accounting(run: labkit.RunHandle, cfg: RunConfig) -> None:
    """Every step summed exactly the global batch at every stage."""
    steps = run.events.history("step")
    assert steps, "no step finished"
    assert all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in steps)


def wait_for_restart(cluster: LocalCluster) -> None:
    """After a SIGKILL the nanny restarts the worker under a new address: wait for it, so that the
    next run of the shared cluster does not place an actor on the dead one."""
    with Client(cluster.scheduler_address) as client:
        client.wait_for_workers(WORKERS, timeout=120)


def local_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """A LocalCluster of `WORKERS` processes on loopback whose workers (restarted ones too) the
    process reaper leaves alone; closed when the generator ends."""
    with restarting_cluster(WORKERS, dashboard_address=None) as lc:
        kept_processes.append(lambda: {n.process.process.pid for n in lc.workers.values()
                                       if n.process is not None and n.process.process is not None})
        yield lc
