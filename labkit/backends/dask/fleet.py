"""Where a Dask run's peers and trainers live: the Dask `PeerFactory`.

It lives with the run's coordinator, in the process holding the run. It places every peer and
trainer as an actor on its own worker (GPU workers first for peers, CPU workers first for
trainers), watches the DHT (peers that
stop announcing are evicted; their queue lengths feed Algorithm 2), and gives every worker that
joins the cluster mid-run a peer on the stage the join rule picks.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from distributed import Client

from labkit import events
from labkit.backends.dask.dht import ANNOUNCE_PERIOD, ANNOUNCE_TTL, DhtNode, StageDirectory, join, release
from labkit.backends.dask.peer_actor import PeerActor
from labkit.backends.dask.placement import peer_worker, trainer_workers
from labkit.backends.dask.remote import START_TIMEOUT, RemotePeer
from labkit.backends.dask.trainer_actor import TrainerActor
from labkit.backends.dask.workers import cluster_workers
from labkit.config import RunConfig
from labkit.runtime.ports import PeerHandle

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator


WORKER_CHECK = 0.5  # seconds between asking the scheduler which workers are still there
JOIN_TRIES = 3  # a worker that joined mid-run but failed this often to start a peer is left alone


class NoFreeWorker(RuntimeError):
    """The cluster has no worker left for a new peer."""


class RemoteTrainer:
    """A trainer actor on `worker`; `join` waits for its loop to end. Each start is a new life,
    and the coordinator knows the trainer by `life_name`, so a dead life's calls take no work."""

    def __init__(self, fleet: DaskPeers, name: str, worker: str) -> None:
        self.fleet, self.name, self.worker = fleet, name, worker
        self.life_name = name
        self._lives = 0
        self._future: Any = None

    def start(self) -> None:
        f = self.fleet
        self._lives += 1
        self.life_name = f"{self.name}#{self._lives}"
        self._future = f.client.submit(TrainerActor, f.run_id, self.name, self.life_name, f.cfg, f.coordinator_address,
                                       f.dht_peers, f.t0_wall, actor=True, workers=[self.worker], allow_other_workers=False,
                                       key=f"labkit-trainer-{f.run_id}-{self.name}-{uuid.uuid4().hex[:8]}")

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._future is not None and (deadline is None or time.monotonic() < deadline):
            try:
                running = self._future.result(START_TIMEOUT).running().result(30)
            except Exception:  # its worker died: the trainer is gone
                running = False
            if not running:
                self._future = None  # releases the actor
                return
            time.sleep(0.2)

    def alive(self) -> bool:
        """Whether the trainer may still work (no join has seen its loop end)."""
        return self._future is not None


class DaskPeers:
    """A `PeerFactory` whose peers and trainers are actors on the workers of `client`'s cluster.

    host: this process's address toward the cluster (its DHT node listens there); coordinator: the
    "host:port" where the coordinator serves trainers (labkit/runtime/sockets.py); t0_wall: when
    the run started, on the wall clock every worker shares."""

    def __init__(self, cfg: RunConfig, *, client: Client, run_id: str, host: str, coordinator: str,
                 t0_wall: float) -> None:
        self.cfg, self.client, self.run_id, self.coordinator_address = cfg, client, run_id, coordinator
        self.t0_wall = t0_wall
        self.directory = StageDirectory(DhtNode([], host), run_id, cfg.stages)
        self.dht_peers = self.directory.node.maddrs()
        self.coordinator: Coordinator | None = None
        self._announced: dict[str, dict[str, Any]] = {}
        self._last_seen: dict[str, float] = {}
        self._placed: dict[str, str] = {}  # worker address -> what runs there
        self._initial_workers = set(cluster_workers(client))
        self._placing = threading.Lock()
        self._joining: set[str] = set()  # workers that joined mid-run, a peer starting on each
        self._failures: dict[str, int] = {}  # such workers whose peer failed to start: how often
        client.run(join, run_id, self.dht_peers)  # every worker joins the DHT now, in parallel

    def clock(self) -> float:
        """Seconds since the run started, on the wall clock every worker shares."""
        return time.time() - self.t0_wall

    def bind(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    # -- placement -----------------------------------------------------------------------------
    def _free_worker(self, stage: int) -> str:
        """A worker hosting nothing of this run for a peer of `stage`: one that joined mid-run
        first, then GPU workers, then one on the machine with the fewest peers of `stage`."""
        workers = cluster_workers(self.client)
        stage_hosts = [workers[p.worker].get("host") for p in self.coordinator.members.peers.values()
                       if p.stage == stage and p.worker in workers]
        worker = peer_worker(workers, self._placed, self._initial_workers, stage_hosts)
        if worker is None:
            raise NoFreeWorker(f"no free Dask worker for a new peer: all {len(workers)} workers host a peer, a trainer "
                               f"of this run; start another `dask worker` (with --resources GPU=1 "
                               f"on a GPU host) or use fewer peers")
        return worker

    def start_trainers(self, count: int) -> list[RemoteTrainer]:
        """One trainer per free worker (CPU workers first); with too few, they share them."""
        trainers = []
        for i, worker in enumerate(trainer_workers(cluster_workers(self.client), self._placed, count)):
            self._placed.setdefault(worker, f"t{i}")
            trainers.append(RemoteTrainer(self, f"t{i}", worker))
        return trainers

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | None, *, source: PeerHandle | None,
                   delay: float, running: bool) -> RemotePeer:
        """Start peer `name` as an actor: on the worker it had (a rebuild), else on a free worker.
        It downloads its state from `source` (a live neighbour) directly when there is one.
        Before the run starts it returns at once (the first peers start in parallel, and announce
        themselves); mid-run it waits until the actor holds its state, silent until `admit`."""
        with self._placing:  # joins start on threads of their own: one worker each
            worker = next((w for w, what in self._placed.items() if what == name), None) or self._free_worker(stage)
            self._placed[worker] = name
        key = f"labkit-peer-{self.run_id}-{name}-{uuid.uuid4().hex[:8]}"
        origin = None if source is None else (source.worker, source.key)
        future = self.client.submit(PeerActor, self.run_id, key, name, stage, self.coordinator.cfg, state, delay,
                                    self.dht_peers, origin, not running, key=key, actor=True, workers=[worker],
                                    allow_other_workers=False)
        if not running:
            future.add_done_callback(lambda f: self._started(name, f))
        peer = RemotePeer(name, stage, key, worker, None, self._announcement, self._withdraw, delay, owner=future)
        if running:
            try:
                peer.actor
            except Exception:
                self._placed.pop(worker, None)
                raise
        return peer

    def admit(self, peer: RemotePeer) -> None:
        """A peer started mid-run is in the run now: it announces itself, and from then on
        counts as silent (and may be evicted) when its announcements stop."""
        self._last_seen[peer.name] = time.monotonic()
        peer.actor.go_live().result(START_TIMEOUT)

    def _wait_announced(self, peers: list[RemotePeer]) -> None:
        """Wait until each of `peers` has started and the DHT lists it under its actor's key:
        from then on trainers can find it."""
        deadline = time.monotonic() + START_TIMEOUT
        for peer in peers:
            peer.actor
        while True:
            try:
                found = self.directory.discover()
            except Exception:  # a DHT hiccup: ask again
                found = {}
            missing = [p.name for p in peers if found.get(p.name, {}).get("key") != p.key]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"peers {missing} started but did not announce themselves in the DHT within "
                                   f"{START_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def _started(self, name: str, future: Any) -> None:
        """A peer's actor started (from then on it must announce itself), or failed to."""
        if future.status == "finished":
            self._last_seen[name] = time.monotonic()
        else:
            threading.Thread(target=self.coordinator.members.evict, args=(name, f"failed to start: {future.exception()}"),
                             daemon=True).start()

    def _announcement(self, name: str) -> dict[str, Any]:
        return self._announced.get(name, {})

    def _withdraw(self, peer: RemotePeer) -> None:
        """A peer left (killed, moved, evicted): free its worker, take it out of the DHT now."""
        for worker, what in list(self._placed.items()):
            if what == peer.name:
                del self._placed[worker]
        try:
            self.directory.withdraw(peer.stage, peer.key)
        except Exception:  # the DHT is slow: the record still expires on its own
            pass

    # -- life cycle ----------------------------------------------------------------------------
    def started(self) -> None:
        """Wait for the first peers (they start in parallel) to be announced, then watch them:
        the DHT for silent peers and new workers, the scheduler for workers that left."""
        self._wait_announced(list(self.coordinator.members.peers.values()))
        threading.Thread(target=self._watch, name="labkit-watch", daemon=True).start()
        threading.Thread(target=self._watch_workers, name="labkit-watch-workers", daemon=True).start()

    def _watch_workers(self) -> None:
        """Every `WORKER_CHECK` seconds, ask the scheduler which workers it has: a worker that left
        (a SIGKILLed process is removed within about a second) takes its peer or trainer with it.
        Its waiting requests fail at once, then the coordinator evicts it as for any crash."""
        c = self.coordinator
        while not c.stopped.wait(WORKER_CHECK):
            try:
                workers = cluster_workers(self.client)
            except Exception:  # the scheduler is busy: ask again
                continue
            for worker, what in list(self._placed.items()):
                if worker not in workers and what != "coordinator":
                    self._worker_left(worker, what)

    def _worker_left(self, worker: str, what: str) -> None:
        c = self.coordinator
        reason = f"its Dask worker {worker} left the cluster"
        del self._placed[worker]
        trainer = next((t for t in c.trainers if t.name == what), None)
        if trainer is not None:
            c.trainer_lost(trainer.life_name, reason)
            self._restart(trainer)
            return
        peer = c.members.peers.get(what)  # without the lock, which a step boundary waiting on this peer holds
        if isinstance(peer, RemotePeer) and peer.worker == worker:
            peer.crashed()  # requests waiting on it fail now, so that boundary goes on (and evicts it)
            c.members.evict(what, reason)

    def _restart(self, trainer: RemoteTrainer) -> None:
        """Start a lost trainer again, under its name, on a free worker (or one it shares)."""
        worker, = trainer_workers(cluster_workers(self.client), self._placed, 1)
        self._placed.setdefault(worker, trainer.name)
        trainer.worker = worker
        trainer.start()

    def _watch(self) -> None:
        """Every announce period: read the DHT, evict peers silent for `ANNOUNCE_TTL`, and give
        workers that joined the cluster a peer."""
        c = self.coordinator
        while not c.stopped.wait(ANNOUNCE_PERIOD):
            try:
                self._announced = self.directory.discover()
            except Exception:
                continue
            now = time.monotonic()
            for name in list(c.members.registry()):
                if name in self._announced:
                    self._last_seen[name] = now
                elif name in self._last_seen and now - self._last_seen[name] > ANNOUNCE_TTL:
                    c.members.evict(name, f"stopped announcing to the DHT for {ANNOUNCE_TTL:.0f} s")
            self._use_new_workers()

    def _use_new_workers(self) -> None:
        """Give each worker that joined the cluster (a restarted one too) a peer, each on a
        thread of its own: a start takes seconds, and the watch must go on meanwhile."""
        try:
            joined = [w for w in cluster_workers(self.client)
                      if w not in self._initial_workers and w not in self._placed and w not in self._joining]
        except Exception:
            return
        for worker in joined:
            if self._failures.get(worker, 0) < JOIN_TRIES:
                self._joining.add(worker)
                threading.Thread(target=self._use_worker, args=(worker,), name="labkit-join", daemon=True).start()

    def _use_worker(self, worker: str) -> None:
        c = self.coordinator
        try:
            if c.stopped.is_set():
                return
            # the worker imports torch and joins the DHT (seconds), then a peer starts on it
            self.client.run(join, self.run_id, self.dht_peers, workers=[worker])
            name = c.members.add_peer(None)
        except Exception as exc:  # e.g. the worker left again before the peer started
            self._failures[worker] = self._failures.get(worker, 0) + 1
            c.emit(events.setting(c.clock(), name="worker_unused", value=f"{worker}: {type(exc).__name__}: {exc}"))
            return
        finally:
            self._joining.discard(worker)
        c.emit(events.setting(c.clock(), name="worker_joined", value=f"{worker} serves {name}"))

    def close(self) -> None:
        """Shut down every worker's DHT node of this run, and this process's."""
        try:
            self.client.run(release, self.run_id)
        except Exception:
            pass
        self.directory.node.shutdown()
