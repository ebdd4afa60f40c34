"""An in-memory transport for unit tests: peers without a model, each serving on its own thread.

`FakePeers` is a `PeerFactory` whose peers hold no model: a test plays the trainers itself
(`FakePeer.accumulate` stands for the backward passes) and drives the coordinator's ledger and
step boundary directly. A `FakePeer` takes the boundary's requests with the real peer-side code
(`StepTaking`: the attempt check, the ring among its stage's peers, the step kept until
`commit_step`); its "step" only records what it was given.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import torch

from labkit.runtime.peer import PeerDied
from labkit.runtime.ring import IMMEDIATE, Mailbox, deliver
from labkit.runtime.stage_step import StepTaking, flatten


class FakeOuter:
    """DiLoCo's outer state, reduced to what the boundary asks of it: a set pseudo-gradient."""

    def __init__(self, peer: FakePeer) -> None:
        self.peer, self.round_samples = peer, 0

    def pseudo_gradient(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.peer.pseudo


class FakePeer(StepTaking):
    """A peer of `stage` that records the steps it is given; `fail_on` methods raise."""

    worker = "fake"
    queue_length = 0

    def __init__(self, name: str, stage: int, state: dict[str, Any], diloco: bool) -> None:
        self.name, self.stage, self.state_, self.delay = name, stage, state, 0.0
        self.accum: list[torch.Tensor] = [torch.zeros(2)]
        self.params = [torch.zeros(2)]
        self.attempts: dict[tuple[int, int, int], int] = {}  # attempt key -> samples in `accum`
        self.outer = FakeOuter(self) if diloco else None
        self.pseudo = [torch.zeros(2)]
        self.applied: list[tuple[str, Any]] = []  # (method, argument) of every step it took
        self.fail_on: set[str] = set()
        self.alive = True
        self.mailbox = Mailbox()
        self.cfg = SimpleNamespace(peer_timeout=5.0)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"fake-{name}")

    @property
    def contact(self) -> FakePeer:
        return self

    def dial(self, contact: FakePeer) -> FakePeer:
        return contact

    @property
    def samples(self) -> int:
        return sum(self.attempts.values())

    @property
    def flat_accum(self) -> torch.Tensor:
        return flatten(self.accum)

    def accumulate(self, grad: list[float], samples: int, attempt: tuple[int, int, int]) -> None:
        """What a backward pass of `attempt` does: add a gradient for `samples` samples."""
        self.accum = [g + torch.tensor(v) for g, v in zip(self.accum, [grad])]
        self.attempts[attempt] = self.attempts.get(attempt, 0) + samples

    def call(self, method: str, *args: Any) -> Future:
        if method in IMMEDIATE and self.alive:
            deliver(self.mailbox, method, args, same_process=True)
            done: Future = Future()
            done.set_result(None)
            return done
        return self._thread.submit(self._serve, method, args)

    def _serve(self, method: str, args: tuple) -> Any:
        if not self.alive:
            raise PeerDied(self.name)
        if method in self.fail_on:
            raise ConnectionError(f"{self.name} fails on {method}")
        return getattr(self, method)(*args)

    # -- what the boundary's requests call -------------------------------------------------------
    def clear_gradients(self) -> None:
        self.accum, self.attempts = [torch.zeros(2)], {}

    def optimizer_step(self, grads: list[torch.Tensor], step: int) -> None:
        self.applied.append(("optimizer_step", grads))
        self.clear_gradients()

    def local_step(self, grads: list[torch.Tensor], samples: int, step: int) -> None:
        self.applied.append(("local_step", samples))
        self.outer.round_samples += samples
        self.clear_gradients()

    def outer_step(self, delta: list[torch.Tensor]) -> None:
        self.applied.append(("outer_step", delta))
        self.outer.round_samples = 0

    def ensure_diloco(self, sync: Any) -> None:
        self.applied.append(("ensure_diloco", sync.mode))

    def drop_stash(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {**self.state_, "steps_taken": len(self.applied)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.state_ = dict(state)

    def copy_from(self, contact: FakePeer) -> None:
        """A joiner's catch-up: the state of a live neighbour."""
        self.load_state(contact.state())

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds

    def kill(self) -> None:
        self.alive = False
        self.mailbox.close(f"{self.name} died")

    def close(self) -> None:
        self.alive = False


class FakePeers:
    """A `PeerFactory` of `FakePeer`s and no trainers (the test is the trainer); a step counter
    stands for the clock."""

    def __init__(self) -> None:
        self.coordinator: Any = None
        self.made: dict[str, FakePeer] = {}
        self.places: dict[str, str | None] = {}  # name -> the peer whose place in a world it took
        self.admitted: list[str] = []
        self.started_from: dict[str, Any] = {}  # name -> the state (or shard path) it started from, or its source's name
        self.starting: Any = None  # a callable run inside start_peer: a test holds a start there
        self.suspected: list[str] = []  # peers a trainer's timeout asked the backend to check
        self.ticks = 0.0

    def clock(self) -> float:
        self.ticks += 1.0
        return self.ticks

    def bind(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | str | None, *, source: FakePeer | None,
                   delay: float, running: bool, emulates: str | None = None) -> FakePeer:
        self.started_from[name] = source.name if source is not None else state
        state = source.state() if source is not None else state if isinstance(state, dict) else {"shard": state}
        peer = FakePeer(name, stage, dict(state), self.coordinator.cfg.sync.mode == "diloco")
        if self.starting is not None:
            self.starting()
        self.made[name] = peer
        self.places[name] = emulates
        return peer

    def admit(self, peer: FakePeer) -> None:
        self.admitted.append(peer.name)

    def start_trainers(self, count: int) -> list:
        return []

    def started(self) -> None:
        pass

    def suspect(self, name: str) -> None:
        self.suspected.append(name)

    def close(self) -> None:
        pass
