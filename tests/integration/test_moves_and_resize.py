"""Moving peers between stages, Algorithm 2 rebalancing, and resizing stages mid-run."""

from __future__ import annotations

import time

import pytest
import torch

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference


def _wait_for_step(run: labkit.Run, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while run.state()["step"] < step:
        assert time.monotonic() < deadline, run.state()
        time.sleep(0.005)


def test_set_layer_split_mid_run_keeps_equivalence(small_run: RunConfig) -> None:
    """Resizing is lossless, so a run resized mid-way still equals single-process training."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, steps=6)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    run.set_layer_split([3, 1])
    summary = run.wait(120)
    assert summary["status"] == "finished", summary
    assert [s["layers"] for s in run.state()["stages"]] == [[0, 1, 2], [3]]
    got = assemble([s["params"] for s in run._swarm.snapshots])
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, 32, cfg.seed))
    want = model.state_dict()
    assert max(float((got[k] - want[k]).abs().max()) for k in want) <= 1e-10
    with pytest.raises(labkit.ConfigError, match="summing to the model's 4 layers"):
        run.set_layer_split([2, 1])


def test_recut_keeps_parameters_and_optimizer_state_bit_identical(small_run: RunConfig) -> None:
    from labkit.runtime.resize import recut_states

    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=3))
    run.wait(120)
    swarm = run._swarm
    before = swarm.snapshots
    swarm.cfg = swarm.cfg.replace(layer_split=(1, 3))
    after = recut_states(before, swarm._build, 2)
    assert after[0]["param_names"][-1].startswith("blocks.0.") and after[1]["param_names"][0].startswith("blocks.1.")
    full_before, full_after = assemble([s["params"] for s in before]), assemble([s["params"] for s in after])
    assert all(torch.equal(full_before[k], full_after[k]) for k in full_before) and full_before.keys() == full_after.keys()

    def adam(states: list[dict]) -> dict[str, torch.Tensor]:
        return {s["param_names"][i]: st["exp_avg_sq"] for s in states for i, st in s["optimizer"]["state"].items()}

    a, b = adam(before), adam(after)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_move_peer_downloads_the_target_stage(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=10)
    run = labkit.launch(cfg)
    _wait_for_step(run, 2)
    new = run.move_peer("s0p1", 1)
    assert [len(s["peers"]) for s in run.state()["stages"]] == [1, 3]
    with pytest.raises(ValueError, match="would leave stage 0 without peers"):
        run.move_peer("s0p0", 1)
    summary = run.wait(120)
    assert summary["status"] == "finished", summary
    moved = [e for e in run.events.history("peer") if e["state"] == "moved"]
    assert moved[0]["peer"] == "s0p1" and moved[0]["to"] == new and moved[0]["to_stage"] == 1
    a, b = run._swarm.peer("s1p0").state()["params"], run._swarm.peer(new).state()["params"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))


def test_rebalancing_moves_a_peer_to_the_overloaded_stage(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=(3, 1), trainers=4, steps=40, rebalance_period=0.3)
    run = labkit.launch(cfg)
    _wait_for_step(run, 1)
    run.set_peer_delay("s1p0", 0.02)  # stage 1 is slow: requests queue up there
    deadline = time.monotonic() + 60
    while not [e for e in run.events.history("peer") if e["state"] == "moved"]:
        assert time.monotonic() < deadline and not run.done, "no peer moved"
        time.sleep(0.05)
    run.stop()
    run.wait(60)
    moved = [e for e in run.events.history("peer") if e["state"] == "moved"][0]
    assert moved["stage"] == 0 and moved["to_stage"] == 1
