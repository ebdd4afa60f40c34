"""What an embedded cluster's workers cost before they compute: forked from a warm server (labkit's
default, `connect.fork_from_a_warm_server`) against spawned (Dask's default), in fresh processes,
interleaved.

Per repeat and way: the seconds from asking for an 8-worker `restarting_cluster` to the end of a
first run on it (SWARM 2 x 2, nano, 4 steps), a second run's seconds, and a SIGKILLed worker's
restart: from the kill to the nanny's new worker having run a torch op. Medians over repeats.

    python benchmarks/cluster_start.py [--repeats 3]
Last line: `cluster_start first_run_fork_s=… first_run_spawn_s=… restart_fork_s=… restart_spawn_s=…`
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

WORKERS = 8


def _torch_op() -> float:
    import torch

    return float(torch.ones(4).sum())


def measure(warm: bool) -> dict[str, float]:
    """One cluster's figures, in this process."""
    from distributed import Client

    import labkit
    from labkit.backends.dask.connect import restarting_cluster
    from labkit.config import DataConfig, ModelConfig, RunConfig

    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000), stages=2,
                    peers=2, trainers=2, global_batch=16, microbatch=4, steps=4, eval_every=0, eval_batches=2)
    figures: dict[str, float] = {}
    start = time.perf_counter()
    with restarting_cluster(WORKERS, dashboard_address=None, warm=warm) as cluster, Client(cluster) as client:
        client.wait_for_workers(WORKERS)
        for name in ("first_run_s", "second_run_s"):
            run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
            assert run.wait(300)["status"] == "finished"
            figures[name] = time.perf_counter() - start
            start = time.perf_counter()
        before = client.run(os.getpid)
        victim = next(iter(before))
        killed = time.perf_counter()
        os.kill(before[victim], signal.SIGKILL)
        while True:
            workers = set(client.scheduler_info()["workers"])
            if len(workers) == WORKERS and victim not in workers:
                break
            time.sleep(0.05)
        client.run(_torch_op, workers=sorted(workers - set(before)))
        figures["restart_s"] = time.perf_counter() - killed
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=("fork", "spawn"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one == "fork")))
        return
    results: dict[str, list[dict[str, float]]] = {"fork": [], "spawn": []}
    for repeat in range(args.repeats):
        for way in ("fork", "spawn"):
            out = subprocess.run([sys.executable, __file__, "--one", way], capture_output=True, text=True, check=True)
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            results[way].append(figures)
            print(f"repeat {repeat} {way}: " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()), flush=True)
    med = {way: {k: statistics.median(f[k] for f in runs) for k in ("first_run_s", "second_run_s", "restart_s")}
           for way, runs in results.items()}
    print(f"cluster_start first_run_fork_s={med['fork']['first_run_s']:.2f} first_run_spawn_s={med['spawn']['first_run_s']:.2f} "
          f"restart_fork_s={med['fork']['restart_s']:.2f} restart_spawn_s={med['spawn']['restart_s']:.2f}")


if __name__ == "__main__":
    main()
