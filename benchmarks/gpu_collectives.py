"""torch.distributed's all-reduce on this machine, as input for issue 25's choice of collective:
gloo over CPU tensors at N processes (one rank each) and message sizes, and the cost of
re-forming a gloo group (destroy, then `init_process_group` on a new world: the same 4 ranks,
and 3 survivors of 4, as after a kill).

Latency = the median over repeats of the slowest rank's seconds for one all_reduce (float32 sum,
after warm-up). Bus bandwidth = 2 (N - 1) / N x bytes / latency (what a ring moves per rank).
Re-forming = the slowest rank's seconds from destroy_process_group to the end of a first 4-byte
all_reduce in the new group (every rank has then joined it).

    python -m benchmarks.gpu_collectives [--ranks 2 4 8] [--mb 1 8 32] [--out collectives.json]
"""

from __future__ import annotations

import argparse
import datetime
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.gpu_common import write

WARMUP, REPEATS, REFORMS = 3, 10, 5


def _slowest(seconds: float) -> float:
    """The largest of every rank's `seconds` (all ranks call this together)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _init(store: dist.Store, prefix: str, rank: int, world: int) -> None:
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))


def _rank(rank: int, world: int, port: int, sizes_mb: list[float], reform: bool, results: dict) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    _init(store, "bench", rank, world)
    rows = []
    for mb in sizes_mb:
        x = torch.ones(int(mb * 1e6 / 4), dtype=torch.float32)
        times = []
        for i in range(WARMUP + REPEATS):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            seconds = _slowest(time.perf_counter() - start)
            if i >= WARMUP:
                times.append(seconds)
        rows.append({"ranks": world, "mb": mb, "latency_s": statistics.median(times), "latency_min_s": min(times)})
    reforms: dict[str, list[float]] = {"same_world": [], "survivors": []}
    if reform:
        for generation in range(REFORMS):
            for kind, members in (("same_world", world), ("survivors", world - 1)):
                dist.barrier()
                start = time.perf_counter()
                dist.destroy_process_group()
                if rank < members:
                    _init(store, f"{kind}{generation}", rank, members)
                    dist.all_reduce(torch.ones(1))
                    elapsed = time.perf_counter() - start
                    reforms[kind].append(_slowest(elapsed))
                    dist.destroy_process_group()
                _init(store, f"back{kind}{generation}", rank, world)
    if rank == 0:
        results["rows"], results["reforms"] = rows, reforms
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world: int, sizes_mb: list[float], reform: bool) -> dict:
    """One world of `world` gloo ranks (processes): latencies per size, and re-forming if asked."""
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank, args=(world, _free_port(), sizes_mb, reform, results), nprocs=world, join=True)
        return dict(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--mb", type=float, nargs="+", default=[1, 8, 32])
    parser.add_argument("--reform-at", type=int, default=4, help="the world size whose group is re-formed")
    parser.add_argument("--out", default=None, help="a JSON file for the figures")
    args = parser.parse_args()
    rows, reforms = [], {}
    for world in args.ranks:
        result = run(world, args.mb, world == args.reform_at)
        for row in result["rows"]:
            row["bus_gbps"] = 2 * (world - 1) / world * row["mb"] * 1e6 / row["latency_s"] / 1e9
            rows.append(row)
            print(f"gloo all_reduce N={world} size={row['mb']:g} MB latency={row['latency_s'] * 1e3:.2f} ms "
                  f"(min {row['latency_min_s'] * 1e3:.2f}) bus={row['bus_gbps']:.2f} GB/s", flush=True)
        for kind, times in result["reforms"].items():
            if times:
                reforms[kind] = {"median_s": statistics.median(times), "max_s": max(times), "n": len(times)}
                members = world if kind == "same_world" else world - 1
                print(f"gloo re-form N={world} -> {members} ({kind}): median {reforms[kind]['median_s'] * 1e3:.1f} ms "
                      f"(max {reforms[kind]['max_s'] * 1e3:.1f}, {len(times)} times)", flush=True)
    write(args.out, "collectives", {"backend": "gloo", "warmup": WARMUP, "repeats": REPEATS, "rows": rows,
                                    "reform_at": args.reform_at, "reforms": reforms})


if __name__ == "__main__":
    main()
