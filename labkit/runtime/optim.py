"""Optimizers and the learning-rate schedule shared by every peer and by the reference loop."""

from __future__ import annotations

import math
from collections.abc import Iterable

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
