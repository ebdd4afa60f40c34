"""One scenario file, simulated and run for real: throughput and per-peer shares side by side.

The real runs train the scenario's model (nano by default) with `RunConfig.links` set to the
scenario, so every trainer-peer request crosses its emulated link; fp32 and int8 on the wire. The
simulator runs the same file with what it cannot derive from FLOPs on this machine, where all
peers share 2 cores and one interpreter: each stage's forward, backward and loss seconds are
measured in the real run itself, as the hop seconds less the link's seconds at the stage's
least-used peer (which rarely queues), and the bytes a microbatch puts on the wire are counted
there too. Routing, queueing and the network are the simulator's own. Two structural differences are mapped,
not hidden: the runtime's last stage answers forward, loss and backward in one request, so the
simulator's two last-stage hops share one round trip (half the RTT each); and the simulator has
no step barrier (trainers never wait for a step boundary), so the real runs use a large global
batch and report how long trainers sat idle (waiting for the next step's work), which the simulator
cannot show. Shares and throughput skip the first 10 % of each run (routers still learning the links).

    python experiments/sim_vs_real.py [--scenario experiments/scenarios/two_continents.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections import Counter
from typing import Any

import numpy as np

import labkit
from experiments._runs import parse_with_out, print_table
from labkit.config import CompressionConfig, ModelConfig, RunConfig
from labkit.sim import SimScenario
from labkit.sim.events_sim import run_events
from labkit.sim.world import build_world

WARMUP = 0.1  # share of each run's time left out of throughput and shares


def real_config(s: SimScenario, path: str, codec: str, steps: int, global_batch: int) -> RunConfig:
    """The scenario as a real run: its model, shape, trainers and router gamma."""
    peers = tuple(sum(g.count for g in s.peers if g.stage == st) for st in range(s.stages))
    return RunConfig(model=ModelConfig(size=s.model, seq_len=s.seq_len), stages=s.stages, peers=peers,
                     trainers=s.trainers, microbatch=s.microbatch, global_batch=global_batch, steps=steps,
                     gamma=s.gamma, debias_ema=s.debias_ema, rebalance_period=0, eval_every=0, eval_batches=1, links=path,
                     compression=CompressionConfig(codec=codec))


def run(cfg: RunConfig, backend: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run `cfg` to the end; its summary and events."""
    handle = labkit.launch(cfg, backend=backend)
    summary = handle.wait()
    if summary["status"] != "finished":
        raise RuntimeError(f"{cfg}: {summary}")
    return summary, handle.events.history()


def calibrate(events: list[dict[str, Any]], stages: int) -> dict[str, Any]:
    """Per (stage, direction) the median service seconds (hop less link seconds) at the stage's
    least-used peer, their spread, and the bytes per microbatch."""
    hops = [e for e in events if e["type"] == "hop"]
    used = Counter(h["peer"] for h in hops)
    quiet = {st: min((p for p in used if any(h["peer"] == p and h["stage"] == st for h in hops)), key=used.get)
             for st in range(stages)}
    served = [h for h in hops if h["peer"] == quiet[h["stage"]]]
    seconds = {(st, d): statistics.median(h["seconds"] - h["link_seconds"] for h in served
                                          if h["stage"] == st and h["direction"] == d)
               for st in range(stages) for d in ("forward", "backward") if st < stages - 1 or d == "forward"}
    per = [(h["seconds"] - h["link_seconds"]) / seconds[h["stage"], h["direction"]] for h in served]
    microbatches = sum(1 for h in hops if h["stage"] == stages - 1)  # one last-stage request per microbatch
    return {"seconds": seconds, "cv": float(np.std(per)), "bytes": sum(h["bytes"] for h in hops) / microbatches}


def simulate(s: SimScenario, cal: dict[str, Any], duration: float) -> list[dict[str, Any]]:
    """The scenario in the simulator with calibrated compute and payload; its events."""
    s = dataclasses.replace(s, duration=duration, bin_seconds=duration / 20, window=1, global_batch=None,
                            service_cv=cal["cv"])
    w = build_world(s)
    last = s.stages - 1
    fwd, bwd = np.zeros_like(w.fwd), np.zeros_like(w.bwd)
    for st in range(s.stages):
        fwd[:, st] = cal["seconds"][st, "forward"]  # the last stage's "forward" is its loss request
        bwd[:, st] = 0.0 if st == last else cal["seconds"][st, "backward"]
    rtt = np.where(w.stage0 == last, w.hop_rtt / 2, w.hop_rtt)  # one request, two simulated hops
    w = dataclasses.replace(w, fwd=fwd, bwd=bwd, hop_rtt=rtt, activation_bytes=cal["bytes"] / (2 * s.stages))
    names = {name: f"s{st}p{k}" for st in range(s.stages)
             for k, name in enumerate(n for n, g in zip(w.names, w.stage0) if g == st)}
    events = run_events(s, w).events
    return [e | {"peer": names[e["peer"]]} if e["type"] == "hop" else e for e in events]


def measure(events: list[dict[str, Any]], tokens_per_microbatch: int) -> dict[str, Any]:
    """Tokens/s and each peer's share of its stage's forward hops, after the warm-up."""
    hops = [e for e in events if e["type"] == "hop"]
    end = max(h["t"] for h in hops)
    steady = [h for h in hops if h["t"] >= WARMUP * end]
    last = max(h["stage"] for h in hops)
    done = [h for h in steady if h["stage"] == last]  # one last-stage forward hop per finished microbatch
    span = end - min(h["t"] for h in steady)
    share = Counter(h["peer"] for h in steady if h["direction"] == "forward")
    stage_total = Counter(h["stage"] for h in steady if h["direction"] == "forward")
    stage_of = {h["peer"]: h["stage"] for h in steady}
    idle = 0.0  # trainer seconds between a hop's answer and the next hop's request (waiting for work)
    for trainer in {h["trainer"] for h in steady}:
        mine = [h for h in steady if h["trainer"] == trainer]
        idle += sum(max(0.0, b["t"] - b["seconds"] - a["t"]) for a, b in zip(mine, mine[1:]))
    trainers = len({h["trainer"] for h in steady})
    return {"tokens_per_s": len(done) * tokens_per_microbatch / span, "trainer_idle": idle / (trainers * span),
            "share": {p: share[p] / stage_total[stage_of[p]] for p in sorted(share)},
            "link_seconds": statistics.mean(h["link_seconds"] for h in steady)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="experiments/scenarios/two_continents.json")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--backend", default="inprocess", choices=["inprocess", "dask"])
    args, out = parse_with_out(parser)
    s = SimScenario.load(args.scenario)
    tokens = s.microbatch * s.seq_len
    results: dict[str, Any] = {"scenario": args.scenario, "backend": args.backend, "date": time.strftime("%Y-%m-%d")}
    for codec in ("fp32", "int8"):
        cfg = real_config(s, args.scenario, codec, args.steps, args.global_batch)
        summary, events = run(cfg, args.backend)
        cal = calibrate(events, s.stages)
        real = measure(events, tokens) | {"tokens_per_s_steps": summary["tokens_per_second"]}
        sim = measure(simulate(s, cal, duration=summary["seconds"]), tokens)
        results[codec] = {"real": real, "sim": sim, "calibration": {f"{k[0]} {k[1]}": v for k, v in cal["seconds"].items()}
                          | {"cv": cal["cv"], "bytes_per_microbatch": cal["bytes"]}}
        rows = [["tokens/s", f"{real['tokens_per_s']:,.0f}", f"{sim['tokens_per_s']:,.0f}",
                 f"{sim['tokens_per_s'] / real['tokens_per_s'] - 1:+.1%}"],
                ["trainers idle", f"{real['trainer_idle']:.1%}", f"{sim['trainer_idle']:.1%}",
                 f"{sim['trainer_idle'] - real['trainer_idle']:+.1%} pts"]]
        rows += [[f"{p} share", f"{real['share'].get(p, 0):.1%}", f"{sim['share'].get(p, 0):.1%}",
                  f"{sim['share'].get(p, 0) - real['share'].get(p, 0):+.1%} pts"] for p in sorted(sim["share"])]
        print_table(f"\n{s.name}, {codec} on the wire ({args.backend}, {summary['seconds']:.0f} s real run)",
                    ["", "real", "simulated", "sim - real"], rows)
    fp32, int8 = (results[c]["real"]["tokens_per_s"] for c in ("fp32", "int8"))
    sim32, sim8 = (results[c]["sim"]["tokens_per_s"] for c in ("fp32", "int8"))
    print(f"\nint8 over fp32 on these links: real {int8 / fp32:.2f}x, simulated {sim8 / sim32:.2f}x")
    (out / "sim_vs_real.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'sim_vs_real.json'}")


if __name__ == "__main__":
    main()
