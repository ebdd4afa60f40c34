"""A world the real runtime runs (issue 26): peers on virtual devices behind emulated links, a
churn trace replayed as real kills and joins, and training still exact. Asserts on what the
peers and trainers report (hop timings, peer events, parameters), never on wall-clock speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import labkit
from labkit.config import ConfigError, ModelConfig, RunConfig
from labkit.runtime.links import load_links
from labkit.runtime.pacing import payload_scale
from labkit.sim.seats import device_table, peer_device, peer_region
from labkit.lab.worlds import measure, simulate_like
from labkit.runtime.world import world_config
from labkit.sim import SimScenario
from tests.integration.test_equivalence import _reference_params

# seconds after the run started: the world's churn trace, and the joiner's state download (the
# file's `move_seconds`). All come well before the run can end: its 40 microbatches, 2 at a time,
# each take at least 80 ms on the fastest devices (A100: 13 ms forward on stage 0, 40 ms forward
# and backward on stage 1, 27 ms backward on stage 0), so >= 1.6 s.
KILL_AT, JOIN_AT, DOWNLOAD = 0.3, 0.6, 0.4


def small_world(tmp_path: Path) -> str:
    """2 stages x 2 peers pricing SWARM's xxlarge (13-195 ms a request): an A100 and a T4 on every
    stage, the T4s across the ocean; one peer leaves at KILL_AT and one joins at JOIN_AT, serving
    DOWNLOAD seconds later at the earliest."""
    world = {"name": "small-world", "model": "xxlarge", "stages": 2, "microbatch": 1, "seq_len": 512,
             "trainers": 2, "window": 1, "trainer_region": "eu", "join_device": "V100",
             "peers": [{"device": d, "count": 1, "stage": s, "region": r} for s in (0, 1)
                       for d, r in (("A100", "eu"), ("T4", "us"))],
             "links": [{"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 1000.0},
                       {"a": "eu", "b": "us", "rtt_ms": 80.0, "bandwidth_mbps": 100.0}],
             "trace": [[KILL_AT, -1], [JOIN_AT, 1]], "move_seconds": DOWNLOAD}
    path = tmp_path / "small_world.json"
    path.write_text(json.dumps(world))
    return str(path)


def world_run(small_run: RunConfig, world: str) -> RunConfig:
    """The world's shape on the small float64 run (4 samples a microbatch, 10 steps of 16)."""
    return world_config(world, small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"),
                                                 steps=10)).replace(microbatch=4, global_batch=16)


def check_world(run: labkit.RunHandle, cfg: RunConfig) -> None:
    """Every hop crossed its link carrying the world's bytes, every data request was held to its
    peer's virtual device (or its overrun reported), the churn trace was replayed, and the
    parameters equal the single-process reference's."""
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    assert [e for e in run.events.history("peer") if e["state"] == "banned"] == []  # deadlines learnt, none too short
    world = load_links(cfg)
    hops = run.events.history("hop")
    assert summary["device_requests"] == len(hops) > 0
    scale = payload_scale(cfg, world)  # xxlarge's 512 x 4096 fp16 activations for nano's 4 x 32 x 64 fp32
    assert scale == 512 * 4096 * 2 / (4 * 32 * 64 * 4)
    for h in hops:  # each trainer has one request at a time on its link: no queueing in the buckets
        rtt_ms, mbps = (2.0, 1000.0) if peer_region(world, h["peer"]) == "eu" else (80.0, 100.0)
        assert h["link_seconds"] == pytest.approx(rtt_ms / 1e3 + h["bytes"] * scale * 8 / (mbps * 1e6), rel=1e-6), h
        fwd, bwd = device_table(world, peer_device(world, h["peer"]))
        last = h["stage"] == cfg.stages - 1
        want = fwd[h["stage"]] + bwd[h["stage"]] if last else (fwd if h["direction"] == "forward" else bwd)[h["stage"]]
        assert h["timing"]["emulated"] == pytest.approx(want, rel=1e-12), h
        assert h["timing"]["compute"] >= want or h["timing"]["overrun"] > 0, h
    assert summary["device_overruns"] == sum(h["timing"]["overrun"] > 0 for h in hops)
    peers = run.events.history("peer")
    killed = [e for e in peers if e["state"] == "killed"]
    joined = [e for e in peers if e["state"] == "joined" and e["peer"] not in {f"s{s}p{k}" for s in (0, 1) for k in (0, 1)}]
    started = next(e["t"] for e in run.events.history("run") if e["state"] == "started")
    assert len(killed) == 1 and killed[0]["t"] >= started + KILL_AT, peers
    assert len(joined) == 1 and joined[0]["t"] >= started + JOIN_AT + DOWNLOAD, peers  # it downloaded its state
    assert peer_device(world, joined[0]["peer"]) == "V100"
    got = labkit.model.assemble([s["params"] for s in run.snapshot().result().stages])
    want = _reference_params(cfg)
    assert max(float((got[k] - want[k]).abs().max()) for k in want) <= 1e-10  # exact as without a world


def test_a_world_runs_on_virtual_devices_with_its_churn_and_stays_exact(small_run: RunConfig, tmp_path: Path) -> None:
    cfg = world_run(small_run, small_world(tmp_path))
    assert (cfg.stages, cfg.peers, cfg.trainers, cfg.world) == (2, (2, 2), 2, str(tmp_path / "small_world.json"))
    run = labkit.launch(cfg)
    check_world(run, cfg)
    events = run.events.history()  # and the simulator's prediction of the same world, measured alike
    sim = simulate_like(SimScenario.load(cfg.world), cfg, events, loads=True)
    assert {e["peer"] for e in sim if e["type"] == "hop"} <= {f"s{s}p{k}" for s in (0, 1) for k in (0, 1, 2)}
    assert any(e["type"] == "load" for e in sim) and len([e for e in sim if e["type"] == "step"]) >= 2
    for side in (events, sim):
        m = measure(side, cfg.microbatches_per_step)
        assert m["rate"] > 0 and sum(m["share"].values()) == pytest.approx(2.0)  # two stages' shares


def test_a_bad_world_is_one_clear_error(small_run: RunConfig, tmp_path: Path) -> None:
    world = small_world(tmp_path)
    with pytest.raises(ConfigError, match="world.*with links=None"):
        small_run.replace(world=world, links=world)
    with pytest.raises(ConfigError, match=r"world.*'nowhere'.*preset world, one of \['world-64', 'world-16'\]"):
        world_config("nowhere")
    with pytest.raises(ConfigError, match="world.*a scenario with the run's 2 stages of \\[3, 3\\] peers"):
        labkit.launch(world_run(small_run, world).replace(peers=3))


def test_a_moved_peer_keeps_its_region_and_device_under_its_new_name(small_run: RunConfig, tmp_path: Path) -> None:
    """A move restarts the peer under a new name (s1p2 here, a joiner's name): in a world it takes
    the old peer's place, as the simulator's moved peer keeps its slot, not a joiner's."""
    from labkit.model.assembly import stage_module
    from labkit.model.partition import init_run_state
    from labkit.runtime.peer import StagePeer
    cfg = world_run(small_run, small_world(tmp_path))
    world, module = load_links(cfg), stage_module(cfg, 1, init_run_state(cfg.model, cfg.seed, cfg.compression, cfg.stages))
    moved, joiner = StagePeer("s1p2", 1, module, cfg, emulates="s0p1"), StagePeer("s1p3", 1, module, cfg)
    assert moved.pacing.table == device_table(world, "T4") and moved.links.origin == "us"
    assert joiner.pacing.table == device_table(world, "V100") and joiner.links.origin == peer_region(world, "s1p3")
    assert device_table(world, "T4") != device_table(world, "V100")
