"""The LocalCluster the Dask tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from distributed import LocalCluster

from labkit import RunHandle
from tests.cluster.helpers import ensure_whole, local_cluster
from tests.processes import stop_runs


@pytest.fixture(scope="session")
def _shared_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    yield from local_cluster(kept_processes)


@pytest.fixture(scope="module")
def _module_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    yield from local_cluster(kept_processes)


@pytest.fixture
def cluster(_shared_cluster: LocalCluster, reap_runs: list[RunHandle]) -> Iterator[LocalCluster]:
    """8 worker processes on loopback, shared by the Dask tests (each run releases its actors
    when it ends; a SIGKILLed worker is restarted by its nanny, and not reaped after the test).
    After each test, passed or failed, its runs are stopped, the next waits for every killed
    worker's restart, and a test that leaves a worker hung or holding actors fails with its
    stacks (`ensure_whole`)."""
    yield _shared_cluster
    stop_runs(reap_runs)  # before the check: this teardown comes before reap_runs' own
    ensure_whole(_shared_cluster)


@pytest.fixture
def own_cluster(_module_cluster: LocalCluster, reap_runs: list[RunHandle]) -> Iterator[LocalCluster]:
    """A cluster for one module's tests only (its SIGKILLs and SIGSTOPs leave the shared one
    whole), checked whole after each test as `cluster` is."""
    yield _module_cluster
    stop_runs(reap_runs)
    ensure_whole(_module_cluster)
