"""The synchronous pipeline's config: GPipe-style stages with 1F1B scheduling, fixed wiring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from labkit.config_checks import check as _check

SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineConfig:
    """A synchronous pipeline (GPipe, with 1F1B scheduling by default): lane r is the r-th peer of
    every stage; each step the microbatches are dealt to the lanes, every lane runs its share
    through its stages in schedule order, and each stage's replicas sum their gradients and take
    the same optimizer step. No rerouting: a killed peer stalls the pipeline until it is replaced.
    """

    name: ClassVar[str] = "pipeline"
    schedule: str = "1f1b"  # "1f1b" (warm-up forwards, one forward one backward, cool-down backwards) or
    # "gpipe" (every forward of the step, then every backward: more activations held, the same bubble)

    def __post_init__(self) -> None:
        _check(self.schedule in SCHEDULES, "PipelineConfig", "schedule", self.schedule, f"one of {list(SCHEDULES)}")

    def check_run(self, run: Any) -> None:
        """Fixed lanes through every stage, one gradient sum per step: none of SWARM's per-peer knobs."""
        o = "RunConfig"
        _check(len(set(run.peers_per_stage)) == 1, o, "peers", run.peers,
               "one number, or the same number for every stage, with executor='pipeline' (lane r is the r-th "
               "peer of every stage)")
        _check(run.sync.mode == "allreduce", o, "sync", run.sync,
               "SyncConfig(mode='allreduce') with executor='pipeline' (a stage's replicas sum their gradients "
               "every step)")
        _check(not run.delayed_updates, o, "delayed_updates", run.delayed_updates,
               "False with executor='pipeline' (a synchronous pipeline steps on the parameters it computed with)")
