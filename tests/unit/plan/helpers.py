"""Build small scenarios whose DT-FM pair costs are exactly a given matrix W."""

from __future__ import annotations

import numpy as np

from labkit.plan.network import Device, NetworkScenario
from labkit.plan.workload import Workload

C_PP = 1e9  # bytes; with delay 0, bandwidth 2·C_PP / W makes w_pp = W


def scenario_with_costs(w: np.ndarray) -> NetworkScenario:
    """Delay 0 and bandwidth 2·C_PP/W, so that w_pp == W (and w_dp == W with `workload_for`)."""
    n = len(w)
    bw = np.full((n, n), 1.0)
    off = ~np.eye(n, dtype=bool)
    bw[off] = 2 * C_PP / w[off]
    devs = tuple(Device(name=f"d{i}") for i in range(n))
    return NetworkScenario(name="hand", devices=devs, delay=np.zeros((n, n)), bandwidth=bw)


def workload_for(replicas: int) -> Workload:
    """c_DP = D_DP · c_PP so that 2·c_DP/(D_DP·β) equals 2·c_PP/β."""
    return Workload(n_layer=8, c_pp_given=C_PP, c_dp_given=replicas * C_PP)


def symmetric(n: int, entries: dict[tuple[int, int], float], default: float = 100.0) -> np.ndarray:
    w = np.full((n, n), default)
    np.fill_diagonal(w, 0.0)
    for (i, j), v in entries.items():
        w[i, j] = w[j, i] = v
    return w
