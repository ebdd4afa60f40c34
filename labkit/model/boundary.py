"""Compression-aware boundary layers between pipeline stages (SWARM seed, Appendix J.1).

The stage output `h = MLP(x)` (a block's output, residual included) is compressed on the sending
stage and expanded on the receiving one:

    bottleneck: LayerNorm(LayerNorm(h) @ w_c) @ w_d      w_c: d x d/f (send),  w_d: d/f x d (recv)
    maxout:     LayerNorm(maxout_f(LayerNorm(h))) @ w_d  max over windows of f features (send),
                                                         w_d: d/f x d (recv)

The sending half ends with the outer LayerNorm, so the d/f features that cross the link are
normalised (which also suits int8 quantization); the receiving half is the single matrix w_d.
Global names: the halves of boundary s (between stage s and s+1) are `boundaries.{s}.send.*`, held
by stage s, and `boundaries.{s}.recv.*`, held by stage s+1.
"""

from __future__ import annotations

import torch
from torch import nn

from labkit.config import ConfigError
from labkit.model.init import init_weights

KINDS = ("bottleneck", "maxout")


def _check(d_model: int, factor: int, kind: str) -> int:
    """Validate the boundary shape and return the number of features sent (d_model / factor)."""
    if kind not in KINDS:
        raise ConfigError("boundary", "kind", kind, f"one of {list(KINDS)}")
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1 or d_model % factor:
        raise ConfigError("boundary", "factor", factor, f"an integer >= 1 dividing d_model={d_model}")
    return d_model // factor


class BoundarySend(nn.Module):
    """Sending half, at the end of stage s: (..., d_model) -> (..., d_model / factor)."""

    def __init__(self, d_model: int, factor: int, kind: str) -> None:
        super().__init__()
        self.sent = _check(d_model, factor, kind)
        self.d_model, self.factor, self.kind = d_model, factor, kind
        self.ln_in = nn.LayerNorm(d_model)
        if kind == "bottleneck":
            self.compress = nn.Linear(d_model, self.sent, bias=False)  # w_c
        self.ln_out = nn.LayerNorm(self.sent)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.ln_in(h)  # (..., d)
        if self.kind == "bottleneck":
            z = self.compress(z)  # (..., d/f)
        else:
            z = z.unflatten(-1, (self.sent, self.factor)).amax(dim=-1)  # (..., d/f): max of each window
        return self.ln_out(z)


class BoundaryRecv(nn.Module):
    """Receiving half, at the start of stage s+1: (..., d_model / factor) -> (..., d_model)."""

    def __init__(self, d_model: int, factor: int, kind: str) -> None:
        super().__init__()
        self.sent = _check(d_model, factor, kind)
        self.d_model, self.factor, self.kind = d_model, factor, kind
        self.decompress = nn.Linear(self.sent, d_model, bias=False)  # w_d

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decompress(z)


def init_boundary_state(d_model: int, factor: int, kind: str, stages: int, seed: int,
                        dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Fresh parameters of all `stages - 1` boundaries under their global names.

    Boundary s draws from its own generator seeded by (seed, s), so its values depend on the seed
    and its index alone, not on how many stages there are."""
    state: dict[str, torch.Tensor] = {}
    for s in range(stages - 1):
        pair = nn.ModuleDict({"send": BoundarySend(d_model, factor, kind),
                              "recv": BoundaryRecv(d_model, factor, kind)}).to(dtype)
        init_weights(pair, 1, torch.Generator().manual_seed(seed * 1_000_003 + s))  # no residual projection: std 0.02
        state.update({f"boundaries.{s}.{k}": v.detach().clone() for k, v in pair.state_dict().items()})
    return state
