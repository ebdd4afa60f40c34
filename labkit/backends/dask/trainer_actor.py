"""The trainer actor: the in-process `Trainer` loop on a Dask worker, fed by the run's coordinator.

On its worker a trainer sees the run through two ports: `CoordinatorClient` (its `WorkSource`:
microbatches and accounting from the coordinator, over its data plane; hop events are batched and
sent with each microbatch's `finish`) and `DhtDirectory` (its `Directory`: peers as the hivemind DHT
announces them). Activations go straight from this worker to the peers' workers. It stores a
heartbeat in the DHT every announce period, by which the coordinator finds it if it hangs.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

from distributed import get_worker

from labkit import events
from labkit.backends.dask.dht import ANNOUNCE_PERIOD, StageDirectory, node_for
from labkit.backends.dask.peer_actor import announce_loop, peer_actor
from labkit.backends.dask.remote import RemotePeer
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.runtime.sockets import SocketClient
from labkit.runtime.trainer import Trainer
from labkit.swarm.ledger import Task


class DhtDirectory:
    """Peers as the DHT announces them, re-read twice per announce period (a failed read keeps
    the last view); remembers which actor instance of each name it last handed out.

    A handle whose record is gone (the coordinator withdrew a dead or departed peer, or it went
    silent) is crashed: a request still waiting on it fails at once instead of waiting for the
    wire to time out (Dask retries a refused connection for 30 s). Should the record come back,
    a fresh handle is made."""

    def __init__(self, run_id: str, cfg: RunConfig, dht_peers: list[str]) -> None:
        self._directory = StageDirectory(node_for(run_id, dht_peers), run_id, cfg.stages)
        self._announced: dict[str, dict[str, Any]] = self._directory.discover()
        self._lock = threading.Lock()
        self._handles: dict[tuple[str, str], RemotePeer] = {}
        self._instances: dict[str, int] = {}  # actor key -> the order this directory first saw it in
        self.called: dict[str, str] = {}  # peer name -> actor key of the handle last given out
        self._stop = threading.Event()
        threading.Thread(target=self._refresh, name="labkit-discover", daemon=True).start()

    def _refresh(self) -> None:
        while not self._stop.wait(ANNOUNCE_PERIOD / 2):
            try:
                announced = self._directory.discover()
            except Exception:
                continue
            live = {(info["address"], info["key"]) for info in announced.values()}
            with self._lock:
                self._announced = announced
                gone = [self._handles.pop(h) for h in list(self._handles) if h not in live]
            for handle in gone:
                handle.crashed()

    def close(self) -> None:
        self._stop.set()

    def beat(self, life: str) -> None:
        """This trainer's heartbeat (`StageDirectory.beat`)."""
        self._directory.beat(life)

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
        with self._lock:
            if handle not in self._handles:
                self._handles[handle] = RemotePeer(name, int(info["stage"]), info["key"], info["address"],
                                                   peer_actor(*handle), data=info.get("data"))
            self.called[name] = info["key"]
            return self._handles[handle]


class CoordinatorClient:
    """The trainer's `WorkSource`: requests to the coordinator over its data plane, with the actor
    instance each report is about (a stale view may have called a peer's replaced instance). Work
    is taken and finished under `life_name`, this life of the trainer (a restarted trainer has a
    new one)."""

    def __init__(self, coordinator: str, directory: DhtDirectory, t0: float, life_name: str) -> None:
        self._plane = SocketClient(coordinator, lambda: ConnectionError(f"the coordinator at {coordinator} hung up"))
        self._directory, self._t0, self._life = directory, t0, life_name
        self._events: list[events.Event] = []

    def _ask(self, method: str, *args: Any) -> Any:
        try:
            return self._plane.call(method, *args).result()
        except ConnectionError:  # the coordinator's process is gone: no more work (not a traceback a lane)
            return None

    def _life_of(self, lane: str) -> str:
        """The name a lane ("t0" or "t0/k") takes work under in this life ("t0#2" or "t0#2/k")."""
        return self._life + (lane[lane.index("/"):] if "/" in lane else "")

    def close(self) -> None:
        self._plane.close()

    def clock(self) -> float:
        return time.time() - self._t0

    def emit(self, event: events.Event) -> None:
        self._events.append(event)

    def next_task(self, trainer: str) -> tuple[Task, str] | None:
        return self._ask("next_task", self._life_of(trainer))

    def finish(self, trainer: str, task: Task, credits: dict[int, str], loss: float | None) -> None:
        batch, self._events = self._events, []
        self._ask("finish", self._life_of(trainer), task, credits, loss, batch)

    def stage_empty(self, stage: int) -> None:
        self._ask("stage_empty", stage)

    def peer_timed_out(self, name: str, may_have_accumulated: bool) -> None:
        self._ask("peer_timed_out", name, may_have_accumulated, self._directory.called.get(name))

    def peer_failed(self, name: str, exc: BaseException) -> None:
        self._ask("peer_failed", name, RuntimeError(f"{type(exc).__name__}: {exc}"), self._directory.called.get(name))

    def fail(self, exc: BaseException) -> None:
        self._ask("fail", RuntimeError(f"{type(exc).__name__}: {exc}"))


class TrainerActor:
    """One trainer on this worker, running the in-process `Trainer` loop against the coordinator."""

    def __init__(self, run_id: str, name: str, life_name: str, cfg: RunConfig, coordinator: str,
                 dht_peers: list[str], t0: float) -> None:
        """coordinator: the "host:port" where the coordinator serves trainers; life_name: this
        start of trainer `name`."""
        prepare_worker(cfg)
        self.directory = DhtDirectory(run_id, cfg, dht_peers)
        self.work = CoordinatorClient(coordinator, self.directory, t0, life_name)
        sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
        self.trainer = Trainer(name, cfg, self.work, self.directory, sampler)
        self.trainer.start()
        self._closed = threading.Event()
        threading.Thread(target=announce_loop, args=(get_worker(), self, self._closed, partial(self._beat, life_name),
                                                     self._close), name="labkit-heartbeat", daemon=True).start()

    def _beat(self, life: str) -> None:
        """Tell the run this life of the trainer lives, while its loop runs (every announce
        period: a process that hangs stops telling it)."""
        if self.trainer.alive():
            self.directory.beat(life)

    def _close(self) -> None:
        self._closed.set()
        self.directory.close()
        self.work.close()

    async def running(self) -> bool:
        alive = self.trainer.alive()
        if not alive:
            self._close()
        return alive
