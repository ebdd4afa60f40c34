"""Cutting the model into pipeline stages, and re-cutting it from a full state dict without loss.

The full model's state dict uses global names (see `labkit.model.gpt.Stage`), so every stage's
state is a slice of it and any split can be rebuilt from the union of the stages' states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch

from labkit.config import CompressionConfig, ConfigError, ModelConfig, even_split
from labkit.model.boundary import init_boundary_state
from labkit.model.gpt import Stage
from labkit.model.init import init_weights

State = dict[str, torch.Tensor]


def resolve_split(cfg: ModelConfig, split: int | Sequence[int]) -> tuple[int, ...]:
    """Blocks per stage from a stage count or an explicit split such as [3, 1]."""
    if isinstance(split, int) and not isinstance(split, bool):
        if not 1 <= split <= cfg.n_layer:
            raise ConfigError("partition", "stages", split, f"an integer in [1, {cfg.n_layer}] (the model's layers)")
        return even_split(cfg.n_layer, split)
    out = tuple(split)
    if not out or any(not isinstance(n, int) or n < 1 for n in out) or sum(out) != cfg.n_layer:
        raise ConfigError("partition", "layer_split", list(out), f"integers >= 1 summing to the model's {cfg.n_layer} layers")
    return out


def stage_bounds(split: Sequence[int]) -> list[tuple[int, int]]:
    """(first block, block count) of every stage."""
    bounds, first = [], 0
    for count in split:
        bounds.append((first, count))
        first += count
    return bounds


def init_full_state(cfg: ModelConfig, seed: int) -> State:
    """Freshly initialised parameters of the whole model, determined by the seed alone."""
    full = Stage(replace(cfg, share_layers=False), 0, cfg.n_layer)
    init_weights(full, cfg.n_layer, torch.Generator().manual_seed(seed))
    return {k: v.detach().clone() for k, v in full.state_dict().items()}


def boundary_spec(compression: CompressionConfig | None, index: int, stages: int) -> tuple[str, int, int, int] | None:
    """What `Stage` needs to hold its boundary halves (None without boundary layers)."""
    if compression is None or compression.boundary == "none" or stages == 1:
        return None
    return (compression.boundary, compression.factor, index, stages)


def init_run_state(cfg: ModelConfig, seed: int, compression: CompressionConfig | None = None, stages: int = 1) -> State:
    """The whole model's initial state plus, with boundary layers, all `stages - 1` boundaries."""
    state = init_full_state(cfg, seed)
    if boundary_spec(compression, 0, stages) is not None:
        state |= init_boundary_state(cfg.d_model, compression.factor, compression.boundary, stages, seed,
                                     getattr(torch, cfg.dtype))
    return state


def build_stage(cfg: ModelConfig, first: int, count: int, state: Mapping[str, torch.Tensor],
                boundary: tuple[str, int, int, int] | None = None) -> Stage:
    """A stage module holding blocks first..first+count-1, loaded from a (full or larger) state."""
    stage = Stage(cfg, first, count, boundary)
    wanted = stage.state_dict().keys()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise KeyError(f"state lacks {len(missing)} parameters of stage starting at block {first}: {missing[:3]}")
    stage.load_state_dict({k: state[k] for k in wanted}, strict=True)
    return stage


def build_stages(cfg: ModelConfig, split: int | Sequence[int], state: Mapping[str, torch.Tensor],
                 compression: CompressionConfig | None = None) -> list[Stage]:
    """Cut the model described by `state` into stage modules by a stage count or a layer split."""
    bounds = stage_bounds(resolve_split(cfg, split))
    return [build_stage(cfg, first, count, state, boundary_spec(compression, i, len(bounds)))
            for i, (first, count) in enumerate(bounds)]


def assemble(stage_states: Sequence[Mapping[str, torch.Tensor]]) -> State:
    """The full model's state dict from the states of all stages (global names make this a union)."""
    full: State = {}
    for state in stage_states:
        for k, v in state.items():
            full[k] = v.detach().clone()
    return full
