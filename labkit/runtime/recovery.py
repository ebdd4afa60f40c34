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


def committed_states(c: Recoverable, timeout: float | None = None) -> list[dict[str, Any]]:
    """Every stage's committed state (lock held: no step is being applied), from its first live
    peer, or if that one fails to answer within `timeout` (default: the peer timeout), from
    whichever other answers first; a stage without one has the last checkpoint's (the run goes
    back to it when a peer joins there). Once the run stopped, the states it stopped with."""
    if c.final is not None:
        return c.final
    timeout = c.cfg.peer_timeout if timeout is None else timeout
    peers = [c.members.live(stage) for stage in range(c.cfg.stages)]
    asked = [[p.call("state") for p in live[:1]] for live in peers]
    return [_first(first, timeout) or _first([p.call("state") for p in live[1:]], timeout)
            or stage_state(c.checkpoints.settle().shard(stage)) for stage, (first, live) in enumerate(zip(asked, peers))]


def _first(futures: list[Future], timeout: float) -> dict[str, Any] | None:
    """The first answer of `futures` within `timeout` seconds (failures skipped), or None."""
    try:
        for future in as_completed(futures, timeout=timeout):
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


def keep_final(c: Recoverable, readable: bool, timeout: float) -> None:
    """Keep the state the run stops with (before its peers go): if the peers hold a consistent
    one (`readable`: the lock held, no stage emptied since the last rollback), every stage's from
    a peer that answers within `timeout`; else the last checkpoint, whole."""
    states = committed_states(c, timeout) if readable else []
    if len(states) == c.cfg.stages and all(states):
        c.final, c.final_step = states, c.ledger.step
    else:
        kept = c.checkpoints.settle()
        c.final, c.final_step = [stage_state(kept.shard(s)) for s in range(c.cfg.stages)], kept.step
