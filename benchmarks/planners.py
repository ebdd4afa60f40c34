"""Planner benchmark: DT-FM's GA on every case at N = 64 at a fixed budget.

    PYTHONPATH=. python benchmarks/planners.py [--generations 60] [--population 10]

Per case (GPT3-XL, 24 layers, batch 1024, D_PP = D_DP = 8): GA cost and wall time (seed 0),
random-assignment cost (mean of seeds 2022-2024), full cost evaluations per second in a tight loop
and inside the GA. Numba compilation is warmed up first and not timed. The last line is
`dtfm_world_n64 cost=<x> random=<y> seconds=<z>`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from labkit.plan.dtfm import RANDOM_SEEDS, CostModel, plan_dtfm, random_partition
from labkit.plan.presets import DTFM_CASES, preset
from labkit.plan.workload import Workload


def evals_per_second(cost: CostModel, n: int, count: int = 2000) -> float:
    """Full COMM-COST evaluations per second on random partitions."""
    rng = np.random.default_rng(0)
    parts = [random_partition(n, cost.stages, rng) for _ in range(count)]
    start = time.perf_counter()
    for g in parts:
        cost(g)
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--population", type=int, default=10)
    args = parser.parse_args()
    work = Workload.gpt3_xl()
    plan_dtfm(preset("dtfm_world", n=16), stages=4, generations=2)  # compile the kernels
    print(f"{'case':15s} {'GA cost':>9s} {'random':>9s} {'ratio':>6s} {'GA s':>6s} {'evals/s':>8s} {'GA evals/s':>10s}")
    last = ""
    for name in DTFM_CASES:
        scenario = preset(name, n=64)
        start = time.perf_counter()
        plan = plan_dtfm(scenario, 8, work, seed=0, population=args.population, generations=args.generations)
        seconds = time.perf_counter() - start
        rnd = float(np.mean([plan_dtfm(scenario, 8, work, method="random", seed=s).time for s in RANDOM_SEEDS]))
        eps = evals_per_second(CostModel.build(scenario, 8, work), scenario.n)
        print(f"{name:15s} {plan.time:9.3f} {rnd:9.3f} {rnd / plan.time:5.2f}x {seconds:6.2f} {eps:8.0f} "
              f"{plan.meta['evals'] / seconds:10.0f}")
        last = f"{name}_n64 cost={plan.time:.3f} random={rnd:.3f} seconds={seconds:.2f}"
    print(last)  # DTFM_CASES ends with dtfm_world


if __name__ == "__main__":
    main()
