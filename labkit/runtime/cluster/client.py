"""What a trainer on a Dask worker sees as its swarm: the coordinator's ledger, the DHT's peers.

`SwarmClient` has the attributes and methods `Trainer` uses on the in-process swarm, so the same
trainer code runs on a worker: microbatches and accounting come from the coordinator actor, peers
are found in the hivemind DHT, and activations go straight to the peers' workers. Hop events are
batched and sent with the microbatch's `finish`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from distributed.actor import Actor

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.runtime.cluster.dht import ANNOUNCE_PERIOD, StageDirectory, node_for
from labkit.runtime.cluster.remote import RemotePeer, peer_actor
from labkit.swarm.ledger import Task


class SwarmClient:
    """The trainer-side view of a run whose coordinator is the actor `coordinator`."""

    def __init__(self, run_id: str, cfg: RunConfig, coordinator: Actor, dht_peers: list[str], t0: float) -> None:
        self.cfg, self.num_stages, self._t0 = cfg, cfg.stages, t0
        self.loss_scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
        self.sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
        self.codec = cfg.compression.codec  # updated with every microbatch the coordinator hands out
        self._coordinator = coordinator
        self._directory = StageDirectory(node_for(run_id, dht_peers), run_id, cfg.stages)
        self._announced: dict[str, dict[str, Any]] = self._directory.discover()
        self._handles: dict[tuple[str, str], RemotePeer] = {}
        self._instances: dict[str, int] = {}  # actor key -> the order this client first saw it in
        self._called: dict[str, str] = {}  # peer name -> actor key of the handle last given out
        self._events: list[events.Event] = []
        self._stop = threading.Event()
        threading.Thread(target=self._refresh, name="labkit-discover", daemon=True).start()

    def _refresh(self) -> None:
        """Re-read the stage keys twice per announce period (a failed read keeps the last view)."""
        while not self._stop.wait(ANNOUNCE_PERIOD / 2):
            try:
                self._announced = self._directory.discover()
            except Exception:
                continue

    def close(self) -> None:
        self._stop.set()

    # -- what Trainer uses ---------------------------------------------------------------------
    def clock(self) -> float:
        return time.time() - self._t0

    def emit(self, event: events.Event) -> None:
        self._events.append(event)

    def registry(self) -> dict[str, tuple[int, int]]:
        """Peers announced in the DHT: name -> (stage, instance). A peer rebuilt under the same
        name has a new actor key, hence a new instance: the trainer's router un-bans it."""
        return {name: (int(info["stage"]), self._instances.setdefault(info["key"], len(self._instances)))
                for name, info in self._announced.items()}

    def peer(self, name: str) -> RemotePeer | None:
        info = self._announced.get(name)
        if info is None:
            return None
        handle = (info["address"], info["key"])
        if handle not in self._handles:
            self._handles[handle] = RemotePeer(name, int(info["stage"]), info["key"], peer_actor(*handle))
        self._called[name] = info["key"]
        return self._handles[handle]

    def next_task(self) -> Task | None:
        task, self.codec = self._coordinator.next_task().result()
        return task

    def finish(self, task: Task, credits: dict[int, str], loss: float | None) -> None:
        batch, self._events = self._events, []
        self._coordinator.finish(task, credits, loss, batch).result()

    def stage_empty(self, stage: int) -> None:
        self._coordinator.trainer_call("stage_empty", stage).result()

    def peer_timed_out(self, name: str, may_have_accumulated: bool) -> None:
        self._coordinator.trainer_call("peer_timed_out", name, may_have_accumulated, self._called.get(name)).result()

    def peer_failed(self, name: str, exc: BaseException) -> None:
        error = RuntimeError(f"{type(exc).__name__}: {exc}")
        self._coordinator.trainer_call("peer_failed", name, error, self._called.get(name)).result()

    def fail(self, exc: BaseException) -> None:
        self._coordinator.trainer_call("fail", RuntimeError(f"{type(exc).__name__}: {exc}")).result()
