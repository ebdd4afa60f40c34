"""argparse types shared by the sub-commands (bounded integers, output folders) and new output folders.

A bad value becomes argparse's one-line `labkit <cmd>: error: argument --flag: ...` before any
work starts, so a long plan or simulation never ends in a traceback over a file in the way, nor
writes over the records of an earlier run, plan or simulation.
"""

from __future__ import annotations

import time
import argparse
import os
from collections.abc import Callable
from pathlib import Path

from labkit.runtime.files import records_in


def int_in(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]; the error names the range (and `why` the upper bound)."""
    def parse(text: str) -> int:
        """The integer `text` spells, if it lies in the range."""
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not allowed: an integer from {low} to {high}"
                                             + (f" ({why})" if why else ""))
        return value

    return parse


def out_dir(text: str) -> Path:
    """An argparse type: a folder that exists or can be made (no file in the way, writable)."""
    path = Path(text)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    if not existing.is_dir():
        where = "is a file" if existing == path else f"cannot be made: {str(existing)!r} is a file"
        raise argparse.ArgumentTypeError(f"{text!r} {where}; give a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: cannot write in {str(existing)!r}")
    return path


def fresh_out_dir(text: str) -> Path:
    """An argparse type: an `out_dir` that holds no run's, plan's or simulation's records, so that
    nothing earlier is overwritten."""
    path = out_dir(text)
    held = records_in(path)
    if held:
        raise argparse.ArgumentTypeError(f"{text!r} holds the records of an earlier run, plan or simulation "
                                         f"({', '.join(held)}): give a new or empty folder, or leave the flag out "
                                         "for a new one")
    return path


def new_run_dir(root: Path, stamp: str | None = None) -> Path:
    """A new empty directory `root/stamp` (by default the date and time now), or `root/stamp-2`,
    `-3`, ... when taken (runs started in the same second); made here, so two runs starting at
    once never get the same one."""
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while True:
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            n += 1
