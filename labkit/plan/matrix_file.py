"""A measured cluster as a JSON file of matrices: what `labkit plan --network FILE` reads.

    {"delay_ms": [[0, 5], [5, 0]], "bandwidth_gbps": [[0, 2], [2, 0]],
     "stages": 2, "dp_message_gb": 0.9, "pp_message_gb": 0.5}

`delay_ms` (milliseconds) and `bandwidth_gbps` (Gbit/s) are N x N, row = sender, diagonal
ignored. Optional: `stages` (D_PP, a divisor of N) and DT-FM's message sizes in GB (1e9 bytes):
`dp_message_gb` (one stage's gradients, c_DP) and `pp_message_gb` (one macro-batch's activations
between two stages, c_PP). Devices are named d0..d{N-1}.

>>> net = network_from_dict({"delay_ms": [[0, 5], [5, 0]], "bandwidth_gbps": [[0, 2], [2, 0]]})
>>> net.scenario.n, float(net.scenario.bandwidth[0, 1])
(2, 250000000.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labkit.config import ConfigError
from labkit.jsonfile import read_json
from labkit.plan.network import BANDWIDTH_RANGE, MAX_DELAY, MAX_DEVICES, Device, NetworkScenario, finite_number

OWNER = "network"
KEYS = ("delay_ms", "bandwidth_gbps", "stages", "dp_message_gb", "pp_message_gb")
UNITS = {"delay_ms": (0.0, MAX_DELAY * 1e3), "bandwidth_gbps": tuple(b * 8e-9 for b in BANDWIDTH_RANGE)}  # the scenario's bounds


@dataclass(frozen=True)
class MatrixNetwork:
    """A scenario built from matrices, with the stage count and message sizes the file gives (or None)."""

    scenario: NetworkScenario
    stages: int | None
    dp_message_gb: float | None
    pp_message_gb: float | None


def _square(data: dict[str, Any], key: str, n: int | None, positive: bool) -> np.ndarray:
    """One N x N matrix of finite numbers >= 0 (> 0 off the diagonal when `positive`)."""
    rows = data[key]
    size = f"{n}x{n}" if n else "N x N"
    if not (isinstance(rows, list) and rows and all(isinstance(r, list) for r in rows)):
        raise ConfigError(OWNER, key, type(rows).__name__, f"a list of rows: an {size} matrix of numbers")
    if any(len(r) != len(rows) for r in rows) or (n is not None and len(rows) != n):
        shape = [len(rows), sorted({len(r) for r in rows})]
        raise ConfigError(OWNER, key, f"{shape[0]} rows of lengths {shape[1]}",
                          f"an {size} matrix (same size as delay_ms), at most {MAX_DEVICES} devices")
    low, high = UNITS[key]
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            ok = finite_number(v) and v >= 0 and (i == j or v <= high)
            if not ok or (positive and i != j and v < low):
                raise ConfigError(OWNER, f"{key}[{i}][{j}]", v, f"a number > 0 between distinct devices "
                                  f"(from {low:g} to {high:g})" if positive else f"a number from 0 to {high:g}")
    return np.array(rows, dtype=np.float64)


def _positive(data: dict[str, Any], key: str) -> float | None:
    v = data.get(key)
    if v is not None and not (finite_number(v) and v > 0):
        raise ConfigError(OWNER, key, v, "a finite number of GB > 0")
    return None if v is None else float(v)


def network_from_dict(data: Any, name: str = "network") -> MatrixNetwork:
    """Validate a parsed file; every problem raises one ConfigError naming the key and what is allowed."""
    if not isinstance(data, dict):
        raise ConfigError(OWNER, "json", type(data).__name__, f"a JSON object with keys {list(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(OWNER, unknown[0], data[unknown[0]], f"one of the keys {list(KEYS)}")
    for key in KEYS[:2]:
        if key not in data:
            raise ConfigError(OWNER, key, None, "present: an N x N matrix (delay_ms in ms, bandwidth_gbps in Gbit/s)")
    delay = _square(data, "delay_ms", None, positive=False)
    n = delay.shape[0]
    if n > MAX_DEVICES:
        raise ConfigError(OWNER, "delay_ms", f"{n} devices", f"at most {MAX_DEVICES} (what the planners handle on a laptop)")
    bandwidth = _square(data, "bandwidth_gbps", n, positive=True)
    stages = data.get("stages")
    if stages is not None and not (isinstance(stages, int) and not isinstance(stages, bool) and stages >= 1
                                   and n % stages == 0):
        raise ConfigError(OWNER, "stages", stages, f"a divisor of the {n} devices: "
                                                   f"{[k for k in range(1, n + 1) if n % k == 0]}")
    scenario = NetworkScenario(name=name, devices=tuple(Device(name=f"d{i}") for i in range(n)),
                               delay=delay / 1e3, bandwidth=bandwidth * 1e9 / 8, notes="read from delay_ms / bandwidth_gbps")
    return MatrixNetwork(scenario, stages, _positive(data, "dp_message_gb"), _positive(data, "pp_message_gb"))


def load_network(path: str | Path) -> MatrixNetwork:
    """Read and validate a matrix file (see the module docstring)."""
    return network_from_dict(read_json(path, OWNER, "a JSON file of delay_ms and bandwidth_gbps matrices"),
                             name=Path(path).stem)
