"""Whole-run checkpoints: config, completed steps, every stage's parameters and optimizer state.

The data position is the step number (sampling is counter-based) and the model has no dropout,
so restoring a checkpoint and continuing reproduces the uninterrupted run. Loading reads tensors
and plain data only (`weights_only`), so a doctored file cannot run code, and checks every entry
against the model its config describes (names, shapes and dtypes of every stage's parameters,
optimizer state for every parameter once a step has been taken, only finite numbers): a file that
is not a whole, sound labkit checkpoint raises one ValueError naming the file, the entry and what
is allowed, before any run starts from it.
"""

from __future__ import annotations

import json
import re
import stat
import threading
from pathlib import Path
from typing import Any

import torch

from labkit.config import ConfigError, RunConfig, SyncConfig
from labkit.model.gpt import Stage
from labkit.model.partition import boundary_spec, stage_bounds
from labkit.runtime.files import write_atomic

FORMAT = "labkit-checkpoint-1"
MANIFEST = "manifest.json"  # a complete periodic checkpoint's record, beside its shards
SHARD = "stage-{}.pt"  # a periodic checkpoint's shard of one stage
SAFE_GLOBALS = [SyncConfig]  # a DiLoCo stage's state records its SyncConfig
_LOADING = threading.Lock()  # torch's safe-globals list is process-wide: one loader at a time edits it


def load_tensors(path: str | Path) -> Any:
    """`torch.load` of tensors and plain data only (and `SAFE_GLOBALS`), on the CPU."""
    with _LOADING, torch.serialization.safe_globals(SAFE_GLOBALS):
        return torch.load(path, map_location="cpu", weights_only=True)


def save_checkpoint(path: str | Path, cfg: RunConfig, step: int, stages: list[dict[str, Any]]) -> Path:
    """Write a checkpoint atomically (temporary file, then rename; see `write_atomic`)."""
    data = {"format": FORMAT, "config": cfg.to_dict(), "step": step, "stages": stages,
            "torch_rng": torch.get_rng_state()}
    return write_atomic(path, lambda tmp: torch.save(data, tmp), "checkpoint")


def _read(path: Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint at `path` (a run directory: its newest, `_newest_of_run`) and its top-level
    dict, or one ValueError saying why it is not one."""
    if path.is_dir():
        return _newest_of_run(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    if not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"checkpoint {str(path)!r} is not a regular file (a FIFO, a device, ...): give a "
                         "checkpoint.pt file")
    data = _load(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a labkit checkpoint (expected format {FORMAT!r})")
    return path, data


def _load(path: Path) -> Any:
    """`load_tensors(path)`, or one ValueError naming the file and why it cannot be read."""
    try:
        return load_tensors(path)
    except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds of error on a bad file
        code = re.search(r"GLOBAL (\S+)", str(exc))
        if code:
            raise ValueError(f"checkpoint {str(path)!r} refers to code ({code.group(1)}) and is not loaded: "
                             "a labkit checkpoint holds only tensors and plain data") from None
        raise ValueError(f"checkpoint {str(path)!r} cannot be read: it is empty, truncated or not a checkpoint "
                         f"labkit wrote ({_why(exc)})") from None


def _newest_of_run(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """A run directory's newest checkpoint: the `checkpoint.pt` its run wrote when it ended, or
    the newest complete one its peers wrote meanwhile (`checkpoints/step-*/`, with its manifest:
    all that a run whose coordinator died leaves), whichever holds the later step."""
    found = [_read(run_dir / "checkpoint.pt")] if (run_dir / "checkpoint.pt").exists() else []
    manifests = sorted((run_dir / "checkpoints").glob(f"step-*/{MANIFEST}"))
    if manifests:
        found.append(_read_periodic(manifests[-1].parent))
    if not found:
        raise ValueError(f"checkpoint {str(run_dir)!r} is a folder holding no checkpoint: give a checkpoint.pt, "
                         f"or a run directory with a checkpoint.pt or a complete checkpoints/step-*/{MANIFEST}")
    return max(found, key=lambda item: item[1]["step"] if isinstance(item[1].get("step"), int) else -1)


def _read_periodic(folder: Path) -> tuple[Path, dict[str, Any]]:
    """A complete periodic checkpoint (`shards.py`): its manifest's config and step, and each
    stage's shard, as one checkpoint dict (without torch's RNG state: training draws from none)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        step, config, count = manifest["step"], manifest["config"], int(manifest["stages"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"checkpoint {str(folder)!r} is damaged: its {MANIFEST} is not one labkit wrote "
                         f"({type(exc).__name__}: {exc})") from None
    stages = [_load(folder / SHARD.format(stage)) for stage in range(count)]
    return folder, {"format": FORMAT, "config": config, "step": step, "stages": stages}


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
    if path.is_file() and not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 and rng.dim() == 1):
        raise bad("torch_rng", "torch's RNG state (a uint8 tensor)")  # a periodic checkpoint's shards hold none
    return saved


def _expected(cfg: RunConfig, stage: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Stage `stage` of `cfg`'s model as meta tensors (names, shapes, dtypes; no memory), and its
    parameters' names in the order its optimizer numbers them."""
    first, count = stage_bounds(cfg.layer_split)[stage]
    with torch.device("meta"):
        module = Stage(cfg.model, first, count, boundary_spec(cfg.compression, stage, cfg.stages))
    return module.state_dict(), [name for name, _ in module.named_parameters()]


def _check_stage(where: str, state: dict[str, Any], expected: dict[str, torch.Tensor], names: list[str], step: int,
                 cfg: RunConfig) -> None:
    """One stage's state: every parameter set named, shaped and typed as the model's, finite
    numbers throughout, and optimizer state for every parameter once a step has been taken."""
    for key in ("params", "compute", "global_params"):
        if key in state:
            _check_tensors(f"{where}['{key}']", state[key], expected)
    _check_finite(where, state)
    optimizer = state.get("optimizer")
    if step == 0 and optimizer is None:
        return
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
            and isinstance(optimizer.get("param_groups"), list) and optimizer["param_groups"]):
        raise ValueError(f"{where}['optimizer']={_short(optimizer)} is not allowed: a checkpoint at step {step} "
                         "holds the optimizer's state dict (state and param_groups); without it the run would "
                         "restart the optimizer from nothing")
    for index, entry in optimizer["state"].items():
        if not (isinstance(index, int) and 0 <= index < len(names) and isinstance(entry, dict)):
            raise ValueError(f"{where}['optimizer']['state'] has an entry {_short(index)}: allowed are the "
                             f"stage's parameter numbers 0..{len(names) - 1}, each with a dict of tensors")
        _check_tensors(f"{where}['optimizer']['state'][{index}] ({names[index]})",
                       {k: v for k, v in entry.items() if isinstance(v, torch.Tensor) and v.dim() > 0},
                       expected[names[index]], exact=False)
    missing = [n for i, n in enumerate(names) if i not in optimizer["state"]]
    if missing and "outer" not in state and (cfg.optimizer == "adamw" or cfg.momentum > 0):
        raise ValueError(f"{where}['optimizer'] lacks the state of {len(missing)} of {len(names)} parameters "
                         f"({missing[0]}, ...): a checkpoint at step {step} holds {cfg.optimizer}'s state for "
                         "every parameter; without it the run would restart them from nothing")


def _check_tensors(where: str, tensors: object, expected: dict[str, torch.Tensor] | torch.Tensor,
                   exact: bool = True) -> None:
    """`tensors` is a dict of tensors named (when `exact`), shaped and typed as `expected` (a dict
    by name, or one tensor every entry must match)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"{where}={_short(tensors)} is not allowed: a dict of tensors by name")
    if exact and isinstance(expected, dict) and tensors.keys() != expected.keys():
        extra, lacking = sorted(tensors.keys() - expected.keys()), sorted(expected.keys() - tensors.keys())
        raise ValueError(f"{where} does not hold this stage's tensors: " + "; ".join(
            f"{what} {names[:2]}{' ...' if len(names) > 2 else ''}" for what, names in
            (("unknown", extra), ("missing", lacking)) if names) + f" (the model has {len(expected)})")
    for name, value in tensors.items():
        want = expected[name] if isinstance(expected, dict) else expected
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{where}[{name!r}]={_short(value)} is not allowed: a tensor")
        if value.shape != want.shape or value.dtype != want.dtype:
            raise ValueError(f"{where}[{name!r}] is a {value.dtype} tensor of shape {list(value.shape)}; the "
                             f"model's is {want.dtype} of shape {list(want.shape)}")


def _check_finite(where: str, value: object, key: str = "") -> None:
    """Every floating tensor anywhere in `value` holds finite numbers only."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}{key} holds NaN or infinite values: a run resumes from finite numbers only")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(where, v, f"{key}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(where, v, f"{key}[{i}]")


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
    path, data = _read(Path(path))
    saved = _entries(path, data)
    if saved.model != cfg.model or saved.stages != cfg.stages or saved.compression != cfg.compression:
        raise ValueError(
            f"checkpoint {path} holds model {saved.model} in {saved.stages} stages with {saved.compression}; "
            f"the run asks for {cfg.model} in {cfg.stages} stages with {cfg.compression}"
        )
    for index, state in enumerate(data["stages"]):
        _check_stage(f"checkpoint {path} is damaged: stages[{index}]", state, *_expected(saved, index), data["step"],
                     saved)
    if data["step"] >= cfg.steps:
        raise ValueError(f"checkpoint {path} is at step {data['step']}, not before the run's last step {cfg.steps}")
    try:
        if "torch_rng" in data:
            torch.set_rng_state(data["torch_rng"])
    except RuntimeError as exc:
        raise ValueError(f"checkpoint {path} is damaged: torch_rng is not a valid RNG state ({exc})") from None
    return data
