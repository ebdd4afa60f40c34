"""Fault tolerance: killed peers lose nothing, an emptied stage pauses the run until a peer joins."""

from __future__ import annotations

import time

import pytest
import torch

import labkit
from labkit.config import RunConfig


def _wait_for_step(run: labkit.Run, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while run.state()["step"] < step:
        assert time.monotonic() < deadline, f"run did not reach step {step}: {run.state()}"
        time.sleep(0.01)


def test_kill_peer_mid_run_keeps_every_step_exact(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=12, eval_every=0)
    run = labkit.launch(cfg)
    _wait_for_step(run, 3)
    time.sleep(0.05)  # land the kill inside a step, with gradients accumulated
    run.kill_peer("s1p0")
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["s1p0"]
    steps = run.events.history("step")
    assert [s["step"] for s in steps] == list(range(1, 13))
    for s in steps:  # every stage summed exactly the global batch, every step
        assert s["stage_samples"] == [cfg.global_batch] * 2
    after = [h for h in run.events.history("hop") if h["t"] > killed[0]["t"] + 0.05]
    assert after and all(h["peer"] != "s1p0" for h in after), "traffic must reroute away from the dead peer"
    assert summary["val_loss_after"] < summary["val_loss_before"] - 0.3


def test_kill_with_accumulated_gradients_recomputes_them(small_run: RunConfig) -> None:
    """Kill peers while they hold credited samples: the ledger withdraws and recomputes them."""
    cfg = small_run.replace(stages=2, peers=2, steps=10, global_batch=32, microbatch=2, eval_every=0)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    swarm = run._swarm
    for stage, victim in ((0, "s0p0"), (1, "s1p1")):
        deadline = time.monotonic() + 30
        while True:  # kill at a moment when the ledger credits the victim with samples of this step
            assert time.monotonic() < deadline, "the victim never held credited samples"
            with swarm._lock:
                if swarm.ledger.samples(stage).get(victim, 0) > 0:
                    run.kill_peer(victim)
                    break
            time.sleep(0.001)
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    lost = sum(e["lost_samples"] for e in killed)
    assert lost > 0, "the kills must have destroyed accumulated work for this test to mean anything"
    assert all(s["stage_samples"] == [32, 32] for s in run.events.history("step"))


def test_last_peer_of_a_stage_pauses_until_add_peer(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=(2, 1), steps=8, eval_every=0)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    run.kill_peer("s1p0")
    deadline = time.monotonic() + 30
    while run.state()["status"] != "paused":
        assert time.monotonic() < deadline, run.state()
        time.sleep(0.01)
    paused_at = run.state()["step"]
    time.sleep(0.5)
    assert run.state()["step"] == paused_at, "no step may complete while a stage has no peer"
    paused = [e for e in run.events.history("run") if e["state"] == "paused"]
    assert paused and "stage 1" in paused[0]["reason"]
    name = run.add_peer(1)
    assert name.startswith("s1")
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    assert [e["state"] for e in run.events.history("run")].count("resumed") == 1
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))


def test_add_peer_copies_its_neighbours_state(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=1, steps=6, eval_every=0)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    name = run.add_peer()  # the rebalancing rule picks the stage
    new = run._swarm.peer(name)
    old = run._swarm.live(new.stage)[0]
    assert old.name != name
    run.stop()
    run.wait(60)
    assert run.summary()["status"] in ("stopped", "finished")
    assert run.summary()["steps"] >= 2
    old_state, new_state = old.state(), new.state()
    for key, tensor in old_state["params"].items():  # identical steps since the join: bit for bit
        assert torch.equal(tensor, new_state["params"][key]), key
    assert torch.equal(old_state["optimizer"]["state"][0]["exp_avg"], new_state["optimizer"]["state"][0]["exp_avg"])


def test_timed_out_straggler_is_evicted_and_nothing_counts_twice(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=10, peer_timeout=0.3)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    run.set_peer_delay("s1p0", 0.5)  # slower than the timeout: every request to it times out
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    states = [(e["peer"], e["state"]) for e in run.events.history("peer") if e["state"] in ("banned", "killed")]
    assert ("s1p0", "banned") in states and ("s1p0", "killed") in states
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"][0]
    assert killed["reason"] == "timeout during backward"
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))


def test_faults_change_nothing_but_time(small_run: RunConfig) -> None:
    """Kills and a straggler mid-run: parameters and every step's loss still equal single-process
    training on the same samples (float64), so no sample was lost, doubled or mis-weighted."""
    from labkit.config import ModelConfig
    from labkit.data import WindowSampler, load_corpus
    from labkit.model import assemble
    from labkit.runtime.reference import train_reference

    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(3, 2),
                            steps=8, global_batch=32, microbatch=2)
    run = labkit.launch(cfg)
    swarm = run._swarm if run._ready.wait(60) else None
    for stage, victim in ((0, "s0p1"), (1, "s1p0")):
        deadline = time.monotonic() + 60
        while True:  # kill while the victim holds credited samples of the current step
            assert time.monotonic() < deadline, "the victim never held credited samples"
            with swarm._lock:
                if swarm.ledger.step >= 2 and swarm.ledger.samples(stage).get(victim, 0) > 0:
                    run.kill_peer(victim)
                    break
            time.sleep(0.001)
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    assert sum(e["lost_samples"] for e in run.events.history("peer") if e["state"] == "killed") > 0
    model, losses = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, 32, cfg.seed))
    got, want = assemble([s["params"] for s in swarm.snapshots]), model.state_dict()
    assert max(float((got[k] - want[k]).abs().max()) for k in want) <= 1e-10
    step_losses = [e["loss"] for e in run.events.history("step")]
    assert step_losses == pytest.approx(losses, rel=1e-10, abs=1e-12)


def test_events_follow_the_schema(small_run: RunConfig) -> None:
    """Every event a run emits uses the schema's types, states and directions (labkit/events.py)."""
    from labkit import events

    run = labkit.launch(small_run.replace(stages=2, peers=(2, 1), steps=6))
    _wait_for_step(run, 2)
    run.kill_peer("s1p0")
    run.add_peer(1)
    assert run.wait(120)["status"] == "finished"
    history = run.events.history()
    assert {e["type"] for e in history} <= {"hop", "step", "peer", "eval", "run", "sync", "setting"}
    assert {e["state"] for e in history if e["type"] == "peer"} <= set(events.PEER_STATES)
    assert {e["state"] for e in history if e["type"] == "run"} <= set(events.RUN_STATES)
    assert {e["direction"] for e in history if e["type"] == "hop"} == set(events.DIRECTIONS)
    assert all(isinstance(e["t"], float) for e in history)
