"""Throughput of the Dask backend (2 stages x 1 peer) against the plain single-process loop.

The same model, data, samples and global batch are trained by (a) `train_reference`, the plain
loop, with 2 torch threads (the baseline) and, for reference, with 1; (b) labkit in-process with
2 stages x 1 peer (two peer threads of one process, 1 torch thread each) and (c) labkit's Dask
backend with 2 stages x 1 peer, each peer an actor on its own worker process with 1 torch
thread: 2 threads of compute in each. The Dask run also has one actor per trainer (2 by
default), each on another worker process of the same machine, and its coordinator in this
driver (which also hosts the scheduler): 2 peers + 2 trainers + 1 spare = 5 worker processes and
the driver share the 2 cores. "2 worker processes" means the two peers, which do all the model
compute; the others route microbatches, keep the ledger and average gradients.

labkit tokens/s come from the run's step events (`t`, `tokens`): tokens of every step but the
first over the time from the first step event to the last, so start-up and the first step are
excluded (what `summary["tokens_per_second"]` computes); the plain loop is timed after 2
warm-up steps (`benchmarks/overhead.py`). One `LocalCluster`, made as `launch(backend="dask")`
would embed it, serves every Dask repeat through `scheduler=`: start-up is not measured anyway,
and sharing it saves a cluster start per repeat (6 worker processes importing torch and labkit:
45 s once measured here under load 14); each run releases its actors and DHT nodes when it
ends, as the integration tests' shared cluster relies on. Repeats are interleaved (plain 2
threads, plain 1 thread, in-process, dask, ...) and medians reported. The 2-thread plain loop
collapses when other jobs oversubscribe the cores (its two threads synchronise in every
parallel op): compare it with the 1-thread figure before trusting a ratio.

    python benchmarks/pipeline.py [--steps 40] [--repeats 3] [--trainers 2] [--inflight 1] [--microbatch 16]
                                  [--size nano] [--global-batch 32]

Last line: pipeline_ratio=<labkit dask 2x1 tokens/s / plain 2-thread tokens/s>.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from overhead import plain_tokens_per_second, workload_config, workload_parser

import labkit
from labkit.backends.dask.connect import connect
from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus


def step_tokens_per_second(steps: list[dict]) -> float:
    """Tokens of every step event but the first, over the time from the first to the last."""
    return sum(e["tokens"] for e in steps[1:]) / (steps[-1]["t"] - steps[0]["t"])


def labkit_run(cfg: RunConfig, **launch: str) -> tuple[float, float]:
    """(tokens/s from the step events, wall seconds from launch to the summary) of one run."""
    start = time.perf_counter()
    run = labkit.launch(cfg, **launch)
    summary = run.wait()
    assert summary["status"] == "finished", summary
    return step_tokens_per_second(run.events.history("step")), time.perf_counter() - start


def main() -> None:
    parser = workload_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=1, help="microbatches each trainer keeps in flight")
    args = parser.parse_args()
    base = workload_config(args, stages=2, peers=1, trainers=args.trainers, inflight=args.inflight, threads=1)
    sampler = WindowSampler(load_corpus(base.data).train, base.model.seq_len, base.seed)
    client, cluster = connect(None, base)
    n_workers = len(cluster.workers)
    walls: list[float] = []

    def plain(threads: int) -> float:
        torch.set_num_threads(threads)  # process-wide; the in-process run sets it to 1 too
        return plain_tokens_per_second(base, sampler)

    def dask() -> float:
        tokens_per_second, wall = labkit_run(base, backend="dask", scheduler=cluster.scheduler_address)
        walls.append(wall)
        return tokens_per_second

    variants: dict[str, Callable[[], float]] = {
        "plain, 2 threads": lambda: plain(2),
        "plain, 1 thread": lambda: plain(1),
        "in-process 2x1": lambda: labkit_run(base)[0],
        "dask 2x1": dask,
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(args.repeats):
            for name, measure in variants.items():
                results[name].append(measure())
    finally:
        client.close()
        cluster.close()
    print(f"model={args.size} seq_len={args.seq_len} global_batch={args.global_batch} microbatch={args.microbatch} "
          f"steps={args.steps} stages=2 peers=1 trainers={args.trainers} inflight={args.inflight} repeats={args.repeats}; torch threads: "
          f"plain 2 (and 1), each labkit peer 1; {n_workers} Dask workers")
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        step_ms = args.global_batch * args.seq_len / medians[name] * 1e3
        print(f"{name:>16}: median {medians[name]:,.0f} tokens/s ({step_ms:.0f} ms/step)  "
              f"(runs: {', '.join(f'{v:,.0f}' for v in values)})")
    print(f"dask run wall time, launch to summary: median {statistics.median(walls):.1f} s "
          f"(runs: {', '.join(f'{w:.1f}' for w in walls)})")
    paired = [a / b for a, b in zip(results["dask 2x1"], results["plain, 2 threads"])]
    print(f"paired dask/plain ratios per repeat: {', '.join(f'{r:.3f}' for r in paired)} (median {statistics.median(paired):.3f})")
    print(f"pipeline_ratio={medians['dask 2x1'] / medians['plain, 2 threads']:.3f}")


if __name__ == "__main__":
    main()
