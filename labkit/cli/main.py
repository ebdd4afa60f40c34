"""The `labkit` command: one sub-command per module, each exposing `register(subparsers)`.

Sub-command modules add themselves to COMMANDS; each `register` adds its parser and sets
`handler` to a function taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

COMMANDS = ["labkit.cli.train", "labkit.cli.plan", "labkit.cli.simulate", "labkit.cli.report"]


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's help ends with its default, unless the help already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return super()._get_help_string(action) or text


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag or value as one line, without the usage dump, and shows defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = _Parser(prog="labkit", description="Decentralized training lab: SWARM, DiLoCo, planners, simulator.")
    parser.add_argument("--version", action="version", version=f"labkit {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    """The installed package's version (pyproject.toml's), or "unknown" when run from a bare source tree."""
    try:
        return version("labkit")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `labkit` console script."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
