"""The stage-partitionable transformer: `Stage` modules and the functions that cut the model.

The torch-backed names are imported on first use, so `labkit.model.memory` (a pure estimate)
stays importable without torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.model.gpt import Stage
    from labkit.model.partition import (assemble, boundary_spec, build_stage, build_stages, init_full_state,
                                        init_run_state, resolve_split, stage_bounds)

__all__ = ["Stage", "assemble", "boundary_spec", "build_stage", "build_stages", "init_full_state", "init_run_state",
           "resolve_split", "stage_bounds"]

_HOME = {name: "labkit.model.gpt" if name == "Stage" else "labkit.model.partition" for name in __all__}


def __getattr__(name: str) -> Any:
    """Import `name` from its torch-backed module when it is first used, then keep it here."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
