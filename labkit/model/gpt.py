"""A GPT-style decoder cut into pipeline stages.

Pre-LayerNorm blocks with causal self-attention and a GELU MLP; learned or rotary positions;
untied input embedding and output head. A `Stage` holds a contiguous run of blocks; the first
stage also holds the embeddings and the last the final norm and head. Parameter names are global
(`blocks.5.mlp.fc.weight` is block 5 wherever it lives), so a stage's state dict is a slice of
the full model's and re-cutting is a matter of re-slicing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from labkit.config import ModelConfig
from labkit.model.boundary import BoundaryRecv, BoundarySend


def rotary_tables(seq_len: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of rotary position embeddings, each (T, head_dim/2)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of features of x (B, nh, T, hs) by position-dependent angles."""
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, nh, T, hs/2) each
    t = x.shape[-2]
    c, s = cos[:t], sin[:t]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, optionally with rotary positions."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.rotary = cfg.positions == "rotary"
        if self.rotary:
            cos, sin = rotary_tables(cfg.seq_len, cfg.head_dim, torch.float32)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)  # (B, T, d) each
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        if self.rotary:
            cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """Two-layer GELU feed-forward network, 4x wide."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Stage(nn.Module):
    """Blocks `first .. first+count-1` of the model, plus embeddings / head at the ends.

    Input of the first stage: token ids (B, T) int64. Input of later stages and output of all but
    the last: hidden states (B, T, d). Output of the last stage: logits (B, T, vocab).
    With `share_layers`, the stage holds one block (named by its first index) applied `count` times.
    `boundary` = (kind, factor, stage index, stage count) adds compression-aware boundary halves:
    the receiving half of boundary index-1 before the blocks, the sending half of boundary index after.
    """

    def __init__(self, cfg: ModelConfig, first: int, count: int, boundary: tuple[str, int, int, int] | None = None) -> None:
        super().__init__()
        self.cfg, self.first, self.count = cfg, first, count
        self.is_first = first == 0
        self.is_last = first + count == cfg.n_layer
        if self.is_first:
            self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.positions == "learned":
                self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        held = [first] if cfg.share_layers else range(first, first + count)
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in held})
        if self.is_last:
            self.ln_f = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.boundaries = nn.ModuleDict()  # boundary index -> {"recv" | "send": half}
        if boundary is not None:
            kind, factor, index, stages = boundary
            if index > 0:
                self.boundaries[str(index - 1)] = nn.ModuleDict({"recv": BoundaryRecv(cfg.d_model, factor, kind)})
            if index < stages - 1:
                self.boundaries[str(index)] = nn.ModuleDict({"send": BoundarySend(cfg.d_model, factor, kind)})
        self.to(dtype=getattr(torch, cfg.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        halves = [(side, half) for pair in self.boundaries.values() for side, half in pair.items()]
        for side, half in halves:
            if side == "recv":
                x = half(x)  # (B, T, d/f) -> (B, T, d)
        if self.is_first:
            t = x.shape[1]
            x = self.tok_emb(x)  # (B, T, d)
            if self.cfg.positions == "learned":
                x = x + self.pos_emb(torch.arange(t, device=x.device))
        blocks = list(self.blocks.values())
        for i in range(self.count):
            x = blocks[0 if self.cfg.share_layers else i](x)
        if self.is_last:
            x = self.head(self.ln_f(x))  # (B, T, vocab)
        for side, half in halves:
            if side == "send":
                x = half(x)  # (B, T, d) -> (B, T, d/f)
        return x
