"""SWARM with CUDA peers on Dask: a `LocalCluster` here whose workers all carry the resource
GPU=1 (as `dask worker --resources GPU=1` on a GPU host), so every stage peer placed on one runs
on `cuda` (labkit/backends/dask/peer_actor.py); the coordinator and trainers stay on the host.
The same run in-process (whose peers always compute on the CPU) gives the baseline, for the sizes
the CPU can carry. A stage's peers reduce their gradients among themselves over labkit's ring
(issue 25); a GPU peer's chunks pass through host memory on the way (there is no NCCL path: one
lent GPU gives one NCCL rank).

tokens/s is the run summary's (steps after the first); `boundary_s` is the median of those steps'
boundary seconds and `coordinator_tensor_bytes` the most tensor bytes any step's boundary sent
through the coordinator. `gpu_workers` counts the workers whose process initialised CUDA (read
with `Client.run` after the run).

    python -m benchmarks.gpu_dask [--sizes tiny small] [--baseline tiny] [--steps 10] [--out dask.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import labkit
from benchmarks.gpu_common import write
from labkit.config import DataConfig, ModelConfig, RunConfig


def _cuda_in_use() -> bool:
    return torch.cuda.is_initialized()


def run_once(cfg: RunConfig, scheduler: str | None) -> dict[str, object]:
    """Run `cfg` on the cluster at `scheduler` (None: in-process) to its end."""
    started = time.perf_counter()
    run = labkit.launch(cfg, backend="inprocess" if scheduler is None else "dask", scheduler=scheduler)
    try:
        summary = run.wait(timeout=240)
    finally:
        run.stop()
        run.wait(timeout=60)
    steps = run.events.history("step")
    later = [e["boundary"] for e in steps[1:] if e.get("boundary")]
    return {"boundary_s": statistics.median(b["total"] for b in later) if later else None,
            "coordinator_tensor_bytes": max((b["tensor_bytes"] for b in later), default=None),
            "status": summary["status"], "error": summary.get("error"), "tokens_per_second": summary.get("tokens_per_second"),
            "steps": len(steps), "loss_first": steps[0]["loss"] if steps else None,
            "loss_last": steps[-1]["loss"] if steps else None, "wall_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    parser.add_argument("--baseline", nargs="*", default=["tiny"], help="sizes also run in-process (CPU peers)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=None, help="a JSON file for the figures")
    args = parser.parse_args()

    def config(size: str) -> RunConfig:
        return RunConfig(model=ModelConfig(size=size, seq_len=args.seq_len), data=DataConfig(max_bytes=4_000_000),
                         stages=2, peers=2, trainers=2, microbatch=8, global_batch=32, steps=args.steps, eval_every=0)
    figures: dict[str, object] = {"stages": 2, "peers": 2, "trainers": 2, "microbatch": 8, "global_batch": 32,
                                  "seq_len": args.seq_len, "steps": args.steps, "runs": []}
    try:
        from distributed import Client

        from labkit.backends.dask.connect import restarting_cluster
    except ImportError as exc:
        print(f"dask skipped: {exc}")
        write(args.out, "dask", {**figures, "skipped": f"{type(exc).__name__}: {exc}"})
        return
    gpu = torch.cuda.is_available()
    workers = 2 * 2 + 2 + 1 + 1  # peers, trainers, the coordinator, one spare
    resources = {"GPU": 1} if gpu else {}
    started = time.perf_counter()
    # restarting_cluster, as an embedded cluster: its workers fork from the warm server (torch imported, CUDA not)
    with restarting_cluster(workers, dashboard_address="127.0.0.1:0", resources=resources) as cluster, \
            Client(cluster) as client:
        print(f"dask cluster of {workers} workers (resources {resources or 'none: no CUDA here'}) up in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        for size in args.sizes:
            cfg = config(size)
            row = {"size": size, "backend": "dask", "gpu_resource": gpu, **run_once(cfg, cluster.scheduler_address)}
            row["gpu_workers"] = sum(client.run(_cuda_in_use).values())
            figures["runs"].append(row)
            print(f"dask size={size} status={row['status']} tokens/s={row['tokens_per_second'] or 0:,.0f} "
                  f"steps={row['steps']} loss {row['loss_first']} -> {row['loss_last']} wall={row['wall_s']:.1f} s "
                  f"boundary_s={row['boundary_s']} coordinator_tensor_bytes={row['coordinator_tensor_bytes']} "
                  f"workers with CUDA in use={row['gpu_workers']}" + (f" error={row['error']}" if row["error"] else ""),
                  flush=True)
    for size in args.baseline:
        cfg = config(size)
        row = {"size": size, "backend": "inprocess", **run_once(cfg, None)}
        figures["runs"].append(row)
        print(f"inprocess size={size} status={row['status']} tokens/s={row['tokens_per_second'] or 0:,.0f} "
              f"steps={row['steps']} loss {row['loss_first']} -> {row['loss_last']} wall={row['wall_s']:.1f} s",
              flush=True)
    write(args.out, "dask", figures)


if __name__ == "__main__":
    main()
