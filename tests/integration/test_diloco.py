"""DiLoCo-SWARM in the in-process runtime: parity, faults inside a round, joins, switching."""

from __future__ import annotations

import torch

import labkit
from labkit.config import ModelConfig, RunConfig, SyncConfig
from labkit.model import assemble


def _params(run: labkit.RunHandle, key: str = "params") -> dict[str, torch.Tensor]:
    summary = run.wait(240)
    assert summary["status"] == "finished", summary
    return assemble([s.get(key, s["params"]) for s in run.snapshot().result().stages])


def test_diloco_h1_outer_lr1_no_momentum_equals_sync_swarm(small_run: RunConfig) -> None:
    """With a linear inner optimizer (SGD, no momentum) and pseudo-gradients weighted by samples,
    one inner step then an outer step of lr 1 lands exactly on the all-reduce step. (AdamW is not
    linear in the gradient, so the identity is only exact for SGD.)"""
    base = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2,
                             steps=4, optimizer="sgd", momentum=0.0, lr=0.5)
    sync = _params(labkit.launch(base))
    diloco = _params(labkit.launch(base.replace(sync=SyncConfig(mode="diloco", inner_steps=1, outer_lr=1.0, outer_momentum=0.0))),
                     key="global_params")
    init = labkit.launch(base.replace(steps=1))
    moved = max(float((sync[k] - v).abs().max()) for k, v in _params(init).items())
    assert moved > 1e-3
    worst = max(float((sync[k] - diloco[k]).abs().max()) for k in sync)
    assert worst <= 1e-10, f"DiLoCo(H=1) differs from SWARM all-reduce by {worst:.3g}"


def _pause(run: labkit.RunHandle, stage: int) -> None:
    """Kill every peer of `stage`: no step can be taken until a peer is added there, so replicas
    of the other stages can be read one after the other without a step between."""
    for peer in run.state()["stages"][stage]["peers"]:
        run.kill_peer(peer["peer"])
    run.wait_for(event={"type": "run", "state": "paused"})


def test_peer_dying_mid_round_leaves_survivors_identical(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=(3, 2), steps=12, sync=SyncConfig(mode="diloco", inner_steps=4),
                            checkpoint_every=4)
    run = labkit.launch(cfg)
    run.wait_for(step=5)  # inside the second round
    run.kill_peer("s0p1")
    run.wait_for(step=8)  # the second outer step, which the survivors took together
    _pause(run, 1)
    survivors = [p["peer"] for p in run.state()["stages"][0]["peers"]]
    assert survivors == ["s0p0", "s0p2"]
    a, b = (run.peer_state(name)["outer"]["global"] for name in survivors)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    run.add_peer(1)
    summary = run.wait(180)
    assert summary["status"] == "finished", summary
    outer_syncs = [e for e in run.events.history("sync") if e["stage"] == 0]
    rollback, = [e["value"] for e in run.events.history("setting") if e["name"] == "rollback"]
    assert rollback["from"] >= 8 and rollback["to"] in (4, 8)  # step 8's checkpoint, unless the pause interrupted it
    redone = [2] * ((12 - rollback["to"]) // 4)  # the outer steps after the checkpoint, by the two survivors
    assert [e["peers"] for e in outer_syncs] == [3, 2, *redone] and all(e["kind"] == "diloco" for e in outer_syncs)
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))


def test_joiner_adopts_global_parameters_and_outer_state(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=1, steps=40, sync=SyncConfig(mode="diloco", inner_steps=5))
    run = labkit.launch(cfg)
    run.wait_for(step=7)
    name = run.add_peer(1)
    _pause(run, 0)
    new, old = run.peer_state(name)["outer"], run.peer_state("s1p0")["outer"]
    run.stop()
    run.wait(120)
    for g_new, g_old in zip(new["global"], old["global"]):
        assert torch.equal(g_new, g_old)
    new_outer, old_outer = new["outer_optimizer"]["state"], old["outer_optimizer"]["state"]
    assert new_outer.keys() == old_outer.keys() and len(old_outer) > 0
    for i in old_outer:
        assert torch.equal(new_outer[i]["momentum_buffer"], old_outer[i]["momentum_buffer"])


def test_set_sync_switches_at_a_boundary(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=20)
    run = labkit.launch(cfg)
    run.wait_for(step=3)
    run.set_sync(SyncConfig(mode="diloco", inner_steps=4))
    summary = run.wait(180)
    assert summary["status"] == "finished"
    kinds = [e["kind"] for e in run.events.history("sync") if e["stage"] == 0]
    first = kinds.index("diloco")
    assert set(kinds[:first]) == {"allreduce"} and set(kinds[first:]) == {"diloco"} and len(kinds) - first >= 3
    assert summary["val_loss_after"] < summary["val_loss_before"]
