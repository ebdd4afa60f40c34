"""Why the real routers sent a third of their hops to the far peers: the router's own numbers,
with the plain EMA (the paper's) and the debiased one, on the two-continents scenario.

Each configuration is one real in-process run of the scenario (`sim_vs_real.real_config`: nano,
2 x 2, 4 trainers in eu, each stage's second peer 100 ms / 5 Mb/s away) and the simulation of the
same file calibrated on it (`sim_vs_real.simulate`), both with that configuration's router. Printed per quarter of the run: the far peers' share of their stage's forward hops, and
trainer t0's EMA of each peer at the quarter's end (its `router` events). Last line:
`router_warmup far_share_plain=<real, whole run> far_share_debiased=<...> seconds_plain=<hop span>
seconds_debiased=<...>`.

    python experiments/router_warmup.py [--scenario experiments/scenarios/two_continents.json] [--steps 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from experiments._runs import parse_with_out, print_table
from experiments.sim_vs_real import calibrate, real_config, run, simulate
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
    parser.add_argument("--global-batch", type=int, default=256)
    args, out = parse_with_out(parser)
    base = SimScenario.load(args.scenario)
    far = {f"s{st}p{k}" for st in range(base.stages)
           for k, g in enumerate(g for g in base.peers if g.stage == st for _ in range(g.count))
           if g.region != base.trainer_region}
    results: dict[str, Any] = {}
    for debias in (False, True):
        s = dataclasses.replace(base, debias_ema=debias)
        summary, events = run(real_config(s, args.scenario, "fp32", args.steps, args.global_batch), "inprocess")
        quarters, whole, span = far_shares(events, far)
        sim = simulate(s, calibrate(events, s.stages), duration=summary["seconds"])
        sim_quarters, sim_whole, _ = far_shares(sim, far)
        emas = ema_at_quarters(events)
        key = "debiased" if debias else "plain"
        results[key] = {"far_share_quarters": quarters, "far_share": whole, "seconds": span,
                        "sim_far_share_quarters": sim_quarters, "sim_far_share": sim_whole, "t0_ema": emas}
        rows = [[f"{a:.0%}-{b:.0%}", f"{q:.1%}", f"{sq:.1%}", "  ".join(f"{p} {v * 1e3:.0f}" for p, v in sorted(e.items()))]
                for (a, b), q, sq, e in zip(QUARTERS, quarters, sim_quarters, emas)]
        print_table(f"\n{key} EMA: far peers' share of forward hops, real {whole:.1%} (sim {sim_whole:.1%}), "
                    f"hops over {span:.1f} s", ["quarter", "far share real", "far share sim", "t0's EMA ms"], rows)
    (out / "router_warmup.json").write_text(json.dumps(results, indent=1))
    print(f"router_warmup far_share_plain={results['plain']['far_share']:.3f} "
          f"far_share_debiased={results['debiased']['far_share']:.3f} seconds_plain={results['plain']['seconds']:.1f} "
          f"seconds_debiased={results['debiased']['seconds']:.1f}")


if __name__ == "__main__":
    main()
