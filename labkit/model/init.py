"""GPT-2 initialisation, shared by the transformer blocks and the boundary layers."""

from __future__ import annotations

import math

import torch
from torch import nn


def init_weights(module: nn.Module, n_layer: int, generator: torch.Generator) -> None:
    """GPT-2 initialisation: normal(0, 0.02) matrices, residual projections scaled by 1/sqrt(2L),
    LayerNorm weights 1, biases 0. Parameters are visited by sorted name, so the values depend on
    the seed alone, never on how the model is cut."""
    for name, p in sorted(module.named_parameters()):
        with torch.no_grad():
            if p.dim() == 1:
                is_norm_weight = name.endswith(".weight") and name.split(".")[-2].startswith("ln")
                p.fill_(1.0 if is_norm_weight else 0.0)
            else:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("proj.weight", "out.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype) * std)
