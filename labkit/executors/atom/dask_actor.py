"""The ATOM replica actor: one whole-model replica on a Dask worker, its heartbeat in the DHT.

The replica's engine runs on a thread of its own (requests are `async def`, so the worker's actor
thread is never blocked and `interrupt` gets through while an iteration runs). Its heartbeat —
the step it is in and the samples it has processed in that step — goes to the run's DHT after
every iteration and step, and every `ANNOUNCE_PERIOD` seconds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from distributed import get_worker
from distributed.actor import Actor

from labkit.backends.dask.dht import StageDirectory, node_for
from labkit.backends.dask.peer_actor import announce_loop, gpu_worker
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.engine import ReplicaEngine, plan_submodels
from labkit.executors.atom.swap import SwapSpan
from labkit.swarm.ledger import Task


class ReplicaActor:
    """Replica `name` on this worker (on its GPU if it has one), from `state` or from a copy of
    the live replica whose actor is at `source` = (worker address, actor key)."""

    def __init__(self, run_id: str, name: str, cfg: RunConfig, state: dict[str, Any] | None,
                 source: tuple[str, str] | None, step: int, dht_peers: list[str], t0_wall: float, key: str) -> None:
        prepare_worker(cfg)
        if source is not None:
            state = replica_actor(*source).state().result()
        self.name, self.step, self._key, self._worker = name, step, key, get_worker()
        self.device = "cuda" if gpu_worker() and torch.cuda.is_available() else "cpu"
        corpus = load_corpus(cfg.data)
        self.plan = plan_submodels(cfg, state["params"], self.device)
        self._spans: list[SwapSpan] = []
        self.engine = ReplicaEngine(cfg, WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed), state, self.device,
                                    self.plan, lambda: time.time() - t0_wall, self._spans.append)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"atom-{name}")
        self._directory = StageDirectory(node_for(run_id, dht_peers), run_id, 1)
        self._stopped = threading.Event()
        threading.Thread(target=announce_loop, args=(self._worker, self, self._stopped, self._heartbeat, self._abandon),
                         name=f"heartbeat-{name}", daemon=True).start()

    def _heartbeat(self) -> None:
        self._directory.announce(self.name, 0, self._key, {"address": self._worker.address, "device": self.device,
                                                           "step": self.step, "samples": self.engine.round_samples})

    def _abandon(self) -> None:
        """Its run's driver is gone: stop computing and release the device."""
        self.engine.interrupt()
        self._thread.submit(self.engine.close)

    async def _on_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def describe(self) -> dict[str, Any]:
        """Its sub-model plan (the `atom_partition` setting) and device."""
        return {**self.plan.describe(), "replica": self.name, "device": self.device, "worker": self._worker.address}

    async def iteration(self, tasks: list[Task]) -> tuple[list[float], list[SwapSpan]]:
        """One iteration over `tasks`; its losses and swap spans. The heartbeat is published
        before it returns, so the DHT counts it once the run credits it."""
        def run() -> tuple[list[float], list[SwapSpan]]:
            losses = self.engine.iteration(tasks)
            spans, self._spans[:] = list(self._spans), []
            self._heartbeat()
            return losses, spans
        return await self._on_thread(run)

    async def gradients(self) -> list[torch.Tensor]:
        return await self._on_thread(self.engine.gradients)

    async def apply(self, total: list[torch.Tensor], step: int) -> None:
        def run() -> None:
            self.engine.apply(total, step)
            self.step = step + 1
            self._heartbeat()
        await self._on_thread(run)

    async def state(self) -> dict[str, Any]:
        return await self._on_thread(self.engine.state)

    async def interrupt(self) -> None:
        self.engine.interrupt()

    async def close(self) -> None:
        """Stop the heartbeat, leave the DHT at once (a tombstone) and release the device."""
        self._stopped.set()
        self.engine.interrupt()
        await self._on_thread(self.engine.close)
        self._directory.withdraw(0, self._key)


def replica_actor(address: str, key: str) -> Actor:
    """A handle on the replica actor `key` on the worker at `address`."""
    return Actor(ReplicaActor, address, key)
