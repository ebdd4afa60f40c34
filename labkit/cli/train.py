"""`labkit train`: the main job (filled in by the SWARM core)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `train` sub-command."""
    parser = sub.add_parser("train", help="train a model with SWARM parallelism")
    parser.set_defaults(handler=lambda args: 0)
