"""The run-handle contract itself: wait_for's outcomes, the opt-in hop trace, verbs after the end."""

from __future__ import annotations

import re

import pytest

import labkit
from labkit.config import RunConfig
from labkit.runtime.handle import STEERING_VERBS, RunHandle, matches


def test_every_steering_verb_is_a_method_of_the_contract() -> None:
    assert all(callable(getattr(RunHandle, verb)) for verb in STEERING_VERBS)
    assert matches({"type": "run", "state": "paused"}, {"type": "run", "state": "paused"})
    assert not matches({"type": "run", "state": "resumed"}, {"type": "run", "state": "paused"})
    assert matches({"type": "hop"}, "hop") and matches({"type": "step", "step": 3}, lambda e: e["step"] == 3)


def test_wait_for_returns_the_event_times_out_and_reports_the_end(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=3))
    assert run.wait_for(step=2)["step"] >= 2
    assert run.wait_for(event={"type": "eval"})["step"] == 0  # emitted before the call: it counts
    with pytest.raises(RuntimeError, match=r"the run ended \(finished\) before step 99"):
        run.wait_for(step=99, timeout=120)
    with pytest.raises(ValueError, match="exactly one of"):
        run.wait_for()
    paused = labkit.launch(small_run.replace(stages=2, peers=1, steps=500))
    paused.wait_for(step=1)
    paused.kill_peer("s1p0")
    with pytest.raises(TimeoutError, match="no step 1000 within 0.3 s"):
        paused.wait_for(step=1000, timeout=0.3)
    paused.stop()
    assert paused.wait(60)["status"] == "stopped"


def test_trace_prints_one_line_per_hop(small_run: RunConfig, capsys: pytest.CaptureFixture[str]) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=2), trace=True)
    assert run.wait(120)["status"] == "finished"
    lines = [line for line in capsys.readouterr().out.splitlines() if "→" in line]
    assert len(lines) == len(run.events.history("hop")) > 0
    assert all(re.fullmatch(r"t\d+ → s\dp\d+ (forward|backward) \d+\.\d KB \d+\.\d ms", line) for line in lines), lines[:3]


def test_verbs_of_an_ended_run_say_so_and_its_final_state_stays(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=2))
    run.wait(120)
    for verb, args in (("kill_peer", ("s0p0",)), ("add_peer", (0,)), ("peer_state", ("s0p0",)), ("rebalance", ())):
        with pytest.raises(RuntimeError, match=f"{verb} is not available: the run has ended"):
            getattr(run, verb)(*args)
    assert run.snapshot().result(timeout=10).step == 2
