"""DT-FM's five cases at N = 64 (the DT-FM paper, Section 4 and Figure 5): GA vs Kernighan-Lin vs random.

    PYTHONPATH=. python experiments/dtfm_cases.py [--generations 60] [--out docs/figures]

For every case, GPT3-XL with 24/32/40 layers and batch 1024/2048/4096 sequences, D_PP = D_DP = 8:
estimated COMM-COST of the hybrid GA with the paper's local search ("dtfm-paper", seeds 0-2), the GA
with Kernighan-Lin ("kl", seeds 0-2) and random assignment (seeds 2022-2024, the paper's), all
averaged; plus the GA's convergence (best cost per iteration) at 24 layers / batch 1024.
Prints markdown tables, writes results JSON and the convergence chart (PNG via vl-convert, else JSON).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from experiments._runs import parse_with_out
from labkit.cli.plan import save_chart
from labkit.plan.dtfm import RANDOM_SEEDS, plan_dtfm
from labkit.plan.presets import DTFM_CASES, preset
from labkit.plan.workload import Workload

SETTINGS = [(layers, batch) for layers in (24, 32, 40) for batch in (1024, 2048, 4096)]


def run_case(name: str, generations: int) -> dict:
    """All settings of one case: mean cost per method, and seed-0 convergence at 24 layers / 1024."""
    scenario = preset(name, n=64)
    rows, curves = [], {}
    for layers, batch in SETTINGS:
        work = Workload.gpt3_xl(batch=batch, n_layer=layers)
        row = {"layers": layers, "batch": batch}
        for method, seeds in (("dtfm-paper", (0, 1, 2)), ("kl", (0, 1, 2)), ("random", RANDOM_SEEDS)):
            plans = [plan_dtfm(scenario, 8, work, method=method, seed=s, generations=generations) for s in seeds]
            row[method] = float(np.mean([p.time for p in plans]))
            if (layers, batch) == (24, 1024) and method != "random":
                curves[method] = plans[0].meta["history"]
        rows.append(row)
    return {"case": name, "rows": rows, "curves": curves}


def convergence_chart(results: list[dict], path: Path) -> Path:
    """Figure 5's shape: best estimated cost vs GA iteration, one panel per case."""
    import altair as alt

    values = [{"case": r["case"], "method": m, "iteration": i, "cost": c}
              for r in results for m, hist in r["curves"].items() for i, c in enumerate(hist)]
    chart = alt.Chart(alt.Data(values=values)).mark_line().encode(
        x=alt.X("iteration:Q"), y=alt.Y("cost:Q", title="estimated cost (s)", scale=alt.Scale(zero=False)),
        color="method:N").properties(width=180, height=150).facet(
        facet=alt.Facet("case:N", sort=list(DTFM_CASES)), columns=5).resolve_scale(y="independent")
    return save_chart(chart, path, fallback=".vl.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=60)
    args, out = parse_with_out(parser)
    start = time.perf_counter()
    results = [run_case(name, args.generations) for name in DTFM_CASES]
    (out / "dtfm_cases.json").write_text(json.dumps(results))
    print("| case | GA (ours) | GA + KL | random | random / GA |\n|---|---|---|---|---|")
    for r in results:
        row = r["rows"][0]
        print(f"| {r['case']} | {row['dtfm-paper']:.2f} | {row['kl']:.2f} | {row['random']:.2f} | {row['random'] / row['dtfm-paper']:.2f}x |")
    print("\n| case | layers | batch | GA | KL | random | random / GA |\n|---|---|---|---|---|---|---|")
    for r in results:
        for row in r["rows"]:
            print(f"| {r['case']} | {row['layers']} | {row['batch']} | {row['dtfm-paper']:.2f} | {row['kl']:.2f} | "
                  f"{row['random']:.2f} | {row['random'] / row['dtfm-paper']:.2f}x |")
    print("\nconvergence (seed 0, 24 layers, batch 1024): best cost at iterations 0/10/30/end")
    for r in results:
        for m, h in r["curves"].items():
            print(f"  {r['case']} {m}: " + " / ".join(f"{h[i]:.2f}" for i in (0, 10, 30, -1)))
    print(f"\nchart: {convergence_chart(results, out / 'dtfm_convergence')}")
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
