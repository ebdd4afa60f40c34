"""`labkit train` end to end in a subprocess: run directory, summary, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _labkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_train_writes_a_run_directory(tmp_path: Path) -> None:
    out = _labkit("train", "--steps", "30", "--seq-len", "32", "--global-batch", "16", "--microbatch", "4",
                  "--eval-every", "0", "--no-progress", "--run-dir", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 30
    assert summary["val_loss_after"] < summary["val_loss_before"] - 0.5
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert {e["type"] for e in events} >= {"run", "hop", "step", "peer", "eval", "load"}
    assert (run / "checkpoint.pt").stat().st_size > 100_000
    assert "validation loss" in out.stdout
    assert "report: run/report.html" in out.stdout.splitlines()  # the run directory as given
    report = (run / "report.html").read_text()
    assert report.count("<svg") == 7 and "<h2>loss</h2>" in report  # every lab chart, as a static picture
    assert "loss (nats/byte)" in report and "nats/token" not in report  # the model's tokens are bytes
    assert '<p class="headline">finished: validation loss ' in report and " tokens/s, " in report
    assert "<td>&quot;" not in report and "<th>executor</th><td>name swarm</td>" in report  # text, not JSON


@pytest.mark.parametrize(("args", "needle"), [
    (["--stages", "0"], "RunConfig.stages=0 is not allowed"),
    (["--peers", "two"], "argument --peers"),
    (["--size", "huge"], "argument --size: invalid choice"),
    (["--layer-split", "3,3"], "RunConfig.layer_split=(3, 3) is not allowed"),
    (["--lr", "-1"], "RunConfig.lr=-1.0 is not allowed"),
    (["--data", "/no/such/path"], "does not exist"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--backend", "inprocess", "--scheduler", "tcp://127.0.0.1:9"], "is not allowed with backend='inprocess'"),
    (["--backend", "ray"], "argument --backend: invalid choice"),
    (["--rebalance-period", "-5"], "RunConfig.rebalance_period=-5.0 is not allowed"),
    (["--world", "nowhere"], "RunConfig.world='nowhere' is not allowed: the path of an existing scenario file or a preset"),
    (["--world", "world-16", "--plan", "plan.json"], "--plan and --world are not allowed together"),
    (["--world", "world-16", "--links", "world-16"], "RunConfig.world='world-16' is not allowed"),
])
def test_bad_flags_give_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    out = _labkit("train", *args, cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "error" in lines[0], out.stderr


def test_train_follows_a_plan(tmp_path: Path) -> None:
    from labkit.plan.plan import Plan, PlanStage

    plan = Plan(method="dtfm", scenario="t",
                stages=(PlanStage(devices=("a", "b"), layers=9), PlanStage(devices=("c",), layers=3)),
                links=((("a", "c", 1.0),),), time=1.0, parts={"dp": 0.1, "pp": 0.2, "compute": 0.3})
    (tmp_path / "plan.json").write_text(plan.to_json())
    out = _labkit("train", "--plan", "plan.json", "--steps", "3", "--seq-len", "32", "--eval-every", "0",
                  "--no-progress", "--no-report", "--run-dir", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["stages"], config["peers"], config["layer_split"]) == (2, [2, 1], [3, 1])


def test_train_runs_a_world(tmp_path: Path) -> None:
    from tests.integration.test_world import small_world

    world = small_world(tmp_path)
    out = _labkit("train", "--world", world, "--steps", "2", "--seq-len", "32", "--eval-every", "0", "--no-progress",
                  "--no-report", "--run-dir", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["stages"], config["peers"], config["trainers"], config["world"]) == (2, [2, 2], 2, world)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["device_requests"] > 0
