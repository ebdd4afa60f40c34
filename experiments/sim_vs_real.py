"""Emulated worlds, simulated and run for real from the same file: throughput and per-peer shares.

Each world is a scenario file (`worlds()`: 2-4 stages, 2-16 peers a stage, T4s alone or a mix of
T4, V100, RTX3080 and A100, one LAN or two continents, fp32 or int8 on the wire, rebalancing on or
off, with or without churn) pricing SWARM's xxlarge (1 x 512 tokens a microbatch). The real run is
`RunConfig(world=<file>)`: every peer on its virtual device behind the file's links, training the
nano stand-in, the file's churn replayed through the handle (labkit/runtime/world.py). The
simulator runs the same file as `labkit.lab.worlds.simulate_like` says (the runtime's hops, its
step barrier with the real run's boundary gap, the codec's wire bytes; nothing else is taken from
the real run). Throughput is microbatches per second over the steps after the first (both sides by
their step events); a peer's share is of its stage's forward hops after the first 10 % of the run,
every peer but those a rebalancing moved (both keep a moved peer's device and region, but the
runtime restarts it under a new name, and Algorithm 2 may move another peer, or at another time,
in the two runs: it reads queue lengths that differ by a request here and there). A world that
rebalances is simulated a second time making the real run's membership decisions (its moves, each
peer at the time it left its stage, and its joiners' stages) instead of its own Algorithm 2's: the
gaps left then (`replayed_*` in the JSON and the progress line) are not Algorithm 2's choice.

    python experiments/sim_vs_real.py [--backend inprocess] [--steps 5] [--only NAME,...]
    python experiments/sim_vs_real.py --plain experiments/scenarios/two_continents.json [--repeats 5]   # real compute

Last line: sim_vs_real worlds=<n> within_10pct=<m> worst_throughput_gap=<x> worst_share_gap_pts=<y>
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

import labkit
from experiments._runs import parse_with_out, print_table
from labkit.config import CompressionConfig, ModelConfig, RunConfig
from labkit.lab.worlds import boundary_gaps, measure, simulate_like, solo_seconds
from labkit.runtime.world import world_config
from labkit.sim import SimScenario
MIX = (("T4", 3), ("V100", 2), ("RTX3080", 2), ("A100", 1))  # of every 8 peers of a mixed stage
LAN = [{"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 1000.0}]
TWO_CONTINENTS = LAN + [{"a": "eu", "b": "us", "rtt_ms": 100.0, "bandwidth_mbps": 200.0}]


def world(stages: int, per_stage: int, mixed: bool, far: bool, codec: str = "fp32", rebalance: float | None = None,
          churn: bool = False) -> tuple[str, dict[str, Any], str]:
    """One world: (name, scenario fields, codec). Mixed stages take MIX's devices in turn; with
    `far`, every second peer of a stage sits in "us", 100 ms and 200 Mb/s from the trainers."""
    devices = [MIX[k % 4][0] for k in range(per_stage)] if mixed else ["T4"] * per_stage
    peers = [{"device": d, "count": 1, "stage": s, "region": "us" if far and k % 2 else "eu"}
             for s in range(stages) for k, d in enumerate(devices)]
    trainers = max(2, per_stage // 2)
    name = (f"{stages}x{per_stage} {'mixed' if mixed else 'T4'} {'2-continents' if far else 'LAN'} {codec}"
            + (f" T={rebalance:g}s" if rebalance else "") + (" churn" if churn else ""))
    fields = {"name": name, "model": "xxlarge", "stages": stages, "peers": peers, "trainer_region": "eu",
              "links": TWO_CONTINENTS if far else LAN, "trainers": trainers, "window": 2, "microbatch": 1,
              "seq_len": 512, "global_batch": trainers * 2 * 4, "rebalance_period": rebalance, "move_seconds": 1.0,
              "service_cv": 0.0, "trace": [[4.0, -1], [8.0, 1]] if churn else []}
    return name, fields, codec


def worlds() -> list[tuple[str, dict[str, Any], str]]:
    """The grid: 24 worlds."""
    return [world(2, 2, False, False), world(2, 2, False, True), world(2, 2, True, True), world(2, 2, True, True, "int8"),
            world(2, 4, False, False), world(2, 4, True, False), world(2, 4, True, True), world(2, 4, True, True, "int8"),
            world(3, 2, False, False), world(3, 4, True, True), world(3, 4, True, True, "int8"), world(4, 2, False, False),
            world(4, 4, True, False), world(4, 4, True, True), world(2, 8, True, False), world(2, 8, True, True, "int8"),
            world(4, 8, True, True), world(2, 16, True, False), world(4, 16, True, True, "int8"),
            world(2, 4, True, True, rebalance=5.0), world(3, 4, True, False, rebalance=5.0),
            world(2, 4, True, True, churn=True), world(4, 4, True, False, rebalance=5.0, churn=True),
            world(2, 2, True, True, "int8", churn=True)]


def base_config(steps: int, codec: str = "fp32") -> RunConfig:
    """What a world's run takes from outside the world: its steps and codec, no evaluation."""
    return RunConfig(steps=steps, eval_every=0, eval_batches=1, compression=CompressionConfig(codec=codec))


def moves(events: list[dict[str, Any]]) -> int:
    """How many peers a run's Algorithm 2 moved."""
    return sum(e["type"] == "peer" and e["state"] == "moved" for e in events)


def share_gap(events: list[dict[str, Any]], sim_events: list[dict[str, Any]], real: dict[str, Any],
              sim: dict[str, Any]) -> float:
    """The largest difference of a peer's share of its stage's forward hops between the two runs (`measure`d).
    A moved peer restarts under a new name (in its old place), and the two runs may move different
    peers: a moved peer's share has no counterpart, so moved peers are left out."""
    moved = ({e["to"] for e in events if e["type"] == "peer" and e["state"] == "moved"}
             | {e["peer"] for e in sim_events if e["type"] == "peer" and e["state"] == "moved"})
    return max(abs(sim["share"].get(p, 0.0) - real["share"].get(p, 0.0))
               for p in (set(sim["share"]) | set(real["share"])) - moved)


def compare(name: str, fields: dict[str, Any], base: RunConfig, backend: str, folder: Path) -> dict[str, Any]:
    """One world both ways: `base` (`base_config`, or more) run in the world `fields` describe, and
    the simulator's prediction of it."""
    path = folder / f"world{abs(hash(name))}.json"
    path.write_text(json.dumps(fields))
    cfg = world_config(str(path), base)
    run = labkit.launch(cfg, backend=backend)
    summary = run.wait()
    if summary["status"] != "finished":
        raise RuntimeError(f"{name}: {summary}")
    events, scenario = run.events.history(), SimScenario.from_dict(fields)
    sim_events = simulate_like(scenario, cfg, events)
    real, sim = measure(events, cfg.microbatches_per_step), measure(sim_events, cfg.microbatches_per_step)
    boundary = statistics.median(boundary_gaps(events))
    replayed: dict[str, Any] = {}
    if fields.get("rebalance_period"):  # again with the real run's moves: what is left is not Algorithm 2's choice
        again = simulate_like(scenario, cfg, events, replay_moves=True)
        replay = measure(again, cfg.microbatches_per_step)
        replayed = {"replayed_gap": replay["rate"] / real["rate"] - 1, "replayed_moves": moves(again),
                    "replayed_share_gap_pts": 100 * share_gap(events, again, real, replay)}
    return {"name": name, "backend": backend, "peers": sum(cfg.peers_per_stage), "real": real["rate"], "sim": sim["rate"],
            "gap": sim["rate"] / real["rate"] - 1, "share_gap_pts": 100 * share_gap(events, sim_events, real, sim),
            "boundary_s": boundary, **replayed,
            "overruns": summary["device_overruns"], "requests": summary["device_requests"],
            "real_share": real["share"], "sim_share": sim["share"],
            "pipeline_bytes": summary["pipeline_bytes"], "dp_bytes": summary["dp_bytes"],
            "real_moves": moves(events), "sim_moves": moves(sim_events)}


def links_config(s: SimScenario, path: str, steps: int, debias: bool) -> RunConfig:
    """The scenario as a real run over its links (no virtual devices): its model, shape and trainers."""
    peers = tuple(sum(g.count for g in s.peers if g.stage == st) for st in range(s.stages))
    return RunConfig(model=ModelConfig(size=s.model, seq_len=s.seq_len), stages=s.stages, peers=peers,
                     trainers=s.trainers, microbatch=s.microbatch, global_batch=256, steps=steps, gamma=s.gamma,
                     debias_ema=debias, rebalance_period=0, eval_every=0, eval_batches=1, links=path)


def plain(path: str, steps: int, codec: str) -> dict[str, Any]:
    """The scenario at `path` as a links-only run on real compute (no virtual devices), against the
    simulator with every peer on one host of this machine's cores (`simulate_like(solo=...)`)."""
    s = SimScenario.load(path)
    cfg = links_config(s, path, steps, s.debias_ema).replace(compression=CompressionConfig(codec=codec))
    solo = solo_seconds(cfg)
    run = labkit.launch(cfg)
    if run.wait()["status"] != "finished":
        raise RuntimeError(f"{path}: {run.summary()}")
    events = run.events.history()
    real = measure(events, cfg.microbatches_per_step)
    sim = measure(simulate_like(s, cfg, events, solo=solo), cfg.microbatches_per_step)
    return {"name": f"{s.name} {codec}, real compute", "real": real["rate"], "sim": sim["rate"],
            "gap": sim["rate"] / real["rate"] - 1, "solo_seconds": solo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inprocess", choices=["inprocess", "dask"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default=None, help="comma-separated world names (default: the whole grid)")
    parser.add_argument("--plain", default=None, metavar="SCENARIO",
                        help="instead: this scenario as a links-only run on real compute, fp32 and int8")
    parser.add_argument("--repeats", type=int, default=1,
                        help="with --plain: runs of each codec, alternating (the medians are printed last)")
    args, out = parse_with_out(parser)
    if args.plain:
        rows = [plain(args.plain, args.steps, codec) for _ in range(args.repeats) for codec in ("fp32", "int8")]
        print_table(f"\n{args.plain} on real compute ({time.strftime('%Y-%m-%d %H:%M')})",
                    ["run", "real mb/s", "sim mb/s", "sim - real"],
                    [[r["name"], f"{r['real']:.2f}", f"{r['sim']:.2f}", f"{r['gap']:+.1%}"] for r in rows])
        (out / "sim_vs_real_plain.json").write_text(json.dumps(rows, indent=1))
        gaps = {c: statistics.median(r["gap"] for r in rows if f" {c}," in r["name"]) for c in ("fp32", "int8")}
        print(f"sim_vs_real_plain runs={len(rows)} median_gap_fp32={gaps['fp32']:+.3f} "
              f"median_gap_int8={gaps['int8']:+.3f}")
        return
    grid = [w for w in worlds() if args.only is None or w[0] in args.only.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name, fields, codec in tqdm(grid, desc="worlds", unit="world"):
            results.append(compare(name, fields, base_config(args.steps, codec), args.backend, Path(folder)))
            r = results[-1]
            again = (f"; with the real moves {r['replayed_gap']:+.1%}, share gap {r['replayed_share_gap_pts']:.1f} pts"
                     if "replayed_gap" in r else "")
            tqdm.write(f"{name}: real {r['real']:.2f} sim {r['sim']:.2f} mb/s ({r['gap']:+.1%}), "
                       f"share gap {r['share_gap_pts']:.1f} pts, boundary {r['boundary_s']:.2f} s, "
                       f"overruns {r['overruns']}, moves real {r['real_moves']} sim {r['sim_moves']}{again}")
    rows = [[r["name"], str(r["peers"]), f"{r['real']:.2f}", f"{r['sim']:.2f}", f"{r['gap']:+.1%}",
             f"{r['share_gap_pts']:.1f}", f"{r['boundary_s']:.2f}", f"{r['overruns']} / {r['requests']}"] for r in results]
    print_table(f"\nworlds on {args.backend} ({time.strftime('%Y-%m-%d %H:%M')})",
                ["world", "peers", "real mb/s", "sim mb/s", "sim - real", "worst share gap (pts)", "boundary s",
                 "overruns"], rows)
    (out / f"sim_vs_real_{args.backend}.json").write_text(json.dumps(results, indent=1))
    within = sum(abs(r["gap"]) <= 0.10 for r in results)
    print(f"sim_vs_real worlds={len(results)} within_10pct={within} "
          f"worst_throughput_gap={max(abs(r['gap']) for r in results):.3f} "
          f"worst_share_gap_pts={max(r['share_gap_pts'] for r in results):.1f}")


if __name__ == "__main__":
    main()
