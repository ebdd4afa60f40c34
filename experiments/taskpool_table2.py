"""The task pool paper's Table 2 and Figure 2 in virtual time: the task pool against SWARM, minutes per batch.

Table 2: the task pool paper's cases 1-4 (`ps_case1..4`, 16 devices) planned by the clustering planner
(`plan_cluster`, up to 8 stages), xxlarge (d 4096, 12 blocks, 512 tokens) and Llama-33B (d 6656,
60 blocks, 2048 tokens), batch 512, minibatch 4; case 4 = case 3 with the 2080s unreliable and a
90 % chance that each vanishes during a batch (back for the next). Figure 2: Llama-33B on
`ps_case4`'s 16 devices with 30 % / 60 % of them unreliable, disconnection rates 10-90 %.
Both methods run on the same plan, links and draws (`labkit.sim.ps_compare`).
Run: PYTHONPATH=. python experiments/taskpool_table2.py [--batches 3] [--plot docs/figures/taskpool_fig2] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from experiments._runs import parse_with_out
from labkit.plan.cluster import llama_33b, plan_cluster
from labkit.plan.network import NetworkScenario
from labkit.plan.presets import preset
from labkit.plan.workload import Workload
from labkit.sim.ps_compare import METHODS, batch_stats, with_unreliable
from labkit.sim.ps_world import ps_world

MODELS = {"xxlarge": Workload(d_model=4096, n_layer=12, seq_len=512, batch=512, microbatch=4), "llama-33b": llama_33b()}
PAPER = {("xxlarge", "taskpool"): (56.1, 65.4, 74.8, 82.2), ("xxlarge", "swarm"): (53.7, 62.8, 77.5, 96.8),
         ("llama-33b", "taskpool"): (194.6, 216.7, 243.6, 253.6), ("llama-33b", "swarm"): (248.4, 272.7, 256.1, 292.5)}
CASE4_RATE = 0.9
RATES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
RATIOS = (0.3, 0.6)


def stats(network: NetworkScenario, work: Workload, rate: float, batches: int) -> dict[str, dict[str, float]]:
    """Both methods on the clustering plan of `network` at disconnection `rate`."""
    world = ps_world(network, plan_cluster(network, work, max_stages=8), work)
    return {m: batch_stats(world, m, rate, batches) for m in METHODS}


def table2(batches: int) -> dict[str, list[dict]]:
    return {model: [stats(preset(f"ps_case{c}"), work, CASE4_RATE if c == 4 else 0.0, batches) for c in (1, 2, 3, 4)]
            for model, work in MODELS.items()}


def figure2(batches: int) -> dict[str, dict]:
    base, work = preset("ps_case4"), MODELS["llama-33b"]
    return {f"{ratio:.0%}": {f"{rate:.0%}": stats(with_unreliable(base, round(ratio * base.n)), work, rate, batches)
                             for rate in RATES} for ratio in RATIOS}


def plot(fig2: dict[str, dict], path: Path) -> Path:
    import altair as alt

    from experiments._plot import save

    values = [{"unreliable": ratio, "rate": int(rate.rstrip("%")), "method": m, "minutes": r[m]["seconds"] / 60}
              for ratio, row in fig2.items() for rate, r in row.items() for m in METHODS]
    chart = alt.Chart(alt.Data(values=values)).mark_line(point=True).encode(
        x=alt.X("rate:Q", title="disconnection rate (%)"), y=alt.Y("minutes:Q", title="minutes per batch"),
        color="method:N", column=alt.Column("unreliable:N", title="unreliable devices")).properties(
        width=260, height=200, title="the task pool paper's Figure 2 in the simulator (Llama-33B)")
    return save(chart, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="disconnection draws per point")
    parser.add_argument("--plot", type=Path, default=None, help="write the Figure 2 chart here (no suffix)")
    args, out = parse_with_out(parser)
    start = time.perf_counter()
    t2, f2 = table2(args.batches), figure2(args.batches)
    (out / "taskpool_table2.json").write_text(json.dumps({"table2": t2, "figure2": f2}))
    print("| model | method | case 1 | case 2 | case 3 | case 4 | paper (1 / 2 / 3 / 4) |\n|---|---|---|---|---|---|---|")
    for model, cases in t2.items():
        for m in METHODS:
            cells = " | ".join(f"{c[m]['seconds'] / 60:.3g}" for c in cases)
            print(f"| {model} | {m} | {cells} | {' / '.join(str(x) for x in PAPER[model, m])} |")
        ratio = cases[3]["swarm"]["seconds"] / cases[3]["taskpool"]["seconds"]
        paper = PAPER[model, "swarm"][3] / PAPER[model, "taskpool"][3]
        print(f"| {model} | case 4 SWARM / pool | | | | {ratio:.2f}x | {paper:.2f}x |")
    print("\n| unreliable | rate | pool min | SWARM min | SWARM / pool | pool repeated beyond lost | SWARM repeated |")
    print("|---|---|---|---|---|---|---|")
    for ratio, row in f2.items():
        for rate, r in row.items():
            p, s = r["taskpool"], r["swarm"]
            print(f"| {ratio} | {rate} | {p['seconds'] / 60:.2f} | {s['seconds'] / 60:.2f} | {s['seconds'] / p['seconds']:.2f}x"
                  f" | {p['repeated_beyond_lost']:.0f} | {s['repeated_beyond_lost']:.0f} |")
    if args.plot:
        print("plot:", plot(f2, args.plot))
    case4 = {m: t2["llama-33b"][3][m]["seconds"] for m in METHODS}
    print(f"taskpool_table2 case4_swarm_over_pool={case4['swarm'] / case4['taskpool']:.2f} "
          f"seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
