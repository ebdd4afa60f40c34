"""Moving peers between stages, Algorithm 2 rebalancing, and resizing stages mid-run."""

from __future__ import annotations

import pytest
import torch

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference


def test_set_layer_split_mid_run_keeps_equivalence(small_run: RunConfig) -> None:
    """Resizing is lossless, so a run resized mid-way still equals single-process training."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, steps=6)
    run = labkit.launch(cfg)
    run.wait_for(step=2)
    run.set_layer_split([3, 1])
    summary = run.wait(120)
    assert summary["status"] == "finished", summary
    assert [s["layers"] for s in run.state()["stages"]] == [[0, 1, 2], [3]]
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, 32, cfg.seed))
    want = model.state_dict()
    assert max(float((got[k] - want[k]).abs().max()) for k in want) <= 1e-10
    with pytest.raises(labkit.ConfigError, match="summing to the model's 4 layers"):
        run.set_layer_split([2, 1])


def test_recut_keeps_parameters_and_optimizer_state_bit_identical(small_run: RunConfig) -> None:
    from labkit.model.assembly import stage_module
    from labkit.runtime.resize import recut_states

    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=3))
    run.wait(120)
    before = run.snapshot().result().stages
    recut = run.config.replace(layer_split=(1, 3))
    after = recut_states(before, lambda stage, params: stage_module(recut, stage, params), 2)
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
    run.wait_for(step=2)
    new = run.move_peer("s0p1", 1)
    assert [len(s["peers"]) for s in run.state()["stages"]] == [1, 3]
    with pytest.raises(ValueError, match="would leave stage 0 without peers"):
        run.move_peer("s0p0", 1)
    run.wait_for(step=run.state()["step"] + 2)  # steps the moved peer took with its new stage
    run.kill_peer("s0p0")  # pause: no step between reading the two replicas
    run.wait_for(event={"type": "run", "state": "paused"})
    a, b = run.peer_state("s1p0")["params"], run.peer_state(new)["params"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    run.add_peer(0)
    summary = run.wait(120)
    assert summary["status"] == "finished", summary
    moved = [e for e in run.events.history("peer") if e["state"] == "moved"]
    assert moved[0]["peer"] == "s0p1" and moved[0]["to"] == new and moved[0]["to_stage"] == 1
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))


def test_rebalancing_moves_a_peer_to_the_overloaded_stage(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=(3, 1), trainers=4, steps=40, rebalance_period=0.3)
    run = labkit.launch(cfg)
    run.wait_for(step=1)
    run.set_peer_delay("s1p0", 0.02)  # stage 1 is slow: requests queue up there
    moved = run.wait_for(event={"type": "peer", "state": "moved"}, timeout=60)
    run.stop()
    run.wait(60)
    assert moved["stage"] == 0 and moved["to_stage"] == 1
