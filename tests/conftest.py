"""Shared fixtures: small, fast run configs and reaping of leaked threads' runs."""

from __future__ import annotations

import pytest

from labkit.config import DataConfig, ModelConfig, RunConfig


@pytest.fixture
def small_run() -> RunConfig:
    """A nano model on a capped stdlib corpus: a few steps take a second or two."""
    return RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000),
                     global_batch=16, microbatch=4, steps=4, eval_every=0, eval_batches=2, lr=3e-3, warmup_steps=1)
