"""The task pool paper's task-pool executor behind the run handle: training equals the single-process loop
(and, with delayed parameter updates, the one-step-delayed loop), and a client that vanishes
mid-forward, mid-backward or by going silent loses no sample and doubles none: its slices are
finished by others from the pool, and no forward work is repeated beyond what it took with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import labkit
from labkit import ModelConfig, RunConfig, TaskPoolConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference
from tests.waiting import wait_until

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, global_batch=16,
                microbatch=4, steps=4, eval_every=0, executor="taskpool")


def _assert_equals_reference(run_dir: Path, cfg: RunConfig, steps: int | None = None) -> None:
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    got = assemble([s["params"] for s in checkpoint["stages"]])
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    reference, _ = train_reference(cfg, sampler, steps=steps)
    worst = max(float((got[k] - v).abs().max()) for k, v in reference.state_dict().items())
    assert worst <= 1e-10, worst


def _exact(run: labkit.RunHandle, cfg: RunConfig) -> None:
    steps = run.events.history("step")
    assert steps and all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in steps), steps


def _pool_stats(run: labkit.RunHandle, stage: int) -> dict:
    return [e["value"] for e in run.events.history("setting") if e["name"] == "pool" and e["value"]["stage"] == stage][-1]


@pytest.mark.parametrize("delayed", [False, True], ids=["plain", "delayed-updates"])
def test_training_equals_the_single_process_loop(tmp_path: Path, delayed: bool) -> None:
    cfg = CFG.replace(delayed_updates=delayed, executor=TaskPoolConfig(frontal=(3, 1), backward=(2, 1)))
    run = labkit.launch(cfg, run_dir=tmp_path)
    summary = run.wait(timeout=120)
    assert summary["status"] == "finished", summary
    _exact(run, cfg)
    _assert_equals_reference(tmp_path, cfg)
    assert summary["val_loss_after"] < summary["val_loss_before"]
    hops = run.events.history("hop")
    assert {h["peer"] for h in hops} == {"s0c0", "s0c1", "s1c0", "s1c1"}  # both clients of each stage computed


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_a_client_killed_mid_task_loses_nothing_and_repeats_no_forward_work(tmp_path: Path, kind: str) -> None:
    cfg = CFG.replace(steps=3, executor=TaskPoolConfig(grace=600.0))  # only the kill takes work away
    run = labkit.launch(cfg, run_dir=tmp_path)
    try:
        run.wait_for(event={"type": "run", "state": "started"}, timeout=60)
        if kind == "backward":  # after its last forward slice of the first pass, its work is backward
            last = CFG.microbatches_per_step - 1
            run.wait_for(event={"type": "hop", "peer": "s0c1", "direction": "forward", "microbatch": last}, timeout=60)
        run.set_peer_delay("s0c1", 30.0)  # it holds each result 30 s: the kill lands while it holds one

        def holding() -> bool:
            peer = next(p for p in run.state()["stages"][0]["peers"] if p["peer"] == "s0c1")
            return (peer["task"] or "").startswith(kind)
        wait_until(holding, timeout=120, what=f"s0c1 holding a {kind} task")
        run.kill_peer("s0c1")
        summary = run.wait(timeout=120)
    finally:
        run.stop()
    assert summary["status"] == "finished", summary
    killed = run.wait_for(event={"type": "peer", "peer": "s0c1", "state": "killed"}, timeout=1)
    assert killed["pooled_samples"] > 0, killed  # what it held went to the pool
    _exact(run, cfg)
    _assert_equals_reference(tmp_path, cfg)
    stats = [_pool_stats(run, s) for s in range(cfg.stages)]
    assert stats[0]["lost_samples"] > 0 and all(s["repeated_beyond_lost"] == 0 for s in stats), stats
    assert all(s["pool_depth"] == 0 for s in stats), stats


def test_an_overdue_client_is_replaced_from_the_pool_and_joins_again(tmp_path: Path) -> None:
    cfg = CFG.replace(steps=500, executor=TaskPoolConfig(grace=0.5, slack=1.0))
    run = labkit.launch(cfg, run_dir=tmp_path)
    try:
        run.wait_for(event={"type": "run", "state": "started"}, timeout=60)
        run.set_peer_delay("s1c0", 2.0)  # every result comes far past its deadline
        overdue = run.wait_for(event={"type": "peer", "peer": "s1c0", "state": "killed"}, timeout=60)
        assert overdue["reason"] == "overdue"
        run.set_peer_delay("s1c0", 0.0)
        run.wait_for(event={"type": "peer", "peer": "s1c0", "state": "joined",
                            "reason": "rejoined after it was overdue"}, timeout=60)
        run.wait_for(step=run.state()["step"] + 2, timeout=60)
    finally:
        run.stop()
    summary = run.wait(timeout=120)
    assert summary["status"] == "stopped", summary
    _exact(run, cfg)
    _assert_equals_reference(tmp_path, cfg, steps=summary["steps"])
    assert all(_pool_stats(run, s)["repeated_beyond_lost"] == 0 for s in range(cfg.stages))


def test_the_servers_re_split_work_by_the_clients_measured_rates(tmp_path: Path) -> None:
    cfg = CFG.replace(steps=6, microbatch=8)
    run = labkit.launch(cfg, run_dir=tmp_path)
    try:
        run.wait_for(event={"type": "run", "state": "started"}, timeout=60)
        run.set_peer_delay("s0c1", 0.1)  # a slow device: every slice takes 0.1 s longer
        assert run.wait(timeout=120)["status"] == "finished"
    finally:
        run.stop()
    _exact(run, cfg)
    _assert_equals_reference(tmp_path, cfg)  # whatever the split, the same samples and parameters
    last = [h for h in run.events.history("hop") if h["stage"] == 0 and h["kind"] == "forward"][-cfg.microbatches_per_step * 2:]
    done = {c: sum(h["end"] - h["start"] for h in last if h["peer"] == c) for c in ("s0c0", "s0c1")}
    assert done["s0c1"] < done["s0c0"], done


def test_a_sharded_checkpoint_resumes_as_swarm_and_with_other_servers(tmp_path: Path) -> None:
    """Two BS shard each stage's parameters (an optimizer each); the checkpoint holds one merged
    optimizer state per stage, which SWARM and a task pool with three BS resume exactly."""
    first = labkit.launch(CFG.replace(steps=2, executor=TaskPoolConfig(backward=2)), run_dir=tmp_path / "pool")
    assert first.wait(timeout=120)["status"] == "finished"
    for name, cfg in [("swarm", CFG.replace(executor="swarm", trainers=2, steps=3)),
                      ("pool-again", CFG.replace(steps=3, executor=TaskPoolConfig(backward=3)))]:
        run = labkit.launch(cfg, run_dir=tmp_path / name, resume=tmp_path / "pool" / "checkpoint.pt")
        summary = run.wait(timeout=120)
        assert summary["status"] == "finished" and [e["step"] for e in run.events.history("step")] == [3], (name, summary)
        _assert_equals_reference(tmp_path / name, CFG.replace(steps=3))  # as if the run had never stopped


def test_verbs_without_meaning_are_refused_with_the_reason(tmp_path: Path) -> None:
    run = labkit.launch(CFG.replace(steps=500), run_dir=tmp_path)
    try:
        run.wait_for(step=1, timeout=120)
        with pytest.raises(ValueError, match="set_compression is not available with executor='taskpool'"):
            run.set_compression("int8")
        with pytest.raises(ValueError, match="rebalance is not available with executor='taskpool'"):
            run.rebalance()
        run.kill_peer("s1c1")
        with pytest.raises(ValueError, match="peer='s1c0' is the last live client of stage 1: add_peer"):
            run.kill_peer("s1c0")
        with pytest.raises(ValueError, match=r"stage=7 is not allowed: None or an integer in \[0, 2\)"):
            run.add_peer(7)
        joined = run.add_peer()  # the stage with the fewest clients
        assert joined == "s1c2"
        run.wait_for(event={"type": "hop", "peer": joined}, timeout=60)
    finally:
        run.stop()
    assert run.wait(timeout=60)["status"] == "stopped"



def test_a_process_that_ends_after_its_runs_exits_cleanly() -> None:
    """A script that ends right after its runs (one finished, one still live) exits with 0: the
    runs' threads have let go of torch before the interpreter finalizes (a daemon thread still
    in torch then aborts the process: "terminate called without an active exception")."""
    script = ("import labkit\n"
              "from labkit.config import ModelConfig, RunConfig\n"
              "cfg = RunConfig(model=ModelConfig(size='nano', seq_len=64), steps=12, eval_every=0, executor='taskpool')\n"
              "run = labkit.launch(cfg)\n"
              "run.wait_for(step=5, timeout=120)\n"
              "assert run.wait(120)['status'] == 'finished'\n"
              "labkit.launch(cfg.replace(steps=500)).wait_for(step=2, timeout=120)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
