"""Numbers a report shows: throughput over time, utilisation, per-stage load, % of optimal.

Optimal throughput at time t: the throughput `labkit.kernels.fluid.pipeline_rate` gives (same
trainers, window, network and all-reduce) when every peer alive at t (serving, downloading or
migrating) serves at once, on the better of two layouts (`labkit.kernels.fluid.optimum_rate`):
balanced by `balanced_stages` (water-filling; for identical peers it maximises the slowest
stage's capacity exactly) or where the peers stand (with mixed devices, e.g. a plan from `labkit
plan`, that can be the better one). % of optimal over a window is 100 x microbatches finished in
it / integral of the optimal throughput over it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labkit.sim.result import SimResult


def _window(r: SimResult, start: float, end: float | None) -> slice:
    last = len(r.work) if end is None else int(np.ceil(end / r.bin_seconds - 1e-9))
    return slice(int(start // r.bin_seconds), last)


def percent_of_optimal(r: SimResult, start: float = 0.0, end: float | None = None) -> float:
    """100 x work done / optimal work over bins in [start, end) (whole bins; end None = run end)."""
    w = _window(r, start, end)
    best = float(r.optimal[w].sum())
    return 100.0 * float(r.work[w].sum()) / best if best > 0 else float("nan")


def throughput_series(r: SimResult) -> list[dict[str, float]]:
    """Per bin: start time, achieved and optimal samples per second."""
    scale = r.samples_per_microbatch / r.bin_seconds
    return [{"t": k * r.bin_seconds, "samples_per_s": float(r.work[k] * scale),
             "optimal_samples_per_s": float(r.optimal[k] * scale)} for k in range(len(r.work))]


def stage_load(r: SimResult) -> list[dict[str, float]]:
    """Per stage: mean serving peers and the share of their time spent computing (utilisation)."""
    duration = len(r.work) * r.bin_seconds
    busy, serving = r.stage_busy.sum(axis=0), r.peer_seconds.sum(axis=0)
    return [{"stage": s, "mean_peers": float(serving[s] / duration),
             "utilization": float(busy[s] / serving[s]) if serving[s] > 0 else 0.0} for s in range(len(busy))]


def summarize(r: SimResult) -> dict[str, Any]:
    """JSON-able summary: throughput, % of optimal (overall, first and last hour), utilisation."""
    duration = len(r.work) * r.bin_seconds
    hour = min(3600.0, duration)
    serving = float(r.peer_seconds.sum())
    return {
        "mode": r.mode,
        "samples_per_s": float(r.work.sum() * r.samples_per_microbatch / duration),
        "percent_of_optimal": percent_of_optimal(r),
        "percent_of_optimal_first_hour": percent_of_optimal(r, 0.0, hour),
        "percent_of_optimal_last_hour": percent_of_optimal(r, duration - hour),
        "device_utilization": float(r.stage_busy.sum()) / serving if serving > 0 else 0.0,
        "stages": stage_load(r),
        "counters": dict(r.counters),
        "wall_seconds": r.wall_seconds,
    }
