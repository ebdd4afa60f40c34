"""The synchronous pipeline on a Dask cluster: each peer an actor on a worker of its own, placed by
the backend's `ActorFleet`; the core stays with the run in the driver.

The driver sends each request (a microbatch's activations or gradients, the step's summed
gradient) to the peer's actor and waits for its answer. A killed peer's actor crashes and its
worker takes the replacement; a peer whose worker leaves the cluster is lost: the request waiting
on it fails at once (`PeerDied`), and the pipeline stalls until `add_peer` replaces it. Peers
compute on their worker's CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.actor_handle import ActorHandle
from labkit.backends.dask.peer_actor import watch_for_release
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.executors.pipeline.peers import stage_peer
from labkit.executors.pipeline.run import launch as launch_pipeline
from labkit.runtime.run import Run
from labkit.runtime.peer import PeerDied


class StageActor:
    """Peer `name` of `stage` on this worker: a `StagePeer` serving requests on a thread of its own
    (the actor's methods are `async def`, so the worker's actor thread is never blocked)."""

    def __init__(self, name: str, stage: int, cfg: RunConfig, state: dict[str, Any], place: str, key: str) -> None:
        prepare_worker(cfg)
        self.peer = stage_peer(cfg, name, stage, state, place=place)
        self._stopped = watch_for_release(self, f"labkit-watch-{name}", self.peer.kill)

    async def run(self, method: str, *args: Any) -> Any:
        """`StagePeer.<method>(*args)`, queued behind the peer's other requests."""
        return await asyncio.wrap_future(self.peer.call(method, *args))

    async def set_delay(self, seconds: float) -> None:
        self.peer.set_delay(seconds)

    async def kill(self) -> None:
        self._stopped.set()
        self.peer.kill()


class RemoteStage:
    """A `StagePort` on a stage actor."""

    def __init__(self, handle: ActorHandle, free: Callable[[ActorHandle], None]) -> None:
        self.handle, self.worker, self._free = handle, handle.worker, free

    def request(self, method: str, *args: Any) -> Any:
        return self.handle.call("run", method, *args, interruptible=True)

    def set_delay(self, seconds: float) -> None:
        self.handle.call("set_delay", seconds)

    def kill(self) -> None:
        """Crash the actor if its worker still answers; a request waiting on it fails at once; its
        worker can host the replacement."""
        self.handle.stopped.set()
        self.handle.tell("kill")
        self.handle.release()
        self._free(self.handle)


class DaskStages:
    """A `StageHost` whose peers are actors on the workers of a Dask cluster (the one at `scheduler`,
    or an embedded `LocalCluster` on `host`)."""

    def __init__(self, cfg: RunConfig, *, scheduler: str | None, host: str) -> None:
        self.cfg = cfg
        self.fleet = ActorFleet(cfg, scheduler, host, PeerDied)
        self.dashboard = self.fleet.dashboard
        try:
            self.left_out = self.fleet.probe()  # hung workers, left out before any actor is placed
        except BaseException:
            self.fleet.close()
            raise
        self.fleet.watch()  # a request waiting on a peer whose worker left fails at once from now on

    def spawn(self, name: str, stage: int, state: dict[str, Any], place: str) -> RemoteStage:
        return RemoteStage(self.fleet.start(name, StageActor, name, stage, self.cfg, dict(state), place), self.fleet.free)

    def watch(self, lost: Callable[[str, str], None]) -> None:
        self.fleet.watch(lambda handle, reason: lost(handle.name, reason))

    def close(self) -> None:
        self.fleet.close()


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> Run:
    """Start a pipeline run whose peers are actors on a Dask cluster; returns its handle at once."""
    return launch_pipeline(cfg, run_dir=run_dir, resume=resume, trace=trace,
                           hosts=partial(DaskStages, scheduler=scheduler, host=host))
