"""Validation loss of committed stage parameters, on a fixed set of held-out windows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.model.gpt import Stage
from labkit.model.partition import boundary_spec, stage_bounds


class Evaluator:
    """Mean next-byte cross-entropy (nats/byte) over `eval_batches` fixed validation microbatches."""

    def __init__(self, cfg: RunConfig, val: np.ndarray, bounds: Sequence[tuple[int, int]]) -> None:
        sampler = WindowSampler(val, cfg.model.seq_len, seed=10_000 + cfg.seed)
        self.batches = [sampler.batch(0, i, cfg.microbatch) for i in range(cfg.eval_batches)]
        self.stages = [Stage(cfg.model, first, count, boundary_spec(cfg.compression, i, len(bounds)))
                       for i, (first, count) in enumerate(bounds)]

    @torch.no_grad()
    def loss(self, stage_params: Sequence[Mapping[str, torch.Tensor]]) -> float:
        for module, params in zip(self.stages, stage_params):
            module.load_state_dict(params)
        total, tokens = 0.0, 0
        for inputs, targets in self.batches:
            x = inputs
            for module in self.stages:
                x = module(x)
            total += float(F.cross_entropy(x.flatten(0, 1).double(), targets.flatten(), reduction="sum"))
            tokens += targets.numel()
        return total / tokens


class Validation:
    """The validation loss of committed stage parameters under the layer split in force (the
    evaluator is rebuilt when a run is re-cut)."""

    def __init__(self, val: np.ndarray) -> None:
        self.val = val
        self._evaluator: Evaluator | None = None
        self._split: tuple[int, ...] | None = None

    def __call__(self, cfg: RunConfig, stage_params: Sequence[Mapping[str, torch.Tensor]]) -> float:
        if self._split != cfg.layer_split:
            self._evaluator = Evaluator(cfg, self.val, stage_bounds(cfg.layer_split))
            self._split = cfg.layer_split
        return self._evaluator.loss(stage_params)
