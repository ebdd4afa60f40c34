"""The coordinator actor: the run itself, on one worker of the cluster.

It hosts a `LocalRun` whose `PeerFactory` (`DaskPeers`) puts every peer and trainer on another
worker. The driver's handle forwards verbs here and polls events; trainers take microbatches
here and report hops and faults, over the coordinator's data plane.
"""

from __future__ import annotations

import asyncio
import pickle
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from distributed import get_client, get_worker
from distributed.comm import get_address_host

from labkit.backends.dask.fleet import DaskPeers
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.runtime.handle import STEERING_VERBS
from labkit.runtime.local_run import LocalRun
from labkit.runtime.sockets import SocketServer

TRAINER_CALLS = ("next_task", "finish", "stage_empty", "peer_timed_out", "peer_failed", "fail")  # what trainers ask


def portable(exc: Exception) -> Exception:
    """`exc` if the driver can unpickle it, else a RuntimeError with its type and message: an
    error the driver cannot rebuild would never reach the caller, and the verb would hang."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class CoordinatorActor:
    """The run on a worker: ledger, step boundary and event log; peers and trainers elsewhere.
    Trainers call it over its own data plane (labkit/runtime/sockets.py), not as an actor: a
    microbatch's `next_task` and `finish` are on the hot path."""

    def __init__(self, run_id: str, key: str, cfg: RunConfig, resume: dict[str, Any] | None) -> None:
        prepare_worker(cfg)
        self._pool = ThreadPoolExecutor(cfg.trainers + 16, thread_name_prefix="coordinator")
        client, here = get_client(), get_worker().address
        self._server = SocketServer(self._serve_trainer, get_address_host(here), "coordinator")

        def peers(c: RunConfig, corpus: Corpus) -> DaskPeers:
            return DaskPeers(c, client=client, run_id=run_id, here=here, coordinator=self._server.address)

        self.run = LocalRun(cfg, peers, resume=resume)

    async def _off(self, fn: Any, *args: Any) -> Any:
        """Run a (possibly blocking) call on the coordinator's pool, not the worker's event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- for the driver's handle ---------------------------------------------------------------
    async def verb(self, name: str, *args: Any) -> Any:
        if name not in STEERING_VERBS + ("state", "summary"):
            raise ValueError(f"verb={name!r} is not allowed: one of {list(STEERING_VERBS)} or state, summary")
        try:
            return await self._off(getattr(self.run, name), *args)
        except Exception as exc:
            raise portable(exc) from None

    async def done(self) -> bool:
        """Whether the run is over (then its trainers are gone, and so is their data plane)."""
        if self.run.done:
            self._server.close()
        return self.run.done

    async def events_since(self, index: int) -> tuple[list[dict[str, Any]], int]:
        return self.run.events.since(index)

    async def snapshot(self) -> Any:
        return await asyncio.wrap_future(await self._off(self.run.snapshot))

    # -- for trainers --------------------------------------------------------------------------
    def _serve_trainer(self, method: str, args: tuple) -> Future:
        """A trainer's request, carried out on the pool (it may wait for the coordinator's lock,
        or for work)."""
        if method not in TRAINER_CALLS:
            refused: Future = Future()
            refused.set_exception(ValueError(f"call={method!r} is not allowed: one of {list(TRAINER_CALLS)}"))
            return refused
        return self._pool.submit(self._trainer_request, method, *args)

    def _trainer_request(self, method: str, *args: Any) -> Any:
        """A report about a peer carries the actor key the trainer called; it is ignored if a
        rebuild has replaced that instance (a stale view says nothing of the new one). A
        microbatch's `finish` brings the trainer's hop events with it."""
        coordinator = self.run.coordinator()
        if method == "finish":
            *args, hops = args
            for event in hops:
                coordinator.emit(event)
        if method in ("peer_timed_out", "peer_failed"):
            *args, key = args
            peer = coordinator.peer(args[0])
            if peer is None or (key is not None and peer.key != key):
                return None
        return getattr(coordinator, method)(*args)
