"""The synchronous pipeline in a world: lane r's peers compute on the r-th peer's virtual device of
each stage (its replacements too), the activations and gradients between stages cross the
world's link between their regions, and training stays exact. Asserts on what the run reports
(each request held at least its device's time, each hand-off at least its link's), never on
wall-clock speed."""

from __future__ import annotations

import json
from pathlib import Path

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.runtime.links import load_links
from labkit.runtime.pacing import payload_scale
from labkit.sim.seats import device_table
from labkit.runtime.world import world_config
from tests.integration.test_pipeline_run import assert_equals_reference

LINKS = {("eu", "eu"): (2.0, 1000.0), ("us", "eu"): (80.0, 100.0)}  # (rtt ms, Mb/s)


def lanes_world(tmp_path: Path) -> str:
    """2 stages x 2 lanes pricing SWARM's xxlarge: lane 0 an A100 then a T4, both in eu; lane 1 a
    T4 in us then an A100 in eu, across the ocean."""
    world = {"name": "lanes", "model": "xxlarge", "stages": 2, "microbatch": 1, "seq_len": 512, "trainers": 1,
             "window": 1, "trainer_region": "eu",
             "peers": [{"device": "A100", "count": 1, "stage": 0, "region": "eu"},
                       {"device": "T4", "count": 1, "stage": 0, "region": "us"},
                       {"device": "T4", "count": 1, "stage": 1, "region": "eu"},
                       {"device": "A100", "count": 1, "stage": 1, "region": "eu"}],
             "links": [{"a": a, "b": b, "rtt_ms": rtt, "bandwidth_mbps": mbps} for (a, b), (rtt, mbps) in LINKS.items()]}
    path = tmp_path / "lanes.json"
    path.write_text(json.dumps(world))
    return str(path)


def pipeline_world(tmp_path: Path) -> RunConfig:
    base = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), executor="pipeline", steps=3,
                     eval_every=0, lr=3e-3, warmup_steps=1)
    return world_config(lanes_world(tmp_path), base).replace(microbatch=2, global_batch=8)


def test_a_pipeline_in_a_world_holds_each_request_to_its_device_and_each_hand_off_to_its_link(tmp_path: Path) -> None:
    cfg = pipeline_world(tmp_path)
    check_pipeline_world(labkit.launch(cfg), cfg)


def check_pipeline_world(run: labkit.RunHandle, cfg: RunConfig, start_seconds: float = 120) -> None:
    """Kill lane 1's stage-0 peer after step 1 and replace it; then every request was held at least
    its peer's device's time, every hand-off took at least its link's, and training was exact."""
    run.wait_for(step=1, timeout=start_seconds)
    run.kill_peer("s0p1")
    assert run.add_peer(0) == "s0p2"  # lane 1's replacement: a T4 in us, as s0p1 was (a joiner would be an A100 in eu)
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    world, scale = load_links(cfg), payload_scale(cfg, load_links(cfg))
    devices = {"s0p0": "A100", "s0p1": "T4", "s0p2": "T4", "s1p0": "T4", "s1p1": "A100"}
    hops = run.events.history("hop")
    assert {h["peer"] for h in hops} == set(devices), {h["peer"] for h in hops}
    for h in hops:
        fwd, bwd = device_table(world, devices[h["peer"]])
        held = {"forward": fwd, "backward": bwd}.get(h["op"], [f + b for f, b in zip(fwd, bwd)])[h["stage"]]
        assert h["seconds"] >= held, h
        lane = int(h["trainer"].removeprefix("lane"))
        rtt_ms, mbps = LINKS[("eu", "eu") if lane == 0 else ("us", "eu")]
        ids = cfg.microbatch * cfg.model.seq_len * 8  # stage 0's forward was sent token ids, and handed on activations
        handed = h["bytes"] - ids if h["op"] == "forward" else h["bytes"] / 2  # the loss request's gradient is as large
        if h["op"] == "backward":  # stage 0's backward hands nothing on
            assert h["link_seconds"] == 0.0, h
        else:
            assert h["link_seconds"] >= rtt_ms / 2e3 + handed * scale * 8 / (mbps * 1e6) - 1e-9, h
    assert_equals_reference(run, cfg)


def test_a_churn_join_with_no_empty_lane_is_refused_aloud_and_the_run_goes_on(tmp_path: Path) -> None:
    """The world's trace adds a peer at 0.1 s, when both lanes are whole: the pipeline's fixed
    wiring refuses it, the replay says so in a `churn_refused` setting, and the run finishes."""
    cfg = pipeline_world(tmp_path).replace(steps=2)
    path = Path(cfg.world)
    path.write_text(json.dumps({**json.loads(path.read_text()), "trace": [[0.1, 1]]}))
    run = labkit.launch(cfg)
    refused = run.wait_for(event={"type": "setting", "name": "churn_refused"}, timeout=120)
    assert "lane" in refused["value"], refused
    assert run.wait(300)["status"] == "finished"
    assert sorted(p["peer"] for s in run.state()["stages"] for p in s["peers"]) == ["s0p0", "s0p1", "s1p0", "s1p1"]
