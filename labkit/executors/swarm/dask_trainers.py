"""A Dask run's trainers as the coordinator sees them: one `RemoteTrainer` per trainer, whose
actor (labkit/backends/dask/trainer_actor.py) runs the trainer loop on a worker. Each start is a
new life with a name of its own, so the coordinator can tell a dead life's calls from the new one's.
"""

from __future__ import annotations

import time

from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.actor_handle import ActorHandle
from labkit.backends.dask.trainer_actor import TrainerActor
from labkit.config import RunConfig


class RemoteTrainer:
    """A trainer actor of `fleet`'s run on `worker`, taking work from the coordinator at
    `coordinator` ("host:port"); `join` waits for its loop to end. Each start is a new life, and the
    coordinator knows the trainer by `life_name`, so a dead life's calls take no work."""

    def __init__(self, fleet: ActorFleet, cfg: RunConfig, coordinator: str, t0_wall: float, name: str,
                 worker: str) -> None:
        self.fleet, self.cfg, self.coordinator, self.t0_wall = fleet, cfg, coordinator, t0_wall
        self.name, self.worker = name, worker
        self.life_name = name
        self.started = 0.0  # when its current life was started (monotonic)
        self._lives = 0
        self.handle: ActorHandle | None = None  # its current life's actor

    def start(self) -> None:
        f = self.fleet
        self._lives += 1
        self.life_name = f"{self.name}#{self._lives}"
        self.started = time.monotonic()
        self.handle = f.start(self.name, TrainerActor, f.run_id, self.name, self.life_name, self.cfg, self.coordinator,
                              f.dht_peers, self.t0_wall, key=f.key(TrainerActor, self.name), worker=self.worker, wait=False)

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.handle is not None and (deadline is None or time.monotonic() < deadline):
            try:
                running = self.handle.call("running", timeout=self.cfg.peer_timeout)
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
