"""A soak of the in-process backend: 25 s of random kills, joins and moves.

Asserts what churn must never change: every step sums exactly the global batch, no action stalls
the run for long, and the threads it started are gone when it ends."""

from __future__ import annotations

import threading

import pytest

import labkit
from labkit.config import RunConfig
from labkit.lab.chaos import Chaos

pytestmark = pytest.mark.slow
SOAK_SECONDS = 25  # the suite's share; benchmarks/soak.py soaks for minutes
STALL_SECONDS = 10.0


def test_churn_never_breaks_accounting_nor_leaks_threads(small_run: RunConfig) -> None:
    threads = threading.active_count()
    cfg = small_run.replace(stages=3, peers=2, trainers=3, steps=100_000)
    run = labkit.launch(cfg)
    run.wait_for(step=1)
    report = Chaos(run, seed=1, max_peers=8, step_timeout=STALL_SECONDS).run_for(SOAK_SECONDS)
    run.stop()
    summary = run.wait(60)
    assert summary["status"] == "stopped", summary
    assert sum(report["actions"].values()) >= 20 and set(report["actions"]) == {"kill", "add", "move"}, report
    assert report["longest_wait"] < STALL_SECONDS, report
    steps = run.events.history("step")
    assert len(steps) >= report["rounds"] and all(s["stage_samples"] == [cfg.global_batch] * 3 for s in steps)
    assert threading.active_count() <= threads + 1, [t.name for t in threading.enumerate()]
