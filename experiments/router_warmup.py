"""Why the real routers sent a third of their hops to the far peers: the router's own numbers,
with the plain EMA (the paper's) and the debiased one.

First the run where it was seen: `experiments/scenarios/two_continents.json` as links only (nano,
2 x 2, 4 trainers in eu, each stage's second peer 100 ms / 5 Mb/s away, real compute), in-process,
6 steps of 256: per quarter of the run the far peers' share of their stage's forward hops, and
trainer t0's EMA of each peer at the quarter's end (its `router` events). Then the same question
in an emulated world (`sim_vs_real.world(2, 2, ...)`: T4s, half of them 100 ms away), real and
simulated (`sim_vs_real.compare`), both ways. Last line: `router_warmup far_share_plain=<real,
whole run> far_share_debiased=<...> seconds_plain=<hop span> seconds_debiased=<...>`.

    python experiments/router_warmup.py [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import labkit
from experiments._runs import parse_with_out, print_table
from experiments.sim_vs_real import base_config, compare, links_config, world
from labkit.sim import SimScenario

QUARTERS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))


def far_shares(events: list[dict[str, Any]], far: set[str]) -> tuple[list[float], float, float]:
    """The far peers' share of forward hops in each quarter of the hops' span, over the whole run,
    and the span in seconds."""
    hops = [e for e in events if e["type"] == "hop" and e["direction"] == "forward"]
    t0, t1 = min(h["t"] for h in hops), max(h["t"] for h in hops)

    def share(sel: list[dict[str, Any]]) -> float:
        return sum(h["peer"] in far for h in sel) / max(1, len(sel))

    quarters = [share([h for h in hops if t0 + a * (t1 - t0) <= h["t"] <= t0 + b * (t1 - t0)]) for a, b in QUARTERS]
    return quarters, share(hops), t1 - t0


def ema_at_quarters(events: list[dict[str, Any]], trainer: str = "t0") -> list[dict[str, float]]:
    """`trainer`'s EMA per peer as its last router event before each quarter's end says."""
    views = [e for e in events if e["type"] == "router" and e["trainer"] == trainer]
    t0, t1 = views[0]["t"], views[-1]["t"]
    out = []
    for _, b in QUARTERS:
        last = [v for v in views if v["t"] <= t0 + b * (t1 - t0)][-1]
        out.append({p["peer"]: p["ema"] for p in last["peers"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="experiments/scenarios/two_continents.json")
    parser.add_argument("--steps", type=int, default=6)
    args, out = parse_with_out(parser)
    base = SimScenario.load(args.scenario)
    far = {f"s{st}p{k}" for st in range(base.stages)
           for k, g in enumerate(g for g in base.peers if g.stage == st for _ in range(g.count))
           if g.region != base.trainer_region}
    results: dict[str, Any] = {}
    for debias in (False, True):
        key = "debiased" if debias else "plain"
        run = labkit.launch(links_config(base, args.scenario, args.steps, debias))
        if run.wait()["status"] != "finished":
            raise RuntimeError(f"{key}: {run.summary()}")
        events = run.events.history()
        quarters, whole, span = far_shares(events, far)
        emas = ema_at_quarters(events)
        name, fields, codec = world(2, 2, False, True)
        with tempfile.TemporaryDirectory() as folder:
            both = compare(name, fields | {"debias_ema": debias}, base_config(5, codec), "inprocess", Path(folder))
        world_far = {side: sum(v for p, v in both[f"{side}_share"].items() if p.endswith("p1")) / 2 for side in ("real", "sim")}
        results[key] = {"far_share_quarters": quarters, "far_share": whole, "seconds": span, "t0_ema": emas,
                        "world_far_share": world_far}
        rows = [[f"{a:.0%}-{b:.0%}", f"{q:.1%}", "  ".join(f"{p} {v * 1e3:.0f}" for p, v in sorted(e.items()))]
                for (a, b), q, e in zip(QUARTERS, quarters, emas)]
        print_table(f"\n{key} EMA, links run: far peers' share of forward hops {whole:.1%}, hops over {span:.1f} s; "
                    f"in the world {name}: real {world_far['real']:.1%}, simulated {world_far['sim']:.1%}",
                    ["quarter", "far share", "t0's EMA ms"], rows)
    (out / "router_warmup.json").write_text(json.dumps(results, indent=1))
    print(f"router_warmup far_share_plain={results['plain']['far_share']:.3f} "
          f"far_share_debiased={results['debiased']['far_share']:.3f} seconds_plain={results['plain']['seconds']:.1f} "
          f"seconds_debiased={results['debiased']['seconds']:.1f}")


if __name__ == "__main__":
    main()
