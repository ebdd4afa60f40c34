"""The LocalCluster the Dask tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from distributed import LocalCluster

from tests.cluster.helpers import WORKERS


@pytest.fixture(scope="session")
def cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """8 worker processes on loopback, shared by the Dask tests (each run releases its actors
    when it ends; a SIGKILLed worker is restarted by its nanny, and not reaped after the test)."""
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as lc:
        kept_processes.append(lambda: {n.process.process.pid for n in lc.workers.values()
                                       if n.process is not None and n.process.process is not None})
        yield lc
