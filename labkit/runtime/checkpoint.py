"""Whole-run checkpoints: config, completed steps, every stage's parameters and optimizer state.

The data position is the step number (sampling is counter-based) and the model has no dropout,
so restoring a checkpoint and continuing reproduces the uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from labkit.config import RunConfig
from labkit.runtime.files import write_atomic

FORMAT = "labkit-checkpoint-1"


def save_checkpoint(path: str | Path, cfg: RunConfig, step: int, stages: list[dict[str, Any]]) -> Path:
    """Write a checkpoint atomically (temporary file, then rename; see `write_atomic`)."""
    data = {"format": FORMAT, "config": cfg.to_dict(), "step": step, "stages": stages,
            "torch_rng": torch.get_rng_state()}
    return write_atomic(path, lambda tmp: torch.save(data, tmp), "checkpoint")


def load_checkpoint(path: str | Path, cfg: RunConfig) -> dict[str, Any]:
    """Read a checkpoint and check it fits `cfg` (the same model); the run continues with the
    checkpoint's layer split and sync mode, which may have changed mid-run."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    data = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a labkit checkpoint (expected format {FORMAT!r})")
    saved = RunConfig.from_dict(data["config"])
    if saved.model != cfg.model or saved.stages != cfg.stages or saved.compression != cfg.compression:
        raise ValueError(
            f"checkpoint {path} holds model {saved.model} in {saved.stages} stages with {saved.compression}; "
            f"the run asks for {cfg.model} in {cfg.stages} stages with {cfg.compression}"
        )
    if data["step"] >= cfg.steps:
        raise ValueError(f"checkpoint {path} is at step {data['step']}, not before the run's last step {cfg.steps}")
    torch.set_rng_state(data["torch_rng"])
    return data
