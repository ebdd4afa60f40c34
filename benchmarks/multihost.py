"""Step time of a Dask run across emulated hosts, with one host's link shaped and without.

Three network namespaces on a bridge stand in for machines (the test helpers of
tests/cluster/hosts.py, so it needs root): `dask scheduler` on one, 4 and 3 worker processes on
hosts a and b, the driver in the root namespace. A 2 stages x 2 peers run puts a peer of each
stage on each host (the coordinator and a trainer on a, a trainer on b). Shaping limits host b's
link with the kernel's token bucket (`tbf`) to `--rate` each way; latency cannot be added here
(no netem). Repeats alternate unshaped and shaped runs on the same workers; each run's step time
is the median gap between its step events after the first two.

    PYTHONPATH=. python benchmarks/multihost.py [--rate 20mbit] [--steps 40] [--repeats 3]

Last line: multihost unshaped_step_s=<median> shaped_step_s=<median> rate=<rate>.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from overhead import workload_config, workload_parser

import labkit
from tests.cluster.hosts import emulated_hosts, start_dask, why_no_hosts


def step_seconds(run: labkit.RunHandle) -> float:
    """Median time between consecutive step events, the first two steps left out."""
    times = [e["t"] for e in run.events.history("step")][2:]
    return statistics.median(b - a for a, b in zip(times, times[1:]))


def main() -> None:
    parser = workload_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="20mbit", help="host b's bandwidth each way, as tc writes it")
    args = parser.parse_args()
    reason = why_no_hosts()
    if reason is not None:
        raise SystemExit(f"multihost: {reason}")
    cfg = workload_config(args, stages=2, peers=(2, 2), trainers=2, threads=1)
    results: dict[str, list[float]] = {"unshaped": [], "shaped": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as logs, emulated_hosts(3) as (head, a, b):
        scheduler = start_dask(head, [(a, 4), (b, 3)], Path(logs))
        for _ in range(args.repeats):
            for name, rate in (("unshaped", None), ("shaped", args.rate)):
                b.shape(rate)
                run = labkit.launch(cfg, backend="dask", scheduler=scheduler)
                summary = run.wait()
                assert summary["status"] == "finished", summary
                results[name].append(step_seconds(run))
                per_step = {k: summary[f"{k}_bytes_total"] / summary["steps"] for k in ("pipeline", "dp")}
                loads.append(os.getloadavg()[0])
    print(f"model={args.size} seq_len={args.seq_len} global_batch={args.global_batch} microbatch={args.microbatch} "
          f"steps={args.steps} 2x2 trainers=2, hosts a (4 workers) and b (3), b shaped to {args.rate} each way; "
          f"load average {loads[0]:.1f} -> {loads[-1]:.1f} (max {max(loads):.1f})")
    print(f"bytes per step (every link together): pipeline {per_step['pipeline'] / 1e6:.2f} MB, "
          f"averaging {per_step['dp'] / 1e6:.2f} MB")
    for name, values in results.items():
        print(f"{name:>9}: median {statistics.median(values) * 1e3:.0f} ms/step "
              f"(runs: {', '.join(f'{v * 1e3:.0f}' for v in values)})")
    print(f"multihost unshaped_step_s={statistics.median(results['unshaped']):.3f} "
          f"shaped_step_s={statistics.median(results['shaped']):.3f} rate={args.rate}")


if __name__ == "__main__":
    main()
