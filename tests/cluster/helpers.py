"""What the Dask tests share: exact accounting, and a cluster left whole after each test."""

from __future__ import annotations

import faulthandler
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster, WorkerPlugin

import labkit
from labkit.backends.dask.connect import restarting_cluster
from labkit.config import RunConfig

WORKERS = 8  # the shared cluster's size
ANSWER_S = 30.0  # seconds a worker has to run a trivial task once a test is over
RELEASE_S = 30.0  # seconds the workers have to let go of the actors of the runs a test ended
STACKS = Path(tempfile.gettempdir()) / "labkit-test-worker-stacks"  # one file per worker process


def assert_exact_accounting(run: labkit.RunHandle, cfg: RunConfig) -> None:
    """Every step summed exactly the global batch at every stage."""
    steps = run.events.history("step")
    assert steps, "no step finished"
    assert all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in steps)


class DumpStacksOnSignal(WorkerPlugin):
    """On each worker (a restarted one too): SIGUSR1 writes every thread's stack to a file of its
    own (faulthandler writes from the signal handler, so a worker whose event loop is blocked
    answers too)."""

    name = "labkit-dump-stacks"

    def setup(self, worker) -> None:
        STACKS.mkdir(exist_ok=True)
        self.file = open(STACKS / f"{os.getpid()}.txt", "w")  # kept open: faulthandler writes to its fd
        faulthandler.register(signal.SIGUSR1, file=self.file, all_threads=True)


def ensure_whole(cluster: LocalCluster) -> None:
    """After a test: wait for the nanny's restart of every killed worker (under a new address, so
    that the next run does not place an actor on the dead one); then every worker must run a
    trivial task within `ANSWER_S` and hold no actor after `RELEASE_S`. A worker that does not
    fails the test that left it so, with its threads' stacks, and the workers are restarted: the
    tests after it start on a whole cluster instead of timing out one by one."""
    with Client(cluster.scheduler_address) as client:
        client.wait_for_workers(WORKERS, timeout=120)
        pids = _worker_pids(client)
        pings = {w: client.submit(os.getpid, workers=[w], allow_other_workers=False, pure=False) for w in pids}
        stuck = _unanswered(client, pings, pids, ANSWER_S)
        held = _actors_held(client, RELEASE_S)
        if not stuck and not held:
            return
        stacks = _stacks([pid for w, pid in _worker_pids(client).items() if w in (stuck or held)])
        client.restart(timeout=120)
        client.wait_for_workers(WORKERS, timeout=120)
    pytest.fail(f"after this test, workers {stuck} ran no task within {ANSWER_S:.0f} s and workers {held} still held "
                f"actors after {RELEASE_S:.0f} s; the cluster was restarted. Their threads:\n{stacks}")


def _unanswered(client: Client, pings: dict[str, Any], pids: dict[str, int], within: float) -> list[str]:
    """Workers whose `pings` task has not run `within` seconds from now, among those still
    registered with the process they had (one the test killed is removed, its ping never runs: a
    plain wait on every ping once spent the whole 30 s on it)."""
    deadline = time.monotonic() + within
    while True:
        now = _worker_pids(client)
        stuck = sorted(w for w, f in pings.items() if not f.done() and now.get(w) == pids[w])
        if not stuck or time.monotonic() > deadline:
            return stuck
        time.sleep(0.2)


def _actors_held(client: Client, within: float) -> dict[str, int]:
    """Workers still holding actors `within` seconds from now: address -> how many."""
    deadline = time.monotonic() + within
    while True:
        held = client.run_on_scheduler(_actors_per_worker)
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def _worker_pids(client: Client) -> dict[str, int]:
    """Address -> pid of every worker the scheduler lists (its worker table has no pid)."""
    return client.run_on_scheduler(_pids_on_scheduler)


def _pids_on_scheduler(dask_scheduler=None) -> dict[str, int]:
    return {ws.address: ws.pid for ws in dask_scheduler.workers.values()}


def _actors_per_worker(dask_scheduler=None) -> dict[str, int]:
    return {ws.address: len(ws.actors) for ws in dask_scheduler.workers.values() if ws.actors}


def _stacks(pids: list[int]) -> str:
    """Every thread's stack in each of `pids` now (SIGUSR1 to `DumpStacksOnSignal`, which appends
    to the worker's file: what it wrote after the signal)."""
    paths = {pid: STACKS / f"{pid}.txt" for pid in pids}
    before = {pid: path.stat().st_size if path.exists() else 0 for pid, path in paths.items()}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:  # it died meanwhile: no dump
            pass
    time.sleep(1.0)
    dumps = []
    for pid, path in paths.items():
        dump = path.read_bytes()[before[pid]:].decode(errors="replace")[:40_000] if path.exists() else ""
        dumps.append(f"--- worker pid {pid}\n{dump or '(no dump)'}")
    return "\n".join(dumps)


def local_cluster(kept_processes: list[Callable[[], set[int]]]) -> Iterator[LocalCluster]:
    """A LocalCluster of `WORKERS` processes on loopback whose workers (restarted ones too) the
    process reaper leaves alone; closed when the generator ends."""
    with restarting_cluster(WORKERS, dashboard_address=None) as lc:
        with Client(lc.scheduler_address) as client:
            client.register_plugin(DumpStacksOnSignal())
        kept_processes.append(lambda: {n.process.process.pid for n in lc.workers.values()
                                       if n.process is not None and n.process.process is not None})
        yield lc
