"""Who serves which stage: the registry of live peers and the verbs that change it.

A mixin of `InProcessSwarm` (which owns the lock, the ledger and the snapshots it uses): peers
join with a neighbour's state, crash or are evicted (their credited samples go back to the
ledger), move between stages, and Algorithm 2 picks moves every `rebalance_period` seconds.
The registry is the in-process stand-in for the DHT that trainers route over.
"""

from __future__ import annotations

from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.model import Stage, boundary_spec, build_stage, init_run_state, stage_bounds
from labkit.runtime.peer import StagePeer
from labkit.swarm.rebalance import choose_move, join_stage


def stage_module(cfg: RunConfig, stage: int, params: dict[str, torch.Tensor]) -> Stage:
    """Stage `stage` of `cfg`'s model under its layer split, holding `params`."""
    first, count = stage_bounds(cfg.layer_split)[stage]
    return build_stage(cfg.model, first, count, params, boundary_spec(cfg.compression, stage, cfg.stages))


def initial_states(cfg: RunConfig) -> list[dict[str, Any]]:
    """Every stage's state at step 0 (`cfg.seed`'s initialization, no optimizer state yet)."""
    full = init_run_state(cfg.model, cfg.seed, cfg.compression, cfg.stages)
    return [{"params": stage_module(cfg, stage, full).state_dict(), "optimizer": None} for stage in range(cfg.stages)]


class Membership:
    """Peer registry and membership verbs; expects the swarm's lock, ledger, config and events."""

    # -- the registry (what trainers route over) ----------------------------------------------
    def registry(self) -> dict[str, tuple[int, int]]:
        """Live peers: name -> (stage, announce epoch)."""
        with self._lock:
            return {name: (p.stage, self._epochs[name]) for name, p in self._peers.items()}

    def peer(self, name: str) -> StagePeer | None:
        with self._lock:
            return self._peers.get(name)

    def live(self, stage: int) -> list[StagePeer]:
        """Live peers of `stage`, by name."""
        with self._lock:
            return sorted((p for p in self._peers.values() if p.stage == stage), key=lambda p: p.name)

    def _spawn(self, stage: int, state: dict[str, Any], source: Any = None) -> str:
        name = f"s{stage}p{self._counter[stage]}"
        self._counter[stage] += 1
        self._peers[name] = self._make_peer(name, stage, state, source=source)
        self._epochs[name] = 0
        self.emit(events.peer(self.clock(), peer=name, stage=stage, state="joined", queue=0))
        return name

    def _make_peer(self, name: str, stage: int, state: dict[str, Any], delay: float = 0.0, source: Any = None) -> StagePeer:
        """A running peer of `stage` holding `state`, or the state it downloads from the live
        neighbour `source` (the backend decides where the peer runs)."""
        if source is not None:
            state = source.call("state").result()
        peer = StagePeer(name, stage, self._build(stage, state["params"]), self.cfg)
        peer.load_state(state)
        peer.set_delay(delay)
        return peer

    def _build(self, stage: int, params: dict[str, torch.Tensor]) -> Stage:
        return stage_module(self.cfg, stage, params)

    # -- verbs -------------------------------------------------------------------------------
    def add_peer(self, stage: int | None = None) -> str:
        """Start a peer on `stage` (None: the stage Algorithm 2 picks) with a neighbour's state."""
        with self._lock:
            if stage is None:
                stage = join_stage({p.name: (p.stage, p.queue_length) for p in self._peers.values()}, self.num_stages)
            if not (isinstance(stage, int) and 0 <= stage < self.num_stages):
                raise ValueError(f"stage={stage!r} is not allowed: an integer in [0, {self.num_stages - 1}] or None")
            neighbours = self.live(stage)
            name = self._spawn(stage, self.snapshots[stage], source=neighbours[0] if neighbours else None)
            if stage in self._paused:
                self._paused.discard(stage)
                if not self._paused:
                    self.emit(events.run(self.clock(), state="resumed", reason=f"{name} joined stage {stage}"))
            self._cond.notify_all()
            return name

    def kill_peer(self, name: str, reason: str = "killed") -> None:
        """Crash a peer: its queue, stashed activations and accumulated gradients are gone."""
        with self._lock:
            peer, lost = self._remove(name)
            self.emit(events.peer(self.clock(), peer=name, stage=peer.stage, state="killed", queue=0) | {"reason": reason, "lost_samples": lost})

    def move_peer(self, name: str, stage: int) -> str:
        """Move a peer to another stage (Algorithm 2's move, or on demand): it stops serving its
        stage, whose un-synced gradients it held are recomputed elsewhere, and starts serving `stage`
        with that stage's state from a neighbour, under a new name (which is returned)."""
        with self._lock:
            peer = self._peers.get(name)
            if peer is None:
                raise KeyError(f"no live peer named {name!r}; live peers: {sorted(self._peers)}")
            if not (isinstance(stage, int) and 0 <= stage < self.num_stages) or stage == peer.stage:
                raise ValueError(f"stage={stage!r} is not allowed: another stage in [0, {self.num_stages - 1}]")
            if len(self.live(peer.stage)) < 2:
                raise ValueError(f"moving {name} would leave stage {peer.stage} without peers")
            _, lost = self._remove(name)
            new = self.add_peer(stage)
            self.emit(events.peer(self.clock(), peer=name, stage=peer.stage, state="moved", queue=0) | {"to": new, "to_stage": stage, "lost_samples": lost})
            return new

    def _remove(self, name: str) -> tuple[StagePeer, int]:
        """Take a peer out of the swarm; its credited samples go back to the ledger."""
        peer = self._peers.pop(name, None)
        if peer is None:
            raise KeyError(f"no live peer named {name!r}; live peers: {sorted(self._peers)}")
        del self._epochs[name]
        peer.kill()
        lost = self.ledger.peer_lost(name)
        self._cond.notify_all()
        return peer, lost

    def rebalance(self) -> str | None:
        """One round of Algorithm 2 over the live peers' queue lengths; the new name if a peer moved."""
        with self._lock:
            move = choose_move({p.name: (p.stage, p.queue_length) for p in self._peers.values()}, self.num_stages)
            return None if move is None else self.move_peer(move.peer, move.target)

    def _rebalance_loop(self) -> None:
        while not self._stopped.wait(self.cfg.rebalance_period):
            try:
                self.rebalance()
            except (KeyError, ValueError) as exc:  # the chosen peer left meanwhile: skip this round
                self.emit(events.setting(self.clock(), name="rebalance_skipped", value=str(exc)))

    def peer_timed_out(self, name: str, may_have_accumulated: bool) -> None:
        """A trainer gave up on a peer. If the request may have accumulated a gradient the ledger
        never credited, the peer is evicted (a straggler) so that no sample is counted twice."""
        with self._lock:
            peer = self._peers.get(name)
            if peer is None:
                return
            self.emit(events.peer(self.clock(), peer=name, stage=peer.stage, state="banned", queue=peer.queue_length))
            if may_have_accumulated:
                self._evict(name, "timeout during backward")

    def peer_failed(self, name: str, exc: BaseException) -> None:
        """A peer raised on a request: it is faulty, so it is evicted like a crashed peer."""
        self._evict(name, f"error: {type(exc).__name__}: {exc}")

    def _evict(self, name: str, reason: str) -> None:
        """Kill a peer for a fault, unless it is already gone."""
        with self._lock:
            if name in self._peers:
                self.kill_peer(name, reason=reason)
