"""The one fleet every executor places its actors with on Dask: real worker processes on loopback.

It places one actor per worker and says clearly when none is free; it joins every worker to the
run's DHT once and releases them all at the end; and when a worker is SIGKILLed, a call waiting on
its actor fails at once with the caller's own error while the fleet says which actor was lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from distributed import Client

from labkit.backends.dask import dht
from labkit.backends.dask.actor_fleet import ActorFleet, NoFreeWorker
from labkit.config import ModelConfig, RunConfig
from tests.cluster.helpers import WORKERS
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
DETECT_SECONDS = 15.0  # a SIGKILL to the failed call, on a loaded CI machine
CFG = RunConfig(model=ModelConfig(size="nano"))


class Lost(RuntimeError):
    """The error these tests ask the fleet to raise for a lost actor."""


class Echo:
    """A test actor: says its tag and pid, or answers after `seconds`."""

    def __init__(self, tag: str, key: str) -> None:
        self.tag, self.key = tag, key

    def pid(self) -> int:
        return os.getpid()

    async def later(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return self.tag


def _has_node(run_id: str) -> bool:
    """On a worker: whether this process runs a DHT node of run `run_id`."""
    return run_id in dht._NODES


def test_one_actor_per_worker_then_one_clear_error_and_a_restart_goes_back(cluster) -> None:
    fleet = ActorFleet(CFG, cluster.scheduler_address, "127.0.0.1", Lost)
    try:
        handles = [fleet.start(f"x{i}", Echo, f"x{i}", wait=False) for i in range(WORKERS)]
        assert len({h.worker for h in handles}) == WORKERS
        assert [h.call("later", 0) for h in handles] == [f"x{i}" for i in range(WORKERS)]
        with pytest.raises(NoFreeWorker, match=f"no free Dask worker for x{WORKERS}: all {WORKERS} workers host an "
                                               "actor of this run; start another `dask worker`"):
            fleet.start(f"x{WORKERS}", Echo, "late")
        handles[0].release()
        fleet.free(handles[0])
        assert fleet.start(f"x{WORKERS}", Echo, "late").worker == handles[0].worker
        again = fleet.start("x3", Echo, "x3 again")
        assert again.worker == handles[3].worker and again.call("later", 0) == "x3 again"
        assert fleet.unused(fleet.workers()) == ([], [])
    finally:
        fleet.close()


def test_every_worker_joins_the_dht_once_and_leaves_it_at_close(cluster) -> None:
    fleet = ActorFleet(CFG, cluster.scheduler_address, "127.0.0.1", Lost)
    fleet.join_dht()
    joined = fleet.client.run(_has_node, fleet.run_id)
    assert len(joined) == WORKERS and all(joined.values()) and fleet.dht_peers
    fleet.close()
    with Client(cluster.scheduler_address) as client:
        assert not any(client.run(_has_node, fleet.run_id).values())


def test_a_sigkilled_worker_fails_the_waiting_call_at_once_and_every_actor_it_hosted_is_reported(cluster) -> None:
    fleet = ActorFleet(CFG, cluster.scheduler_address, "127.0.0.1", Lost)
    told: list[tuple[str, str]] = []
    try:
        fleet.watch(lambda handle, reason: told.append((handle.name, reason)))
        victim, bystander = fleet.start("victim", Echo, "v"), fleet.start("bystander", Echo, "b")
        sharer = fleet.start("sharer", Echo, "s", worker=victim.worker)  # as a restarted trainer shares a peer's worker
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(victim.call, "later", 600.0)
            os.kill(victim.call("pid"), signal.SIGKILL)
            killed_at = time.monotonic()
            with pytest.raises(Lost, match=f"victim: its Dask worker {victim.worker}"):
                waiting.result(60)
        assert time.monotonic() - killed_at < DETECT_SECONDS
        wait_until(lambda: told, DETECT_SECONDS, "the fleet's report of the lost actor")
        wait_until(lambda: len(told) == 2, DETECT_SECONDS, "the report of the actor sharing the worker")
        assert sorted(told) == [(name, f"its Dask worker {victim.worker} left the cluster") for name in ("sharer", "victim")]
        assert victim.gone.is_set() and sharer.gone.is_set() and not bystander.gone.is_set()
        with pytest.raises(Lost, match=f"victim: its Dask worker {victim.worker} left the cluster"):
            victim.call("later", 0)
        assert bystander.call("later", 0) == "b"
        replacement = fleet.start("victim", Echo, "v2")  # on another worker: its own left the cluster
        assert replacement.worker != victim.worker and replacement.call("later", 0) == "v2"
    finally:
        fleet.close()
