"""The task pool paper's config: per stage, frontal and backward servers and unreliable clients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from labkit.config_checks import check as _check
from labkit.config_checks import is_int as _is_int
from labkit.config_checks import is_number as _is_number


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPoolConfig:
    """The task pool paper's parameter-server pipeline: per stage, reliable frontal and backward servers and
    unreliable clients (the stage's `peers`); a task pool takes over a vanished client's work.

    A task is overdue, and its client declared lost, `grace + slack x` its expected compute time
    after it was handed out (the expected time from the client's speed measured when it joined).
    """

    name: ClassVar[str] = "taskpool"
    frontal: int | tuple[int, ...] = 1  # frontal servers per stage (one number for all, or one per stage): hold the
    # stage's inputs and split them over its clients
    backward: int | tuple[int, ...] = 1  # backward servers per stage (one number or one per stage): collect outputs,
    # route gradients back by the slice list, and shard the stage's parameters among them
    slack: float = 3.0  # times a task's expected compute time before it is overdue (>= 1)
    grace: float = 2.0  # seconds added to every deadline (>= 0)

    def __post_init__(self) -> None:
        o = "TaskPoolConfig"
        for name in ("frontal", "backward"):
            value = getattr(self, name)
            counts = value if isinstance(value, tuple) else (value,)
            _check(len(counts) >= 1 and all(_is_int(n) and n >= 1 for n in counts), o, name, value,
                   "an integer >= 1, or a tuple of them, one per stage")
        _check(_is_number(self.slack) and self.slack >= 1, o, "slack", self.slack, "a finite number >= 1")
        _check(_is_number(self.grace) and self.grace >= 0, o, "grace", self.grace, "a finite number >= 0")

    def servers(self, stage: int) -> tuple[int, int]:
        """(frontal, backward) servers of `stage`."""
        return tuple(v[stage] if isinstance(v, tuple) else v for v in (self.frontal, self.backward))  # type: ignore[return-value]

    def check_run(self, run: Any) -> None:
        """Clients compute slices with the servers' parameters: no codec, no DiLoCo, no links."""
        o = "RunConfig"
        for name in ("frontal", "backward"):
            value = getattr(self, name)
            _check(not isinstance(value, tuple) or len(value) == run.stages, o, f"taskpool.{name}", value,
                   f"one number, or one per stage ({run.stages})")
        _check(run.sync.mode == "allreduce", o, "sync", run.sync,
               "SyncConfig(mode='allreduce') with executor='taskpool' (the servers aggregate every pass)")
        _check(run.compression.boundary == "none", o, "compression", run.compression,
               "boundary='none' with executor='taskpool' (slices cross stages as they are)")
        _check(run.links is None, o, "links", run.links,
               "None with executor='taskpool' (its servers and clients talk directly; no trainer-peer requests)")
