"""Shared fixtures: small, fast run configs; every launched run stopped and every child process
reaped when a test ends, even when it fails."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import psutil
import pytest

from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.runtime import launch as launching
from labkit.runtime.handle import RunHandle
from tests.processes import reap, stop_runs


# pytest-xdist groups (`--dist loadgroup`): the Dask tests share their session's cluster, and the
# course tests publish the tutorials nbmake ran in the same process; everything else spreads.
XDIST_GROUPS = {("tests", "cluster"): "dask-cluster", ("tests", "browser"): "course", ("notebooks",): "course"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test of a folder in `XDIST_GROUPS` with its group, before xdist reads the marks."""
    for item in items:
        parts = item.path.relative_to(config.rootpath).parts if item.path.is_relative_to(config.rootpath) else ()
        group = XDIST_GROUPS.get(parts[:2]) or XDIST_GROUPS.get(parts[:1])
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def small_run() -> RunConfig:
    """A nano model on a capped stdlib corpus: a few steps take a second or two."""
    return RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000),
                     global_batch=16, microbatch=4, steps=4, eval_every=0, eval_batches=2, lr=3e-3, warmup_steps=1)


@pytest.fixture(scope="session")
def kept_processes() -> list[Callable[[], set[int]]]:
    """Functions giving pids that outlive a test on purpose (a shared cluster's workers, which
    its nannies restart under new pids after a kill): the reaper leaves them alone."""
    return []


@pytest.fixture(autouse=True)
def reap_runs(monkeypatch: pytest.MonkeyPatch, kept_processes: list[Callable[[], set[int]]]
              ) -> Iterator[list[RunHandle]]:
    """Record every run the test launches; at teardown stop those still running, wait for them,
    then kill the child processes the test started (an embedded cluster's, a leaked worker)."""
    launched: list[RunHandle] = []
    launch = launching.launch

    def recording(*args, **kwargs) -> RunHandle:
        run = launch(*args, **kwargs)
        launched.append(run)
        return run

    monkeypatch.setattr(launching, "launch", recording)
    me = psutil.Process(os.getpid())
    before = {p.pid for p in _started(me)}
    yield launched
    stop_runs(launched)
    kept = set().union(*(pids() for pids in kept_processes))
    reap([p for p in _started(me) if p.pid not in before | kept])


def _started(me: psutil.Process) -> list[psutil.Process]:
    """The processes a test may leave behind: this process's children, except the session's
    shared helpers, and the forkserver's children (an embedded cluster's workers are forked there)."""
    started = []
    for child in me.children():
        if not _shared_helper(child):
            started.append(child)
            continue
        try:
            started += child.children()
        except psutil.Error:
            continue
    return started


def _shared_helper(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker and forkserver serve the whole session: keep them."""
    try:
        return any(part in " ".join(process.cmdline()) for part in ("resource_tracker", "forkserver"))
    except psutil.Error:
        return True


SIGINT_AT_START = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.fixture(autouse=True)
def sigint_left_as_found() -> Iterator[None]:
    """A test (or a fixture it set up) that leaves this process ignoring or blocking SIGINT fails
    here, and the disposition the session started with is put back: children inherit both, so a
    later test's `labkit` child would not see its Ctrl-C."""
    yield
    left = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if left != SIGINT_AT_START:
        handler, mask = SIGINT_AT_START
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        pytest.fail(f"SIGINT was left as (handler {left[0]!r}, blocked {sorted(left[1])}); the session began "
                    f"with (handler {handler!r}, blocked {sorted(mask)})")
