"""Shared by the experiments that repeat their runs over seeds: run every config once per seed,
and print a row's mean +- standard deviation over the seeds."""

from __future__ import annotations

import statistics
from typing import Any

from _runs import run_all

from labkit.config import RunConfig


def run_seeds(configs: dict[str, RunConfig], seeds: int) -> dict[str, list[dict[str, Any]]]:
    """Each config's run summaries for seeds 0 .. seeds - 1, in seed order (seed 0 is the config's
    single-seed run, so `seeds=1` reproduces the one-seed tables)."""
    if seeds < 1:
        raise SystemExit(f"--seeds must be >= 1, got {seeds}")
    per_seed = [run_all({name: cfg.replace(seed=s) for name, cfg in configs.items()}) for s in range(seeds)]
    return {name: [runs[name] for runs in per_seed] for name in configs}


def mean_std(values: list[float], digits: int = 4) -> str:
    """'m' for one value, 'm +- sd' (sample standard deviation) for several."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"
