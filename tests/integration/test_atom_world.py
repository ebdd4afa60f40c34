"""ATOM in a world (issue 28): replicas on virtual devices, their gradients round the world's links,
the world's churn replayed as real kills and joins, and training still exact. Asserts on what the
run reports (its `atom_world` and `atom_overrun` settings, step times against a lower bound the
emulation guarantees, parameters), never on how fast this machine is."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import labkit
from labkit import AtomConfig
from labkit.config import ConfigError, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.world import exchange_seconds, microbatch_seconds
from labkit.model import assemble
from labkit.runtime.links import load_links
from labkit.sim.seats import device_table
from labkit.runtime.reference import train_reference
from labkit.runtime.world import world_config
from labkit.sim.world import GRAD_BYTES

KILL_AT, JOIN_AT = 0.3, 0.6  # seconds after the run started; every step waits >= 0.13 s for its ring, 6 steps


def atom_world(tmp_path: Path) -> str:
    """3 replicas pricing SWARM's `small` at 1 x 512 tokens (3-15 ms a microbatch): an A100 and a T4
    in eu, a T4 in us, 20 ms and 10 Gb/s apart; one leaves at KILL_AT, a V100 joins at JOIN_AT."""
    world = {"name": "atom-world", "model": "small", "stages": 1, "microbatch": 1, "seq_len": 512,
             "join_device": "V100",
             "peers": [{"device": "A100", "count": 1, "stage": 0, "region": "eu"},
                       {"device": "T4", "count": 1, "stage": 0, "region": "eu"},
                       {"device": "T4", "count": 1, "stage": 0, "region": "us"}],
             "links": [{"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 10_000.0},
                       {"a": "eu", "b": "us", "rtt_ms": 20.0, "bandwidth_mbps": 10_000.0}],
             "trace": [[KILL_AT, -1], [JOIN_AT, 1]]}
    path = tmp_path / "atom_world.json"
    path.write_text(json.dumps(world))
    return str(path)


def atom_world_run(small_run: RunConfig, world: str) -> RunConfig:
    return world_config(world, small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), steps=6,
                                                 executor=AtomConfig())).replace(microbatch=4, global_batch=16)


def test_an_atom_world_holds_its_devices_and_links_replays_its_churn_and_stays_exact(small_run: RunConfig,
                                                                                    tmp_path: Path) -> None:
    cfg = atom_world_run(small_run, atom_world(tmp_path))
    assert (cfg.stages, cfg.peers_per_stage, cfg.executor.replicas) == (1, (3,), 3)  # the world's peers, as replicas
    run = labkit.launch(cfg)
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    world = load_links(cfg)
    seats = next(e["value"] for e in run.events.history("setting") if e["name"] == "atom_world")
    for replica, device in (("r0", "A100"), ("r1", "T4"), ("r2", "T4")):
        forward, backward = device_table(world, device)
        assert seats["replicas"][replica] == {"device": device, "microbatch_s": forward[0] + backward[0]}
    ring = 2 * 2 * (0.010 + 85_054_464 * GRAD_BYTES / 3 / 1.25e9)  # 2(N-1) steps of the slowest hop: eu-us
    assert seats["exchange_s"] == pytest.approx(ring, rel=1e-9)
    for e in run.events.history("setting"):
        if e["name"] == "atom_overrun":  # real compute slower than the device: said, with by how much
            assert e["value"]["over_s"] > 0 and e["value"]["replica"] in {"r0", "r1", "r2", "r3"}, e
    peers = run.events.history("peer")
    started = next(e["t"] for e in run.events.history("run") if e["state"] == "started")
    killed = [e for e in peers if e["state"] == "killed"]
    joined = [e for e in peers if e["state"] == "joined" and e["peer"] == "r3"]
    assert len(killed) == 1 and killed[0]["t"] >= started + KILL_AT, peers
    assert len(joined) == 1 and joined[0]["t"] >= started + JOIN_AT, peers
    rings = [["r0", "r1", "r2"], ["r0", "r1", "r2", "r3"]]  # the live replicas of some step, in name order
    rings = [[r for r in ring if r != killed[0]["peer"]] for ring in rings] + rings[:1]
    times = [e["t"] for e in run.events.history("step")]
    assert len(times) == cfg.steps
    floor = min(exchange_seconds(world, ring) for ring in rings)
    assert all(b - a >= floor for a, b in zip(times, times[1:])), (times, floor)  # every step waited for its ring
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, 32, cfg.seed))
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10


def test_an_atom_world_is_refused_with_its_reason_where_it_cannot_run(small_run: RunConfig, tmp_path: Path) -> None:
    world = atom_world(tmp_path)
    with pytest.raises(ConfigError, match=r"a world file of one stage .* this run has stages=2, peers=\[2, 2\]"):
        small_run.replace(world=world, executor=AtomConfig())  # 2 stages: not ATOM's shape
    with pytest.raises(ConfigError, match=r"this run has stages=1, peers=\[2\], atom.replicas=3"):
        small_run.replace(stages=1, peers=2, world=world, executor=AtomConfig(replicas=3))
    two_stages = tmp_path / "two_stages.json"  # a SWARM world given to ATOM
    two_stages.write_text(json.dumps(json.loads(Path(world).read_text()) | {"stages": 2, "peers": [
        {"device": "T4", "count": 1, "stage": s, "region": "eu"} for s in (0, 1)]}))
    with pytest.raises(ConfigError, match=r"a world file of one stage .* this run has stages=2, peers=\[1, 1\]"):
        world_config(str(two_stages), small_run.replace(executor=AtomConfig()))
    cfg = atom_world_run(small_run, world)
    with pytest.raises(ValueError, match="virtual devices and links run in-process: backend='inprocess'"):
        labkit.launch(cfg, backend="dask")
    assert microbatch_seconds(load_links(cfg), "r5") == pytest.approx(sum(x[0] for x in device_table(load_links(cfg),
                                                                                                        "V100")))


def test_a_stop_during_the_ring_ends_the_run_without_waiting_for_it(small_run: RunConfig, tmp_path: Path) -> None:
    """The ring's wait releases the run's lock: while it runs (here about 23 minutes: `small`'s
    gradients over 1 Mb/s), state() answers, and a stop ends the run at once, with no step taken."""
    world = json.loads(Path(atom_world(tmp_path)).read_text()) | {"trace": [], "links": [
        {"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 1.0}, {"a": "eu", "b": "us", "rtt_ms": 100.0,
                                                                      "bandwidth_mbps": 1.0}]}
    path = tmp_path / "slow_ring.json"
    path.write_text(json.dumps(world))
    cfg = atom_world_run(small_run, str(path))
    assert exchange_seconds(load_links(cfg), ["r0", "r1", "r2"]) > 1000
    run = labkit.launch(cfg)
    deadline = time.monotonic() + 120
    while sum(p["credited"] for s in run.state()["stages"] for p in s["peers"]) < cfg.global_batch:  # the step's work
        assert time.monotonic() < deadline, run.state()
        time.sleep(0.05)
    time.sleep(0.2)  # the boundary is in the ring now
    run.stop()
    summary = run.wait(60)
    assert summary["status"] == "stopped", summary
    assert run.events.history("step") == []
