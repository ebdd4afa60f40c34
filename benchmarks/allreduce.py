"""Summing a stage's gradients across N peer processes: star (the step boundary before issue 25)
vs labkit's ring vs torch.distributed's gloo, and the cost of re-forming the ring or the gloo group
after a peer is killed (issue 25's choice of collective).

Each peer is its own process (1 torch thread) hosting a `SocketServer` (labkit's TCP data plane)
on 127.0.0.1 (benchmarks/allreduce_peer.py), and holds a list of float32 gradient tensors: the
shapes of the nano model's stage 0 (RunConfig(stages=2), about 0.48 MB), then 8 equal tensors of
each --sizes total (MB = 10**6 bytes). A round replaces every peer's gradients by their sum.

star: what the step boundary did before issue 25. The driver, as coordinator, asks every peer
for its gradients (one request per peer, all sent at once), sums them in rank order
(`sum_over_peers`), and sends the sum to every peer, which copies it into its gradients (a second
request each).
ring: on the driver's request each peer flattens its gradients into one tensor and runs
`labkit.runtime.ring.ring_allreduce` with its neighbours: each chunk goes to the right
neighbour's server (`post`, over a link opened before timing), which puts it in its `Mailbox` at
once; the peer then copies the sum back. gloo: each peer joined one `ProcessGroupGloo` (on a
`PrefixStore` of the driver's `TCPStore`) before timing; on the driver's request it flattens its
gradients, `allreduce`s the flat tensor (sum) and copies it back. All three are timed from the
first request sent to the last answer. Bus bandwidth = 2(N - 1)/N x bytes per peer / time.

Before each round every peer writes fresh gradients (base * (rank + 1) + rank + round); after it
every peer checks that its result is allclose (rtol 1e-5) to the exact sum; a wrong result stops
the benchmark. Both are untimed. Per peer count and size: 2 warm-up rounds, then --repeats
rounds, the three methods interleaved (their order rotates every round), medians reported.
Then the re-form trials at --reform-peers (benchmarks/allreduce_reform.py says what is timed),
and whether a gloo group forms among threads of one process (benchmarks/allreduce_threads.py).

This machine has 2 cores: with 4 and 8 peers (plus the driver) the processes are oversubscribed
and every transfer competes with the others for CPU; the figures say which wins where on this
machine, not on a network of hosts.

    python -m benchmarks.allreduce [--repeats 9] [--sizes 8,32] [--peers 2,4,8]
                                   [--reform-peers 4,8] [--reform-trials 7]

Last line: allreduce n<N>_<size>_<star|ring|gloo>_ms=<median ms> for the nano stage and the
largest size at each N, reform_n<N>_<ring|gloo>_ms=<median ms from the kill to the survivors'
first reduce done>, then winner_small / winner_large: the method fastest at every N at the nano
stage / the largest size, or "mixed".
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from benchmarks.allreduce_peer import HOST, Peers, Shapes, payload_mb, peers, wait
from benchmarks.allreduce_reform import measure, table
from benchmarks.allreduce_threads import report
from labkit.config import RunConfig
from labkit.model.assembly import initial_states
from labkit.swarm.sync import sum_over_peers

MB = 1_000_000
N_TENSORS = 8
WARMUP = 2


def nano_shapes() -> Shapes:
    """Shapes of the float tensors of the nano model's stage 0 (of 2)."""
    params = initial_states(RunConfig(stages=2))[0]["params"]
    return [tuple(t.shape) for t in params.values() if t.is_floating_point()]


def mb_shapes(size_mb: float) -> Shapes:
    """N_TENSORS flat shapes that make up size_mb of float32."""
    total = int(size_mb * MB) // 4
    return [(total // N_TENSORS + (i < total % N_TENSORS),) for i in range(N_TENSORS)]


def star(group: Peers, size: int, tag: int) -> float:
    """One star round as the step boundary runs it; its seconds."""
    start = time.perf_counter()
    summed = sum_over_peers(wait([c.call("gradients", size) for c in group.clients]))
    wait([c.call("apply", size, summed) for c in group.clients])
    return time.perf_counter() - start


def ring(group: Peers, size: int, tag: int) -> float:
    """One round of labkit's ring, as ring `tag`; its seconds."""
    start = time.perf_counter()
    wait([c.call("ring", size, tag) for c in group.clients])
    return time.perf_counter() - start


def gloo(group: Peers, size: int, tag: int) -> float:
    """One gloo all-reduce round; its seconds."""
    start = time.perf_counter()
    wait([c.call("gloo", size) for c in group.clients])
    return time.perf_counter() - start


METHODS: dict[str, Callable[[Peers, int, int], float]] = {"star": star, "ring": ring, "gloo": gloo}


def run_peers(n: int, sizes: Sequence[Shapes], repeats: int,
              store_port: int) -> dict[tuple[str, int], list[float]]:
    """Timed seconds per (method, size index) for n peers, every round verified on every peer."""
    seconds: dict[tuple[str, int], list[float]] = {(m, s): [] for m in METHODS for s in range(len(sizes))}
    tags = itertools.count()
    names = list(METHODS)
    with peers(n, sizes, store_port) as group:
        for s in range(len(sizes)):
            for round_no in range(WARMUP + repeats):
                k = round_no % len(names)
                for m in names[k:] + names[:k]:
                    wait([c.call("load", s, round_no) for c in group.clients])
                    took = METHODS[m](group, s, next(tags))
                    assert all(wait([c.call("verify", s, round_no, range(n)) for c in group.clients])), \
                        f"{m} all-reduce of {n} peers, size {s}, round {round_no}: a wrong sum"
                    if round_no >= WARMUP:
                        seconds[m, s].append(took)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds per method and cell")
    parser.add_argument("--sizes", default="8,32",
                        help="MB of float32 per peer besides the nano stage, comma-separated")
    parser.add_argument("--peers", default="2,4,8", help="peer counts, comma-separated")
    parser.add_argument("--reform-peers", default="4,8",
                        help="peer counts of the re-form trials ('' for none)")
    parser.add_argument("--reform-trials", type=int, default=7, help="kills per method and peer count")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the driver is the star's coordinator: one thread, as a peer
    mbs = [float(x) for x in args.sizes.split(",")]
    sizes = [nano_shapes()] + [mb_shapes(mb) for mb in mbs]
    labels = ["nano"] + [f"{mb:g}mb" for mb in mbs]
    size_mb = [payload_mb(shapes) for shapes in sizes]
    peer_counts = [int(x) for x in args.peers.split(",")]
    reform_counts = [int(x) for x in args.reform_peers.split(",") if x]
    store = dist.TCPStore(HOST, 0, None, True, wait_for_workers=False)
    load_before, began = os.getloadavg()[0], time.perf_counter()
    medians: dict[tuple[int, str, int], float] = {}  # (N, method, size index) -> median ms
    for n in peer_counts:
        for (m, s), secs in run_peers(n, sizes, args.repeats, store.port).items():
            medians[n, m, s] = statistics.median(secs) * 1e3
    reform = measure(reform_counts, args.reform_trials, sizes, store.port)
    print(f"{WARMUP} warm-up + {args.repeats} timed rounds per cell, star/ring/gloo interleaved, "
          f"{os.cpu_count()} cores; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; {time.perf_counter() - began:.0f} s")
    print("| N | size | MB/peer | " + " | ".join(f"{m} ms" for m in METHODS) + " | "
          + " | ".join(f"{m} bus MB/s" for m in METHODS) + " |")
    print("|---|---|---|" + "---|" * 2 * len(METHODS))
    for n in peer_counts:
        for s, label in enumerate(labels):
            ms = [medians[n, m, s] for m in METHODS]
            bus = [2 * (n - 1) / n * size_mb[s] / (t / 1e3) for t in ms]
            print(f"| {n} | {label} | {size_mb[s]:.2f} | " + " | ".join(f"{t:.1f}" for t in ms) + " | "
                  + " | ".join(f"{b:.0f}" for b in bus) + " |")
    print("\n".join(table(reform, args.reform_trials) + report()))

    def winner(s: int) -> str:
        wins = {min(METHODS, key=lambda m: medians[n, m, s]) for n in peer_counts}
        return wins.pop() if len(wins) == 1 else "mixed"

    large = len(sizes) - 1
    keys = [f"n{n}_{labels[s]}_{m}_ms={medians[n, m, s]:.1f}"
            for n in peer_counts for s in (0, large) for m in METHODS]
    keys += [f"reform_n{n}_{m}_ms={cell['total']:.1f}" for (n, m), cell in reform.items()]
    print(f"allreduce {' '.join(keys)} winner_small={winner(0)} winner_large={winner(large)}")


if __name__ == "__main__":
    main()
