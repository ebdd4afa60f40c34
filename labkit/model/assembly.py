"""A run's model as stages: one stage's module under the run's layer split, and step-0 states."""

from __future__ import annotations

from typing import Any

import torch

from labkit.config import RunConfig
from labkit.model.gpt import Stage
from labkit.model.partition import boundary_spec, build_stage, init_run_state, stage_bounds


def stage_module(cfg: RunConfig, stage: int, params: dict[str, torch.Tensor]) -> Stage:
    """Stage `stage` of `cfg`'s model under its layer split, holding `params`."""
    first, count = stage_bounds(cfg.layer_split)[stage]
    return build_stage(cfg.model, first, count, params, boundary_spec(cfg.compression, stage, cfg.stages))


def initial_states(cfg: RunConfig) -> list[dict[str, Any]]:
    """Every stage's state at step 0 (`cfg.seed`'s initialization, no optimizer state yet)."""
    full = init_run_state(cfg.model, cfg.seed, cfg.compression, cfg.stages)
    return [{"params": stage_module(cfg, stage, full).state_dict(), "optimizer": None} for stage in range(cfg.stages)]
