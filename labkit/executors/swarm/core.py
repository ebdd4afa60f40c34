"""SWARM's core: the coordinator (ledger, membership, sync schedule, step boundary), as the one
run shell drives it. The peers and trainers are wherever the coordinator's `PeerFactory` puts them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from labkit import events
from labkit.config import RunConfig, SyncConfig
from labkit.runtime import moves
from labkit.runtime.coordinator import Coordinator
from labkit.wire import get_codec


class SwarmCore:
    """A `RunCore` over `coordinator`; `on_close` releases what the backend holds for it."""

    writes_checkpoints = True  # its peers write their stages' shards (runtime/shards.py)

    def __init__(self, coordinator: Coordinator, dashboard: str | None = None,
                 on_close: tuple[Callable[[], Any], ...] = ()) -> None:
        self.c, self.dashboard, self._on_close = coordinator, dashboard, on_close

    @property
    def cond(self) -> threading.Condition:
        return self.c.cond

    @property
    def stopping(self) -> bool:
        return self.c.stopping

    @property
    def finished(self) -> threading.Event:
        return self.c.finished

    @property
    def error(self) -> BaseException | None:
        return self.c.error

    @property
    def diverged(self) -> str | None:
        return self.c.diverged

    @property
    def step_hooks(self) -> list[Callable[[int], None]]:
        return self.c.step_hooks

    @property
    def step(self) -> int:
        """The step of the committed state (once stopped: of the state it stopped with)."""
        return self.c.ledger.step if self.c.final_step is None else self.c.final_step

    def committed(self) -> tuple[RunConfig, list[dict[str, Any]]]:
        """The config with the layer split and sync mode in force, and every stage's committed state."""
        return self.c.cfg.replace(sync=self.c.schedule.cfg), self.c.committed_states()

    def consistent(self) -> bool:
        """With DiLoCo, only at an outer-step boundary does every peer hold the global parameters."""
        return self.c.schedule.inner == 0

    def start(self) -> None:
        self.c.start()

    def stop(self) -> None:
        self.c.stop()

    def join(self, timeout: float) -> None:
        self.c.join(timeout)

    def close(self) -> None:
        for release in self._on_close:
            try:
                release()
            except Exception:  # already gone: nothing to release
                pass

    def state(self) -> dict[str, Any]:
        return self.c.state()

    # -- the verbs -------------------------------------------------------------------------------
    def kill_peer(self, name: str) -> None:
        self.c.members.kill_peer(name)

    def add_peer(self, stage: int | None) -> str:
        return self.c.members.add_peer(stage)

    def move_peer(self, name: str, stage: int) -> str:
        return moves.move_peer(self.c.members, name, stage)

    def rebalance(self) -> str | None:
        return moves.rebalance(self.c.members)

    def set_layer_split(self, split: tuple[int, ...]) -> None:
        """Re-cut the model into `split` blocks per stage at the next step boundary."""
        c = self.c
        cfg = c.cfg.replace(layer_split=tuple(split))  # validates: ConfigError names the field
        with c.lock:
            c.live_or_raise("set_layer_split")
            diloco = c.schedule.cfg.mode != "allreduce" or c.schedule.pending is not None
            if diloco or cfg.delayed_updates or cfg.model.share_layers:
                raise ValueError("set_layer_split is not allowed with DiLoCo (in force or requested), delayed updates "
                                 "or shared layers: it needs one optimizer state per parameter, identical on every peer")
            c.new_split = cfg.layer_split
            c.emit(events.setting(c.clock(), name="layer_split", value=list(cfg.layer_split)))

    def set_peer_delay(self, name: str, seconds: float) -> None:
        self.c.members.live_peer(name, "set_peer_delay").set_delay(seconds)

    def peer_state(self, name: str) -> dict[str, Any]:
        return self.c.members.live_peer(name, "peer_state").call("state").result()

    def set_compression(self, codec: str) -> None:
        """Use `codec` for every hop from now on (a microbatch in flight may mix codecs; each
        tensor carries the name of the codec that encoded it)."""
        get_codec(codec)
        with self.c.lock:
            self.c.live_or_raise("set_compression")
            self.c.codec = codec
            self.c.emit(events.setting(self.c.clock(), name="codec", value=codec))

    def set_sync(self, sync: SyncConfig) -> None:
        """Switch between all-reduce and DiLoCo at the next boundary where the current mode can stop."""
        with self.c.lock:
            self.c.live_or_raise("set_sync")
            self.c.schedule.request(sync)
            self.c.emit(events.setting(self.c.clock(), name="sync", value=sync.mode))
