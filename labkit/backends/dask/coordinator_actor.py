"""The coordinator actor: the run itself, on one worker of the cluster.

It hosts a `LocalRun` whose `PeerFactory` (`DaskPeers`) puts every peer and trainer on another
worker. The driver's handle forwards verbs here and polls events; trainers take microbatches
here and report hops and faults.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from distributed import get_client, get_worker

from labkit.backends.dask.fleet import DaskPeers
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.runtime.handle import STEERING_VERBS
from labkit.runtime.local_run import LocalRun

TRAINER_CALLS = ("stage_empty", "peer_timed_out", "peer_failed", "fail")  # what trainers report


class CoordinatorActor:
    """The run on a worker: ledger, step boundary and event log; peers and trainers elsewhere."""

    def __init__(self, run_id: str, key: str, cfg: RunConfig, resume: dict[str, Any] | None) -> None:
        self._pool = ThreadPoolExecutor(cfg.trainers + 16, thread_name_prefix="coordinator")
        client, me = get_client(), (CoordinatorActor, get_worker().address, key)

        def peers(c: RunConfig, corpus: Corpus) -> DaskPeers:
            return DaskPeers(c, client=client, run_id=run_id, coordinator=me)

        self.run = LocalRun(cfg, peers, resume=resume)

    async def _off(self, fn: Any, *args: Any) -> Any:
        """Run a (possibly blocking) call on the coordinator's pool, not the worker's event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- for the driver's handle ---------------------------------------------------------------
    async def verb(self, name: str, *args: Any) -> Any:
        if name not in STEERING_VERBS + ("state", "summary"):
            raise ValueError(f"verb={name!r} is not allowed: one of {list(STEERING_VERBS)} or state, summary")
        return await self._off(getattr(self.run, name), *args)

    async def done(self) -> bool:
        return self.run.done

    async def events_since(self, index: int) -> tuple[list[dict[str, Any]], int]:
        return self.run.events.since(index)

    async def snapshot(self) -> Any:
        return await asyncio.wrap_future(await self._off(self.run.snapshot))

    # -- for trainers --------------------------------------------------------------------------
    async def next_task(self, trainer: str) -> Any:
        coordinator = await self._off(self.run.coordinator)
        return await self._off(coordinator.next_task, trainer)

    async def finish(self, trainer: str, task: Any, credits: dict[int, str], loss: float | None,
                     hops: list[dict[str, Any]]) -> None:
        coordinator = self.run.coordinator()
        for event in hops:
            coordinator.emit(event)
        await self._off(coordinator.finish, trainer, task, credits, loss)

    async def trainer_call(self, name: str, *args: Any) -> Any:
        """A trainer's report, carried out on the pool (it may wait for the coordinator's lock,
        which the worker's event loop must never do)."""
        if name not in TRAINER_CALLS:
            raise ValueError(f"call={name!r} is not allowed: one of {list(TRAINER_CALLS)}")
        return await self._off(self._report, name, *args)

    def _report(self, name: str, *args: Any) -> None:
        """A report about a peer carries the actor key the trainer called; it is ignored if a
        rebuild has replaced that instance (a stale view says nothing of the new one)."""
        coordinator = self.run.coordinator()
        if name in ("peer_timed_out", "peer_failed"):
            *args, key = args
            peer = coordinator.peer(args[0])
            if peer is None or (key is not None and peer.key != key):
                return
        getattr(coordinator, name)(*args)
