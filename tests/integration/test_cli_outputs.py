"""No output of `labkit train`, `plan` or `simulate` is ever written over: an output folder holding
records is refused, default folders are new each time, and a claim that fails half way (a write
refused for real: the file size limit of a full disk) leaves the folder free for the next run.
Also what a student reads first: `--version`, defaults in every `--help`, a plan too deep for the
model refused with the flags that fix it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli.main import main
from labkit.config import RunConfig
from labkit.runtime.files import claim

SMALL_TRAIN = ["--steps", "3", "--seq-len", "32", "--global-batch", "16", "--microbatch", "4", "--eval-every", "0",
               "--no-progress", "--no-report"]
SMALL_SIM = ["--preset", "small-swarm", "--duration", "60"]
SMALL_PLAN = ["--preset", "dtfm_regional", "--n", "16", "--stages", "4"]
# a process whose every write past 512 bytes fails with EFBIG (SIGXFSZ ignored), as on a full disk
FULL_DISK = ("import resource, signal, sys, runpy; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512)); sys.argv = ['labkit', *sys.argv[1:]]; "
             "runpy.run_module('labkit.cli.main', run_name='__main__')")


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line of a command refused at its flags (argparse's exit 2)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_records_of_a_run_a_plan_or_a_simulation_are_never_written_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", *SMALL_TRAIN, "--run-dir", "run"]) == 0
    assert main(["simulate", *SMALL_SIM, "--out", "sim"]) == 0
    assert main(["plan", *SMALL_PLAN, "--generations", "1", "--out", "plan"]) == 0
    kept = {name: _contents(tmp_path / name) for name in ("run", "sim", "plan")}
    capsys.readouterr()
    for folder, held in (("run", "config.json, events.jsonl, summary.json, checkpoint.pt"),
                         ("sim", "events.jsonl, summary.json, throughput.json"), ("plan", "plan.json")):
        for command in (["simulate", *SMALL_SIM], ["plan", *SMALL_PLAN, "--generations", "1"]):
            line = _refused([*command, "--out", folder], capsys)
            assert f"argument --out: '{folder}' holds the records of an earlier run, plan or simulation ({held})" in line
            assert "give a new or empty folder" in line
    assert {name: _contents(tmp_path / name) for name in kept} == kept
    (tmp_path / "empty").mkdir()
    assert main(["simulate", *SMALL_SIM, "--out", "empty"]) == 0  # an empty folder is fine


def test_default_outputs_are_new_folders_each_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["simulate", *SMALL_SIM]) == 0
        assert main(["plan", *SMALL_PLAN]) == 0
    sims, plans = (sorted((tmp_path / "runs" / kind).iterdir()) for kind in ("simulate", "plan"))
    assert len(sims) == len(plans) == 2 and sims[0].name != sims[1].name and plans[0].name != plans[1].name
    assert all((p / "plan.json").is_file() for p in plans) and all((s / "events.jsonl").is_file() for s in sims)
    out, err = capsys.readouterr()
    assert all(f"wrote {p.relative_to(tmp_path) / 'plan.json'} and" in out for p in plans)  # the path to train with
    assert all(f"-> {s.relative_to(tmp_path)}" in out for s in sims)
    assert "4/4" in err  # the GA's bar has its total (4 iterations, dtfm's default)
    assert err.count("dtfm: improving the structured starting plans by tabu search before the GA's first iteration") == 2


def test_a_run_whose_claim_fails_leaves_its_folder_free(tmp_path: Path) -> None:
    config = RunConfig().to_dict()
    assert len(json.dumps(config, indent=2)) > 512  # so config.json cannot be written under FULL_DISK
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-B", "-c", FULL_DISK, "train", *SMALL_TRAIN, "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert out.returncode == 2, out.stderr
    error = [line for line in out.stderr.splitlines() if line.startswith("labkit train: error:")]
    assert len(error) == 1 and f"config {str(run_dir / 'config.json')!r} could not be written" in error[0], out.stderr
    assert "File too large" in error[0]
    assert not run_dir.exists()  # made for the run, so removed with its empty event log
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    out = subprocess.run([sys.executable, "-B", "-c", FULL_DISK, "train", *SMALL_TRAIN, "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert out.returncode == 2, out.stderr
    assert _contents(run_dir) == {"notes.txt": b"mine"}  # a folder that was there stays, as it was
    assert claim(run_dir, config) == run_dir  # and the next run takes it
    assert json.loads((run_dir / "config.json").read_text()) == config


def test_a_plan_deeper_than_the_model_names_the_flags_that_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--preset", "dtfm_regional", "--n", "16", "--method", "random", "--out", "p8"]) == 0
    capsys.readouterr()
    assert main(["train", "--plan", "p8/plan.json", *SMALL_TRAIN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Plan.stages=8 is not allowed: at most the model's 4 layers" in err[0], err
    assert "--size small" in err[0] and "labkit plan --stages 4" in err[0]
    assert not (tmp_path / "runs").exists()  # nothing launched, no empty run folder left


def test_version_and_every_default_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"labkit {version('labkit')}"
    for command, shown in (("train", ["--steps STEPS     optimizer steps (default: 400)", "(default nano)",
                                      "(default: as even as the stages allow)", "(default: 0.003)",
                                      "(default: dask with --scheduler, else inprocess)"]),
                           ("plan", ["(default dtfm", "(default: 1024)", "(default: a new runs/plan/<date-time>)"]),
                           ("simulate", ["(default: events)", "(default: a new runs/simulate/<date-time>)"])):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(" ".join(s.split()) in text for s in shown), (command, text)
        assert "(default: None)" not in text and "(default: False)" not in text
