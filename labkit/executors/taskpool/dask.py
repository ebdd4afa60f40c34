"""The task pool paper's task pool on a Dask cluster: each client's computer is an actor on a worker of its
own (GPU workers first), the servers and the pool stay with the run in the driver.

The servers send each task's input slice, output-gradient slice and (at a new pass) parameters
to the client's actor and get its result back; the slice's graph stays on the client's worker
until its backward. A client whose worker leaves the cluster is lost: the call waiting on it fails
at once (`ClientLost`), and the run hands what the client held to the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import torch

from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.actor_handle import ActorHandle
from labkit.backends.dask.peer_actor import watch_for_release
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.runtime.run import Run
from labkit.executors.taskpool.client import StageClient
from labkit.executors.taskpool.ports import ClientLost
from labkit.executors.taskpool.run import launch as launch_taskpool
from labkit.taskpool import Task


class ClientActor:
    """Client `name` of `stage` on this worker: a `StageClient` computing on a thread of its own
    (requests are `async def`, so the worker's actor thread is never blocked)."""

    def __init__(self, name: str, stage: int, cfg: RunConfig, params: dict[str, torch.Tensor], key: str) -> None:
        prepare_worker(cfg)
        self.client = StageClient(cfg, name, stage, params)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"labkit-client-{name}")
        # its thread would end only once the released actor is collected: end it when let go
        watch_for_release(self, f"labkit-watch-{name}", partial(self._thread.shutdown, wait=False, cancel_futures=True))

    async def run(self, method: str, *args: Any) -> Any:
        """`StageClient.<method>(*args)` on the client's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, getattr(self.client, method), *args)


class RemoteClient:
    """A `ClientPort` on a client actor."""

    def __init__(self, handle: ActorHandle, on_close: Any) -> None:
        self.handle, self.worker, self._on_close = handle, handle.worker, on_close

    def load(self, params: Mapping[str, torch.Tensor], version: int) -> None:
        self.handle.call("run", "load", dict(params), version)

    def speed(self) -> float:
        return self.handle.call("run", "speed")

    def forward(self, task: Task, inputs: torch.Tensor) -> torch.Tensor:
        return self.handle.call("run", "forward", task, inputs)

    def backward(self, task: Task, inputs: torch.Tensor | None,
                 grad_out: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        return self.handle.call("run", "backward", task, inputs, grad_out)

    def params(self) -> dict[str, torch.Tensor]:
        return self.handle.call("run", "params")

    def close(self) -> None:
        self.handle.release()
        self._on_close(self.handle)


class DaskClients:
    """A `ClientHost` whose clients are actors on the workers of a Dask cluster (the one at
    `scheduler`, or an embedded `LocalCluster` of one worker per client and one more on `host`)."""

    def __init__(self, cfg: RunConfig, *, scheduler: str | None, host: str) -> None:
        self.cfg = cfg
        self.fleet = ActorFleet(cfg, scheduler, host, ClientLost)
        self.dashboard = self.fleet.dashboard
        try:
            self.left_out = self.fleet.probe()  # hung workers, left out before any actor is placed
        except BaseException:
            self.fleet.close()
            raise
        self.fleet.watch()  # a call waiting on a client whose worker left fails at once from now on

    def spawn(self, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> RemoteClient:
        return RemoteClient(self.fleet.start(name, ClientActor, name, stage, self.cfg, dict(params)), self.fleet.free)

    def hold(self, client: str, task: Task, reload: bool, real: float) -> float:
        """Clients on workers compute at their machines' speed (no world on Dask)."""
        return 0.0

    def watch(self, lost: Callable[[str, str], None]) -> None:
        self.fleet.watch(lambda handle, reason: lost(handle.name, f"{handle.name}: {reason}"))

    def close(self) -> None:
        self.fleet.close()


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> Run:
    """Start a task-pool run whose clients are actors on a Dask cluster; returns its handle at once."""
    return launch_taskpool(cfg, run_dir=run_dir, resume=resume, trace=trace,
                           clients=partial(DaskClients, scheduler=scheduler, host=host))
