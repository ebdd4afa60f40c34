"""The step boundary: where SWARM's exactness is enforced and every stage takes its step.

`step_boundary` is a function from the run's books (`Books`: a value the coordinator takes under
its lock once the ledger says every microbatch of the step is credited at every stage) to a
`Commit`, which only the coordinator applies. It talks to the peers (the I/O around the decision)
but changes nothing of the coordinator. In six steps:

1. gather  — ask every live peer for its accumulated gradient sum and the attempts it holds;
2. check   — the ledger's one rule (`swarm/ledger.py:reconcile`): keep each sum that holds exactly
   the attempts credited to its peer; a peer holding more (or failing to answer) abandons the
   boundary (the commit drops its sum or evicts it, its credits are recomputed, and the boundary
   runs again); a sum lacking a credited attempt means the accounting broke: the run stops loudly;
3. decide  — the sync schedule says all-reduce, a DiLoCo inner step, an outer step, a switch;
4. reduce  — sum the stage's gradients (or average DiLoCo's pseudo-gradients by samples);
5. apply   — every peer of the stage applies the same step;
6. commit  — the stages' new states, the new layer split, the events, and whether the step
   diverged (a loss or new parameters not finite: then nothing of it is recorded).

A peer that fails while the step is applied is evicted (by the commit) and the survivors go on.
Requests to the peers of all stages go out at once (they may live in other processes), and the
new states are asked for right behind the step itself, each peer's queue keeping the order. The
step event says where the boundary's time went (`BoundaryTimes`): each request's wall seconds and
its slowest peer's queue + compute.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig, SyncConfig
from labkit.runtime.ports import PeerHandle
from labkit.runtime.request_queue import timing
from labkit.swarm.ledger import AttemptKey, reconcile
from labkit.swarm.sync import SyncSchedule, sum_over_peers, weighted_average


@dataclass(frozen=True)
class Books:
    """What the boundary reads of the run, taken under the coordinator's lock."""

    cfg: RunConfig
    step: int  # the step being taken (its number is step + 1)
    loss: float  # the ledger's loss of the step
    credited: list[dict[str, dict[AttemptKey, int]]]  # per stage: peer -> attempts the ledger credits it
    peers: list[list[PeerHandle]]  # per stage: its live peers, by name
    schedule: SyncSchedule  # a copy: the boundary advances it, the commit carries it back
    split: tuple[int, ...] | None  # set_layer_split's request, taken with the step
    clock: Callable[[], float]


@dataclass
class Commit:
    """What one boundary decided; the coordinator applies it (and nothing else changes the run)."""

    step: int
    drop: dict[str, str] = field(default_factory=dict)  # peer -> why: it clears its sum, its credits are recomputed
    evict: dict[str, str] = field(default_factory=dict)  # peer -> why: it failed a request at the boundary
    keep: list[list[str]] = field(default_factory=list)  # per stage, the peers whose sums make the step
    reduced: dict[int, list[Any]] = field(default_factory=dict)  # stage -> the step every peer applied (all-reduce)
    states: dict[int, dict[str, Any]] = field(default_factory=dict)  # stage -> its state after the step
    schedule: SyncSchedule | None = None  # the sync schedule after this boundary (None: no step taken)
    split: tuple[int, ...] | None = None  # the layer split from the next step on, if it changes
    events: list[events.Event] = field(default_factory=list)  # to emit once applied: syncs, then the step if taken
    diverged: str | None = None  # why the step was not committed: the run stops

    @property
    def taken(self) -> bool:
        """The step is committed: record its states, advance the ledger."""
        return self.schedule is not None and self.diverged is None


class BoundaryTimes:
    """Where one boundary's time goes: wall seconds the boundary waited on each request sent to
    the peers (named by its method; the states, asked for behind the step, count from when the
    step's answers were in) and of the coordinator's own reduction, and per request the slowest peer's queue
    + compute (the rest is transport). Reported with the step event as its "boundary"."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.peer_seconds: dict[str, float] = {}

    def add(self, name: str, start: float, futures: Sequence[Future] = ()) -> None:
        """Count the seconds since `start` under `name`, and the slowest of `futures`' peers."""
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        served = [t["queue"] + t["compute"] for t in map(timing, futures) if t]  # a failed request has none
        if served:
            self.peer_seconds[name] = self.peer_seconds.get(name, 0.0) + max(served)

    def report(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "peer_seconds": self.peer_seconds, "total": time.perf_counter() - self.start}


def step_boundary(books: Books) -> Commit:
    """Take one optimizer step of the whole run (see the module docstring); raises if the
    accounting broke."""
    commit, cfg = Commit(books.step), books.cfg
    io = Calls(commit, cfg.peer_timeout)
    # 1. gather every live peer's gradient sum and the attempts it holds
    peers = [p for stage_peers in books.peers for p in stage_peers]
    answers = dict(zip([p.name for p in peers], io.gather("gradients", [(p, ()) for p in peers])))
    # 2. check them against the ledger's credits
    verdicts = reconcile({name: owed for stage in books.credited for name, owed in stage.items()},
                         {name: None if a is None else a[1] for name, a in answers.items()})
    broken = {name: v.why for name, v in verdicts.items() if v.action == "broken"}
    if broken:
        raise RuntimeError(f"accounting broke at step {books.step + 1}: {broken}")
    for name, v in verdicts.items():
        if v.action == "drop":  # a sum to clear; or no answer: evicted already, or credited but gone
            (commit.drop if v.reported else commit.evict).setdefault(name, v.why)
    if commit.drop or commit.evict:
        return commit  # their credits are recomputed, then the boundary runs again
    commit.keep = [[p.name for p in stage_peers] for stage_peers in books.peers]
    taken = [[answers[p.name] for p in stage_peers] for stage_peers in books.peers]
    # 3. decide what this boundary does
    schedule = books.schedule
    decision = schedule.boundary()
    # 4-5. reduce and apply
    states: Sent | None = None  # the new states, asked for as soon as the last request is sent
    if decision.allreduce:
        start = time.perf_counter()
        commit.reduced = {stage: sum_over_peers([g for g, _ in grads]) for stage, grads in enumerate(taken)}
        io.times.add("reduce", start)
        applying = io.send("optimizer_step", [(p, (commit.reduced[stage], books.step))
                                              for stage, stage_peers in enumerate(books.peers) for p in stage_peers])
        if decision.switch_to is None:
            states = request_states(books, io)  # queued behind the step on each peer: one round trip for both
        io.collect(applying)
        for stage, stage_peers in enumerate(books.peers):
            _sync_event(books, commit, stage, "allreduce", len(stage_peers), commit.reduced[stage])
    else:
        io.gather("local_step", [(p, (g, sum(held.values()), books.step))
                                 for stage_peers, grads in zip(books.peers, taken)
                                 for p, (g, held) in zip(stage_peers, grads) if held])
        if decision.outer:
            for stage in range(cfg.stages):
                _outer_step(books, io, stage)
    if decision.switch_to is not None:
        for stage in range(cfg.stages):
            _switch(io, io.alive(books.peers[stage]), decision.switch_to)
    # 6. commit
    commit.states = _new_states(books, io, states or request_states(books, io))
    commit.diverged = _divergence(books.step, books.loss, commit.states)
    commit.schedule, commit.split = schedule, books.split
    if commit.diverged is None:
        commit.events.append(events.step(books.clock(), step=books.step + 1, loss=books.loss,
                                         samples=cfg.global_batch, tokens=cfg.global_batch * cfg.model.seq_len)
                             | {"stage_samples": [sum(sum(held.values()) for _, held in grads) for grads in taken],
                                "boundary": io.times.report()})
    return commit


class Sent:
    """Requests of one method sent to peers, not yet answered: (peer, future) pairs."""

    def __init__(self, method: str, futures: list[tuple[PeerHandle, Future]], start: float) -> None:
        self.method, self.futures, self.start = method, futures, start


class Calls:
    """The boundary's requests to peers: sent all at once, each answered within `timeout`
    seconds or its peer is to be evicted (`commit.evict`); their seconds go in `times`."""

    def __init__(self, commit: Commit, timeout: float) -> None:
        self.commit, self.timeout, self.times = commit, timeout, BoundaryTimes()

    def send(self, method: str, calls: list[tuple[PeerHandle, tuple]]) -> Sent:
        """Call `method` on each peer with its arguments, all at once, without waiting."""
        start = time.perf_counter()
        return Sent(method, [(p, p.call(method, *args)) for p, args in calls], start)

    def collect(self, sent: Sent, since: float | None = None) -> list[Any]:
        """The answers of `sent`, None in place of a peer that failed or timed out; counts the
        seconds from `since` (default: when the requests were sent)."""
        results = []
        for p, f in sent.futures:
            try:
                results.append(f.result(timeout=self.timeout))
            except Exception as exc:
                self.commit.evict.setdefault(p.name, f"{sent.method} failed at the step boundary: "
                                                     f"{type(exc).__name__}: {exc}")
                results.append(None)
        self.times.add(sent.method, sent.start if since is None else since, [f for _, f in sent.futures])
        return results

    def gather(self, method: str, calls: list[tuple[PeerHandle, tuple]]) -> list[Any]:
        """Call `method` on each peer and wait for every answer (see `collect`)."""
        return self.collect(self.send(method, calls))

    def alive(self, peers: list[PeerHandle]) -> list[PeerHandle]:
        """`peers` less those that failed a request of this boundary."""
        return [p for p in peers if p.name not in self.commit.evict]


def _outer_step(books: Books, io: Calls, stage: int) -> None:
    """DiLoCo: average the peers' pseudo-gradients, weighted by samples, and step every peer."""
    peers = io.alive(books.peers[stage])
    pairs = [(p, r) for p, r in zip(peers, io.gather("pseudo_gradient", [(p, ()) for p in peers])) if r is not None]
    start = time.perf_counter()
    delta = weighted_average({p.name: d for p, (d, _) in pairs}, {p.name: n for p, (_, n) in pairs})
    io.times.add("average", start)
    io.gather("outer_step", [(p, (delta,)) for p, _ in pairs])
    _sync_event(books, io.commit, stage, "diloco", len(pairs), delta)


def _switch(io: Calls, peers: list[PeerHandle], sync: SyncConfig) -> None:
    """Change every peer of a stage to `sync`'s mode (DiLoCo starts from the current parameters)."""
    if sync.mode == "diloco":
        io.gather("enter_diloco", [(p, (sync,)) for p in peers])
    else:
        io.gather("leave_diloco", [(p, ()) for p in peers])


def _sync_event(books: Books, commit: Commit, stage: int, kind: str, peers: int, tensors: list[Any]) -> None:
    """Data-parallel traffic of one sync: each peer sends its tensors and receives the average."""
    size = sum(t.numel() * t.element_size() for t in tensors)
    commit.events.append(events.sync(books.clock(), step=books.step + 1, stage=stage, kind=kind, peers=peers,
                                     nbytes=2 * size * peers))


def request_states(books: Books, io: Calls) -> Sent:
    """Ask each stage's first live peer for its state (after dropping every peer's stash of
    abandoned attempts); the answers are the stages' new states (`_new_states`)."""
    for stage_peers in books.peers:
        for p in io.alive(stage_peers):
            p.call("drop_stash")  # activations of abandoned attempts
    firsts = [peers[0] for peers in map(io.alive, books.peers) if peers]
    return io.send("state", [(p, ()) for p in firsts])


def _new_states(books: Books, io: Calls, asked: Sent) -> dict[int, dict[str, Any]]:
    """Each stage's state after the step, from the first live peer it was asked of; a stage whose
    peer failed meanwhile asks the next live one, and a stage without one keeps the state
    committed before. None asked for if the loss is not finite (the step is not committed)."""
    if not math.isfinite(books.loss):
        return {}
    answers = io.collect(asked, since=time.perf_counter())  # the wait beyond the step's own requests
    states = {p.stage: state for (p, _), state in zip(asked.futures, answers) if state is not None}
    for stage in set(range(books.cfg.stages)) - set(states):
        for p in io.alive(books.peers[stage]):
            state, = io.gather("state", [(p, ())])
            if state is not None:
                states[stage] = state
                break
    return states


def _divergence(step: int, loss: float, states: dict[int, dict[str, Any]]) -> str | None:
    """Why step `step + 1` diverged (its training loss, or a stage's new parameters, not finite);
    None if it did not."""
    if not math.isfinite(loss):
        return f"the training loss of step {step + 1} is {loss}"
    for stage, state in states.items():
        if not all(torch.isfinite(t).all() for t in state["params"].values() if _is_float(t)):
            return f"step {step + 1} left stage {stage}'s parameters not finite (its training loss was {loss:.4g})"
    return None


def _is_float(value: Any) -> bool:
    """A floating-point tensor (a state dict may hold other values)."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()
