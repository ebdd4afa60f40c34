"""The `labkit` command: one sub-command per module, each exposing `register(subparsers)`.

Sub-command modules add themselves to COMMANDS; each `register` adds its parser and sets
`handler` to a function taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ["labkit.cli.train", "labkit.cli.plan", "labkit.cli.simulate", "labkit.cli.report"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag or value as one line, without the usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = _Parser(prog="labkit", description="Decentralized training lab: SWARM, DiLoCo, planners, simulator.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `labkit` console script."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
