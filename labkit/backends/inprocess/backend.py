"""Peers and trainers as threads of this process: the in-process `PeerFactory`.

A request to a peer goes on the peer's own queue (the in-process transport); trainers take work
from the coordinator and find peers in its registry directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit.config import RunConfig
from labkit.data import Corpus, WindowSampler
from labkit.model.assembly import stage_module
from labkit.runtime.coordinator import Coordinator
from labkit.runtime.peer import StagePeer
from labkit.runtime.ports import PeerHandle
from labkit.runtime.shards import stage_state
from labkit.runtime.trainer import Trainer, trainer_name


class ThreadPeers:
    """A `PeerFactory` whose peers and trainers are threads of this process."""

    def __init__(self, cfg: RunConfig, corpus: Corpus, clock: Callable[[], float]) -> None:
        self.sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
        self.clock = clock  # seconds since the run started
        self.coordinator: Coordinator | None = None

    def bind(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | str | None, *, source: PeerHandle | None,
                   delay: float, running: bool, emulates: str | None = None) -> StagePeer:
        """A peer thread holding `state`, or the state it downloads from the live neighbour `source`."""
        cfg = self.coordinator.cfg  # with the layer split in force
        state = source.call("state").result() if source is not None else stage_state(state)
        peer = StagePeer(name, stage, stage_module(cfg, stage, state["params"]), cfg, emulates=emulates)
        peer.load_state(state)
        peer.set_delay(delay)
        return peer

    def admit(self, peer: StagePeer) -> None:
        """A peer thread serves from the moment it exists: nothing to do."""

    def start_trainers(self, count: int) -> list[Trainer]:
        c = self.coordinator
        return [Trainer(trainer_name(i), c.cfg, c, c, self.sampler) for i in range(count)]

    def started(self) -> None:
        """Peer threads serve from the moment they exist: nothing to wait for."""

    def suspect(self, name: str) -> None:
        """A peer thread cannot hang apart from its process: a slow one is only banned."""

    def close(self) -> None:
        """Nothing outlives the peers here."""

