"""A stage's compute under Dask's worker malloc setting, and with labkit's fix.

Dask's nanny starts every worker process with MALLOC_TRIM_THRESHOLD_=65536 (the config key
`distributed.nanny.pre-spawn-environ`). Setting it also freezes glibc's mmap threshold at
128 KiB, so every activation and gradient buffer larger than that is a fresh mmap whose pages
fault in. This times nano's last stage (forward, loss, backward of one microbatch, 1 torch thread)
in a fresh process each way, interleaved:

- plain: no variable (glibc's defaults, what the in-process backend runs with);
- nanny: MALLOC_TRIM_THRESHOLD_=65536, as a Dask worker starts;
- nanny + fix: the same, then `backends/dask/workers.py:prepare_worker`, which every labkit
  actor calls first (mallopt at run time).

    python benchmarks/worker_malloc.py [--repeats 3] [--microbatch 16] [--iterations 30]

Last line: worker_malloc plain_ms=<median> nanny_ms=<median> fixed_ms=<median> nanny_over_plain=<ratio>.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = """
import statistics, sys, time
import torch
import torch.nn.functional as F
from labkit.config import RunConfig
from labkit.model.assembly import initial_states, stage_module
cfg = RunConfig(stages=2, microbatch={microbatch}, global_batch={microbatch} * 2, threads=1)
if {fix}:
    from labkit.backends.dask.workers import prepare_worker
    prepare_worker(cfg)
torch.set_num_threads(1)
stage = stage_module(cfg, 1, initial_states(cfg)[1]["params"])
x = torch.randn({microbatch}, cfg.model.seq_len, cfg.model.d_model, requires_grad=True)
targets = torch.randint(0, cfg.model.vocab_size, ({microbatch}, cfg.model.seq_len))
seconds = []
for _ in range({iterations}):
    start = time.perf_counter()
    logits = stage(x)
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    seconds.append(time.perf_counter() - start)
print(statistics.median(seconds[5:]) * 1000)
"""

VARIANTS = {"plain": ({}, False), "nanny": ({"MALLOC_TRIM_THRESHOLD_": "65536"}, False),
            "nanny + fix": ({"MALLOC_TRIM_THRESHOLD_": "65536"}, True)}


def time_variant(env: dict[str, str], fix: bool, microbatch: int, iterations: int) -> float:
    """Median ms of a stage-1 step in a fresh Python process with `env` added."""
    code = CHILD.format(microbatch=microbatch, iterations=iterations, fix=fix)
    child_env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"} | env
    out = subprocess.run([sys.executable, "-c", code], env=child_env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--microbatch", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        for name, (env, fix) in VARIANTS.items():
            results[name].append(time_variant(env, fix, args.microbatch, args.iterations))
    print(f"nano stage 1, microbatch {args.microbatch}, forward + loss + backward, 1 torch thread, medians of "
          f"{args.iterations - 5} per process, {args.repeats} processes each, interleaved; load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    medians = {name: statistics.median(v) for name, v in results.items()}
    for name, runs in results.items():
        print(f"{name:>12}: median {medians[name]:.1f} ms  (runs: {', '.join(f'{v:.1f}' for v in runs)})")
    print(f"worker_malloc plain_ms={medians['plain']:.1f} nanny_ms={medians['nanny']:.1f} "
          f"fixed_ms={medians['nanny + fix']:.1f} nanny_over_plain={medians['nanny'] / medians['plain']:.2f}")


if __name__ == "__main__":
    main()
