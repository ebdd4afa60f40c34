"""One attempt at one step of a synchronous pipeline.

Every lane runs its share of the step's microbatches through its stages in schedule order: one
thread per (stage, lane) sends that peer its requests in turn, and activations and their gradients
pass between stages through a `Mailbox`. Each peer stashes what its backward needs and adds its
parameter gradients to its own sums (`StagePeer`). A peer's death breaks the attempt: every thread
stops, and the core recomputes the step from its start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labkit.executors.pipeline.links import StageLinks
from labkit.executors.pipeline.peers import StagePort
from labkit.pipeline.schedule import BACKWARD, FORWARD, deal, stage_order
from labkit.runtime.peer import PeerDied
from labkit.swarm.ledger import AttemptKey

# (lane, stage, peer, kind, bytes sent and received, seconds, microbatch, seconds on the emulated link of
# what it handed on): one request, answered
HopReport = Callable[[int, int, str, str, int, float, int, float], None]


class Broken(RuntimeError):
    """The attempt cannot finish: a peer died, or the run stops."""


class Mailbox:
    """What the stages of an attempt hand each other, by key; broken once, for every reader."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.items: dict[Hashable, Any] = {}
        self.broken: BaseException | None = None

    def put(self, key: Hashable, value: Any) -> None:
        with self.cond:
            self.items[key] = value
            self.cond.notify_all()

    def get(self, key: Hashable) -> Any:
        """The value put under `key`, once it is there; `Broken` if the attempt breaks first."""
        with self.cond:
            while key not in self.items and self.broken is None:
                self.cond.wait()
            if self.broken is not None:
                raise Broken(f"the step's attempt broke: {self.broken}")
            return self.items.pop(key)

    def break_(self, why: BaseException) -> None:
        """End the attempt: every reader waiting or to come raises `Broken` (the first reason stays)."""
        with self.cond:
            if self.broken is None:
                self.broken = why
            self.cond.notify_all()


@dataclass(frozen=True)
class Outcome:
    """What a finished attempt measured: each microbatch's loss, each peer's busy seconds, its own seconds."""

    losses: dict[int, float]
    busy: list[float]
    seconds: float


def _nbytes(*tensors: Any) -> int:
    return sum(t.nbytes for t in tensors if t is not None)


class Attempt:
    """One attempt at a step: `grid[stage][lane]` = (peer name, port); `batches[mb]` = (inputs, targets)."""

    def __init__(self, grid: Sequence[Sequence[tuple[str, StagePort]]], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 *, schedule: str, scale: float, codec: str, step: int, attempt: int, report: HopReport,
                 links: StageLinks | None = None) -> None:
        self.grid, self.batches, self.schedule, self.scale, self.codec = grid, batches, schedule, scale, codec
        self.links = links  # the emulated links between stages (None: handed on at once)
        self.step, self.attempt, self.report = step, attempt, report
        self.box = Mailbox()
        self.shares = deal(len(batches), len(grid[0]))
        self.losses: dict[int, float] = {}
        self.busy = [[0.0] * len(grid[0]) for _ in grid]

    def key(self, mb: int) -> AttemptKey:
        """What microbatch `mb`'s activations and gradient sums are kept under at the peers."""
        return (self.step, mb, self.attempt)

    def run(self) -> Outcome:
        """Drive every (stage, lane) to the end; `Broken` if a peer died (or `stop` was called),
        and any other error raised by a thread as it is (a bug)."""
        start = time.perf_counter()
        threads = [threading.Thread(target=self._drive, args=(stage, lane), name=f"pipeline-s{stage}l{lane}",
                                    daemon=True) for stage in range(len(self.grid)) for lane in range(len(self.grid[0]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        broken = self.box.broken
        if isinstance(broken, (PeerDied, Broken)):
            raise Broken(str(broken)) from broken
        if broken is not None:
            raise broken
        return Outcome(dict(self.losses), [b for row in self.busy for b in row], time.perf_counter() - start)

    def stop(self, why: str) -> None:
        self.box.break_(Broken(why))

    def _drive(self, stage: int, lane: int) -> None:
        try:
            for kind, index in stage_order(self.schedule, len(self.grid), stage, len(self.shares[lane])):
                self._request(stage, lane, kind, self.shares[lane][index])
        except BaseException as exc:  # the attempt ends for every thread; `run` sorts death from bug
            self.box.break_(exc)

    def _request(self, stage: int, lane: int, kind: str, mb: int) -> None:
        """Run `kind` of microbatch `mb` on the peer at (stage, lane), and pass on what it returns."""
        name, port = self.grid[stage][lane]
        inputs, targets = self.batches[mb]
        samples, key, link = inputs.shape[0], self.key(mb), 0.0
        if kind == BACKWARD:
            grad = self.box.get(("grad", stage, mb))
            start = time.perf_counter()
            out = port.request("backward", key, grad, True, samples, self.codec)
            sent = _nbytes(grad, out)
        else:
            x = inputs if stage == 0 else self.box.get(("act", stage, mb))
            start = time.perf_counter()
            if kind == FORWARD:
                out = port.request("forward", key, x, True, self.codec)
                link = self._hand(stage, stage + 1, lane, ("act", stage + 1, mb), out)
            else:  # the last stage: forward, loss and backward in one request
                self.losses[mb], out = port.request("loss", key, x, targets, self.scale, True, samples, self.codec)
            sent = _nbytes(x, out)
        seconds = time.perf_counter() - start
        if kind != FORWARD and stage > 0:
            link = self._hand(stage, stage - 1, lane, ("grad", stage - 1, mb), out)
        self.busy[stage][lane] += seconds
        self.report(lane, stage, name, kind, sent, seconds, mb, link)

    def _hand(self, source: int, target: int, lane: int, key: Hashable, value: Any) -> float:
        """Hand `value` to `lane`'s peer at stage `target`: at once, or once its emulated link carried
        it; the link's seconds."""
        if self.links is None:
            self.box.put(key, value)
            return 0.0
        return self.links.hand(source, target, lane, value, lambda: self.box.put(key, value))
