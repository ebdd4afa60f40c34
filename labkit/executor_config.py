"""The configs of the executors other than SWARM's pipeline, and what each requires of a run.

`RunConfig` (labkit/config.py) holds one of each and calls `check_executor` on construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from labkit.config_checks import check as _check
from labkit.config_checks import is_int as _is_int
from labkit.config_checks import is_number as _is_number

if TYPE_CHECKING:
    from labkit.config import RunConfig

EXECUTORS = ("swarm", "atom", "taskpool")
ATOM_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, kw_only=True, slots=True)
class AtomConfig:
    """ATOM: whole-model replicas, each swapping sub-models through a device budget.

    Replicas draw microbatches of the step; when together they have processed the global batch
    they average their gradients and all take the same optimizer step.
    """

    replicas: int = 2  # whole-model replicas training side by side
    budget_mb: float | None = None  # device memory for sub-models and activations, in MB; None = the least that works
    accumulation: int = 2  # C: microbatches each replica runs forward before backward (hides loading)
    device: str = "cpu"  # where sub-models compute: "cpu" or "cuda" (the host holds the master copy)
    prefetch: bool = True  # load the next sub-model while the current one computes

    def __post_init__(self) -> None:
        o = "AtomConfig"
        _check(_is_int(self.replicas) and self.replicas >= 1, o, "replicas", self.replicas, "an integer >= 1")
        _check(self.budget_mb is None or (_is_number(self.budget_mb) and self.budget_mb > 0), o, "budget_mb",
               self.budget_mb, "None (the least budget that fits) or a finite number of MB > 0")
        _check(_is_int(self.accumulation) and self.accumulation >= 1, o, "accumulation", self.accumulation, "an integer >= 1")
        _check(self.device in ATOM_DEVICES, o, "device", self.device, f"one of {list(ATOM_DEVICES)}")
        _check(isinstance(self.prefetch, bool), o, "prefetch", self.prefetch, "True or False")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPoolConfig:
    """The task pool paper's parameter-server pipeline: per stage, reliable frontal and backward servers and
    unreliable clients (the stage's `peers`); a task pool takes over a vanished client's work.

    A task is overdue, and its client declared lost, `grace + slack x` its expected compute time
    after it was handed out (the expected time from the client's speed measured when it joined).
    """

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


def check_executor(run: RunConfig) -> None:
    """The run-wide rules of the executor in force: the fields its design leaves no room for."""
    o = "RunConfig"
    if run.executor == "taskpool":  # clients compute slices with the servers' parameters: no codec, no DiLoCo
        for name in ("frontal", "backward"):
            value = getattr(run.taskpool, name)
            _check(not isinstance(value, tuple) or len(value) == run.stages, o, f"taskpool.{name}", value,
                   f"one number, or one per stage ({run.stages})")
        _check(run.sync.mode == "allreduce", o, "sync", run.sync,
               "SyncConfig(mode='allreduce') with executor='taskpool' (the servers aggregate every pass)")
        _check(run.compression.boundary == "none", o, "compression", run.compression,
               "boundary='none' with executor='taskpool' (slices cross stages as they are)")
        _check(run.links is None, o, "links", run.links,
               "None with executor='taskpool' (its servers and clients talk directly; no trainer-peer requests)")
    if run.executor == "atom":  # whole-model replicas: no stages, so none of the stage-wise knobs
        _check(not run.model.share_layers, o, "executor", run.executor,
               "'swarm' when model.share_layers is set (ATOM swaps the blocks of a whole model, none shared)")
        _check(run.sync.mode == "allreduce", o, "sync", run.sync,
               "SyncConfig(mode='allreduce') with executor='atom' (replicas average at every global batch)")
        _check(not run.delayed_updates, o, "delayed_updates", run.delayed_updates, "False with executor='atom'")
        _check(run.compression.boundary == "none", o, "compression", run.compression,
               "boundary='none' with executor='atom' (no stage boundaries to compress)")
        _check(run.links is None, o, "links", run.links, "None with executor='atom' (no trainer-peer requests)")
