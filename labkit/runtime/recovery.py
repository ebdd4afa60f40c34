"""What the committed state of a SWARM run is when no process keeps a copy of it, and how the run
goes back to its last checkpoint.

The peers hold the committed state (every peer of a stage the same, after each step), and the
peers' checkpoints (labkit/runtime/shards.py) hold it every `checkpoint_every` steps. When a stage
loses every peer, or a step is taken by some stages and not others, the run rolls back: the
ledger, the sync schedule and every live peer's state go back to the last checkpoint, and the run
goes on exactly as it went on from there the first time (sampling is counted by step).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, as_completed
from typing import Any, Protocol

from labkit import events
from labkit.config import RunConfig
from labkit.runtime.ports import PeerHandle
from labkit.runtime.shards import Checkpoints, stage_state
from labkit.runtime.verdicts import settle
from labkit.swarm.ledger import StepLedger, Task
from labkit.swarm.sync import SyncSchedule

HEDGE_S = 5.0  # seconds a stage's first peer has to answer a state request before its others are asked too


class Members(Protocol):
    """What recovery needs of the run's membership."""

    def live(self, stage: int) -> list[PeerHandle]: ...

    def settle(self, evict: dict[str, str], drop: dict[str, str]) -> None: ...


class Recoverable(Protocol):
    """What recovery needs of the coordinator."""

    cfg: RunConfig
    ledger: StepLedger
    schedule: SyncSchedule
    checkpoints: Checkpoints
    members: Members
    held: dict[str, Task]
    suspects: set[str]
    version: int
    final: list[dict[str, Any]] | None
    final_step: int | None
    cond: threading.Condition
    clock: Callable[[], float]

    def emit(self, event: events.Event) -> None: ...


class StatesUnread(TimeoutError):
    """No live peer of a stage answered a state request in time (what the run holds is not read)."""


def committed_states(c: Recoverable, timeout: float | None = None) -> list[dict[str, Any]]:
    """Every stage's committed state (lock held: no step is being applied), from its first live
    peer, or, if that one has not answered within `HEDGE_S`, from whichever of the stage's live
    peers answers first within `timeout` (default: the peer timeout); a stage without a live peer
    has the last checkpoint's (the run goes back to it when a peer joins there). Raises
    `StatesUnread` rather than mix a stage's checkpoint into live states. Once the run stopped,
    the states it stopped with."""
    if c.final is not None:
        return c.final
    total = c.cfg.peer_timeout if timeout is None else timeout
    deadline = time.monotonic() + total
    peers = [c.members.live(stage) for stage in range(c.cfg.stages)]
    asked = [[p.call("state") for p in live[:1]] for live in peers]
    states = []
    for stage, (live, futures) in enumerate(zip(peers, asked)):
        if not live:
            states.append(stage_state(c.checkpoints.settle().shard(stage)))
            continue
        state = _first(futures, min(HEDGE_S, deadline - time.monotonic()))
        if state is None and len(live) > 1:  # hedge: the first peer may be slow, not gone
            futures += [p.call("state") for p in live[1:]]
        if state is None and (state := _first(futures, deadline - time.monotonic())) is None:
            raise StatesUnread(f"no live peer of stage {stage} ({', '.join(p.name for p in live)}) answered a "
                               f"state request within {total:g} s")
        states.append(state)
    return states


def _first(futures: list[Future], timeout: float) -> dict[str, Any] | None:
    """The first answer of `futures` within `timeout` seconds (failures skipped), or None."""
    try:
        for future in as_completed(futures, timeout=max(0.0, timeout)):
            if future.exception() is None:
                return future.result()
    except TimeoutError:
        pass
    return None


def rollback(c: Recoverable, why: str) -> None:
    """Take the whole run back to its last checkpoint (lock held): the ledger, the sync schedule
    and every live peer's state (read from its stage's shard), as if the steps since had not
    been taken; the work in flight is abandoned."""
    kept, was = c.checkpoints.settle(), c.ledger.step
    c.ledger.rewind(kept.step)
    c.held.clear()  # the microbatches in flight belong to abandoned steps
    c.suspects.clear()
    c.schedule, c.version = copy.copy(kept.schedule), c.version + 1
    c.checkpoints.rewound(kept.step)
    peers = [p for stage in range(c.cfg.stages) for p in c.members.live(stage)]
    restoring = [(p, p.call("restore", kept.shard(p.stage), kept.schedule.cfg)) for p in peers]
    failed = {}
    for p, future in restoring:
        try:
            future.result(c.cfg.peer_timeout)
        except Exception as exc:
            failed[p.name] = f"restoring the checkpoint of step {kept.step} failed: {type(exc).__name__}: {exc}"
    c.emit(events.setting(c.clock(), name="rollback", value={"from": was, "to": kept.step, "reason": why}))
    settle(c.members, failed, {})
    c.cond.notify_all()


def unreadable_at_stop(held: bool, waited: float, empty: set[int]) -> str | None:
    """Why a stopping run cannot read its peers' state (None if it can): the lock was not `held`
    after `waited` seconds (a step boundary under way), or stages `empty` have no peer."""
    if not held:
        return f"a step boundary held the run's lock for the {waited:.1f} s the stop waited"
    return f"stages {sorted(empty)} had no peer" if empty else None


def keep_final(c: Recoverable, unreadable: str | None, timeout: float) -> None:
    """Keep the state the run stops with (before its peers go): if the peers hold a consistent
    one (`unreadable` is None: the caller holds the lock and no stage is empty), every stage's
    from a peer that answers within `timeout`; else the last checkpoint, whole, with a
    `final_state` setting that says so and why (`unreadable`, or the stage whose peers did not
    answer; the run's steps then count to that checkpoint's)."""
    why = unreadable
    if why is None:
        try:
            c.final, c.final_step = committed_states(c, timeout), c.ledger.step
            return
        except StatesUnread as exc:
            why = str(exc)
    kept = c.checkpoints.settle()
    c.final, c.final_step = [stage_state(kept.shard(s)) for s in range(c.cfg.stages)], kept.step
    if kept.step != c.ledger.step:
        c.emit(events.setting(c.clock(), name="final_state", value={"step": kept.step, "reason": why}))
