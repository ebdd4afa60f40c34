"""The LocalCluster the Dask tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from distributed import LocalCluster

from tests.cluster.helpers import local_cluster, ensure_whole


@pytest.fixture(scope="session")
def _shared_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    yield from local_cluster(kept_processes)


@pytest.fixture(scope="module")
def _module_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    yield from local_cluster(kept_processes)


@pytest.fixture
def cluster(_shared_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """8 worker processes on loopback, shared by the Dask tests (each run releases its actors
    when it ends; a SIGKILLed worker is restarted by its nanny, and not reaped after the test).
    After each test, passed or failed, the next waits for every killed worker's restart, and a
    test that leaves a worker hung or holding actors fails with its stacks (`ensure_whole`)."""
    yield _shared_cluster
    ensure_whole(_shared_cluster)


@pytest.fixture
def own_cluster(_module_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """A cluster for one module's tests only (its SIGKILLs and SIGSTOPs leave the shared one
    whole), restarted whole after each test as `cluster` is."""
    yield _module_cluster
    ensure_whole(_module_cluster)
