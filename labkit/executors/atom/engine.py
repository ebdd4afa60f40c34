"""One ATOM replica's training engine: the whole model in host memory, its optimizer, its swapper.

The in-process executor runs one engine per replica thread; a Dask replica actor runs one on its
worker. Both are driven the same way: iterations of up to C microbatches of the step, then, at the
global batch, the replicas' summed gradients applied with the same optimizer step everywhere.
Each engine plans its own sub-models on its own device (ATOM profiles the device in use).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.model import Stage, build_stage
from labkit.plan.atom_partition import least_budget, partition
from labkit.plan.atom_profile import LayerCost
from labkit.executors.atom.profile import flow_bytes, measure_profile
from labkit.executors.atom.swap import SwapReplica, SwapSpan
from labkit.runtime.optim import apply_step, make_optimizer
from labkit.swarm.ledger import Task


def accumulation(cfg: RunConfig) -> int:
    """C in effect: an iteration never takes more microbatches than a step has."""
    return min(cfg.executor.accumulation, cfg.microbatches_per_step)


def device_budget(cfg: RunConfig, profile: tuple[LayerCost, ...]) -> tuple[int, int]:
    """(the device budget in bytes, the part of it left for sub-models after the activations in
    flight): `budget_mb`, or the least budget in which some partition works at this C."""
    c = accumulation(cfg)
    flow = math.ceil(flow_bytes(profile, c, target_bytes=cfg.microbatch * cfg.model.seq_len * 8))  # int64 targets
    least = math.ceil(least_budget(profile, c, together=True))
    if cfg.executor.budget_mb is None:
        return flow + least, least
    budget = int(cfg.executor.budget_mb * 1e6)
    if budget < flow + least:
        raise ValueError(f"atom.budget_mb={cfg.executor.budget_mb} is not allowed: at accumulation={c} "
                         f"and microbatch={cfg.microbatch} the activations in flight need {flow / 1e6:.3f} MB and the "
                         f"smallest partition of this profile {least / 1e6:.3f} MB more: budget_mb >= "
                         f"{(flow + least) / 1e6:.3f} works (or None, that least budget)")
    return budget, budget - flow


@dataclass(frozen=True)
class SubmodelPlan:
    """Where one replica cuts the model: layers per sub-model, and the device budget in bytes."""

    sizes: tuple[int, ...]
    budget: int
    model_bytes: int
    layers: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        """The plan as the `atom_partition` setting event carries it."""
        return {"sizes": list(self.sizes), "budget_bytes": self.budget, "model_bytes": self.model_bytes,
                "layers": list(self.layers)}


def plan_submodels(cfg: RunConfig, params: Mapping[str, torch.Tensor], device: str) -> SubmodelPlan:
    """Profile the model on `device` and search the partition (Algorithm 1) that fits the budget."""
    profile = measure_profile(build_stage(cfg.model, 0, cfg.model.n_layer, params), device, cfg.microbatch)
    budget, for_submodels = device_budget(cfg, profile)
    cut = partition(profile, for_submodels, accumulation(cfg), together=True)
    return SubmodelPlan(tuple(cut.sizes), budget, int(sum(x.memory for x in profile)), tuple(x.name for x in profile))


class ReplicaEngine:
    """A whole-model replica: parameters, gradients and optimizer state on the host, sub-models
    swapped through `device` within `plan.budget` bytes."""

    def __init__(self, cfg: RunConfig, sampler: WindowSampler, state: Mapping[str, Any], device: str,
                 plan: SubmodelPlan, clock: Callable[[], float], on_span: Callable[[SwapSpan], None]) -> None:
        self.cfg, self.sampler, self.device = cfg, sampler, device
        self.model: Stage = build_stage(cfg.model, 0, cfg.model.n_layer, state["params"])
        self.optimizer = make_optimizer(self.model.parameters(), cfg)
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.swap = SwapReplica(self.model, plan.sizes, device, plan.budget, cfg.executor.prefetch, clock, on_span)
        self.round_samples = 0  # samples accumulated since the last step: the replica's heartbeat count
        self._scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)

    def iteration(self, tasks: Sequence[Task]) -> list[float]:
        """Forward then backward over the tasks' microbatches, gradients added on the host; one
        loss per microbatch. Raises `Interrupted` if interrupted (its work is then void)."""
        batches = [self.sampler.batch(t.step, t.microbatch, self.cfg.microbatch) for t in tasks]
        losses = self.swap.iteration(batches, self._scale)
        self.round_samples += len(tasks) * self.cfg.microbatch
        return losses

    def gradients(self) -> list[torch.Tensor]:
        """The gradient sums accumulated since the last step, one per parameter."""
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()]

    def apply(self, total: Sequence[torch.Tensor], step: int) -> None:
        """Take the step every replica takes: `total` is the replicas' summed gradient."""
        for p, g in zip(self.model.parameters(), total):
            p.grad = g.clone()
        apply_step(self.optimizer, step, self.cfg)
        self.optimizer.zero_grad(set_to_none=True)
        self.swap.release_all()
        self.round_samples = 0

    def state(self) -> dict[str, Any]:
        """A copy of the parameters and the optimizer state (what a joiner starts from)."""
        return {"params": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict())}

    def interrupt(self) -> None:
        self.swap.interrupt()

    def close(self) -> None:
        self.swap.close()



def swap_event(t: float, replica: str, span: SwapSpan) -> events.Event:
    """The `swap` event of one sub-model's turn on `replica`'s device (Figure 12's timeline)."""
    return events.swap(t, replica=replica, submodel=span.submodel, phase=span.phase, load_start=span.load_start,
                       load_end=span.load_end, compute_start=span.compute_start, compute_end=span.compute_end)
