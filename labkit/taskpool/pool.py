"""One stage of the task pool paper's parameter-server pipeline as pure bookkeeping, driven by explicit calls
with explicit times (no threads, no clock): an executor calls it from its server threads or
actors, the simulator calls it in virtual time.

Frontal servers (FS) split each microbatch's samples over the live clients by compute
(`forward_ready`); backward servers (BS) list which client produced which slice and route the
gradients back by that list (`backward_ready`). A client that vanishes (`client_lost`, or
`timeout` once a deadline passes) leaves its work to the task pool: its unfinished forwards as
forward tasks, and every slice whose activations or unsent gradients it held as a leftover
backward ("recompute": fetch the activations from the FS, run the forward again, then the
backward). Idle clients take pool work (`next_task`). Only the lost slices are computed again.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from labkit.taskpool.accounting import coverage, repeated_beyond_lost
from labkit.taskpool.segments import Segment, owners, split_by_compute
from labkit.taskpool.tasks import FORWARD_RUNS, Done, Slice, Task, Work

COUNTERS = ("forward_samples", "backward_samples", "lost_samples", "pooled_samples", "discarded_samples")


@dataclass
class _Microbatch:
    produced: list[Slice] = field(default_factory=list)  # the BS list, sorted by start
    credits: list[Slice] = field(default_factory=list)  # backward results; held until flushed
    grad_ready: bool = False
    computed: list[tuple[int, int]] = field(default_factory=list)  # forward runs handed out
    lost: list[tuple[int, int]] = field(default_factory=list)  # forward results lost with a client


def _covered(slices: list[Slice]) -> int:
    return sum(s.end - s.start for s in slices)


def _take(items: list[Work]) -> Work | None:
    """The first backward-side item (1F1B: backward first), else the first forward, else None."""
    for i, work in enumerate(items):
        if work.kind != "forward":
            return items.pop(i)
    return items.pop(0) if items else None


class StagePool:
    """FS, BS, clients and task pool of one pipeline stage, for microbatches of `samples` samples.

    A handed-out task's deadline is `now + grace + slack x cost / speed`, the cost of a forward
    being its samples, a backward `backward_cost` times that and a recompute both; `speed` is the
    client's forward samples per second as it announced on joining.
    """

    def __init__(self, samples: int, frontal: Sequence[str], backward: Sequence[str], *, slack: float = 3.0,
                 grace: float = 1.0, backward_cost: float = 2.0) -> None:
        if samples < 1 or not frontal or not backward:
            raise ValueError("a stage needs samples >= 1, at least one frontal and one backward server")
        if slack < 1 or grace < 0 or backward_cost <= 0:
            raise ValueError(f"need slack >= 1, grace >= 0, backward_cost > 0 (got {slack}, {grace}, {backward_cost})")
        self.samples, self.frontal, self.backward = samples, tuple(frontal), tuple(backward)
        self.slack, self.grace, self.backward_cost = slack, grace, backward_cost
        self.passes = 0
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._speed: dict[str, float] = {}
        self._queue: dict[str, list[Work]] = {}  # work pushed to a client by the FS or BS
        self._pool: list[Work] = []
        self._held: dict[int, Task] = {}
        self._waiting: dict[str, float] = {}  # client -> since when it has queued work and none held
        self._mbs: dict[int, _Microbatch] = {}
        self._ids = 0
        self._repeated_before = 0

    # membership -----------------------------------------------------------------------------
    def client_joined(self, client: str, speed: float, now: float) -> None:
        """`client` serves this stage from `now` at `speed` forward samples per second."""
        if client in self._speed or speed <= 0:
            raise ValueError(f"client {client!r} already live or speed {speed} not > 0")
        self._speed[client], self._queue[client] = float(speed), []

    def set_speed(self, client: str, speed: float) -> None:
        """`client`'s measured forward samples per second: the split of the microbatches entering
        from now on, and its deadlines, follow it (the servers re-split by compute every pass)."""
        if client not in self._speed or not speed > 0:
            raise ValueError(f"client {client!r} not live or speed {speed} not > 0")
        self._speed[client] = float(speed)

    def client_lost(self, client: str, now: float) -> list[Work]:
        """`client` is gone: post everything it held or was given to the pool; returns the posts."""
        if client not in self._speed:
            return []
        del self._speed[client]
        self._waiting.pop(client, None)
        posted = [w if w.kind != "backward" else self._lose(replace(w, kind="recompute"))
                  for w in self._queue.pop(client)]
        for task in [t for t in self._held.values() if t.client == client]:
            del self._held[task.id]
            work = task.work if task.kind == "forward" else replace(task.work, kind="recompute")
            posted.append(self._lose(work))
        for index, mb in self._mbs.items():
            for s in mb.produced:
                if s.client == client and s.held:  # activations stashed for a gradient still to come
                    s.held = False
                    self._lose(Work("recompute", index, s.start, s.end))
            gone = [s for s in mb.credits if s.client == client and s.held]
            mb.credits = [s for s in mb.credits if s not in gone]
            posted += [self._lose(Work("recompute", index, s.start, s.end)) for s in gone]
        self._post(posted)
        return posted

    def timeout(self, now: float) -> list[str]:
        """Declare lost every client past a deadline at `now`; returns them."""
        late = {t.client for t in self._held.values() if now >= t.deadline}
        late |= {c for c in self._waiting if now >= self._waiting_deadline(c)}
        for client in sorted(late):
            self.client_lost(client, now)
        return sorted(late)

    def next_deadline(self) -> float:
        """The earliest time `timeout` could declare a client lost (inf if none)."""
        times = [t.deadline for t in self._held.values()] + [self._waiting_deadline(c) for c in self._waiting]
        return min(times, default=float("inf"))

    # work arriving at the servers ------------------------------------------------------------
    def forward_ready(self, microbatch: int, now: float) -> None:
        """The FS hold `microbatch`'s inputs: split them over the live clients by compute."""
        if microbatch in self._mbs:
            raise ValueError(f"microbatch {microbatch} already entered stage in pass {self.passes}")
        self._mbs[microbatch] = _Microbatch()
        if not self._speed:
            self._post([Work("forward", microbatch, 0, self.samples)])
        for client, start, end in split_by_compute(0, self.samples, self._speed) if self._speed else ():
            self._push(client, Work("forward", microbatch, start, end), now)

    def backward_ready(self, microbatch: int, now: float) -> None:
        """The BS hold `microbatch`'s output gradients: route them back by the BS list."""
        mb = self._mbs[microbatch]
        if mb.grad_ready or _covered(mb.produced) != self.samples:
            raise ValueError(f"microbatch {microbatch}: gradients already routed or forward not complete")
        mb.grad_ready = True
        for s in mb.produced:
            work = Work("backward", microbatch, s.start, s.end)
            if s.held:
                s.held = False
                self._push(s.client, work, now)
            else:
                self._post([replace(work, kind="recompute")])

    # clients --------------------------------------------------------------------------------
    def next_task(self, client: str, now: float) -> Task | None:
        """The next task for an idle live client: its own queued work, else pool work, else None."""
        if client not in self._speed:
            raise ValueError(f"{client!r} is not a live client of this stage")
        self._waiting.pop(client, None)
        work = _take(self._queue[client]) or _take(self._pool)
        if work is None:
            return None
        self._ids += 1
        task = Task(self._ids, client, work, now, now + self.grace + self.slack * self._cost(work) / self._speed[client])
        self._held[task.id] = task
        if work.kind in FORWARD_RUNS:
            self._mbs[work.microbatch].computed.append((work.start, work.end))
            self.counts["forward_samples"] += work.samples
        if work.kind != "forward":
            self.counts["backward_samples"] += work.samples
        return task

    def client_done(self, task: Task, now: float) -> Done:
        """`task`'s result reached the servers at `now`. Results of tasks given up on are dropped."""
        if self._held.get(task.id) is not task:
            self.counts["discarded_samples"] += task.work.samples
            return Done(credited=False)
        del self._held[task.id]
        mb, node = self._mbs[task.microbatch], Slice(task.client, task.start, task.end)
        if task.kind == "forward":
            bisect.insort(mb.produced, node, key=lambda s: s.start)
            done = Done(True, forward_complete=_covered(mb.produced) == self.samples)
        else:
            mb.credits.append(node)
            done = Done(True, backward_complete=_covered(mb.credits) == self.samples)
        self._maybe_waiting(task.client, now)
        return done

    def flush(self, client: str) -> int:
        """`client`'s accumulated gradients reached the servers: its backward results can no
        longer be lost with it. Returns the samples made safe."""
        safe = [s for mb in self._mbs.values() for s in mb.credits if s.client == client and s.held]
        for s in safe:
            s.held = False
        return sum(s.end - s.start for s in safe)

    # state ----------------------------------------------------------------------------------
    def route(self, microbatch: int) -> list[Segment]:
        """The BS list of `microbatch`: (client, start, end) of every forward result, by start."""
        return [(s.client, s.start, s.end) for s in self._mbs[microbatch].produced]

    def frontal_of(self, start: int, end: int) -> list[Segment]:
        """The FS holding [start, end) (activations in, input gradients out), with their parts."""
        return owners(self.samples, self.frontal, start, end)

    def backward_of(self, start: int, end: int) -> list[Segment]:
        """The BS holding [start, end) (outputs in, output gradients out), with their parts."""
        return owners(self.samples, self.backward, start, end)

    def forward_complete(self, microbatch: int) -> bool:
        return _covered(self._mbs[microbatch].produced) == self.samples

    def backward_complete(self, microbatch: int) -> bool:
        return _covered(self._mbs[microbatch].credits) == self.samples

    def credits(self, microbatch: int) -> list[Segment]:
        """(client, start, end) of every backward result of `microbatch` kept so far."""
        return [(s.client, s.start, s.end) for s in self._mbs[microbatch].credits]

    def clients(self) -> dict[str, float]:
        """Live clients and their speeds."""
        return dict(self._speed)

    @property
    def pool_depth(self) -> int:
        return len(self._pool)

    def ready(self) -> bool:
        """Every microbatch of the pass done backward, and no work queued, pooled or held."""
        return (all(_covered(mb.credits) == self.samples for mb in self._mbs.values()) and not self._pool
                and not self._held and not any(self._queue.values()))

    def repeated_beyond_lost(self) -> int:
        """Forward samples run more often than once plus once per loss, over every pass so far."""
        return self._repeated_before + sum(repeated_beyond_lost(mb.computed, mb.lost, self.samples)
                                           for mb in self._mbs.values())

    def forward_runs(self, microbatch: int) -> tuple[int, ...]:
        """How many forward runs each sample of `microbatch` had at this stage in this pass."""
        return tuple(int(x) for x in coverage(self._mbs[microbatch].computed, self.samples))

    def stats(self) -> dict[str, int]:
        """Counters over all passes plus the pool depth and the repeated forward work."""
        return {**self.counts, "pool_depth": self.pool_depth, "repeated_beyond_lost": self.repeated_beyond_lost()}

    def advance(self) -> None:
        """Close a finished pass (the gradients are aggregated) and start the next."""
        if not self.ready():
            raise ValueError(f"pass {self.passes} is not finished")
        self._repeated_before = self.repeated_beyond_lost()
        self._mbs.clear()
        self.passes += 1

    # internals ------------------------------------------------------------------------------
    def _cost(self, work: Work) -> float:
        factor = {"forward": 1.0, "backward": self.backward_cost, "recompute": 1.0 + self.backward_cost}
        return factor[work.kind] * work.samples

    def _lose(self, work: Work) -> Work:
        """Record that `work`'s samples lost a forward run (in flight or its result); returns `work`."""
        self._mbs[work.microbatch].lost.append((work.start, work.end))
        self.counts["lost_samples"] += work.samples
        return work

    def _post(self, works: list[Work]) -> None:
        self._pool += works
        self.counts["pooled_samples"] += sum(w.samples for w in works)

    def _push(self, client: str, work: Work, now: float) -> None:
        self._queue[client].append(work)
        self._maybe_waiting(client, now)

    def _maybe_waiting(self, client: str, now: float) -> None:
        busy = any(t.client == client for t in self._held.values())
        if client in self._speed and self._queue[client] and not busy:
            self._waiting.setdefault(client, now)

    def _waiting_deadline(self, client: str) -> float:
        first = self._queue[client][0]
        return self._waiting[client] + self.grace + self.slack * self._cost(first) / self._speed[client]
