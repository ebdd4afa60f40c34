"""The plain single-process training loop SWARM must match, on exactly the same samples.

Used by the equivalence tests (SWARM with any stages x peers ends with these parameters, to
float tolerance) and by the overhead benchmark as the baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.model import Stage, build_stage, init_full_state
from labkit.runtime.optim import apply_step, make_optimizer


def reference_model(cfg: RunConfig) -> Stage:
    """The whole model as one module, initialised exactly as a SWARM run with `cfg` would be."""
    return build_stage(cfg.model, 0, cfg.model.n_layer, init_full_state(cfg.model, cfg.seed))


def train_reference(cfg: RunConfig, sampler: WindowSampler, steps: int | None = None,
                    model: Stage | None = None) -> tuple[Stage, list[float]]:
    """Train `steps` optimizer steps of `cfg` in one process; returns the model and step losses.

    With `cfg.delayed_updates`, gradients are computed on parameters one update behind: the
    optimizer steps a separate copy, which the model adopts at the next step (as SWARM's peers do).
    """
    model = model or reference_model(cfg)
    params = list(model.parameters())
    stepped = [torch.nn.Parameter(p.detach().clone()) for p in params] if cfg.delayed_updates else params
    optimizer = make_optimizer(stepped, cfg)
    scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
    losses = []
    for step in range(steps if steps is not None else cfg.steps):
        total = 0.0
        for index in range(cfg.microbatches_per_step):
            inputs, targets = sampler.batch(step, index, cfg.microbatch)
            logits = model(inputs)  # (B, T, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") * scale
            loss.backward()  # gradients accumulate over the global batch
            total += float(loss.detach())
        if cfg.delayed_updates:
            for p, s in zip(params, stepped):
                s.grad, p.grad = p.grad, None
                with torch.no_grad():
                    p.copy_(s)  # adopt the previous step's result, then step the copy
        apply_step(optimizer, step, cfg)
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
    if cfg.delayed_updates:
        with torch.no_grad():
            for p, s in zip(params, stepped):
                p.copy_(s)  # the newest parameters, as a SWARM run reports them
    return model, losses
