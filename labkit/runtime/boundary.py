"""The step boundary: where SWARM's exactness is enforced and every stage takes its step.

`step_boundary` is a function from the run's books (`Books`: a value the coordinator takes under
its lock once the ledger says every microbatch of the step is credited at every stage) to a
`Commit`, which only the coordinator applies. It talks to the peers (the I/O around the decision)
but changes nothing of the coordinator, and no tensor passes through it: the peers of a stage
reduce among themselves (labkit/runtime/stage_step.py, over labkit/runtime/ring.py). In four parts:

1. decide  — the sync schedule says all-reduce, a DiLoCo inner step, an outer step, a switch;
2. prepare — every live peer gets its `StepPlan` (the attempts the ledger credits it, its stage's
   ring): it answers with the attempts its sum holds and, where they match, reduces the sum over
   its stage's ring and keeps it. The ledger's one rule (`swarm/ledger.py:reconcile`) judges the
   answers: a peer holding more (or failing to answer) abandons the boundary (the commit drops its
   sum or evicts it, its credits are recomputed, and the boundary runs again), as does a ring that
   broke (a peer died in it: every other ring of the boundary is aborted at once); a sum lacking a
   credited attempt means the accounting broke: the run stops loudly;
3. apply   — only once every stage's reduce completed does any peer step (`commit_step`), so a
   step is taken everywhere or nowhere. Where every stage has one peer and no trainer timed out
   on a peer since the last step (nothing can hold an uncredited attempt), the step is applied with
   the prepare: one round trip (`Books.one_trip`). DiLoCo's outer step then averages each stage's
   pseudo-gradients over its ring, retried with the survivors if a peer dies in it;
4. commit  — the events, the layer split, and whether the step diverged (a loss or new parameters
   not finite: then nothing of it is recorded, and the run stops). A loss or summed gradient not
   finite is caught before any peer steps; parameters that a step left not finite can only be
   undone by going back to the last checkpoint.

A peer that fails while the step is applied is evicted (by the commit) and the survivors go on.
The step event says where the boundary's time went (`BoundaryTimes`): each request's wall seconds,
its slowest peer's queue + compute, and the tensor bytes that crossed the coordinator (none).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labkit import events
from labkit.config import RunConfig, SyncConfig
from labkit.runtime.boundary_calls import Calls
from labkit.runtime.ports import PeerHandle
from labkit.runtime.stage_step import StepPlan
from labkit.swarm.ledger import AttemptKey, reconcile
from labkit.swarm.sync import SyncSchedule


@dataclass(frozen=True)
class Books:
    """What the boundary reads of the run, taken under the coordinator's lock."""

    cfg: RunConfig
    step: int  # the step being taken (its number is step + 1)
    loss: float  # the ledger's loss of the step
    credited: list[dict[str, dict[AttemptKey, int]]]  # per stage: peer -> attempts the ledger credits it
    peers: list[list[PeerHandle]]  # per stage: its live peers, by name (the ring's order)
    schedule: SyncSchedule  # a copy: the boundary advances it, the commit carries it back
    split: tuple[int, ...] | None  # set_layer_split's request, taken with the step
    clock: Callable[[], float]
    tags: Callable[[], int]  # a new ring tag, increasing over the run
    deadline: Callable[[str], float]  # seconds a kind of request may take (learnt from earlier boundaries)
    suspects: frozenset[str] = frozenset()  # peers a trainer timed out on since the last step

    @property
    def one_trip(self) -> bool:
        """Apply the step with the prepare: every stage has one peer, none is suspect."""
        return all(len(stage) == 1 for stage in self.peers) and not self.suspects


@dataclass
class Commit:
    """What one boundary decided; the coordinator applies it (and nothing else changes the run)."""

    step: int
    drop: dict[str, str] = field(default_factory=dict)  # peer -> why: it clears its sum, its credits are recomputed
    evict: dict[str, str] = field(default_factory=dict)  # peer -> why: it failed a request at the boundary
    took: dict[str, float] = field(default_factory=dict)  # kind of request -> seconds, where every peer answered
    late: set[str] = field(default_factory=set)  # kinds of request whose deadline passed
    keep: list[list[str]] = field(default_factory=list)  # per stage, the peers whose sums make the step
    schedule: SyncSchedule | None = None  # the sync schedule after this boundary (None: no step taken)
    split: tuple[int, ...] | None = None  # the layer split from the next step on, if it changes
    events: list[events.Event] = field(default_factory=list)  # to emit once applied: syncs, then the step if taken
    diverged: str | None = None  # why the step was not committed: the run stops
    retry: str | None = None  # why a ring broke with no peer to blame: the boundary runs again
    rollback: str | None = None  # why the run must go back to its last checkpoint (a one-trip step half taken)

    @property
    def taken(self) -> bool:
        """The step is committed: advance the ledger."""
        return self.schedule is not None and self.diverged is None and self.rollback is None


def step_boundary(books: Books) -> Commit:
    """Take one optimizer step of the whole run (see the module docstring); raises if the
    accounting broke."""
    commit, cfg, schedule = Commit(books.step), books.cfg, books.schedule
    io = Calls(commit, books.deadline)
    # 1. decide what this boundary does
    decision = schedule.boundary()
    local = not decision.allreduce
    one_trip = books.one_trip and decision.switch_to is None and not decision.outer and math.isfinite(books.loss)
    # 2. prepare: every peer checks its sum against its credits and reduces it with its stage
    tag, kind = books.tags(), "prepare" + (" local" if local else " ring") + (" and step" if one_trip else "")
    wait = books.deadline(kind)  # for each ring chunk
    plans = [(p, (StepPlan(tag, books.step, books.credited[stage].get(p.name, {}), _ring(stage_peers), rank,
                           local, one_trip, wait),))
             for stage, stage_peers in enumerate(books.peers) for rank, p in enumerate(stage_peers)]
    everyone = [p for p, _ in plans]
    answers = dict(zip([p.name for p in everyone],  # a ring waits `wait` per chunk: wait for it to tell
                       io.collect(io.send("prepare", plans, kind), watch=_trouble,
                                  abort=lambda why: _abort(everyone, tag, why), scale=2)))
    for stage_peers in books.peers:  # a peer that sent its neighbour nothing within `wait`
        for p in stage_peers:
            if (late := (answers[p.name] or {}).get("late")) is not None:
                commit.evict.setdefault(stage_peers[late].name, f"sent {p.name} no ring chunk within "
                                                                f"{wait:.3g} s at the step boundary")
    verdicts = reconcile({name: owed for stage in books.credited for name, owed in stage.items()},
                         {name: None if a is None else a["held"] for name, a in answers.items()})
    broken = {name: v.why for name, v in verdicts.items() if v.action == "broken"}
    if broken:
        raise RuntimeError(f"accounting broke at step {books.step + 1}: {broken}")
    for name, v in verdicts.items():
        if v.action == "drop":  # a sum to clear; or no answer: evicted already, or credited but gone
            (commit.drop if v.reported else commit.evict).setdefault(name, v.why)
    rings = {name: a["ring"] for name, a in answers.items() if a is not None and a["ring"]}
    stepped = [name for name, a in answers.items() if a is not None and a["finite"] is not None]
    if commit.drop or commit.evict or rings:
        if stepped:  # a one-trip step some stages took: only the last checkpoint is consistent
            commit.rollback = f"step {books.step + 1} was taken by {stepped} but not by every stage"
        elif rings and not commit.evict:
            commit.retry = f"a ring broke with every peer answering: {rings}"
        return commit  # credits are recomputed (or the ring is tried again), then the boundary runs again
    commit.keep = [[p.name for p in stage_peers] for stage_peers in books.peers]
    if not math.isfinite(books.loss):
        commit.diverged = f"the training loss of step {books.step + 1} is {books.loss}"
    elif bad := [name for name, a in answers.items() if a["sum_finite"] is False]:
        commit.diverged = (f"step {books.step + 1}'s gradient is not finite at {bad} "
                           f"(its training loss was {books.loss:.4g})")
    if commit.diverged is not None:
        if stepped:  # a one-trip step other stages took
            commit.rollback = commit.diverged
        return commit
    # 3. apply: every peer steps on its stage's sum
    if one_trip:
        finite = {name: a["finite"] for name, a in answers.items()}
    else:
        applied = io.collect(io.send("commit_step", [(p, (tag, books.step)) for p in everyone]))
        finite = {p.name: ok for p, ok in zip(everyone, applied) if ok is not None}
    for stage, stage_peers in enumerate(books.peers):
        if not local:
            _sync_event(books, commit, stage, "allreduce", len(stage_peers),
                        max(answers[p.name]["nbytes"] for p in stage_peers))
    if decision.outer:
        _outer_steps(books, io)
    if decision.switch_to is not None:
        for stage in range(cfg.stages):
            _switch(io, io.alive(books.peers[stage]), decision.switch_to)
    # 4. commit
    commit.diverged = _divergence(books, finite)
    commit.schedule, commit.split = schedule, books.split
    if commit.diverged is not None:
        commit.rollback = commit.diverged  # the peers hold the diverged parameters: back to the checkpoint
    else:
        commit.events.append(events.step(books.clock(), step=books.step + 1, loss=books.loss,
                                         samples=cfg.global_batch, tokens=cfg.global_batch * cfg.model.seq_len)
                             | {"stage_samples": [sum(sum(c.values()) for c in credited.values())
                                                  for credited in books.credited],
                                "boundary": io.times.report()})
    return commit


def _ring(peers: list[PeerHandle]) -> tuple[tuple[str, Any], ...]:
    """Each peer of a stage and how the others reach it, in ring order (one peer reaches nobody;
    None for a peer that cannot be reached: the ring breaks there, and the peer fails its prepare)."""
    return tuple((p.name, _contact(p)) for p in peers) if len(peers) > 1 else ((peers[0].name, None),)


def _contact(peer: PeerHandle) -> Any:
    try:
        return peer.contact
    except Exception:  # its process is gone: its own requests fail too
        return None


def _trouble(answer: dict[str, Any]) -> str | None:
    """Why a prepare answer must end the boundary's other rings (its ring broke, or its peer's
    attempts differ from its credits: it stays out of its ring), if it must."""
    return answer.get("ring") or ("a peer's attempts differ from its credits" if answer.get("mismatch") else None)


def _abort(peers: list[PeerHandle], tag: int, why: str) -> None:
    """End every wait of ring `tag` at once (a peer died in one of the boundary's rings)."""
    for p in peers:
        p.call("abort", tag, why)


def _outer_steps(books: Books, io: Calls) -> None:
    """DiLoCo: each stage averages its peers' pseudo-gradients over its ring, weighted by samples,
    and every peer applies the average; a stage whose ring broke tries again with its survivors."""
    stages = {stage: io.alive(peers) for stage, peers in enumerate(books.peers)}
    stages = {stage: peers for stage, peers in stages.items() if peers}
    while stages:
        tag = books.tags()
        books.tags()  # the next tag too: a ring of no samples is re-run under it with equal weights
        calls = [(p, (tag, _ring(peers), rank, books.deadline("outer_reduce")))
                 for peers in stages.values() for rank, p in enumerate(peers)]
        everyone = [p for p, _ in calls]
        answers = dict(zip([p.name for p in everyone], io.collect(io.send("outer_reduce", calls), watch=_trouble,
                                                                  abort=lambda why: _abort(everyone, tag, why))))
        again = {}
        for stage, peers in stages.items():
            if all(answers[p.name] is not None and answers[p.name]["ring"] is None for p in peers):
                io.gather("outer_apply", [(p, (tag,)) for p in peers])
                _sync_event(books, io.commit, stage, "diloco", len(peers), answers[peers[0].name]["nbytes"])
            elif len(survivors := io.alive(peers)) < len(peers) and survivors:
                again[stage] = survivors
            elif survivors:
                raise RuntimeError(f"DiLoCo's outer step of stage {stage} failed with every peer answering: "
                                   f"{[answers[p.name] for p in peers]}")
        stages = again


def _switch(io: Calls, peers: list[PeerHandle], sync: SyncConfig) -> None:
    """Change every peer of a stage to `sync`'s mode (DiLoCo starts from the current parameters)."""
    if sync.mode == "diloco":
        io.gather("enter_diloco", [(p, (sync,)) for p in peers])
    else:
        io.gather("leave_diloco", [(p, ()) for p in peers])


def _sync_event(books: Books, commit: Commit, stage: int, kind: str, peers: int, nbytes: int) -> None:
    """Data-parallel traffic of one sync over a ring of `peers`, each holding `nbytes`: each sends
    2 (peers - 1) / peers of it to its neighbour."""
    commit.events.append(events.sync(books.clock(), step=books.step + 1, stage=stage, kind=kind, peers=peers,
                                     nbytes=2 * (peers - 1) * nbytes))


def _divergence(books: Books, finite: dict[str, bool]) -> str | None:
    """Why step `books.step + 1` diverged (a stage's new parameters not finite); None if not."""
    for stage, peers in enumerate(books.peers):
        if any(finite.get(p.name) is False for p in peers):
            return (f"step {books.step + 1} left stage {stage}'s parameters not finite "
                    f"(its training loss was {books.loss:.4g})")
    return None
