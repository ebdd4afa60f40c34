"""Where a Dask run's SWARM peers and trainers live: the Dask `PeerFactory`, a user of the fleet.

It lives with the run's coordinator. The fleet (backends/dask/actor_fleet.py) places every peer
and trainer as an actor and says whose worker left; this adds what is SWARM's own: a lost peer is
evicted and a lost trainer restarted, hung ones too (the DHT is watched, and silent ones checked
directly: backends/dask/liveness.py; a worker found hung is the fleet's to lose whole), and every
worker that joins mid-run gets a peer on the stage the join rule picks (dask_joins.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from labkit import events
from labkit.backends.dask.actor_fleet import ActorFleet
from labkit.backends.dask.actor_handle import ActorHandle
from labkit.backends.dask.dht import ANNOUNCE_PERIOD, ANNOUNCE_TTL, StageDirectory
from labkit.backends.dask.liveness import SUSPECT_AFTER, Probes
from labkit.backends.dask.peer_actor import ALIVE, PeerActor
from labkit.backends.dask.remote import START_TIMEOUT, RemotePeer
from labkit.config import RunConfig
from labkit.executors.swarm.dask_joins import ACTOR_MODULES, Newcomers
from labkit.executors.swarm.dask_trainers import RemoteTrainer
from labkit.runtime.background import in_background
from labkit.runtime.peer import PeerDied
from labkit.runtime.ports import PeerHandle
from labkit.runtime.trainer import trainer_name

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator


WORKER_WAIT = 60.0  # seconds a lost trainer waits for a worker to restart on (nannies take a few)


class DaskPeers:
    """A `PeerFactory` whose peers and trainers are actors on the workers of `fleet`'s cluster.

    coordinator: the "host:port" where the coordinator serves trainers (labkit/runtime/sockets.py);
    t0_wall: when the run started, on the wall clock every worker shares."""

    def __init__(self, cfg: RunConfig, fleet: ActorFleet, *, coordinator: str, t0_wall: float) -> None:
        self.cfg, self.fleet, self.coordinator_address, self.t0_wall = cfg, fleet, coordinator, t0_wall
        self._left_out = fleet.join_dht(warm=ACTOR_MODULES)  # every worker, in parallel; a hung one is left out
        self.directory = StageDirectory(fleet.node, fleet.run_id, cfg.stages)
        self.coordinator: Coordinator | None = None
        self._actors: dict[str, ActorHandle] = {}  # peer name -> its actor
        self._announced: dict[str, dict[str, Any]] = {}
        self._last_seen: dict[str, float] = {}  # peer name, or trainer life: when it last announced itself
        self._restarts = threading.Lock()  # one restart of a trainer at a time (its worker left, or it hangs)
        self._newcomers: Newcomers | None = None  # gives workers that join mid-run a peer each, once bound
        self._probes = Probes()  # direct liveness checks under way
        self._turn = 0  # whose turn it is for a routine liveness check

    def clock(self) -> float:
        """Seconds since the run started, on the wall clock every worker shares."""
        return time.time() - self.t0_wall

    def bind(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self._newcomers = Newcomers(self.fleet, coordinator)
        for worker, why in self._left_out.items():
            coordinator.emit(events.worker_unused(self.clock(), worker, why))

    # -- peers and trainers --------------------------------------------------------------------
    def start_trainers(self, count: int) -> list[RemoteTrainer]:
        """One trainer per free worker (CPU workers first); with too few, they share them."""
        return [RemoteTrainer(self.fleet, self.cfg, self.coordinator_address, self.t0_wall, trainer_name(i), worker)
                for i, worker in enumerate(self.fleet.trainer_workers(count))]

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | str | None, *, source: PeerHandle | None,
                   delay: float, running: bool, emulates: str | None = None) -> RemotePeer:
        """Start peer `name` as an actor: on the worker it had (a rebuild), else on a free worker,
        away from the machines of its stage's peers. It downloads its state from `source` (a live
        neighbour) directly when there is one. Before the run starts it returns at once (the first
        peers start in parallel, and announce themselves); mid-run it waits until the actor holds
        its state, silent until `admit`."""
        f = self.fleet
        key = f.key(PeerActor, name)
        origin = None if source is None else source.contact
        spread = [p.worker for p in self.coordinator.members.peers.values() if p.stage == stage]
        handle = f.start(name, PeerActor, f.run_id, key, name, stage, self.coordinator.cfg, state, delay, f.dht_peers,
                         origin, not running, emulates, key=key, spread=spread, wait=running)
        self._actors[name] = handle
        if not running:
            handle.owner.add_done_callback(lambda future: self._started(name, future))
        peer = RemotePeer(name, stage, key, handle.worker, handle.actor if running else None, self._announcement,
                          self._withdraw, delay, owner=handle.owner)
        if running:
            try:  # where it listens, asked now, not under the coordinator's lock: a hung worker never says
                peer.contact
            except PeerDied:
                self._withdraw(peer)
                raise
        return peer

    def admit(self, peer: RemotePeer) -> None:
        """A peer started mid-run is in the run now: it announces itself, and from then on
        counts as silent (and may be evicted) when its announcements stop."""
        self._last_seen[peer.name] = time.monotonic()
        peer.actor.go_live().result(START_TIMEOUT)

    def _wait_announced(self, peers: list[RemotePeer]) -> None:
        """Wait until each of `peers` still in the run has started and the DHT lists it under its
        actor's key: from then on trainers can find it. A peer killed meanwhile is not waited for."""
        deadline = time.monotonic() + START_TIMEOUT
        for peer in peers:
            peer.actor
        members = self.coordinator.members.peers
        while True:
            try:
                found = self.directory.discover()
            except Exception:  # a DHT hiccup: ask again
                found = {}
            missing = [p.name for p in peers if members.get(p.name) is p and found.get(p.name, {}).get("key") != p.key]
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
        """A peer left (killed, moved, evicted): free its worker, and take it out of the DHT in the
        background. The caller holds the coordinator's lock, and a DHT store can take up to its
        30 s timeout while the DHT still routes to dead nodes: in a 30-minute chaos run the step
        boundary waited 35 s on one, and the whole run with it. (If it fails, the record expires.)"""
        handle = self._actors.get(peer.name)
        if handle is not None and handle.key == peer.key:
            del self._actors[peer.name]
            self.fleet.free(handle)
        in_background(self.directory.withdraw, peer.stage, peer.key, name="labkit-withdraw")

    # -- life cycle ----------------------------------------------------------------------------
    def started(self) -> None:
        """Wait for the first peers (they start in parallel) to be announced, then watch them:
        the DHT for silent peers and new workers, and (through the fleet) workers that left."""
        self._wait_announced(list(self.coordinator.members.peers.values()))
        threading.Thread(target=self._watch, name="labkit-watch", daemon=True).start()
        self.fleet.watch(self._worker_left)

    def _worker_left(self, handle: ActorHandle, reason: str) -> None:
        """`handle`'s worker left the cluster: a trainer loses its microbatches and starts again
        elsewhere; a peer's waiting requests fail at once, then the coordinator evicts it as for any
        crash."""
        c = self.coordinator
        if c.stopped.is_set():
            return
        trainer = next((t for t in c.trainers if t.name == handle.name), None)
        if trainer is not None:
            self._restart(trainer, handle, reason)
            return
        peer = c.members.peers.get(handle.name)
        if isinstance(peer, RemotePeer) and peer.worker == handle.worker:
            self._gone(peer, reason)

    def _restart(self, trainer: RemoteTrainer, handle: ActorHandle, reason: str) -> None:
        """Trainer life `handle` is lost (`reason`): its microbatches are handed out again and the
        trainer starts a new life on another worker; nothing if `handle` is no longer its life."""
        c = self.coordinator
        with self._restarts:
            if trainer.handle is not handle or c.stopped.is_set():  # a life it left behind, hung
                return
            c.trainer_lost(trainer.life_name, reason)
            self._last_seen.pop(trainer.life_name, None)  # a lost life is never judged again
            try:
                if (worker := self.fleet.trainer_worker(handle.worker, c.stopped, WORKER_WAIT)) is None:
                    if not c.stopped.is_set():
                        c.fail(RuntimeError(f"trainer {trainer.name} was lost ({reason}) and no Dask worker "
                                            f"was there to restart it on within {WORKER_WAIT:.0f} s"))
                    return
                trainer.worker = worker
                trainer.start()
            except Exception as exc:  # the scheduler did not answer: the heartbeat watch tries again
                c.emit(events.setting(c.clock(), name="trainer_restart_failed", value=f"{trainer.name}: {exc!r}"))
                return
            handle.release()  # the old life's actor goes (a start still queued on its worker is dropped)

    def _gone(self, peer: RemotePeer, reason: str) -> None:
        """`peer` is dead or hung: its waiting requests fail now, without the coordinator's lock
        (a step boundary waiting on this peer holds it, and then goes on and evicts it), and the
        coordinator evicts it (not a successor the lock's holder started under its name)."""
        peer.crashed()
        self.coordinator.members.evict(peer.name, reason, peer)

    def _watch(self) -> None:
        """Every announce period: read the DHT, check who fell silent there, give new workers a peer."""
        c = self.coordinator
        while not c.stopped.wait(ANNOUNCE_PERIOD):
            try:
                self._announced = self.directory.discover()
            except Exception:
                continue
            now = time.monotonic()
            for name in list(c.members.peers):  # a copy, not the registry: a boundary waiting on a hung peer holds the lock
                if name in self._announced:  # when it last refreshed its record, not when we read it
                    self._last_seen[name] = max(self._last_seen.get(name, 0.0), now - self._announced[name]["age"])
                if name in self._last_seen and (silent := now - self._last_seen[name]) > SUSPECT_AFTER:
                    self._check_peer(name, f"its last DHT record is {silent:.0f} s old",
                                     lambda n=name, s=silent: self._still_alive(n, s))
            self._check_heartbeats(now)
            self._check_in_turn()
            self._newcomers.use()

    def suspect(self, name: str) -> None:
        """A trainer's request to peer `name` timed out: ask the peer now (evicted if it hangs)."""
        self._check_peer(name, "a request to it timed out")

    def _check_peer(self, name: str, why: str, answered: Callable[[], None] = lambda: None) -> None:
        """Evict peer `name` (`why`: what made it suspect) unless it answers a direct check in time."""
        if isinstance(peer := self.coordinator.members.peers.get(name), RemotePeer):
            self._probes.start(name, ALIVE, lambda wait: peer.call(ALIVE).result(wait), lambda wait: self.peer_silent(
                peer, f"{why} and it did not answer a liveness check within {wait:.1f} s (hung)"), answered)

    def peer_silent(self, peer: RemotePeer, reason: str) -> None:
        """A check found `peer` silent: its worker hangs, unless the run let that peer go meanwhile
        (a kill or move closes it, a layer split replaces it under its name): a closed peer
        answers no check, and its worker may host its successor."""
        if not peer.let_go:
            self._hung(peer.worker, reason, lambda why: self._gone(peer, why))

    def _hung(self, worker: str, reason: str, lost: Callable[[str], None]) -> None:
        """A check found `worker` hung: the fleet loses its every actor (so `_worker_left` evicts or
        restarts each) and places nothing there again; then `lost(reason)`, a no-op unless the
        fleet no longer held the one checked."""
        self.fleet.hangs(worker, reason)
        lost(reason)

    def _still_alive(self, name: str, silent: float) -> None:
        """`name` (a peer, a trainer's life) answered though its record was `silent` s old (expired: an event)."""
        self._last_seen[name], c = time.monotonic(), self.coordinator
        if silent > ANNOUNCE_TTL:
            c.emit(events.setting(c.clock(), name="announce_missed",
                                  value=f"{name}: no DHT record for {silent:.0f} s, but it answered directly"))

    def _check_heartbeats(self, now: float) -> None:
        """A trainer whose heartbeat expired (`ANNOUNCE_TTL`) is checked directly and restarted on
        another worker if it does not answer (it hangs); so is one that never beat within
        `START_TIMEOUT` of its start (it did not start: its worker's thread is taken)."""
        try:
            beats = self.directory.heartbeats()
        except Exception:  # the DHT is slow: look again next period
            return
        for trainer in self.coordinator.trainers:
            life, handle = trainer.life_name, trainer.handle
            if life in beats:
                self._last_seen[life] = max(self._last_seen.get(life, 0.0), now - beats[life])
            if handle is None:
                continue
            if life in self._last_seen:
                if (silent := now - self._last_seen[life]) > ANNOUNCE_TTL:
                    self._check_trainer(trainer, f"its heartbeat stopped {silent:.0f} s ago",
                                        lambda n=life, s=silent: self._still_alive(n, s))
            elif now - trainer.started > START_TIMEOUT:
                self._restart(trainer, handle, f"it did not start on {handle.worker} within {START_TIMEOUT:.0f} s")

    def _check_trainer(self, trainer: RemoteTrainer, why: str, answered: Callable[[], None] = lambda: None) -> None:
        """Restart `trainer` (`why`: what made it suspect) unless it answers a direct check in time."""
        handle = trainer.handle
        self._probes.start(trainer.life_name, "running", lambda wait: handle.call("running", timeout=wait), lambda wait:
                           self._hung(handle.worker, f"{why} and it did not answer within {wait:.1f} s (hung)",
                                      lambda reason: self._restart(trainer, handle, reason)), answered)

    def _check_in_turn(self) -> None:
        """One peer a period is checked in turn: the check's deadline is learnt before anyone is
        suspected, and a hang is found even where nothing else notices. (Not trainers: while one
        worker hangs, a live trainer's Dask actor call and heartbeat can lag for seconds.)"""
        self._turn += 1
        if peers := sorted(self._last_seen.keys() & self.coordinator.members.peers.keys()):
            self._check_peer(peers[self._turn % len(peers)], "it was checked in its turn")

    def close(self) -> None:
        """Nothing of its own: the fleet closes with the run's core, after the run's record is written."""
