"""The LocalCluster the Dask tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from distributed import LocalCluster

from tests.cluster.helpers import local_cluster


@pytest.fixture(scope="session")
def cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """8 worker processes on loopback, shared by the Dask tests (each run releases its actors
    when it ends; a SIGKILLed worker is restarted by its nanny, and not reaped after the test)."""
    yield from local_cluster(kept_processes)


@pytest.fixture
def own_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """A cluster for one test only: a worker stopped by SIGSTOP and then killed is the harshest
    fault, and no other test should start on what it leaves."""
    yield from local_cluster(kept_processes)
