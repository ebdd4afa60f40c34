"""What a run leaves behind: a run directory of its own (never another run's), files written
whole, a diverged run stopped with its last good state, a validation loss measured where it ended."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import labkit
from labkit.cli.main import main
from labkit.cli.args import new_run_dir
from labkit.config import DataConfig, RunConfig

RUN_FILES = {"config.json", "events.jsonl", "summary.json", "checkpoint.pt"}
DIVERGING = {"optimizer": "sgd", "lr": 10.0, "warmup_steps": 0}  # nano's loss is not finite within ~8 steps


def _contents(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run_dir.iterdir()}


def _train(*flags: str, steps: int = 3) -> int:
    """`labkit train` in this process, small and quiet."""
    return main(["train", "--steps", str(steps), "--seq-len", "32", "--global-batch", "16", "--microbatch", "4",
                 "--eval-every", "0", "--no-progress", "--no-report", *flags])


def test_a_run_never_writes_into_a_directory_holding_another_run(small_run: RunConfig, tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert labkit.launch(small_run, run_dir=first).wait(120)["status"] == "finished"
    kept = _contents(first)
    assert set(kept) == RUN_FILES
    for resume in (None, first / "checkpoint.pt"):
        with pytest.raises(FileExistsError) as refused:
            labkit.launch(small_run.replace(steps=6), run_dir=first, resume=resume)
        assert str(first) in str(refused.value) and f"--resume {first / 'checkpoint.pt'}" in str(refused.value)
    assert _contents(first) == kept
    second = tmp_path / "second"
    resumed = labkit.launch(small_run.replace(steps=6), run_dir=second, resume=first / "checkpoint.pt")
    assert resumed.wait(120)["status"] == "finished"
    assert _contents(first) == kept and set(_contents(second)) == RUN_FILES
    assert torch.load(second / "checkpoint.pt", weights_only=False)["step"] == 6


def test_a_file_is_refused_as_run_directory_and_an_empty_directory_is_taken(small_run: RunConfig,
                                                                            tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(NotADirectoryError, match=f"run_dir {str(notes)!r} is a file"):
        labkit.launch(small_run, run_dir=notes)
    with pytest.raises(NotADirectoryError, match="cannot be made: Not a directory"):
        labkit.launch(small_run, run_dir=notes / "under")
    assert notes.read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert labkit.launch(small_run, run_dir=empty).wait(120)["status"] == "finished"
    assert set(_contents(empty)) == RUN_FILES


def test_the_cli_refuses_a_used_run_dir_and_resumes_into_a_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert _train("--run-dir", "first") == 0
    kept = _contents(tmp_path / "first")
    capsys.readouterr()
    assert _train("--run-dir", "first") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'first'" in err[0] and "--resume first/checkpoint.pt" in err[0], err
    assert _train("--resume", "first/checkpoint.pt", steps=5) == 0
    assert _contents(tmp_path / "first") == kept
    (made,) = (tmp_path / "runs").iterdir()
    assert set(_contents(made)) == RUN_FILES
    assert torch.load(made / "checkpoint.pt", weights_only=False)["step"] == 5


def test_default_run_directories_of_the_same_second_are_numbered(tmp_path: Path) -> None:
    made = [new_run_dir(tmp_path, "20261124-070001") for _ in range(3)]
    assert [p.name for p in made] == ["20261124-070001", "20261124-070001-2", "20261124-070001-3"]
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


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


def test_a_diverged_run_stops_and_keeps_its_last_good_state(small_run: RunConfig, tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(steps=40, **DIVERGING), run_dir=tmp_path / "run")
    summary = run.wait(180)
    assert summary["status"] == "diverged", summary
    steps = summary["steps"]
    assert 1 <= steps < 40
    said = [e["reason"] for e in run.events.history("run") if e["state"] == "diverged"]
    assert said and re.match(rf"(the training loss of )?step {steps + 1}\b.* (is|was) [-\w.+]+", said[0]), said
    assert summary["reason"] == said[0] and f"keeps the state of step {steps}" in said[0]
    losses = [e["loss"] for e in run.events.history("step")]
    assert len(losses) == steps and all(math.isfinite(loss) for loss in losses)
    assert summary["train_loss_last"] == losses[-1]
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == steps
    assert all(torch.isfinite(t).all() for stage in saved["stages"] for t in stage["params"].values())


def test_the_cli_exits_1_with_one_line_when_the_run_diverges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = _train("--optimizer", "sgd", "--lr", "10", "--warmup-steps", "0", "--run-dir", "run", steps=40)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "diverged" in err[0] and "run/checkpoint.pt" in err[0], err


def test_a_stopped_run_measures_its_validation_loss_where_it_stopped(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(steps=500))
    run.wait_for(step=5)
    run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped"
    last = run.events.history("eval")[-1]
    assert last["step"] == summary["steps"] >= 5
    assert summary["val_loss_after"] == last["val_loss"] < summary["val_loss_before"]


def test_a_failed_run_measures_no_validation_loss_after(small_run: RunConfig, tmp_path: Path) -> None:
    summary = labkit.launch(small_run.replace(data=DataConfig(path=str(tmp_path / "missing")))).wait(60)
    assert summary["status"] == "failed" and "val_loss_after" in summary and summary["val_loss_after"] is None
