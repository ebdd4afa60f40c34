"""Who serves which stage: the registry of live peers and the verbs that change it.

A part of the run's coordinator (its lock, ledger and committed states, as `Run` names them): peers join with
a neighbour's state, crash or are evicted (their credits go back to the ledger), or move between stages
(`moves`); a stage without a live peer pauses the run until one joins. The registry is the in-process
directory trainers route over; on Dask the DHT mirrors it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from labkit import events
from labkit.config import RunConfig
from labkit.model.assembly import stage_module
from labkit.model.partition import stage_bounds
from labkit.runtime.joining import catch_up, start_joiner
from labkit.runtime.pacing import join_seconds
from labkit.runtime.ports import PeerFactory, PeerHandle
from labkit.runtime.resize import recut_states
from labkit.runtime.shards import Checkpoints
from labkit.swarm.ledger import StepLedger
from labkit.swarm.rebalance import join_stage

LOAD_PERIOD = 0.25  # seconds between `load` events (each live peer's queue length)
SPLIT_TRIES = 3  # starts of a joiner before add_peer gives up on a layer split that keeps changing


class Run(Protocol):
    """What the membership needs of the run it belongs to (the coordinator)."""

    cfg: RunConfig
    factory: PeerFactory
    ledger: StepLedger
    lock: threading.RLock
    cond: threading.Condition
    checkpoints: Checkpoints  # the last one is what a peer of an emptied stage starts from
    version: int  # changes with every committed step and rollback
    paused: set[int]  # stages without a live peer
    running: bool  # new peers must be ready before they join
    closed: bool  # the peers were stopped
    stopped: threading.Event
    clock: Callable[[], float]

    def emit(self, event: events.Event) -> None: ...
    def rollback(self, why: str) -> None: ...
    def live_or_raise(self, verb: str) -> None: ...


class Membership:
    """The live peers of one run and the verbs that add, remove and move them."""

    def __init__(self, coordinator: Run, bounds: list[tuple[int, int]]) -> None:
        self.c, self.bounds = coordinator, bounds  # bounds: (first block, blocks) per stage
        self.peers: dict[str, PeerHandle] = {}
        self._epochs: dict[str, int] = {}  # announce epoch of each name (a rebuilt peer is re-announced)
        self._counter = [0] * coordinator.cfg.stages
        self._starting: dict[str, int] = {}  # peers being started -> their stage
        self.size = sum(coordinator.cfg.peers_per_stage)  # peers kept through faults (`refill`): added ones count
        self.emulates: dict[str, str] = {}  # a moved peer's name -> the first name of its line (its place in a world)
        self.downloads = join_seconds(coordinator.cfg)  # per stage: a joiner's least start, its download in a world

    # -- the registry (what trainers route over) ----------------------------------------------
    def registry(self) -> dict[str, tuple[int, int]]:
        """Live peers: name -> (stage, announce epoch); none once the run closed."""
        with self.c.lock:
            return {} if self.c.closed else {name: (p.stage, self._epochs[name]) for name, p in self.peers.items()}

    def peer(self, name: str) -> PeerHandle | None:
        with self.c.lock:
            return None if self.c.closed else self.peers.get(name)

    def live(self, stage: int) -> list[PeerHandle]:
        """Live peers of `stage`, by name."""
        with self.c.lock:
            return sorted((p for p in self.peers.values() if p.stage == stage), key=lambda p: p.name)

    def live_peer(self, name: str, verb: str) -> PeerHandle:
        """The live peer `name`, for `verb`; a clear error if the run ended or no such peer lives."""
        with self.c.lock:
            self.c.live_or_raise(verb)
            peer = self.peers.get(name)
            if peer is None:
                raise KeyError(f"no live peer named {name!r}; live peers: {sorted(self.peers)}")
            return peer

    def populate(self, states: list[dict[str, Any]]) -> None:
        """Start every stage's first peers with its state in `states`, before the run starts."""
        for stage, count in enumerate(self.c.cfg.peers_per_stage):
            for _ in range(count):
                name = self._next_name(stage)
                peer = self.c.factory.start_peer(name, stage, states[stage], source=None, delay=0.0, running=False)
                self._enter(name, peer)
                if self.c.cfg.sync.mode == "diloco":
                    peer.call("ensure_diloco", self.c.cfg.sync).result()

    def _next_name(self, stage: int) -> str:
        self._counter[stage] += 1
        return f"s{stage}p{self._counter[stage] - 1}"

    def _enter(self, name: str, peer: PeerHandle, emulates: str | None = None) -> None:
        """`peer` is in the run (lock held): trainers route to it, the ledger may credit it."""
        self.peers[name] = peer
        self.emulates.update({name: emulates} if emulates else {})
        self._epochs[name] = 0
        self.c.emit(events.peer(self.c.clock(), peer=name, stage=peer.stage, state="joined", queue=0))

    def stages(self) -> list[dict[str, Any]]:
        """Every stage's layers and live peers: queue length, samples held, samples credited."""
        out = []
        for stage, (first, count) in enumerate(self.bounds):
            credited = self.c.ledger.samples(stage)
            peers = [{"peer": p.name, "queue": p.queue_length, "samples": p.samples, "delay": p.delay,
                      "worker": p.worker, "credited": credited.get(p.name, 0)} for p in self.live(stage)]
            out.append({"stage": stage, "layers": list(range(first, first + count)), "peers": peers})
        return out

    def publish_loads(self) -> None:
        """Every live peer's queue length as a `load` event, LOAD_PERIOD apart, until the run
        stops (the stage-load charts). Reads a copy of the registry, never the lock."""
        while not self.c.stopped.wait(LOAD_PERIOD):
            for p in list(self.peers.values()):
                self.c.emit(events.load(self.c.clock(), peer=p.name, stage=p.stage, queue=p.queue_length))

    def alive(self) -> None:
        """Every live peer, by name, as an `alive` event (after each step)."""
        now = self.c.clock()
        for p in sorted(self.peers.values(), key=lambda p: p.name):
            self.c.emit(events.peer(now, peer=p.name, stage=p.stage, state="alive", queue=p.queue_length))

    def rebuild(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The committed `states` re-sliced to the run's layer split now, each peer replaced by one of the same name
        holding its stage's (at a step boundary: nothing is in flight)."""
        cfg = self.c.cfg
        self.bounds = stage_bounds(cfg.layer_split)
        states = recut_states(states, lambda stage, params: stage_module(cfg, stage, params), cfg.stages)
        for name, old in list(self.peers.items()):
            old.close()
            try:
                self.peers[name] = self.c.factory.start_peer(name, old.stage, states[old.stage], source=None,
                                                             delay=old.delay, running=self.c.running,
                                                             emulates=self.emulates.get(name))
                if self.c.running:
                    self.c.factory.admit(self.peers[name])
            except Exception as exc:  # its worker died or hangs: lost, as a killed peer is
                self._kill(name, f"it failed to restart with the new layer split: {type(exc).__name__}: {exc}")
        return states

    # -- verbs -------------------------------------------------------------------------------
    def add_peer(self, stage: int | None = None, *, emulates: str | None = None) -> str:
        """Start a peer on `stage` (None: Algorithm 2 picks, counting the peers still starting) with a neighbour's
        state, in a world in peer `emulates`'s place (`move_peer`'s; default a joiner's); the run's `size` grows by
        one. The start (seconds on Dask) runs without the lock, so steps, faults and other joins go on; the peer
        enters under it, caught up if a step was taken meanwhile, or started again if the layer split changed."""
        return self._join(stage, emulates, refill=False)

    def short(self) -> bool:
        """Whether the run has fewer peers than its `size` (those starting counted): a fault took one."""
        return len(self.peers) + len(self._starting) < self.size

    def refill(self) -> str | None:
        """Start a peer in place of one a fault took (Algorithm 2 picks the stage) if the run is `short`, else None."""
        return self._join(None, None, refill=True)

    def _join(self, stage: int | None, emulates: str | None, refill: bool) -> str | None:
        c = self.c
        with c.lock:
            c.live_or_raise("add_peer")
            if refill and not self.short():
                return None
            if stage is None:
                stage = join_stage({p.name: (p.stage, p.queue_length) for p in self.peers.values()}, c.cfg.stages,
                                   Counter(self._starting.values()))
            if not (isinstance(stage, int) and 0 <= stage < c.cfg.stages):
                raise ValueError(f"stage={stage!r} is not allowed: an integer in [0, {c.cfg.stages - 1}] or None")
            name, grown = self._next_name(stage), 0 if refill else 1
            self._starting[name], self.size = stage, self.size + grown
        try:
            return self._start(name, stage, emulates)
        except BaseException:
            with c.lock:
                self.size -= grown  # a peer that never served grows nothing
            raise
        finally:
            with c.lock:
                del self._starting[name]

    def _start(self, name: str, stage: int, emulates: str | None) -> str:
        c = self.c
        for _ in range(SPLIT_TRIES):
            with c.lock:
                c.live_or_raise("add_peer")
                version, bounds, neighbours = c.version, self.bounds, self.live(stage)
            peer, fell_back = start_joiner(c.factory, c.checkpoints, name, stage, neighbours, running=c.running,
                                           emulates=emulates, at_least=self.downloads[stage], stopped=c.stopped)
            with c.lock:
                try:
                    c.live_or_raise("add_peer")
                    if self.bounds == bounds and (fell_back or c.version != version):  # behind the run: catch up
                        catch_up(peer, stage, self.live(stage), c.checkpoints, c.cfg.peer_timeout)
                except Exception:
                    peer.kill()
                    raise
                if self.bounds != bounds:  # its layers are no longer its stage's: start it again
                    peer.kill()
                    continue
                self._enter(name, peer, emulates)
                if stage in c.paused:
                    c.paused.discard(stage)
                    if not c.paused:
                        c.rollback(f"stage {stage} had lost every peer")
                        c.emit(events.run(c.clock(), state="resumed", reason=f"{name} joined stage {stage}; "
                                          f"the run went back to its checkpoint of step {c.ledger.step}"))
                c.cond.notify_all()
            c.factory.admit(peer)
            return name
        raise RuntimeError(f"the layer split changed {SPLIT_TRIES} times while {name} started: add it again")

    def stage_empty(self, stage: int) -> None:
        """`stage` has no live peer (the last one left, or a trainer found none): its committed state is gone. The
        run pauses until a peer joins from the last checkpoint's shard; then the whole run goes back to it."""
        with self.c.lock:
            if not self.live(stage) and stage not in self.c.paused and not self.c.closed:
                self.c.paused.add(stage)
                self.c.emit(events.run(self.c.clock(), state="paused",
                                       reason=f"stage {stage} has no live peer; add_peer({stage}) resumes the run from "
                                              f"its checkpoint of step {self.c.checkpoints.latest.step}"))

    def kill_peer(self, name: str) -> None:
        """Crash a peer: its queue, stashed activations and accumulated gradients are gone."""
        with self.c.lock:
            self.c.live_or_raise("kill_peer")
            self._kill(name, "killed")
            self.size -= 1

    def _kill(self, name: str, reason: str) -> None:
        peer, lost = self.remove(name)
        self.c.emit(events.peer(self.c.clock(), peer=name, stage=peer.stage, state="killed", queue=0)
                    | {"reason": reason, "lost_samples": lost})
        if self.c.running:
            self.stage_empty(peer.stage)

    def remove(self, name: str) -> tuple[PeerHandle, int]:
        """Take a peer out of the run; its credited samples go back to the ledger."""
        peer = self.peers.pop(name, None)
        if peer is None:
            raise KeyError(f"no live peer named {name!r}; live peers: {sorted(self.peers)}")
        del self._epochs[name]
        self.emulates.pop(name, None)
        peer.kill()
        lost = self.c.ledger.peer_lost(name)
        self.c.cond.notify_all()
        return peer, lost

    def stop_all(self, crash: bool) -> None:
        """Crash every peer, or close each after its queued requests, without the lock (a slow boundary may hold it)."""
        for p in list(self.peers.values()):
            (p.kill if crash else p.close)()

    def evict(self, name: str, reason: str, peer: PeerHandle | None = None) -> None:
        """Kill a peer for a fault, unless it is already gone (or the run is over, or the peer under `name` is no
        longer `peer`, the one found at fault)."""
        with self.c.lock:
            if name in self.peers and peer in (None, self.peers[name]) and not self.c.closed:
                self._kill(name, reason)
