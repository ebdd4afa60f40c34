"""Shared by the compression and DiLoCo experiments: run a config to the end and keep its summary."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

import labkit
from labkit.config import RunConfig


def run_all(configs: dict[str, RunConfig]) -> dict[str, dict[str, Any]]:
    """Run each config in turn (one at a time: the machine has 2 cores) with a progress bar."""
    results = {}
    for name, cfg in tqdm(configs.items(), desc="runs", unit="run"):
        summary = labkit.launch(cfg).wait()
        if summary["status"] != "finished":
            raise RuntimeError(f"{name}: {summary}")
        results[name] = summary
    return results


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Print a markdown table under a one-line title."""
    print(title)
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
