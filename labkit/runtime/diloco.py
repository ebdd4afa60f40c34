"""A peer's DiLoCo state: the stage's global parameters, the outer optimizer, the round's samples.

The peer's module holds its local parameters, stepped by the inner optimizer. At an outer step the
peer reports its pseudo-gradient (local - global), the stage averages them, and every peer applies
the same outer step to its copy of the global parameters and restarts from them.
"""

from __future__ import annotations

from typing import Any

import torch

from labkit.config import SyncConfig
from labkit.runtime.optim import make_outer_optimizer


class OuterState:
    """Global parameters of one stage and their outer Nesterov-SGD optimizer, on one peer."""

    def __init__(self, params: list[torch.nn.Parameter], cfg: SyncConfig) -> None:
        self.cfg = cfg
        self.global_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
        self.optimizer = make_outer_optimizer(self.global_params, cfg.outer_lr, cfg.outer_momentum)
        self.round_samples = 0  # samples this peer processed since the last outer step

    def pseudo_gradient(self, local: list[torch.nn.Parameter]) -> list[torch.Tensor]:
        """Delta = local - global, per parameter."""
        return [(p.detach() - g.detach()) for p, g in zip(local, self.global_params)]

    def outer_step(self, delta: list[torch.Tensor], local: list[torch.nn.Parameter]) -> None:
        """Move the global parameters toward the averaged local ones (gradient = -delta), adopt them."""
        for g, d in zip(self.global_params, delta):
            g.grad = -d
        self.optimizer.step()
        with torch.no_grad():
            for p, g in zip(local, self.global_params):
                g.grad = None
                p.copy_(g)
        self.round_samples = 0

    def state(self) -> dict[str, Any]:
        return {"global": [g.detach().clone() for g in self.global_params],
                "outer_optimizer": self.optimizer.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for g, v in zip(self.global_params, state["global"]):
                g.copy_(v)
        self.optimizer.load_state_dict(state["outer_optimizer"])
