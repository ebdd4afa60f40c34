"""ATOM's config: whole-model replicas swapping sub-models through a device budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from labkit.config_checks import check as _check
from labkit.config_checks import is_int as _is_int
from labkit.config_checks import is_number as _is_number

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, kw_only=True, slots=True)
class AtomConfig:
    """ATOM: whole-model replicas, each swapping sub-models through a device budget.

    Replicas draw microbatches of the step; when together they have processed the global batch
    they average their gradients and all take the same optimizer step.
    """

    name: ClassVar[str] = "atom"
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
        _check(self.device in DEVICES, o, "device", self.device, f"one of {list(DEVICES)}")
        _check(isinstance(self.prefetch, bool), o, "prefetch", self.prefetch, "True or False")

    def check_run(self, run: Any) -> None:
        """Whole-model replicas: no stages, so none of the stage-wise knobs."""
        o = "RunConfig"
        _check(not run.model.share_layers, o, "executor", run.executor,
               "'swarm' when model.share_layers is set (ATOM swaps the blocks of a whole model, none shared)")
        _check(run.sync.mode == "allreduce", o, "sync", run.sync,
               "SyncConfig(mode='allreduce') with executor='atom' (replicas average at every global batch)")
        _check(not run.delayed_updates, o, "delayed_updates", run.delayed_updates, "False with executor='atom'")
        _check(run.compression.boundary == "none", o, "compression", run.compression,
               "boundary='none' with executor='atom' (no stage boundaries to compress)")
        _check(run.links is None, o, "links", run.links, "None with executor='atom' (no trainer-peer requests)")
        _check(run.world is None or (run.stages == 1 and run.peers_per_stage == (self.replicas,)), o, "world", run.world,
               f"a world file of one stage whose peers are the replicas, in a run of stages=1, peers=atom.replicas "
               f"(world_config(path, RunConfig(executor=AtomConfig())) makes it from such a file); this run has "
               f"stages={run.stages}, peers={list(run.peers_per_stage)}, atom.replicas={self.replicas}")
