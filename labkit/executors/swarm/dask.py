"""Start a SWARM run whose peers and trainers are actors on the workers of a Dask cluster; its
coordinator stays in this process, behind the one run shell, and serves trainers their work over
labkit's data plane (`WorkServer`). The fleet (backends/dask/actor_fleet.py) holds the cluster;
`DaskPeers` (dask_peers.py) is what SWARM places on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labkit import events
from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.work_server import WorkServer
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.executors.swarm.core import SwarmCore
from labkit.executors.swarm.dask_peers import DaskPeers
from labkit.runtime.coordinator import Coordinator
from labkit.runtime.peer import PeerDied
from labkit.runtime.run import Run
from labkit.runtime.shards import checkpoint_folder


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> Run:
    """Start `cfg` with every peer and trainer an actor on its own worker of a Dask cluster (the one
    at `scheduler`, or an embedded LocalCluster on `host`); the coordinator stays here."""
    def build(cfg: RunConfig, corpus: Corpus, states: Sequence[Mapping[str, Any]], step: int,
              emit: Callable[[events.Event], None], clock: Callable[[], float]) -> SwarmCore:
        fleet = ActorFleet(cfg, scheduler, host, PeerDied)
        folder, remove = checkpoint_folder(run_dir)
        releases: list[Callable[[], Any]] = [fleet.close, remove]
        try:
            emit(events.setting(clock(), name="cluster", value={"run_id": fleet.run_id, "dashboard": fleet.dashboard}))
            server = WorkServer(fleet.here, cfg.trainers)
            releases.insert(0, server.close)
            peers = DaskPeers(cfg, fleet, coordinator=server.address, t0_wall=time.time() - clock())
            coordinator = Coordinator(cfg, emit, peers, [dict(s) for s in states], step=step, checkpoints=folder)
            server.serve(coordinator)
        except BaseException:
            for release in releases:
                release()
            raise
        return SwarmCore(coordinator, fleet.dashboard, tuple(releases))

    return Run(cfg, build, run_dir=run_dir, resume=resume, trace=trace)
