"""Optimizers and the learning-rate schedule shared by every peer and by the reference loop."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from labkit.config import RunConfig


def lr_at(step: int, cfg: RunConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to 10 % of `lr` at `steps`."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW (default) or SGD with `cfg.momentum`, as `cfg.optimizer` says; lr is set per step."""
    params = list(params)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay, foreach=False)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, foreach=False)


def make_outer_optimizer(params: Iterable[torch.nn.Parameter], lr: float, momentum: float) -> torch.optim.Optimizer:
    """DiLoCo's outer optimizer: SGD with Nesterov momentum (plain SGD when momentum is 0)."""
    return torch.optim.SGD(list(params), lr=lr, momentum=momentum, nesterov=momentum > 0, foreach=False)


def apply_step(optimizer: torch.optim.Optimizer, step: int, cfg: RunConfig) -> None:
    """One optimizer step at the scheduled learning rate, with gradients already in `.grad`."""
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, cfg)
    optimizer.step()


def split_state(state: dict[str, Any], bounds: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """One optimizer's state dict (one parameter group) as the state dicts of optimizers over the
    parameter ranges `bounds` [lo, hi): how servers that shard a stage's parameters resume."""
    group = state["param_groups"][0]
    return [{"state": {i - lo: v for i, v in state["state"].items() if lo <= i < hi},
             "param_groups": [dict(group, params=list(range(hi - lo)))]} for lo, hi in bounds]


def merge_states(states: Sequence[dict[str, Any]], bounds: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The inverse of `split_state`: the state dict one optimizer over all the ranges would have."""
    merged = {lo + i: v for s, (lo, _) in zip(states, bounds) for i, v in s["state"].items()}
    return {"state": merged, "param_groups": [dict(states[0]["param_groups"][0], params=list(range(bounds[-1][1])))]}
