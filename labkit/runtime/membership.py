"""Who serves which stage: the registry of live peers and the verbs that change it.

A part of the `Coordinator` (whose lock, ledger and committed states it uses): peers join with a
neighbour's state, crash or are evicted (their credited samples go back to the ledger), move
between stages, and Algorithm 2 picks moves every `rebalance_period` seconds. The registry is
the in-process directory trainers route over; on Dask the DHT mirrors it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labkit import events
from labkit.runtime.ports import PeerHandle, RunEnded
from labkit.swarm.rebalance import choose_move, join_stage

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator


class Membership:
    """The live peers of one run and the verbs that add, remove and move them."""

    def __init__(self, coordinator: Coordinator, bounds: list[tuple[int, int]]) -> None:
        self.c = coordinator
        self.bounds = bounds  # (first block, blocks) per stage
        self.peers: dict[str, PeerHandle] = {}
        self._epochs: dict[str, int] = {}  # announce epoch of each name (a rebuilt peer is re-announced)
        self._counter = [0] * coordinator.cfg.stages

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

    def spawn(self, stage: int, state: dict[str, Any]) -> str:
        """Start the next peer of `stage` with `state`, before the run starts; returns its name."""
        name = self._next_name(stage)
        self._enter(name, self.c.factory.start_peer(name, stage, state, source=None, delay=0.0, running=False))
        return name

    def _next_name(self, stage: int) -> str:
        self._counter[stage] += 1
        return f"s{stage}p{self._counter[stage] - 1}"

    def _enter(self, name: str, peer: PeerHandle) -> None:
        """`peer` is in the run (lock held): trainers route to it, the ledger may credit it."""
        self.peers[name] = peer
        self._epochs[name] = 0
        self.c.emit(events.peer(self.c.clock(), peer=name, stage=peer.stage, state="joined", queue=0))

    def rebuild(self, bounds: list[tuple[int, int]]) -> None:
        """Replace every peer by one of the same name holding its stage's committed state under
        the new `bounds` (a layer split, applied at a step boundary with nothing in flight)."""
        self.bounds = bounds
        for name, old in list(self.peers.items()):
            old.close()
            self.peers[name] = self.c.factory.start_peer(name, old.stage, self.c.snapshots[old.stage], source=None,
                                                         delay=old.delay, running=self.c.running)
            if self.c.running:
                self.c.factory.admit(self.peers[name])

    # -- verbs -------------------------------------------------------------------------------
    def add_peer(self, stage: int | None = None) -> str:
        """Start a peer on `stage` (None: the stage Algorithm 2 picks) with a neighbour's state.

        The start (a worker's imports, the model, the state download: seconds on Dask) runs
        without the coordinator's lock, so steps and faults go on meanwhile; the peer enters
        under the lock, with the state committed since if a step was taken meanwhile."""
        c = self.c
        with c.lock:
            c.live_or_raise("add_peer")
            if stage is None:
                stage = join_stage({p.name: (p.stage, p.queue_length) for p in self.peers.values()}, c.cfg.stages)
            if not (isinstance(stage, int) and 0 <= stage < c.cfg.stages):
                raise ValueError(f"stage={stage!r} is not allowed: an integer in [0, {c.cfg.stages - 1}] or None")
            name, step, bounds, state = self._next_name(stage), c.ledger.step, self.bounds, c.snapshots[stage]
            neighbours = self.live(stage)
        try:
            peer = c.factory.start_peer(name, stage, None if neighbours else state,
                                        source=neighbours[0] if neighbours else None, delay=0.0, running=c.running)
        except Exception:
            if not neighbours:
                raise
            # the neighbour (or the worker) may have died during the download: the committed state, afresh
            peer = c.factory.start_peer(name, stage, state, source=None, delay=0.0, running=c.running)
        with c.lock:
            try:
                c.live_or_raise("add_peer")
                if self.bounds != bounds:
                    raise RuntimeError(f"the layer split changed while {name} started: add it again")
                if c.ledger.step != step:
                    peer.call("load_state", c.snapshots[stage]).result(c.cfg.peer_timeout)
            except Exception:
                peer.kill()
                raise
            self._enter(name, peer)
            if stage in c.paused:
                c.paused.discard(stage)
                if not c.paused:
                    c.emit(events.run(c.clock(), state="resumed", reason=f"{name} joined stage {stage}"))
            c.cond.notify_all()
        c.factory.admit(peer)
        return name

    def kill_peer(self, name: str) -> None:
        """Crash a peer: its queue, stashed activations and accumulated gradients are gone."""
        with self.c.lock:
            self.c.live_or_raise("kill_peer")
            self._kill(name, "killed")

    def _kill(self, name: str, reason: str) -> None:
        peer, lost = self._remove(name)
        self.c.emit(events.peer(self.c.clock(), peer=name, stage=peer.stage, state="killed", queue=0)
                    | {"reason": reason, "lost_samples": lost})

    def move_peer(self, name: str, stage: int) -> str:
        """Move a peer to another stage (Algorithm 2's move, or on demand): it stops serving its
        stage, whose un-synced gradients it held are recomputed elsewhere, and starts serving `stage`
        with that stage's state from a neighbour, under a new name (which is returned)."""
        c = self.c
        with c.lock:
            peer = self.live_peer(name, "move_peer")
            if not (isinstance(stage, int) and 0 <= stage < c.cfg.stages) or stage == peer.stage:
                raise ValueError(f"stage={stage!r} is not allowed: another stage in [0, {c.cfg.stages - 1}]")
            if len(self.live(peer.stage)) < 2:
                raise ValueError(f"moving {name} would leave stage {peer.stage} without peers")
            _, lost = self._remove(name)
        new = self.add_peer(stage)
        c.emit(events.peer(c.clock(), peer=name, stage=peer.stage, state="moved", queue=0)
               | {"to": new, "to_stage": stage, "lost_samples": lost})
        return new

    def _remove(self, name: str) -> tuple[PeerHandle, int]:
        """Take a peer out of the run; its credited samples go back to the ledger."""
        peer = self.peers.pop(name, None)
        if peer is None:
            raise KeyError(f"no live peer named {name!r}; live peers: {sorted(self.peers)}")
        del self._epochs[name]
        peer.kill()
        lost = self.c.ledger.peer_lost(name)
        self.c.cond.notify_all()
        return peer, lost

    def rebalance(self) -> str | None:
        """One round of Algorithm 2 over the live peers' queue lengths; the new name if a peer moved."""
        with self.c.lock:
            self.c.live_or_raise("rebalance")
            move = choose_move({p.name: (p.stage, p.queue_length) for p in self.peers.values()}, self.c.cfg.stages)
            return None if move is None else self.move_peer(move.peer, move.target)

    def rebalance_loop(self) -> None:
        """Algorithm 2 every `rebalance_period` seconds until the run stops."""
        while not self.c.stopped.wait(self.c.cfg.rebalance_period):
            try:
                self.rebalance()
            except (KeyError, ValueError) as exc:  # the chosen peer left meanwhile: skip this round
                self.c.emit(events.setting(self.c.clock(), name="rebalance_skipped", value=str(exc)))
            except RunEnded:
                return

    def timed_out(self, name: str, may_have_accumulated: bool) -> None:
        """A trainer gave up on a peer. If the request may have accumulated a gradient the ledger
        never credited, the peer is evicted (a straggler) so that no sample is counted twice."""
        with self.c.lock:
            peer = self.peers.get(name)
            if peer is None:
                return
            self.c.emit(events.peer(self.c.clock(), peer=name, stage=peer.stage, state="banned",
                                    queue=peer.queue_length))
            if may_have_accumulated:
                self.evict(name, "timeout during backward")

    def drop_gradients(self, name: str, reason: str) -> None:
        """A peer holds gradients no credit will come for: it drops every accumulated gradient
        (queued behind whatever reached it first) and the ledger withdraws its credits, so those
        samples are recomputed. Its parameters are untouched, so it serves on: evicting it could
        leave a stage with no peer. Evicted instead if it fails to drop them."""
        with self.c.lock:
            peer = self.peers.get(name)
            if peer is None or self.c.closed:
                return
            try:
                peer.call("clear_gradients").result(timeout=self.c.cfg.peer_timeout)
            except Exception as exc:
                self.evict(name, f"{reason}, and dropping them failed: {type(exc).__name__}: {exc}")
                return
            lost = self.c.ledger.withdraw(name)
            self.c.emit(events.setting(self.c.clock(), name="gradients_dropped",
                                       value=f"{name}: {reason}; {lost} samples to recompute"))

    def evict(self, name: str, reason: str) -> None:
        """Kill a peer for a fault, unless it is already gone (or the run is over)."""
        with self.c.lock:
            if name in self.peers and not self.c.closed:
                self._kill(name, reason)
