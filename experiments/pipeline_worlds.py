"""The synchronous pipeline in emulated worlds, run for real and predicted from the same file.

Each world prices SWARM's xxlarge (1 x 512 tokens a microbatch) on virtual devices, 2 lanes
through 2 or 4 stages, on a LAN (every cut 2 ms, 1 Gb/s) or with lane 1 zig-zagging across an
ocean (every cut of it 100 ms, 200 Mb/s). The real run is `RunConfig(world=..., executor=
PipelineConfig(schedule))` on the in-process backend: the nano stand-in trains for real while its
peers hold each request to their device's time and its links carry the world's bytes
(labkit/executors/pipeline/links.py). The prediction is `labkit.sim.lanes.lane_seconds` for every
lane with the executor's own schedule, the same device tables and links, plus the real run's
boundary gap (the lanes' gradient sum and optimizer step, which the world does not price).

    python -m experiments.pipeline_worlds [--steps 5] [--only NAME,...]

Last line: pipeline_worlds worlds=<n> within_10pct=<m> worst_gap=<g>
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from experiments._runs import parse_with_out, print_table, run_world
from labkit.config import RunConfig
from labkit.executors.pipeline.config import PipelineConfig
from labkit.pipeline.schedule import deal, stage_order
from labkit.lab.worlds import boundary_gaps, codec_compression
from labkit.runtime.links import load_links
from labkit.runtime.pacing import payload_scale
from labkit.sim.seats import device_table, peer_device, peer_region
from labkit.sim.lanes import lane_seconds
from labkit.sim.links import region_link

GOAL = 0.10
LINKS = [{"a": "eu", "b": "eu", "rtt_ms": 2.0, "bandwidth_mbps": 1000.0},
         {"a": "eu", "b": "us", "rtt_ms": 100.0, "bandwidth_mbps": 200.0},
         {"a": "us", "b": "us", "rtt_ms": 2.0, "bandwidth_mbps": 1000.0}]
MIXED = ("T4", "V100", "A100", "RTX3080")


def world(stages: int, devices: tuple[str, ...], ocean: bool, microbatches: int) -> dict[str, Any]:
    """2 lanes through `stages` stages; lane 1 alternates eu and us stage by stage when `ocean`."""
    def region(stage: int, lane: int) -> str:
        return "us" if ocean and lane == 1 and stage % 2 == 1 else "eu"
    return {"name": "pipeline-world", "model": "xxlarge", "stages": stages, "microbatch": 1, "seq_len": 512,
            "trainers": 1, "window": 1, "global_batch": microbatches, "trainer_region": "eu", "links": LINKS,
            "peers": [{"device": devices[(stage + lane) % len(devices)], "count": 1, "stage": stage,
                       "region": region(stage, lane)} for stage in range(stages) for lane in range(2)]}


WORLDS = {
    "2x2 T4 LAN 1f1b": (world(2, ("T4",), False, 8), "1f1b"),
    "2x2 T4 ocean 1f1b": (world(2, ("T4",), True, 8), "1f1b"),
    "2x2 mixed ocean gpipe": (world(2, MIXED, True, 8), "gpipe"),
    "4x2 mixed LAN 1f1b": (world(4, MIXED, False, 16), "1f1b"),
    "4x2 mixed ocean 1f1b": (world(4, MIXED, True, 16), "1f1b"),
    "4x2 mixed ocean gpipe": (world(4, MIXED, True, 16), "gpipe"),
}


def predicted_lanes(cfg: RunConfig) -> list[float]:
    """Each lane's seconds for its share of a step, by `lane_seconds` over the world of `cfg`."""
    s = load_links(cfg)
    nbytes = cfg.microbatch * cfg.model.seq_len * cfg.model.d_model * 4 / codec_compression(cfg) * payload_scale(cfg, s)
    out = []
    for lane, share in enumerate(deal(cfg.microbatches_per_step, cfg.peers_per_stage[0])):
        tables = [device_table(s, peer_device(s, f"s{stage}p{lane}")) for stage in range(cfg.stages)]
        seconds = {"forward": [t[0][k] for k, t in enumerate(tables)], "backward": [t[1][k] for k, t in enumerate(tables)],
                   "last": [t[0][k] + t[1][k] for k, t in enumerate(tables)]}
        links = [region_link(s, peer_region(s, f"s{k}p{lane}"), peer_region(s, f"s{k + 1}p{lane}"))
                 for k in range(cfg.stages - 1)]
        orders = [stage_order(cfg.executor.schedule, cfg.stages, k, len(share)) for k in range(cfg.stages)]
        out.append(lane_seconds(orders, seconds, links, nbytes))
    return out


def one(name: str, spec: dict[str, Any], schedule: str, steps: int, folder: Path) -> dict[str, Any]:
    """World `spec` run for real with `schedule` and predicted: seconds a step, both ways."""
    base = RunConfig(executor=PipelineConfig(schedule=schedule), steps=steps, eval_every=0)
    cfg, events, real = run_world(name, spec, base, folder, timeout=600)
    lanes, gap = predicted_lanes(cfg), statistics.median(boundary_gaps(events))
    sim = max(lanes) + gap
    return {"world": name, "peers": sum(cfg.peers_per_stage), "real_s": real, "sim_s": sim, "lanes_s": lanes,
            "boundary_s": gap, "gap": sim / real - 1, "microbatches": cfg.microbatches_per_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default=None, help="comma-separated world names")
    args, out = parse_with_out(parser)
    names = list(WORLDS) if args.only is None else args.only.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in tqdm(names, desc="worlds", unit="world"):
            spec, schedule = WORLDS[name]
            rows.append(one(name, spec, schedule, args.steps, Path(folder)))
    (out / "pipeline_worlds.json").write_text(json.dumps(rows, indent=2))
    print_table("The synchronous pipeline in emulated worlds: seconds a step, real and predicted",
                ["world", "peers", "real s/step", "predicted s/step", "predicted - real", "lanes s", "boundary s"],
                [[r["world"], str(r["peers"]), f"{r['real_s']:.3f}", f"{r['sim_s']:.3f}", f"{r['gap']:+.1%}",
                  " / ".join(f"{x:.3f}" for x in r["lanes_s"]), f"{r['boundary_s']:.3f}"] for r in rows])
    within = sum(abs(r["gap"]) <= GOAL for r in rows)
    print(f"pipeline_worlds worlds={len(rows)} within_10pct={within} worst_gap={max(abs(r['gap']) for r in rows):.3f}")


if __name__ == "__main__":
    main()
