"""Fault tolerance: killed peers lose nothing, an emptied stage pauses the run until a peer joins."""

from __future__ import annotations

import time

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
        assert s["samples"] == cfg.global_batch and s["stage_samples"] == [cfg.global_batch] * 2
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
