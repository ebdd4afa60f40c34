"""Closed-form traffic of a SWARM step: pipeline bytes (activations and their gradients) and
data-parallel bytes (gradient all-reduce over each stage's ring, or DiLoCo pseudo-gradients every
H steps).

Counts exactly what the in-process runtime's hop and sync events count with the fp32 codec and no
boundary layers, so a measured run checks the formula. Pure: no torch.
"""

from __future__ import annotations

from labkit.config import ModelConfig, RunConfig

FLOAT_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2}
TOKEN_BYTES = 8  # token ids and targets travel as int64


def pipeline_bytes_per_step(cfg: RunConfig) -> list[int]:
    """Bytes per optimizer step at each stage: every hop's request plus its reply."""
    m, s_count = cfg.model, cfg.stages
    act = cfg.global_batch * m.seq_len * m.d_model * FLOAT_BYTES[m.dtype]  # one activation tensor, whole batch
    tokens = cfg.global_batch * m.seq_len * TOKEN_BYTES
    out = []
    for s in range(s_count):
        if s_count == 1:
            out.append(2 * tokens)  # tokens and targets in, no activation gradient back
        elif s == s_count - 1:
            out.append(act + tokens + act)  # activation and targets in, its gradient back
        else:
            forward = (tokens if s == 0 else act) + act  # input in, output back
            backward = act + (0 if s == 0 else act)  # output gradient in, input gradient back
            out.append(forward + backward)
    return out


def dp_bytes_per_step(cfg: RunConfig, model: ModelConfig | None = None) -> list[float]:
    """Bytes per optimizer step at each stage: its peers reduce their gradients (or
    pseudo-gradients) over a ring, where each of the p peers sends 2 (p - 1) / p of its tensors to
    its neighbour, every step (all-reduce) or every H steps (DiLoCo)."""
    m = model or cfg.model
    every = cfg.sync.inner_steps if cfg.sync.mode == "diloco" else 1
    bounds, first = [], 0
    for count in cfg.layer_split:
        bounds.append((first, count))
        first += count
    return [2 * (p - 1) * m.stage_params(f, c) * FLOAT_BYTES[m.dtype] / every
            for (f, c), p in zip(bounds, cfg.peers_per_stage)]
