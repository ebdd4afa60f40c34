"""The task pool in a world (issue 28): clients on virtual devices behind their links to the
servers, the world's churn replayed as real kills and joins, and training still exact. Asserts on
what the run reports (each task's seconds against the lower bound the emulation guarantees, the
kills, parameters), never on how fast this machine is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import labkit
from labkit import TaskPoolConfig
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.links import load_links
from labkit.runtime.reference import train_reference
from labkit.runtime.world import world_config
from labkit.sim.taskpool_world import task_costs

KILL_AT, JOIN_AT = 0.3, 0.6  # seconds after the run started


def pool_world(tmp_path: Path) -> RunConfig:
    """2 stages of 2 clients pricing SWARM's `small` at 4 x 256 tokens: GTX1080Tis in eu and a T4 in
    us, 20 ms and 10 Gb/s from the servers in eu; one client leaves at KILL_AT, an A100 joins at JOIN_AT."""
    world = {"name": "pool-world", "model": "small", "stages": 2, "microbatch": 4, "seq_len": 256,
             "trainer_region": "eu", "join_device": "A100",
             "peers": [{"device": "GTX1080Ti", "count": 2, "stage": 0, "region": "eu"},
                       {"device": "GTX1080Ti", "count": 1, "stage": 1, "region": "eu"},
                       {"device": "T4", "count": 1, "stage": 1, "region": "us"}],
             "links": [{"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 10_000.0},
                       {"a": "eu", "b": "us", "rtt_ms": 20.0, "bandwidth_mbps": 10_000.0}],
             "trace": [[KILL_AT, -1], [JOIN_AT, 1]], "seed": 2}
    path = tmp_path / "pool_world.json"
    path.write_text(json.dumps(world))
    base = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), steps=4, eval_every=0,
                     executor=TaskPoolConfig())
    return world_config(str(path), base).replace(global_batch=16)


def test_a_task_pool_world_holds_each_task_replays_its_churn_and_stays_exact(tmp_path: Path) -> None:
    cfg = pool_world(tmp_path)
    assert (cfg.stages, cfg.peers_per_stage, cfg.microbatch) == (2, (2, 2), 4)  # the world's clients
    run = labkit.launch(cfg)
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    world, stage_of = load_links(cfg), {}
    for e in run.events.history("peer"):
        stage_of[e["peer"]] = e["stage"]
    for hop in run.events.history("hop"):  # each task held at least its device's and link's time
        costs = task_costs(world, hop["peer"], stage_of[hop["peer"]])
        assert hop["seconds"] >= costs.seconds(hop["kind"], hop["end"] - hop["start"], reload=False), hop
    assert task_costs(world, "s1c1", 1).rtt == 0.02 and task_costs(world, "s0c2", 0).forward < task_costs(
        world, "s0c0", 0).forward  # the far T4's link; the joiner's A100
    started = next(e["t"] for e in run.events.history("run") if e["state"] == "started")
    peers = run.events.history("peer")
    killed = [e for e in peers if e["state"] == "killed" and e.get("reason") != "overdue"]  # the trace's
    joined = [e for e in peers if e["state"] == "joined" and e["t"] > started and "overdue" not in e.get("reason", "")]
    assert len(killed) == 1 and killed[0]["t"] >= started + KILL_AT, peers
    assert len(joined) == 1 and joined[0]["t"] >= started + JOIN_AT, peers
    assert all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in run.events.history("step"))
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, 32, cfg.seed))
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10


def test_a_task_pool_world_is_refused_on_dask_with_its_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"executor='taskpool' and backend='dask'.* run in-process: "
                                         r"backend='inprocess'"):
        labkit.launch(pool_world(tmp_path), backend="dask")
