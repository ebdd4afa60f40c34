"""Re-cutting a running model: move blocks between stages with their optimizer state.

Parameters have global names, so the stages' states are slices of one model. Optimizer state is
stored per parameter index of each stage's module; it is re-keyed by parameter name, re-sliced for
the new split and re-indexed for the new modules. Nothing is recomputed, so the assembled model
and its optimizer state are bit-identical before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from labkit.model import Stage

StageState = dict[str, Any]


def _by_name(state: StageState) -> dict[str, Any]:
    """A stage's per-parameter optimizer state keyed by parameter name."""
    names = state["param_names"]
    return {names[i]: s for i, s in state["optimizer"]["state"].items()}


def recut_states(states: Sequence[StageState], build: Callable[[int, dict[str, torch.Tensor]], Stage],
                 stages: int) -> list[StageState]:
    """The states of `stages` stages built by `build(stage, params)` from the union of `states`."""
    params: dict[str, torch.Tensor] = {}
    per_param: dict[str, Any] = {}
    for state in states:
        params.update(state["params"])
        per_param.update(_by_name(state))
    hyper = {k: v for k, v in states[0]["optimizer"]["param_groups"][0].items() if k != "params"}
    out = []
    for stage in range(stages):
        module = build(stage, params)
        names = [n for n, _ in module.named_parameters()]
        optimizer = {"state": {i: per_param[n] for i, n in enumerate(names) if n in per_param},
                     "param_groups": [{**hyper, "params": list(range(len(names)))}]}
        out.append({"params": module.state_dict(), "optimizer": optimizer, "param_names": names})
    return out
