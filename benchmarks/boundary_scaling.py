"""SWARM's step boundary on Dask as a stage grows: seconds, bytes through the coordinator, and the bound.

Per cell (model size x N peers a stage), one run of `labkit.launch(cfg, backend="dask")` (its own
embedded `LocalCluster`): 2 stages x N peers, SWARM (the stage's peers ring-reduce their gradient
sums among themselves, `labkit/runtime/ring.py`), 2 trainers, seq_len 64, microbatch 2, one
microbatch per peer a step (global batch 2N), eval_every=0, 1 torch thread per process. From
its step events, steps after the first `--warmup`: the median boundary seconds a step
(`boundary["total"]`) and the median tensor bytes that crossed the coordinator
(`boundary["tensor_bytes"]`). The stage's gradient bytes are counted from the stage modules'
parameters (float32) and checked against the run's sync events (2(N-1) x those bytes a stage).

The bound is what a ring over this machine's data plane needs for those bytes: 2(N-1)/N x the
larger stage's gradient bytes / the data plane's bandwidth, measured here first: a 32 MB float32
tensor echoed between this process (`SocketClient`) and a spawned one (`SocketServer`), labkit's
peer-to-peer transport (`labkit/runtime/sockets.py`, which the ring's chunks travel on);
bandwidth = 2 x bytes x round trips / seconds, the median of `--repeats`. over_bound = boundary
seconds / bound. Beside it, for small stages where latency rules: the bound plus 2(N-1) one-way
message latencies (half the data plane's median round trip of a 4-byte tensor), one a ring step;
neither counts the boundary's two control requests from the coordinator (prepare, commit_step),
whose seconds are shown. The machine has 2 cores: 2N peers, 2 trainers and the driver share them, so the
ring's transfers and additions compete for CPU with each other (and with other jobs).

With `--links MBPS,...` the `--link-cells` run again over emulated links (`RunConfig.links`, a
scenario written here: every peer and trainer in one region whose link is `--link-rtt-ms` and
MBPS megabits a second), which a stage's ring chunks and the trainers' requests cross (not the
coordinator's control requests); their bound takes the link's bandwidth and a one-way latency of
half its round trip instead of the data plane's.

    PYTHONPATH=$PWD python benchmarks/boundary_scaling.py [--cells nano:2,4,8/tiny:2,4,8/small:2] [--steps 6] [--warmup 2]
                                                          [--links 1000,100 --link-cells nano:2,4,8/tiny:2,4,8]

Last line: boundary_scaling coordinator_tensor_bytes=<max over all cells> worst_over_bound=<max over
loopback cells with N <= 4> worst_over_bound_n8=<max over loopback N = 8 cells, or na>.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path

import torch

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.model.assembly import stage_module
from labkit.model.partition import init_run_state
from labkit.runtime.sockets import SocketClient, SocketServer

HOST = "127.0.0.1"
ECHO_BYTES = 32 * 2**20  # 32 MiB of float32
TIMEOUT_S = 120.0


def echo_server(conn: Connection) -> None:
    """Spawned process: a `SocketServer` whose every request is answered with its first argument."""
    torch.set_num_threads(1)

    def serve(method: str, args: tuple) -> Future:
        done: Future = Future()
        done.set_result(args[0])
        return done

    server = SocketServer(serve, HOST, "echo")
    conn.send(server.address)
    conn.recv()  # until the driver is done
    server.close()


def data_plane(round_trips: int, repeats: int) -> tuple[float, list[float], float]:
    """Median bytes/s (and every repeat's) of echoing ECHO_BYTES over labkit's data plane to another
    process, and the median round-trip seconds of a 4-byte tensor (the per-message latency)."""
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=echo_server, args=(there,), daemon=True)
    process.start()
    client = SocketClient(here.recv(), lambda: ConnectionError("the echo process died"))
    tensor = torch.randn(ECHO_BYTES // 4, generator=torch.Generator().manual_seed(0))
    try:
        assert torch.equal(client.call("echo", tensor).result(TIMEOUT_S), tensor), "the echo changed the tensor"
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(round_trips):
                client.call("echo", tensor).result(TIMEOUT_S)
            rates.append(2 * ECHO_BYTES * round_trips / (time.perf_counter() - start))
        tiny, latencies = torch.zeros(1), []
        for _ in range(50 * repeats):
            start = time.perf_counter()
            client.call("echo", tiny).result(TIMEOUT_S)
            latencies.append(time.perf_counter() - start)
    finally:
        client.close()
        here.send(None)
        process.join(10)
        if process.is_alive():
            process.terminate()
    return statistics.median(rates), rates, statistics.median(latencies)


def cell_config(size: str, n: int, steps: int) -> RunConfig:
    """2 stages x n peers of `size`, one microbatch of 2 a peer each step."""
    return RunConfig(model=ModelConfig(size=size, seq_len=64), data=DataConfig(max_bytes=2_000_000), stages=2, peers=n,
                     trainers=2, global_batch=2 * n, microbatch=2, steps=steps, eval_every=0, eval_batches=1, threads=1)


def stage_gradient_bytes(cfg: RunConfig) -> list[int]:
    """Bytes of each stage's gradients (its trainable parameters, float32 as the peers keep them)."""
    full = init_run_state(cfg.model, cfg.seed, cfg.compression, cfg.stages)
    return [sum(p.numel() * p.element_size() for p in stage_module(cfg, s, full).parameters() if p.requires_grad)
            for s in range(cfg.stages)]


def links_file(cfg: RunConfig, mbps: float, rtt_ms: float, folder: str) -> str:
    """A scenario placing `cfg`'s peers and trainers in one region whose links are `mbps`, `rtt_ms`."""
    path = os.path.join(folder, f"{cfg.model.size}-n{cfg.peers}-{mbps:g}mbps.json")
    peers = [{"device": "T4", "count": cfg.peers, "stage": s} for s in range(cfg.stages)]
    with open(path, "w") as f:
        json.dump({"name": f"lan-{mbps:g}mbps", "model": cfg.model.size, "stages": cfg.stages, "peers": peers,
                   "trainers": cfg.trainers, "rtt_ms": rtt_ms, "bandwidth_mbps": mbps}, f)
    return path


def run_cell(size: str, n: int, steps: int, warmup: int, bandwidth: float, latency: float,
             links: str | None = None) -> dict:
    """One Dask run of the cell (over the emulated links of the scenario file `links`, if given);
    its boundary figures (steps after `warmup`) beside the bound for `bandwidth` bytes/s and a
    round trip of `latency` seconds."""
    cfg = cell_config(size, n, steps).replace(links=links)
    grads = stage_gradient_bytes(cfg)
    began = time.perf_counter()
    run = labkit.launch(cfg, backend="dask")
    summary = run.wait()
    wall = time.perf_counter() - began
    assert summary["status"] == "finished", f"{size} N={n}: {summary}"
    measured = [e for e in run.events.history("step") if e["step"] > warmup]
    assert measured, f"{size} N={n}: no step after the {warmup} warm-up steps"
    for e in run.events.history("sync"):
        assert e["bytes"] == 2 * (n - 1) * grads[e["stage"]], \
            f"{size} N={n}: stage {e['stage']} sync bytes {e['bytes']} != 2(N-1) x {grads[e['stage']]} gradient bytes"
    seconds = statistics.median(e["boundary"]["total"] for e in measured)
    bound = 2 * (n - 1) / n * max(grads) / bandwidth
    with_latency = bound + 2 * (n - 1) * latency / 2  # and a one-way message latency per ring step
    return {"size": size, "n": n, "links": links, "params": cfg.model.num_params(), "grad_bytes": max(grads), "seconds": seconds,
            **{part: statistics.median(e["boundary"]["seconds"].get(part, 0.0) for e in measured)
               for part in ("prepare", "commit_step")},
            "tensor_bytes": max(e["boundary"]["tensor_bytes"] for e in run.events.history("step")),
            "median_tensor_bytes": statistics.median(e["boundary"]["tensor_bytes"] for e in measured),
            "bound": bound, "over_bound": seconds / bound, "with_latency": with_latency, "steps": len(measured), "wall": wall}


def parse_cells(text: str) -> list[tuple[str, int]]:
    """"nano:2,4/tiny:2" -> [("nano", 2), ("nano", 4), ("tiny", 2)]."""
    cells = []
    for part in text.split("/"):
        size, _, counts = part.partition(":")
        cells += [(size, int(c)) for c in counts.split(",")]
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="nano:2,4,8/tiny:2,4,8/small:2",
                        help="size:N,N,.../size:N,... (model sizes and peers a stage)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians")
    parser.add_argument("--round-trips", type=int, default=5, help="32 MiB echo round trips per bandwidth repeat")
    parser.add_argument("--repeats", type=int, default=5, help="bandwidth repeats")
    parser.add_argument("--links", default="", help="emulated link bandwidths in Mb/s, comma-separated (none by default)")
    parser.add_argument("--link-cells", default="nano:2,4,8/tiny:2,4,8", help="the cells run over each --links")
    parser.add_argument("--link-rtt-ms", type=float, default=1.0, help="the emulated links' round trip")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_start, began = os.getloadavg(), time.perf_counter()
    bandwidth, rates, latency = data_plane(args.round_trips, args.repeats)
    print(f"data plane (SocketClient -> SocketServer, 32 MiB echo, {args.round_trips} round trips x {args.repeats}): "
          f"median {bandwidth / 1e6:,.0f} MB/s (runs: {', '.join(f'{r / 1e6:,.0f}' for r in rates)}); "
          f"4-byte round trip {latency * 1e3:.2f} ms; labkit from {Path(labkit.__file__).parent}", flush=True)
    plans = [(size, n, None) for size, n in parse_cells(args.cells)]
    plans += [(size, n, float(mbps)) for mbps in filter(None, args.links.split(",")) for size, n in parse_cells(args.link_cells)]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for size, n, mbps in plans:
            if mbps is None:
                rows.append(run_cell(size, n, args.steps, args.warmup, bandwidth, latency) | {"label": "loopback"})
            else:
                links = links_file(cell_config(size, n, args.steps), mbps, args.link_rtt_ms, folder)
                rows.append(run_cell(size, n, args.steps, args.warmup, mbps * 1e6 / 8, args.link_rtt_ms / 1e3, links)
                            | {"label": f"{mbps:g} Mb/s, {args.link_rtt_ms:g} ms"})
            r = rows[-1]
            print(f"{size} N={n} {r['label']}: boundary {r['seconds'] * 1e3:.1f} ms, bound {r['bound'] * 1e3:.2f} ms, "
                  f"over_bound {r['over_bound']:.1f}, run wall {r['wall']:.0f} s", flush=True)
    load_end = os.getloadavg()
    print(f"\n2 stages x N peers, Dask, {args.steps} steps ({args.warmup} warm-up left out), {os.cpu_count()} cores; "
          f"load average {load_start[0]:.1f} -> {load_end[0]:.1f} (5 min {load_start[1]:.1f} -> {load_end[1]:.1f}); "
          f"{time.perf_counter() - began:.0f} s\n")
    print("| links | size | params | N | stage grad MB | boundary ms | prepare ms | commit_step ms | coordinator tensor bytes "
          "| bound ms | over bound | bound + ring latency ms | over that |")
    print("| --- |" + " --- |" * 12)
    for r in rows:
        print(f"| {r['label']} | {r['size']} | {r['params']:,} | {r['n']} | {r['grad_bytes'] / 1e6:.2f} | {r['seconds'] * 1e3:.1f} | "
              f"{r['prepare'] * 1e3:.1f} | {r['commit_step'] * 1e3:.1f} | {r['median_tensor_bytes']:,.0f} | "
              f"{r['bound'] * 1e3:.2f} | {r['over_bound']:.1f} | {r['with_latency'] * 1e3:.2f} | "
              f"{r['seconds'] / r['with_latency']:.1f} |")
    worst = {key: max((r["over_bound"] for r in rows if keep(r["n"]) and r["links"] is None), default=None)
             for key, keep in (("worst_over_bound", lambda n: n <= 4), ("worst_over_bound_n8", lambda n: n == 8))}
    print(f"boundary_scaling coordinator_tensor_bytes={max(r['tensor_bytes'] for r in rows)} "
          + " ".join(f"{key}={'na' if v is None else f'{v:.2f}'}" for key, v in worst.items()))


if __name__ == "__main__":
    main()
