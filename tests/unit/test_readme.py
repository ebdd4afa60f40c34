"""The README's commands stay true: CI runs its test command, and every `labkit` line it shows parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from labkit.cli.main import build_parser

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
SHELL_LINES = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", README, re.S)
               for line in block.splitlines()]


def test_ci_runs_the_readmes_test_command() -> None:
    command = 'pip install torch==2.13.0 -e ".[test]" && python -m pytest'
    assert command in SHELL_LINES
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == command


def test_the_readme_starts_from_a_clone_in_a_virtual_environment() -> None:
    first = SHELL_LINES[:5]
    assert first[0].startswith("git clone") and first[1].startswith("cd ")
    assert "-m venv .venv" in first[2] and ". .venv/bin/activate" in first[2]
    assert first[3] == "pip install torch==2.13.0 -e . && labkit train"


@pytest.mark.parametrize("line", [line for line in SHELL_LINES if line.startswith("labkit ")])
def test_every_labkit_command_in_the_readme_parses(line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # output folders are checked against the working directory: a new one here
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert callable(args.handler)
