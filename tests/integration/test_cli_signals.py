"""`labkit train` interrupted the way people interrupt it: a terminal's Ctrl-C (SIGINT to the whole
foreground process group, the embedded cluster's workers included), twice, and SIGTERM (what
`docker stop`, Slurm and systemd send). Each must stop the run at a step boundary, leave its
checkpoint and summary, print a few plain lines (no traceback) and exit as an interrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_until

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _start(run_dir: Path, backend: str) -> subprocess.Popen:
    """`labkit train` as a terminal starts a foreground job: the leader of a process group of its own."""
    args = ["train", "--backend", backend, "--steps", "100000", "--seq-len", "32", "--global-batch", "8",
            "--microbatch", "4", "--eval-every", "0", "--no-progress", "--no-report", "--run-dir", str(run_dir)]
    return subprocess.Popen([sys.executable, "-m", "labkit.cli.main", *args], cwd=run_dir.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _steps(run_dir: Path) -> int:
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum('"type": "step"' in line for line in lines)


def _interrupt(process: subprocess.Popen, run_dir: Path, signals: list[signal.Signals], *, group: bool
               ) -> tuple[str, str]:
    """Send `signals` (0.5 s apart) once the run has taken 3 steps; its output once it exited."""
    wait_until(lambda: _steps(run_dir) >= 3 or process.poll() is not None, 240, "3 steps of the run")
    assert process.poll() is None, process.communicate()
    for sig in signals:
        (os.killpg if group else os.kill)(process.pid, sig)
        try:
            process.wait(0.5)
        except subprocess.TimeoutExpired:
            pass
    try:
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def _check_interrupted(process: subprocess.Popen, out: str, err: str, run_dir: Path, sig: signal.Signals) -> None:
    assert process.returncode == EXIT_CODES[sig], (out, err)
    assert "Traceback" not in out + err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] >= 3, summary
    assert (run_dir / "checkpoint.pt").stat().st_size > 100_000
    assert "checkpoint" in out and len((out + err).strip().splitlines()) <= 12, (out, err)


@pytest.mark.parametrize(("sig", "presses"), [(signal.SIGINT, 1), (signal.SIGINT, 2), (signal.SIGTERM, 1)])
def test_in_process_run_stops_cleanly_on_a_signal_to_its_process_group(tmp_path: Path, sig: signal.Signals,
                                                                        presses: int) -> None:
    run_dir = tmp_path / "run"
    process = _start(run_dir, "inprocess")
    out, err = _interrupt(process, run_dir, [sig] * presses, group=True)
    _check_interrupted(process, out, err, run_dir, sig)


@pytest.mark.slow
def test_dask_run_keeps_its_workers_through_a_terminals_ctrl_c(tmp_path: Path) -> None:
    """The whole process group gets Ctrl-C, twice: the embedded cluster's workers do not die of it
    (they lead process groups of their own), the run stops at a step boundary with its
    checkpoint, and the second Ctrl-C while it saves prints no traceback. (SIGTERM takes the same
    path: the in-process test above sends it.)"""
    run_dir = tmp_path / "run"
    process = _start(run_dir, "dask")
    out, err = _interrupt(process, run_dir, [signal.SIGINT] * 2, group=True)
    _check_interrupted(process, out, err, run_dir, signal.SIGINT)
    assert "Worker holding Actor was lost" not in out + err
