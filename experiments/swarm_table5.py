"""SWARM Table 5 / Figure 5: % of optimal throughput over a 32-hour preemptible-T4 trace.

4 stages of T4s under the churn model `labkit.sim.presets.TABLE5_CHURN` (single preemptions plus
bursts that hit one stage, chosen on the no-rebalancing row only; a moving or joining peer serves
nothing while it downloads the stage's parameters and Adam state); none vs T = 300 s vs T = 60 s, 10 seeds,
fluid granularity. Algorithm 2 (moves and directed joins) reads the queue lengths as the runtime
publishes them (`load_estimate="measured"`: instantaneous counts, announced every second and read
once a second); `--load-estimate exact` gives it the model's mean queues instead. Also an ablation
where newcomers join a uniform stage even with rebalancing.
Run: PYTHONPATH=. python experiments/swarm_table5.py [--seeds 10] [--first-seed 0] [--plot docs/img/swarm_fig5]
[--high-churn] [--load-estimate measured|exact]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np

from labkit.sim import ChurnModel, simulate
from labkit.sim.presets import table5

PAPER = {"none": (82.7, 99.0, 45.4), "t300": (95.8, 99.4, 88.9), "t60": (97.6, 99.8, 91.7)}
# Sensitivity check (--high-churn): 1000 peers, 5x the churn, also calibrated on the no-rebalancing row
HIGH_CHURN = ChurnModel(hours=32.0, join_per_hour=500.0, leave_per_peer_hour=0.5, join_decay=0.42)
POLICIES = {"none": (None, True), "t300": (300.0, True), "t60": (60.0, True),
            "t300-uniform-joins": (300.0, False), "t60-uniform-joins": (60.0, False)}


def run(seeds: int, high_churn: bool = False, first_seed: int = 0,
        load_estimate: str = "measured") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per policy: (work, optimal) per 60 s bin, summed over seeds first_seed.. (averaged trajectories)."""
    out = {}
    for name, (period, directed) in POLICIES.items():
        work = optimal = 0.0
        for seed in range(first_seed, first_seed + seeds):
            s = table5(period, seed=seed, per_stage=250) if high_churn else table5(period, seed=seed)
            s = dataclasses.replace(s, directed_joins=directed, load_estimate=load_estimate,
                                    **({"churn": HIGH_CHURN} if high_churn else {}))
            r = simulate(s, "fluid")
            work, optimal = work + r.work, optimal + r.optimal
        out[name] = (work, optimal)
    return out


def rows(results: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[float, float, float]]:
    """% of optimal overall, first hour, last hour (60 bins each)."""
    pct = lambda w, o, sl: 100.0 * w[sl].sum() / o[sl].sum()
    return {k: (pct(w, o, slice(None)), pct(w, o, slice(0, 60)), pct(w, o, slice(-60, None)))
            for k, (w, o) in results.items()}


def plot(results: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> Path:
    import altair as alt

    from experiments._plot import save

    records = []
    for name, (w, o) in results.items():
        hourly_w, hourly_o = w.reshape(-1, 60).sum(1), o.reshape(-1, 60).sum(1)
        records += [{"hour": h + 0.5, "policy": name, "pct_of_optimal": float(100 * a / b)}
                    for h, (a, b) in enumerate(zip(hourly_w, hourly_o))]
    chart = alt.Chart(alt.Data(values=records)).mark_line(point=True).encode(
        x=alt.X("hour:Q", title="hour of the trace"), y=alt.Y("pct_of_optimal:Q", title="% of optimal throughput"),
        color="policy:N").properties(width=520, height=260, title="Rebalancing over a 32 h preemptible T4 trace")
    return save(chart, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--load-estimate", choices=("measured", "exact"), default="measured",
                        help="what Algorithm 2 reads: the runtime's published queue lengths, or the mean queues")
    parser.add_argument("--plot", type=Path, default=None, help="write the Figure 5 chart here (no suffix)")
    parser.add_argument("--high-churn", action="store_true", help="the sensitivity churn model instead")
    args = parser.parse_args()
    start = time.perf_counter()
    results = run(args.seeds, args.high_churn, args.first_seed, args.load_estimate)
    wall = time.perf_counter() - start
    table = rows(results)
    print(f"{'policy':<20} {'overall':>8} {'first 1h':>9} {'last 1h':>8}   paper")
    for name, (a, b, c) in table.items():
        paper = PAPER.get(name)
        print(f"{name:<20} {a:8.1f} {b:9.1f} {c:8.1f}   " + (" / ".join(f"{x:.1f}" for x in paper) if paper else "-"))
    if args.plot:
        print("plot:", plot(results, args.plot))
    print(f"table5 none={table['none'][0]:.1f} t300={table['t300'][0]:.1f} t60={table['t60'][0]:.1f} seconds={wall:.1f}")


if __name__ == "__main__":
    main()
