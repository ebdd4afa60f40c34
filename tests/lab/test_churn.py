"""The shared churn (`kill_every`) and its cost (`extra_forward`) on real small runs, through the handle."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig
from labkit.lab.churn import extra_forward, kill_every, tokens_per_s


def test_a_quiet_run_repeats_no_forward_work(small_run: RunConfig) -> None:
    for executor in ("swarm", "taskpool"):
        cfg = small_run.replace(executor=executor, steps=5)
        run = labkit.launch(cfg)
        assert kill_every(run, 0) == [] and run.wait(120)["status"] == "finished"
        assert extra_forward(run, cfg) == 0, executor
        assert tokens_per_s(run, warmup=1) > 0


def test_kill_every_alternates_stages_and_replaces_each_victim(small_run: RunConfig) -> None:
    cfg = small_run.replace(executor="taskpool", steps=6)
    run = labkit.launch(cfg)
    assert kill_every(run, 2) == ["s1c1", "s0c1"]  # at steps 2 and 4: stage 1, then stage 0, the newest client
    assert run.wait(120)["status"] == "finished"
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [(e["peer"], e["reason"]) for e in killed] == [("s1c1", "killed"), ("s0c1", "killed")]
    joined = [e["peer"] for e in run.events.history("peer") if e["state"] == "joined"]
    assert joined == ["s0c0", "s0c1", "s1c0", "s1c1", "s1c2", "s0c2"]  # a fresh client in the victim's stage
    pools = {e["value"]["stage"]: e["value"] for e in run.events.history("setting") if e["name"] == "pool"}
    pooled = sum(value["pooled_samples"] for value in pools.values())
    assert 0 <= extra_forward(run, cfg) <= pooled  # only what went through the pool is computed again
