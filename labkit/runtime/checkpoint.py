"""Whole-run checkpoints: config, completed steps, every stage's parameters and optimizer state.

The data position is the step number (sampling is counter-based) and the model has no dropout,
so restoring a checkpoint and continuing reproduces the uninterrupted run. Loading reads tensors
and plain data only (`weights_only`), so a doctored file cannot run code, and checks every entry:
a file that is not a whole labkit checkpoint raises one ValueError naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from labkit.config import ConfigError, RunConfig, SyncConfig
from labkit.runtime.files import write_atomic

FORMAT = "labkit-checkpoint-1"
SAFE_GLOBALS = [SyncConfig]  # a DiLoCo stage's state records its SyncConfig


def save_checkpoint(path: str | Path, cfg: RunConfig, step: int, stages: list[dict[str, Any]]) -> Path:
    """Write a checkpoint atomically (temporary file, then rename; see `write_atomic`)."""
    data = {"format": FORMAT, "config": cfg.to_dict(), "step": step, "stages": stages,
            "torch_rng": torch.get_rng_state()}
    return write_atomic(path, lambda tmp: torch.save(data, tmp), "checkpoint")


def _read(path: Path) -> dict[str, Any]:
    """The checkpoint's top-level dict, or one ValueError saying why the file is not one."""
    if path.is_dir():
        raise ValueError(f"checkpoint {str(path)!r} is a folder: give the checkpoint.pt file in it")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds of error on a bad file
        code = re.search(r"GLOBAL (\S+)", str(exc))
        if code:
            raise ValueError(f"checkpoint {str(path)!r} refers to code ({code.group(1)}) and is not loaded: "
                             "a labkit checkpoint holds only tensors and plain data") from None
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: it is empty, truncated or not a checkpoint "
                         f"labkit wrote ({_why(exc)})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a labkit checkpoint (expected format {FORMAT!r})")
    return data


def _entries(path: Path, data: dict[str, Any]) -> RunConfig:
    """The saved config, after checking every entry a resumed run reads has the right shape."""
    def bad(key: str, allowed: str) -> ValueError:
        return ValueError(f"checkpoint {path} is damaged: {key}={_short(data.get(key))} is not {allowed}")

    if not isinstance(data.get("config"), dict):
        raise bad("config", "a RunConfig dict")
    try:
        saved = RunConfig.from_dict(data["config"])
    except (ConfigError, TypeError) as exc:
        raise ValueError(f"checkpoint {path} is damaged: its config is not a valid RunConfig ({exc})") from None
    step = data.get("step")
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        raise bad("step", "an integer >= 0")
    stages = data.get("stages")
    if not (isinstance(stages, list) and len(stages) == saved.stages
            and all(isinstance(s, dict) and isinstance(s.get("params"), dict) for s in stages)):
        raise bad("stages", f"a list of {saved.stages} stage states, each with its 'params'")
    rng = data.get("torch_rng")
    if not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 and rng.dim() == 1):
        raise bad("torch_rng", "torch's RNG state (a uint8 tensor)")
    return saved


def _why(exc: Exception) -> str:
    """The gist of torch's error on one short line."""
    text = str(exc)
    if text.startswith("Weights only load failed"):
        return "its bytes are not a pickle of tensors and plain data"
    first = text.split(". ")[0].strip()
    return f"{type(exc).__name__}: {first[:100]}" if first else type(exc).__name__


def _short(value: object) -> str:
    """A value's repr cut to one short line for an error message."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def load_checkpoint(path: str | Path, cfg: RunConfig) -> dict[str, Any]:
    """Read a checkpoint and check it fits `cfg` (the same model); the run continues with the
    checkpoint's layer split and sync mode, which may have changed mid-run."""
    path = Path(path)
    data = _read(path)
    saved = _entries(path, data)
    if saved.model != cfg.model or saved.stages != cfg.stages or saved.compression != cfg.compression:
        raise ValueError(
            f"checkpoint {path} holds model {saved.model} in {saved.stages} stages with {saved.compression}; "
            f"the run asks for {cfg.model} in {cfg.stages} stages with {cfg.compression}"
        )
    if data["step"] >= cfg.steps:
        raise ValueError(f"checkpoint {path} is at step {data['step']}, not before the run's last step {cfg.steps}")
    try:
        torch.set_rng_state(data["torch_rng"])
    except RuntimeError as exc:
        raise ValueError(f"checkpoint {path} is damaged: torch_rng is not a valid RNG state ({exc})") from None
    return data
