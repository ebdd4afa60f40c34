"""A long soak: random kills, joins and moves on a live run, memory sampled every minute.

The in-suite soaks (tests/integration/test_soak.py, tests/cluster/test_soak_dask.py) last a
minute; this one runs for as long as asked and reports whether memory, threads or processes
grow, and how long churn ever stalled the run.

    python benchmarks/soak.py --backend inprocess|dask [--minutes 5] [--seed 0]

Per minute: RSS of this process and its children (MB), threads, child processes, steps, actions.
Last line: soak backend=<b> minutes=<m> steps=<n> actions=<k> longest_wait_s=<x> rss_growth_mb=<y>
exact=<True|False>.
"""

from __future__ import annotations

import argparse
import threading

import psutil

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.lab.chaos import Chaos


def sample() -> tuple[float, int, int]:
    """(RSS of this process and its descendants in MB, threads here, descendant processes)."""
    me = psutil.Process()
    family = [me, *me.children(recursive=True)]
    rss = 0
    for process in family:
        try:
            rss += process.memory_info().rss
        except psutil.Error:
            continue
    return rss / 1e6, threading.active_count(), len(family) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("inprocess", "dask"), default="inprocess")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000), stages=2,
                    peers=2, trainers=2, global_batch=16, microbatch=4, steps=1_000_000, eval_every=0, eval_batches=2)
    run = labkit.launch(cfg, backend=args.backend)
    run.wait_for(step=1, timeout=300)
    monkey = Chaos(run, seed=args.seed, max_peers=5 if args.backend == "dask" else 8, step_timeout=120)
    first = sample()
    print(f"minute 0: rss {first[0]:.0f} MB, {first[1]} threads, {first[2]} child processes")
    for minute in range(1, int(args.minutes) + 1):
        report = monkey.run_for(60)
        rss, threads, children = sample()
        print(f"minute {minute}: rss {rss:.0f} MB, {threads} threads, {children} child processes, "
              f"step {run.state()['step']}, actions {report['actions']}, longest wait {report['longest_wait']:.2f} s",
              flush=True)
    run.stop()
    run.wait(300)
    steps = run.events.history("step")
    exact = all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in steps)
    report = monkey.report()
    print(f"soak backend={args.backend} minutes={args.minutes:g} steps={len(steps)} "
          f"actions={sum(report['actions'].values())} longest_wait_s={report['longest_wait']:.2f} "
          f"median_wait_s={report['median_wait']:.2f} rss_growth_mb={rss - first[0]:.0f} exact={exact}")


if __name__ == "__main__":
    main()
