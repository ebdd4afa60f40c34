"""An in-memory transport for unit tests: peers that answer at once, on the caller's thread.

`FakePeers` is a `PeerFactory` whose peers hold no model: a test plays the trainers itself
(`FakePeer.accumulate` stands for the backward passes) and drives the coordinator's ledger and
step boundary directly, with no thread and no torch model.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import torch

from labkit.runtime.peer import PeerDied


class FakePeer:
    """A peer of `stage` that records the requests it is sent; `fail_on` methods raise."""

    worker = "fake"
    queue_length = 0

    def __init__(self, name: str, stage: int, state: dict[str, Any]) -> None:
        self.name, self.stage, self.state_, self.delay = name, stage, state, 0.0
        self.grads: list[torch.Tensor] = [torch.zeros(2)]
        self.attempts: dict[tuple[int, int, int], int] = {}  # attempt key -> samples in `grads`
        self.round_samples = 0  # DiLoCo: samples since the last outer step
        self.pseudo = [torch.zeros(2)]
        self.applied: list[tuple[str, Any]] = []  # (method, argument) of every step it took
        self.fail_on: set[str] = set()
        self.alive = True

    @property
    def samples(self) -> int:
        return sum(self.attempts.values())

    def accumulate(self, grad: list[float], samples: int, attempt: tuple[int, int, int]) -> None:
        """What a backward pass of `attempt` does: add a gradient for `samples` samples."""
        self.grads = [g + torch.tensor(v) for g, v in zip(self.grads, [grad])]
        self.attempts[attempt] = self.attempts.get(attempt, 0) + samples

    def call(self, method: str, *args: Any) -> Future:
        future: Future = Future()
        try:
            if not self.alive:
                raise PeerDied(self.name)
            if method in self.fail_on:
                raise ConnectionError(f"{self.name} fails on {method}")
            future.set_result(getattr(self, method)(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    # -- requests ------------------------------------------------------------------------------
    def gradients(self) -> tuple[list[torch.Tensor], dict[tuple[int, int, int], int]]:
        return self.grads, dict(self.attempts)

    def clear_gradients(self) -> None:
        self.grads, self.attempts = [torch.zeros(2)], {}

    def optimizer_step(self, grads: list[torch.Tensor], step: int) -> None:
        self.applied.append(("optimizer_step", grads))
        self.clear_gradients()

    def local_step(self, grads: list[torch.Tensor], samples: int, step: int) -> None:
        self.applied.append(("local_step", samples))
        self.round_samples += samples
        self.clear_gradients()

    def pseudo_gradient(self) -> tuple[list[torch.Tensor], int]:
        return self.pseudo, self.round_samples

    def outer_step(self, delta: list[torch.Tensor]) -> None:
        self.applied.append(("outer_step", delta))
        self.round_samples = 0

    def ensure_diloco(self, sync: Any) -> None:
        self.applied.append(("ensure_diloco", sync.mode))

    def drop_stash(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {**self.state_, "steps_taken": len(self.applied)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.state_ = dict(state)

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds

    def kill(self) -> None:
        self.alive = False

    def close(self) -> None:
        self.alive = False


class FakePeers:
    """A `PeerFactory` of `FakePeer`s and no trainers (the test is the trainer); a step counter
    stands for the clock."""

    def __init__(self) -> None:
        self.coordinator: Any = None
        self.made: dict[str, FakePeer] = {}
        self.admitted: list[str] = []
        self.starting: Any = None  # a callable run inside start_peer: a test holds a start there
        self.ticks = 0.0

    def clock(self) -> float:
        self.ticks += 1.0
        return self.ticks

    def bind(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | None, *, source: FakePeer | None,
                   delay: float, running: bool) -> FakePeer:
        peer = FakePeer(name, stage, source.state() if source is not None else dict(state))
        if self.starting is not None:
            self.starting()
        self.made[name] = peer
        return peer

    def admit(self, peer: FakePeer) -> None:
        self.admitted.append(peer.name)

    def start_trainers(self, count: int) -> list:
        return []

    def started(self) -> None:
        pass

    def close(self) -> None:
        pass
