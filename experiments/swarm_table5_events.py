"""SWARM Table 5 in events mode: Algorithm 2 on every peer's actual queue count (one seed ~25 min).

Same scenarios as `swarm_table5.py` (churn `TABLE5_CHURN`, 4 stages of T4s), simulated microbatch by
microbatch: IWRR routing, closed-loop trainers, and each rebalancing round reads the queues as they
are at that moment. Percentages are of the fluid model's optimum, which the events model's own
balanced pipeline exceeds (by about 7 % at 100 peers a stage, 3 % at 41), see docs/reproductions.md.
Run: PYTHONPATH=. python experiments/swarm_table5_events.py [--seeds 1] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import time

from experiments.swarm_table5 import PAPER, rows
from labkit.sim.events_sim import run_events
from labkit.sim.presets import table5

PERIODS = {"none": None, "t300": 300.0, "t60": 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    results = {}
    for name, period in PERIODS.items():
        work = optimal = 0.0
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            r = run_events(table5(period, seed=seed), max_hops=0)
            work, optimal = work + r.work, optimal + r.optimal
        results[name] = (work, optimal)
    for name, (a, b, c) in rows(results).items():
        print(f"{name:<6} {a:6.1f} {b:6.1f} {c:6.1f}   paper " + " / ".join(f"{x:.1f}" for x in PAPER[name]))
    print(f"seconds={time.perf_counter() - start:.0f}")


if __name__ == "__main__":
    main()
