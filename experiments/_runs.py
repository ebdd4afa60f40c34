"""Shared by the experiments: run configs to the end and keep their summaries, print tables, and
parse the common `--out` flag."""

from __future__ import annotations

import argparse
from pathlib import Path
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


def parse_with_out(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, Path]:
    """Add `--out` (the results' folder, default docs/figures) to an experiment's flags, parse
    them, and make the folder."""
    parser.add_argument("--out", default="docs/figures")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return args, out
