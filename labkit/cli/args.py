"""argparse types shared by the sub-commands: bounded integers and output folders.

A bad value becomes argparse's one-line `labkit <cmd>: error: argument --flag: ...` before any
work starts, so a long plan or simulation never ends in a traceback over a file in the way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


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
