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


@pytest.fixture(scope="module")
def own_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """A cluster for one module's tests only (its SIGKILLs and SIGSTOPs leave the shared one
    whole); each test that kills a worker waits for its nanny's restart (`wait_for_restart`)
    before the next starts."""
    yield from local_cluster(kept_processes)
