"""Summing a stage's gradients across N peer processes: star (labkit's step boundary) vs ring.

Each peer is its own spawned process (1 torch thread) hosting a `SocketServer` (labkit's TCP data
plane, runtime/sockets.py, tensors out of band) on 127.0.0.1, and holds a list of float32
gradient tensors: the shapes of the nano model's stage 0 (RunConfig(stages=2), about 0.48 MB),
then 8 equal tensors of each --sizes total (MB = 10**6 bytes). A round replaces every peer's
gradients by their sum over the N peers.

star: what the step boundary does today. The driver, as coordinator, asks every peer for its
gradients (one request per peer, all sent at once), sums them in rank order (`sum_over_peers`),
and sends the sum to every peer, which copies it into its gradients (a second request each).
Timed from the first gather sent to the last apply answered.

ring: reduce-scatter then all-gather. On the driver's "allreduce" (one request per peer) each
peer flattens its gradients into one tensor, splits it into N chunks and, in 2(N-1) steps, sends
one chunk to its right neighbour's server (over a `SocketClient` opened before timing) and adds
(first N-1 steps) or copies (last N-1) the chunk its left neighbour sent; it then copies the
result back into its gradient tensors and answers. Timed from the first request sent to the last
answer. Each peer ships 2(N-1)/N of the payload; the star's coordinator ships 2N times it.

Before each round every peer writes fresh gradients (base * (rank + 1) + rank + round); after it
every peer checks that its result is allclose (rtol 1e-5) to the exact sum; a wrong result stops
the benchmark. Both are untimed. Per peer count and size: 2 warm-up rounds, then --repeats
rounds, star and ring interleaved (which goes first alternates), medians reported.

This machine has 2 cores: with 4 and 8 peers (plus the driver) the processes are oversubscribed
and every transfer competes with the others for CPU; the figures say which wins where on this
machine, not on a network of hosts.

    python benchmarks/allreduce.py [--repeats 5] [--sizes 8,32] [--peers 2,4,8]

Last line: allreduce n<N>_<size>_<star|ring>_ms=<median ms> for the nano stage and the largest
size at each N, then winner_small / winner_large: the method faster at every N at the nano stage /
the largest size, or "mixed".
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

import torch

from labkit.config import RunConfig
from labkit.model.assembly import initial_states
from labkit.runtime.sockets import SocketClient, SocketServer
from labkit.swarm.sync import sum_over_peers

MB = 1_000_000
N_TENSORS = 8
WARMUP = 2
HOST = "127.0.0.1"
TIMEOUT_S = 120.0  # a peer that does not start or answer in this long fails the benchmark

Shapes = list[tuple[int, ...]]


def nano_shapes() -> Shapes:
    """Shapes of the float tensors of the nano model's stage 0 (of 2)."""
    params = initial_states(RunConfig(stages=2))[0]["params"]
    return [tuple(t.shape) for t in params.values() if t.is_floating_point()]


def mb_shapes(size_mb: float) -> Shapes:
    """N_TENSORS flat shapes that make up size_mb of float32."""
    total = int(size_mb * MB) // 4
    return [(total // N_TENSORS + (i < total % N_TENSORS),) for i in range(N_TENSORS)]


class Peer:
    """One peer process's gradients (a tensor list per size) and its request handlers. Ring
    chunks are queued at once on the reading thread; every other request runs in order on the
    peer's one work thread (which may block waiting for chunks)."""

    def __init__(self, rank: int, n: int, sizes: Sequence[Shapes]) -> None:
        self.rank, self.n = rank, n
        self.bases = [[torch.randn(shape, generator=torch.Generator().manual_seed(100 * s + i))
                       for i, shape in enumerate(shapes)] for s, shapes in enumerate(sizes)]
        self.grads = [[torch.empty_like(b) for b in base] for base in self.bases]
        self.inbox: queue.Queue[tuple[int, torch.Tensor]] = queue.Queue()
        self.work = ThreadPoolExecutor(1, thread_name_prefix=f"peer{rank}")
        self.right: SocketClient | None = None

    def serve(self, method: str, args: tuple) -> Future:
        """The `SocketServer` handler: a ring chunk (or the hello that opens a link) is taken
        at once; any other request is queued for the work thread."""
        if method not in ("chunk", "hello"):
            return self.work.submit(getattr(self, method), *args)
        if method == "chunk":
            self.inbox.put(args)
        done: Future = Future()
        done.set_result(None)
        return done

    def connect(self, address: str) -> None:
        """Open the link to the right neighbour's server."""
        self.right = SocketClient(address, died((self.rank + 1) % self.n))
        self.right.call("hello").result(TIMEOUT_S)

    def load(self, size: int, round_no: int) -> None:
        """Write this round's gradients: base * (rank + 1) + rank + round_no."""
        for g, b in zip(self.grads[size], self.bases[size]):
            torch.mul(b, self.rank + 1, out=g).add_(self.rank + round_no)

    def verify(self, size: int, round_no: int) -> bool:
        """Whether the gradients are the exact sum of every peer's `load`."""
        n = self.n
        return all(torch.allclose(g, b * (n * (n + 1) / 2) + (n * (n - 1) / 2 + n * round_no),
                                  rtol=1e-5, atol=1e-4)
                   for g, b in zip(self.grads[size], self.bases[size]))

    def gradients(self, size: int) -> list[torch.Tensor]:
        """Star, first request: this peer's gradients."""
        return self.grads[size]

    def apply(self, size: int, summed: list[torch.Tensor]) -> None:
        """Star, second request: take the coordinator's sum."""
        for g, s in zip(self.grads[size], summed):
            g.copy_(s)

    def allreduce(self, size: int) -> None:
        """Ring: reduce-scatter then all-gather with the neighbours (see the module docstring).
        At step s a peer sends chunk (rank - s) % n and receives chunk (rank - s - 1) % n."""
        assert self.right is not None, "connect first"
        grads, n = self.grads[size], self.n
        flat = torch.cat([g.reshape(-1) for g in grads])
        chunks = flat.tensor_split(n)
        sent = []
        for step in range(2 * (n - 1)):
            sent.append(self.right.call("chunk", step, chunks[(self.rank - step) % n]))
            got_step, got = self.inbox.get(timeout=TIMEOUT_S)
            assert got_step == step, f"peer {self.rank} expected step {step}, got {got_step}"
            mine = chunks[(self.rank - step - 1) % n]
            if step < n - 1:
                mine.add_(got)
            else:
                mine.copy_(got)
        for f in sent:
            f.result(TIMEOUT_S)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))


def peer_main(rank: int, n: int, sizes: Sequence[Shapes], ready: Queue, stop: Event) -> None:
    """Spawned peer process: serve until the driver sets `stop`."""
    torch.set_num_threads(1)
    server = SocketServer(Peer(rank, n, sizes).serve, HOST, f"peer{rank}")
    ready.put((rank, server.address))
    stop.wait()
    server.close()


def died(rank: int) -> Callable[[], Exception]:
    """The error a request to peer `rank` fails with once its connection breaks."""
    return lambda: ConnectionError(f"peer {rank} died")


@contextmanager
def peers(n: int, sizes: Sequence[Shapes]) -> Iterator[list[SocketClient]]:
    """n spawned peers linked in a ring, and the driver's client of each; all reaped on exit."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=peer_main, args=(r, n, sizes, ready, stop), name=f"peer{r}")
             for r in range(n)]
    clients: list[SocketClient] = []
    try:
        for p in procs:
            p.start()
        addresses = dict(ready.get(timeout=TIMEOUT_S) for _ in procs)
        clients = [SocketClient(addresses[r], died(r)) for r in range(n)]
        wait([c.call("connect", addresses[(r + 1) % n]) for r, c in enumerate(clients)])
        yield clients
    finally:
        for c in clients:
            c.close()
        stop.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join()


def wait(futures: Sequence[Future]) -> list:
    """Every future's result, in order."""
    return [f.result(TIMEOUT_S) for f in futures]


def star(clients: Sequence[SocketClient], size: int) -> float:
    """One star round as the step boundary runs it; its seconds."""
    start = time.perf_counter()
    summed = sum_over_peers(wait([c.call("gradients", size) for c in clients]))
    wait([c.call("apply", size, summed) for c in clients])
    return time.perf_counter() - start


def ring(clients: Sequence[SocketClient], size: int) -> float:
    """One ring round; its seconds."""
    start = time.perf_counter()
    wait([c.call("allreduce", size) for c in clients])
    return time.perf_counter() - start


def run_peers(n: int, sizes: Sequence[Shapes], repeats: int) -> dict[tuple[str, int], list[float]]:
    """Timed seconds per (method, size index) for n peers, every round verified on every peer."""
    methods = {"star": star, "ring": ring}
    seconds: dict[tuple[str, int], list[float]] = {(m, s): [] for m in methods
                                                   for s in range(len(sizes))}
    with peers(n, sizes) as clients:
        for s in range(len(sizes)):
            for round_no in range(WARMUP + repeats):
                order = list(methods) if round_no % 2 == 0 else list(reversed(methods))
                for m in order:
                    wait([c.call("load", s, round_no) for c in clients])
                    took = methods[m](clients, s)
                    assert all(wait([c.call("verify", s, round_no) for c in clients])), \
                        f"{m} all-reduce of {n} peers, size {s}, round {round_no}: a wrong sum"
                    if round_no >= WARMUP:
                        seconds[m, s].append(took)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per method and cell")
    parser.add_argument("--sizes", default="8,32",
                        help="MB of float32 per peer besides the nano stage, comma-separated")
    parser.add_argument("--peers", default="2,4,8", help="peer counts, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the driver is the star's coordinator: one thread, as a peer
    mbs = [float(x) for x in args.sizes.split(",")]
    sizes = [nano_shapes()] + [mb_shapes(mb) for mb in mbs]
    labels = ["nano"] + [f"{mb:g}mb" for mb in mbs]
    size_mb = [4 * sum(map(math.prod, shapes)) / MB for shapes in sizes]
    peer_counts = [int(x) for x in args.peers.split(",")]
    load_before, began = os.getloadavg()[0], time.perf_counter()
    medians: dict[tuple[int, str, int], float] = {}  # (N, method, size index) -> median ms
    for n in peer_counts:
        for (m, s), secs in run_peers(n, sizes, args.repeats).items():
            medians[n, m, s] = statistics.median(secs) * 1e3
    print(f"{WARMUP} warm-up + {args.repeats} timed rounds per cell, star/ring interleaved, "
          f"{os.cpu_count()} cores; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; {time.perf_counter() - began:.0f} s")
    print("| N | size | MB/peer | star median ms | ring median ms | ring/star |")
    print("|---|---|---|---|---|---|")
    for n in peer_counts:
        for s, label in enumerate(labels):
            st, rg = medians[n, "star", s], medians[n, "ring", s]
            print(f"| {n} | {label} | {size_mb[s]:.2f} | {st:.1f} | {rg:.1f} | {rg / st:.2f} |")

    def winner(s: int) -> str:
        wins = {"star" if medians[n, "star", s] < medians[n, "ring", s] else "ring"
                for n in peer_counts}
        return wins.pop() if len(wins) == 1 else "mixed"

    large = len(sizes) - 1
    keys = " ".join(f"n{n}_{labels[s]}_{m}_ms={medians[n, m, s]:.1f}"
                    for n in peer_counts for s in (0, large) for m in ("star", "ring"))
    print(f"allreduce {keys} winner_small={winner(0)} winner_large={winner(large)}")


if __name__ == "__main__":
    main()
