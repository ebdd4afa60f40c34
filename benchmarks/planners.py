"""Planner benchmark: DT-FM's five cases at N = 64 (and, on request, other N and seeds).

    PYTHONPATH=. python benchmarks/planners.py [--generations 60] [--population 10] [--reference-generations 4900]
                                              [--ours-generations 4] [--sizes 64 32] [--seeds 0 1 2]

1. The cases as DT-FM's paper describes them (`dtfm_paper_case`: no jitter, DT-FM's message
   sizes, D_PP = 8): labkit's default search (method dtfm) against the GA with the paper's local
   search at DT-FM's own budget (population 100, 4900 offspring, method dtfm-paper; labkit's at
   --ours-generations, its default unless given), both with the
   same seed, costs and process CPU seconds; one line per case, size and seed
   `paper_<case>_n<N> cost=<x> reference=<y> cpu_seconds=<a> reference_cpu_seconds=<b> seed=<s>`
   (defaults: N = 64, seed 0, so one line per case).
2. The jittered presets (GPT3-XL, 24 layers, batch 1024): the paper-local-search GA at
   --generations (seed 0), its wall time, random assignment (mean of seeds 2022-2024), full cost
   evaluations per second. The last line is `dtfm_world_n64 cost=<x> random=<y> seconds=<z>`.
Numba compilation is warmed up first and not timed.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import numpy as np

from labkit.plan.dtfm import DEFAULT_GENERATIONS, RANDOM_SEEDS, CostModel, plan_dtfm, random_partition
from labkit.plan.plan import Plan
from labkit.plan.presets import DTFM_CASES, dtfm_paper_case, preset
from labkit.plan.workload import Workload


def evals_per_second(cost: CostModel, n: int, count: int = 2000) -> float:
    """Full COMM-COST evaluations per second on random partitions."""
    rng = np.random.default_rng(0)
    parts = [random_partition(n, cost.stages, rng) for _ in range(count)]
    start = time.perf_counter()
    for g in parts:
        cost(g)
    return count / (time.perf_counter() - start)


def timed(run: Callable[[], Plan]) -> tuple[Plan, float]:
    """A plan and the process CPU seconds it took."""
    start = time.process_time()
    plan = run()
    return plan, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--population", type=int, default=10)
    parser.add_argument("--reference-generations", type=int, default=4900, help="DT-FM's budget: 4900")
    parser.add_argument("--ours-generations", type=int, default=DEFAULT_GENERATIONS["dtfm"],
                        help=f"labkit's search's generations (its default: {DEFAULT_GENERATIONS['dtfm']})")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64], help="device counts N of the paper's cases")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of both searches")
    args = parser.parse_args()
    work = Workload.gpt3_xl()
    plan_dtfm(preset("dtfm_world", n=16), stages=4, generations=2)  # compile the kernels
    plan_dtfm(preset("dtfm_world", n=16), stages=4, generations=2, method="dtfm-paper")
    for name, n, seed in itertools.product(DTFM_CASES, args.sizes, args.seeds):
        scenario, paper_work = dtfm_paper_case(name, n=n)
        ours, ours_cpu = timed(lambda: plan_dtfm(scenario, 8, paper_work, seed=seed,
                                                  generations=args.ours_generations))
        ref, ref_cpu = timed(lambda: plan_dtfm(scenario, 8, paper_work, method="dtfm-paper", seed=seed, population=100,
                                                generations=args.reference_generations))
        print(f"paper_{name}_n{n} cost={ours.time:.4f} reference={ref.time:.4f} cpu_seconds={ours_cpu:.2f} "
              f"reference_cpu_seconds={ref_cpu:.2f} seed={seed}", flush=True)
    print(f"{'case':15s} {'GA cost':>9s} {'random':>9s} {'ratio':>6s} {'GA s':>6s} {'evals/s':>8s} {'GA evals/s':>10s}")
    last = ""
    for name in DTFM_CASES:
        scenario = preset(name, n=64)
        start = time.perf_counter()
        plan = plan_dtfm(scenario, 8, work, method="dtfm-paper", seed=0, population=args.population,
                         generations=args.generations)
        seconds = time.perf_counter() - start
        rnd = float(np.mean([plan_dtfm(scenario, 8, work, method="random", seed=s).time for s in RANDOM_SEEDS]))
        eps = evals_per_second(CostModel.build(scenario, 8, work), scenario.n)
        print(f"{name:15s} {plan.time:9.3f} {rnd:9.3f} {rnd / plan.time:5.2f}x {seconds:6.2f} {eps:8.0f} "
              f"{plan.meta['evals'] / seconds:10.0f}")
        last = f"{name}_n64 cost={plan.time:.3f} random={rnd:.3f} seconds={seconds:.2f}"
    print(last)  # DTFM_CASES ends with dtfm_world


if __name__ == "__main__":
    main()
