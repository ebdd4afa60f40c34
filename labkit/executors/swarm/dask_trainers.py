"""A Dask run's trainers as the coordinator sees them: one `RemoteTrainer` per trainer, whose
actor (labkit/backends/dask/trainer_actor.py) runs the trainer loop on a worker. Each start is a
new life with a name of its own, so the coordinator can tell a dead life's calls from the new one's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from labkit.backends.dask.actor_fleet import ActorHandle
from labkit.backends.dask.trainer_actor import TrainerActor

if TYPE_CHECKING:
    from labkit.executors.swarm.dask_peers import DaskPeers


class RemoteTrainer:
    """A trainer actor on `worker`; `join` waits for its loop to end. Each start is a new life,
    and the coordinator knows the trainer by `life_name`, so a dead life's calls take no work."""

    def __init__(self, peers: DaskPeers, name: str, worker: str) -> None:
        self.peers, self.name, self.worker = peers, name, worker
        self.life_name = name
        self.started = 0.0  # when its current life was started (monotonic)
        self._lives = 0
        self.handle: ActorHandle | None = None  # its current life's actor

    def start(self) -> None:
        p = self.peers
        self._lives += 1
        self.life_name = f"{self.name}#{self._lives}"
        self.started = time.monotonic()
        self.handle = p.fleet.start(self.name, TrainerActor, p.fleet.run_id, self.name, self.life_name, p.cfg,
                                     p.coordinator_address, p.fleet.dht_peers, p.t0_wall,
                                     key=p.fleet.key(TrainerActor, self.name), worker=self.worker, wait=False)

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.handle is not None and (deadline is None or time.monotonic() < deadline):
            try:
                running = self.handle.call("running", timeout=30)
            except Exception:  # its worker died: the trainer is gone
                running = False
            if not running:
                self.handle.release()
                self.handle = None
                return
            time.sleep(0.2)

    def alive(self) -> bool:
        """Whether the trainer may still work (no join has seen its loop end)."""
        return self.handle is not None
