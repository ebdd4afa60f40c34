"""Shared by the experiments: run configs to the end and keep their summaries, print tables, and
parse the common `--out` flag."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from tqdm import tqdm

import labkit
from labkit.config import RunConfig
from labkit.runtime.world import world_config


def run_all(configs: dict[str, RunConfig]) -> dict[str, dict[str, Any]]:
    """Run each config in turn (one at a time: the machine has 2 cores) with a progress bar."""
    results = {}
    for name, cfg in tqdm(configs.items(), desc="runs", unit="run"):
        summary = labkit.launch(cfg).wait()
        if summary["status"] != "finished":
            raise RuntimeError(f"{name}: {summary}")
        results[name] = summary
    return results


def run_world(name: str, spec: dict[str, Any], base: RunConfig, folder: Path,
              timeout: float = 1800) -> tuple[RunConfig, list[dict[str, Any]], float]:
    """Write world `spec` to a file in `folder`, run it to the end on `base` (`world_config`),
    and return its config, its events and the median seconds between its steps."""
    path = folder / f"{name.replace(' ', '_')}.json"
    path.write_text(json.dumps(spec))
    cfg = world_config(str(path), base)
    run = labkit.launch(cfg)
    summary = run.wait(timeout)
    if summary["status"] != "finished":
        raise RuntimeError(f"{name}: {summary}")
    events = run.events.history()
    times = [e["t"] for e in events if e["type"] == "step"]
    return cfg, events, statistics.median(b - a for a, b in zip(times, times[1:]))


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Print a markdown table under a one-line title."""
    print(title)
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def parse_with_out(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, Path]:
    """Add `--out` (the results' folder, default docs/figures) to an experiment's flags, parse
    them, and make the folder."""
    parser.add_argument("--out", default="docs/figures")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return args, out
