"""A pipeline peer as the core sees it, and the in-process place peers live.

A peer is one replica of one stage: a `StagePeer` (labkit/runtime/peer.py: the stage's module,
its optimizer, its stash and accumulated gradients, served by a thread of its own). The core
sends it `StagePeer` requests by name (forward, backward, loss, gradients, optimizer_step, state,
load_state, ...) and waits for each; a request to a killed peer fails with `PeerDied`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from dataclasses import dataclass
from typing import Any, Protocol

from labkit.config import RunConfig
from labkit.model.assembly import stage_module
from labkit.runtime.peer import StagePeer


class StagePort(Protocol):
    """One pipeline peer, in this process or an actor on a Dask worker."""

    worker: str  # where it runs ("local", or a Dask worker's address)

    def request(self, method: str, *args: Any) -> Any:
        """`StagePeer.<method>(*args)` on the peer's thread, waited for; `PeerDied` once it is gone."""

    def set_delay(self, seconds: float) -> None:
        """Hold every later data request `seconds` longer (a slow device)."""

    def kill(self) -> None:
        """Crash: whatever it held is gone, and every waiting request fails at once (never blocks)."""


class StageHost(Protocol):
    """Where a run's peers live: threads of this process, or actors on the workers of a Dask cluster."""

    dashboard: str | None  # where its workers are watched (Dask's dashboard), if anywhere
    left_out: Mapping[str, str]  # workers it leaves unused (hung at the launch), each with why

    def spawn(self, name: str, stage: int, state: dict[str, Any], place: str) -> StagePort:
        """Start peer `name` of `stage` holding `state` (parameters and optimizer state), in a world
        in peer `place`'s region on its device (its lane's first peer's)."""

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Call `lost(peer, reason)` when a peer's process is seen gone, whatever it is doing."""

    def close(self) -> None:
        """Release what the peers used."""


def stage_peer(cfg: RunConfig, name: str, stage: int, state: dict[str, Any], device: str = "cpu",
               place: str | None = None) -> StagePeer:
    """A `StagePeer` of `stage` holding `state`: its parameters and, once it has one, its optimizer's
    state; in a world on peer `place`'s virtual device (default its own name's)."""
    peer = StagePeer(name, stage, stage_module(cfg, stage, dict(state["params"])), cfg, device, emulates=place)
    peer.load_state(state)
    return peer


class LocalStage:
    """A `StagePort` on a `StagePeer` of this process."""

    worker = "local"

    def __init__(self, peer: StagePeer) -> None:
        self.peer = peer

    def request(self, method: str, *args: Any) -> Any:
        return self.peer.call(method, *args).result()

    def set_delay(self, seconds: float) -> None:
        self.peer.set_delay(seconds)

    def kill(self) -> None:
        self.peer.kill()


class LocalStages:
    """Peers as `StagePeer`s of this process, each served by a thread of its own."""

    dashboard = None  # threads of this process: no dashboard
    left_out: Mapping[str, str] = MappingProxyType({})  # no workers to leave out

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    def spawn(self, name: str, stage: int, state: dict[str, Any], place: str) -> LocalStage:
        return LocalStage(stage_peer(self.cfg, name, stage, state, place=place))

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Nothing to watch: a peer here leaves only when it is killed."""

    def close(self) -> None:
        """Nothing to release (the core kills its peers)."""


@dataclass
class Peer:
    """One peer of the pipeline: its place (stage, lane), its port, and whether it is alive."""

    name: str
    stage: int
    lane: int
    port: StagePort
    delay: float = 0.0
    alive: bool = True

    def describe(self) -> dict[str, Any]:
        return {"peer": self.name, "lane": self.lane, "queue": 0, "worker": self.port.worker, "delay": self.delay}


def kept(state: dict[str, Any]) -> dict[str, Any]:
    """A peer's state as a checkpoint's stage keeps it: parameters and optimizer state."""
    return {"params": state["params"], "optimizer": state["optimizer"]}
