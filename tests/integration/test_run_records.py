"""What a run leaves behind: files written whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import labkit
from labkit.config import RunConfig

RUN_FILES = {"config.json", "events.jsonl", "summary.json", "checkpoint.pt"}


def _contents(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run_dir.iterdir()}


def test_a_failed_checkpoint_says_why_and_leaves_no_temporary_file(small_run: RunConfig, tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(steps=500), run_dir=tmp_path / "run")
    run.wait_for(step=1)
    (tmp_path / "taken").mkdir()
    (tmp_path / "plain").write_text("not a directory")
    for target, why in ((tmp_path / "taken", "is a directory"), (tmp_path / "plain" / "c.pt", "could not be written")):
        with pytest.raises(OSError, match=why) as failed:
            run.checkpoint(target).result(timeout=60)
        assert str(target) in str(failed.value)
    assert torch.load(run.checkpoint(tmp_path / "good.pt").result(timeout=60), weights_only=False)["step"] >= 1
    run.stop()
    assert run.wait(120)["status"] == "stopped"
    assert not list(tmp_path.rglob("*.tmp"))
    assert set(_contents(tmp_path / "run")) == RUN_FILES
