"""Kernel and simulator speed: IWRR decisions/s (numba vs heapq twin) and the Table 5 wall time.

Run: PYTHONPATH=. python benchmarks/kernels.py [--repeats 3]
Last line: iwrr_speedup=<numba / python decisions per second at 1 000 peers>.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from labkit.kernels.iwrr import iwrr_route_batch, iwrr_route_batch_py
from labkit.swarm.routing import Router

PEERS = (10, 1_000, 100_000)
DECISIONS = 200_000  # microbatches routed per batched call


def _peers(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (np.zeros(n, np.int64), rng.uniform(0, 1, n), rng.uniform(0.05, 2.0, n), np.arange(n, dtype=np.int64),
            np.zeros(n, np.bool_))


def route_rate(n: int, python: bool, repeats: int) -> float:
    """Median routing decisions per CPU second of one batched call over n peers of one stage."""
    stage, prio, ema, order, banned = _peers(n)
    out = np.empty(DECISIONS, np.int64)
    iwrr_route_batch(stage, prio.copy(), ema, order, banned, 0, out[:10])  # compile outside the timing
    times = []
    for _ in range(repeats):
        p = prio.copy()
        start = time.process_time()  # CPU time: the 2 cores are shared, wall time is not ours
        if python:
            iwrr_route_batch_py(stage, p, ema, order, banned, 0, DECISIONS)
        else:
            iwrr_route_batch(stage, p, ema, order, banned, 0, out)
        times.append(time.process_time() - start)
    return DECISIONS / statistics.median(times)


def choose_overhead(repeats: int) -> float:
    """Median microseconds per `Router.choose` (one pick, as the runtime calls it per hop), 100 peers."""
    router = Router()
    for i in range(100):
        router.announce(f"p{i}", stage=0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(20_000):
            router.choose(0)
        times.append((time.perf_counter() - start) / 20_000 * 1e6)
    return statistics.median(times)


def table5_seconds(repeats: int) -> float:
    """Median wall seconds of the whole Table 5 reproduction (3 policies x 10 seeds x 32 h)."""
    from labkit.sim import simulate
    from labkit.sim.presets import table5
    simulate(table5(60.0, seed=0), "fluid")  # compile / load the cache outside the timing
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for period in (None, 300.0, 60.0):
            for seed in range(10):
                simulate(table5(period, seed=seed), "fluid")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    speedup = 0.0
    print(f"{'peers':>8} {'numba dec/s':>14} {'python dec/s':>14} {'speedup':>8}")
    for n in PEERS:
        fast, slow = route_rate(n, False, args.repeats), route_rate(n, True, args.repeats)
        print(f"{n:8d} {fast:14.3e} {slow:14.3e} {fast / slow:8.1f}")
        if n == 1_000:
            speedup = fast / slow
    print(f"Router.choose: {choose_overhead(args.repeats):.2f} us per call (100 peers)")
    print(f"table5 (3 policies x 10 seeds x 32 h, fluid): {table5_seconds(args.repeats):.1f} s")
    print(f"iwrr_speedup={speedup:.1f}")


if __name__ == "__main__":
    main()
