"""Averaging a stage's gradients across peer processes: hivemind all-reduce vs a Dask hub actor.

Each peer is its own OS process holding a stage's gradients: a list of 8 float32 tensors with the
given total payload (MB = 10**6 bytes). One round replaces every peer's gradients by their mean over
the N peers; every round is checked against the true mean with torch.allclose.

hivemind: hivemind.averaging.DecentralizedAverager in N spawned processes, each starting its own
hivemind.DHT on 127.0.0.1 (the others bootstrap from the first one's visible maddrs), with
target_group_size = min_group_size = N and no compression. A round is `averager.step()` on every
peer, timed from the driver's "go" (all peers loaded and idle) to the last peer's finish. Each size
runs with hivemind's default matchmaking (min_matchmaking_time 5 s, request_timeout 3 s) and with
the smallest min_matchmaking_time that still formed the group reliably here (--fast-matchmaking,
request_timeout half of it). "matchmaking s" is the time until the last peer entered all-reduce
(StepControl.stage, polled every 2 ms); the rest of the round is the butterfly all-reduce itself.

dask: distributed.LocalCluster with N+1 single-threaded worker processes on 127.0.0.1; N peer
actors, each pinned to its own worker, and a hub actor on the last one. A round is the driver's
`hub.round(size).result()`: the hub concurrently awaits `peer.gradients()` from every peer, sums
them in rank order, then concurrently awaits `peer.apply(summed)` (each peer keeps summed / N).

For each peer count both systems are up at once; sizes run one after another, and within a size
the two systems' rounds are interleaved (each round: both hivemind settings, then dask), since the
machine is shared and noisy. Per size 2 warm-up rounds, then medians of --repeats rounds
(--big-repeats for hivemind at 64 MB and up, where a round takes seconds).
MB/s is the algorithm bandwidth: payload bytes per peer / median round seconds. "failed" (rounds
that raised) and "wrong" (peer results not allclose to the mean) count warm-up rounds too.

    python benchmarks/averaging.py [--repeats 7] [--big-repeats 4] [--sizes 0.5,16,100]
                                   [--peers 2,4] [--fast-matchmaking 0.2]

Last line: averaging_choice=<dask|hivemind> dask_over_hivemind=<median seconds of the faster
hivemind setting / median seconds of dask> at N=4 and 16 MB (in general: the largest N and the
size nearest 16 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import os
import signal
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import torch
from distributed import Actor, Client, LocalCluster

from labkit.backends.dask.workers import cluster_workers

MB = 1_000_000
N_TENSORS = 8
WARMUP = 2
BIG_MB = 64  # hivemind rounds at this size and up are counted by --big-repeats
DEFAULT_MATCHMAKING = (5.0, 3.0)  # hivemind's own min_matchmaking_time and request_timeout
POLL_S = 0.002
STEP_TIMEOUT_S = 60.0  # hivemind gives up looking for a group after this
REPLY_TIMEOUT_S = 180.0  # the driver gives up on a silent peer process after this

Key = tuple[str, int, float]  # (method, peers, MB per peer)


def tensor_numels(size_mb: float) -> list[int]:
    """Element counts of the N_TENSORS float32 tensors that make up size_mb."""
    total = int(size_mb * MB) // 4
    return [total // N_TENSORS + (i < total % N_TENSORS) for i in range(N_TENSORS)]


def base_tensors(numels: Sequence[int]) -> list[torch.Tensor]:
    """Random tensors that every process regenerates identically (fixed seeds)."""
    return [torch.randn(n, generator=torch.Generator().manual_seed(1000 + i))
            for i, n in enumerate(numels)]


def fill_gradients(out: Sequence[torch.Tensor], base: Sequence[torch.Tensor], rank: int,
                   round_no: int) -> None:
    """Write peer `rank`'s gradients of round `round_no`: base * (rank + 1) + rank + round_no."""
    for o, b in zip(out, base):
        torch.mul(b, rank + 1, out=o).add_(rank + round_no)


def is_mean(got: Sequence[torch.Tensor], base: Sequence[torch.Tensor], n: int,
            round_no: int) -> bool:
    """Whether `got` is allclose to the mean of fill_gradients over ranks 0..n-1."""
    return all(torch.allclose(g, b * ((n + 1) / 2) + ((n - 1) / 2 + round_no), rtol=1e-5, atol=1e-5)
               for g, b in zip(got, base))


@dataclass
class Rounds:
    """Timed rounds of one (method, peers, size) cell."""

    seconds: list[float] = field(default_factory=list)
    matchmaking: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # failed rounds, warm-up included
    wrong: int = 0  # peer results that were not the true mean, warm-up included


# ------------------------------------------------------------------------------------ hivemind


def exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM handler: leave through `finally`, so the peer shuts its averagers and DHT down."""
    raise SystemExit(128 + signum)


def hivemind_peer(rank: int, n: int, initial_peers: list[str] | None, sizes: Sequence[float],
                  matchmaking: Sequence[tuple[float, float]], conn: Connection) -> None:
    """Spawned peer process: its own DHT and one averager per (size, matchmaking setting).

    Serves the driver: ("load", key, round) -> "ok"; ("step", key, round) -> (finished,
    allreduce_began, error, correct), times from time.monotonic (system-wide on Linux); None ends.
    key = (size index, matchmaking index).
    """
    os.setpgrp()  # a group of its own: the driver can reap DHT, averager and p2pd processes with it
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")
    mp.set_start_method("fork", force=True)  # hivemind's DHT and averagers are fork-started
    torch.set_num_threads(1)
    import hivemind
    from hivemind.averaging.control import AveragingStage

    averagers: dict[tuple[int, int], hivemind.DecentralizedAverager] = {}
    dht = hivemind.DHT(initial_peers=initial_peers, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                       start=True)
    try:
        if initial_peers is None:
            conn.send([str(m) for m in dht.get_visible_maddrs()])
        bases = [base_tensors(tensor_numels(mb)) for mb in sizes]
        for s, base in enumerate(bases):
            for m, (min_time, request_timeout) in enumerate(matchmaking):
                averagers[s, m] = hivemind.DecentralizedAverager(
                    [torch.zeros_like(b) for b in base], dht, start=True, prefix=f"grads_s{s}_m{m}",
                    target_group_size=n, min_group_size=n, min_matchmaking_time=min_time,
                    request_timeout=request_timeout, allow_state_sharing=False)
        conn.send("ready")
        while (msg := conn.recv()) is not None:
            kind, key, round_no = msg
            averager, base = averagers[key], bases[key[0]]
            if kind == "load":
                with averager.get_tensors() as tensors:
                    fill_gradients(tensors, base, rank, round_no)
                conn.send("ok")
                continue
            control = averager.step(wait=False, timeout=STEP_TIMEOUT_S)
            began = None
            while not control.done():
                if began is None and control.stage in (AveragingStage.RUNNING_ALLREDUCE,
                                                       AveragingStage.FINISHED):
                    began = time.monotonic()
                time.sleep(POLL_S)
            finished = time.monotonic()
            error = None if control.exception() is None else repr(control.exception())
            with averager.get_tensors() as tensors:
                correct = error is None and is_mean(tensors, base, n, round_no)
            conn.send((finished, finished if began is None else began, error, correct))
    finally:
        for averager in averagers.values():
            averager.shutdown()
        dht.shutdown()


def recv(conn: Connection) -> object:
    """The next reply of a peer process; TimeoutError if it stays silent."""
    if not conn.poll(REPLY_TIMEOUT_S):
        raise TimeoutError(f"no reply from a hivemind peer process in {REPLY_TIMEOUT_S:.0f} s")
    return conn.recv()


def hivemind_round(conns: Sequence[Connection], key: tuple[int, int], round_no: int, into: Rounds,
                   timed: bool) -> None:
    """Load fresh gradients on every peer, then run one step, timed from "go" to the last finish;
    failures and wrong results are recorded in warm-up rounds too."""
    for c in conns:
        c.send(("load", key, round_no))
    for c in conns:
        recv(c)
    start = time.monotonic()
    for c in conns:
        c.send(("step", key, round_no))
    replies = [recv(c) for c in conns]
    errors = [error for _, _, error, _ in replies if error is not None]
    if errors:
        into.errors.append(errors[0])
        return
    into.wrong += sum(not correct for *_, correct in replies)
    if timed:
        into.seconds.append(max(finished for finished, *_ in replies) - start)
        into.matchmaking.append(max(began for _, began, *_ in replies) - start)


@contextmanager
def hivemind_peers(n: int, sizes: Sequence[float],
                   matchmaking: Sequence[tuple[float, float]]) -> Iterator[list[Connection]]:
    """Spawn n hivemind peer processes (rank 0 bootstraps the DHT); reap every one on exit."""
    ctx = mp.get_context("spawn")
    procs: list[BaseProcess] = []
    conns: list[Connection] = []

    def start(rank: int, initial_peers: list[str] | None) -> None:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=hivemind_peer, name=f"hivemind-peer-{rank}",
                           args=(rank, n, initial_peers, sizes, matchmaking, theirs))
        proc.start()
        theirs.close()
        procs.append(proc)
        conns.append(ours)

    try:
        start(0, None)
        initial_peers = recv(conns[0])
        for rank in range(1, n):
            start(rank, initial_peers)
        for c in conns:
            if recv(c) != "ready":
                raise RuntimeError("a hivemind peer process failed to start")
        yield conns
    finally:
        for c in conns:
            with suppress(OSError):
                c.send(None)
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
            with suppress(ProcessLookupError):  # whatever is left of the peer's process group
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.is_alive():
                proc.kill()
            proc.join()


# ---------------------------------------------------------------------------------------- dask


class DaskPeer:
    """Actor holding one peer's gradients: a tensor list per benchmark size."""

    def __init__(self, rank: int, n: int, sizes: Sequence[float]) -> None:
        torch.set_num_threads(1)
        self.rank, self.n = rank, n
        self.bases = [base_tensors(tensor_numels(mb)) for mb in sizes]
        self.grads = [[torch.empty_like(b) for b in base] for base in self.bases]

    async def load(self, size: int, round_no: int) -> None:
        """Write this round's fresh gradients."""
        fill_gradients(self.grads[size], self.bases[size], self.rank, round_no)

    async def gradients(self, size: int) -> list[torch.Tensor]:
        """This peer's gradients."""
        return self.grads[size]

    async def apply(self, size: int, summed: list[torch.Tensor]) -> None:
        """Replace the gradients by summed / n."""
        for g, s in zip(self.grads[size], summed):
            torch.div(s, self.n, out=g)

    async def verify(self, size: int, round_no: int) -> bool:
        """Whether the gradients are the true mean of this round."""
        return is_mean(self.grads[size], self.bases[size], self.n, round_no)


class DaskHub:
    """Actor that runs the star all-reduce over the peer actors."""

    def __init__(self) -> None:
        torch.set_num_threads(1)
        self.peers: list[Actor] = []

    async def connect(self, peers: list[Actor]) -> None:
        """Take the peer actor handles, in rank order."""
        self.peers = peers

    async def round(self, size: int) -> None:
        """Gather every peer's gradients, sum them in rank order, send the sum to every peer."""
        grads = await asyncio.gather(*(p.gradients(size) for p in self.peers))
        summed = [t.clone() for t in grads[0]]
        for other in grads[1:]:
            for s, t in zip(summed, other):
                s.add_(t)
        await asyncio.gather(*(p.apply(size, summed) for p in self.peers))


def dask_round(hub: Actor, peers: Sequence[Actor], size: int, round_no: int, into: Rounds,
               timed: bool) -> None:
    """Load fresh gradients, time hub.round() as the driver sees it, then check every peer."""
    for future in [p.load(size, round_no) for p in peers]:
        future.result()
    start = time.monotonic()
    hub.round(size).result()
    seconds = time.monotonic() - start
    correct = [future.result() for future in [p.verify(size, round_no) for p in peers]]
    into.wrong += sum(not ok for ok in correct)
    if timed:
        into.seconds.append(seconds)


@contextmanager
def dask_actors(n: int, sizes: Sequence[float]) -> Iterator[tuple[Actor, list[Actor]]]:
    """LocalCluster of n+1 worker processes, n pinned peer actors and the hub; closed on exit."""
    with (LocalCluster(n_workers=n + 1, threads_per_worker=1, processes=True, host="127.0.0.1",
                       dashboard_address=None, silence_logs=logging.ERROR) as cluster,
          Client(cluster) as client):
        client.wait_for_workers(n + 1)
        workers = sorted(cluster_workers(client))
        peer_futures = [client.submit(DaskPeer, rank, n, sizes, actor=True, workers=[workers[rank]],
                                      allow_other_workers=False, key=f"peer-{rank}")
                        for rank in range(n)]
        hub_future = client.submit(DaskHub, actor=True, workers=[workers[n]],
                                   allow_other_workers=False, key="hub")
        peers = [f.result() for f in peer_futures]
        hub = hub_future.result()
        hub.connect(peers).result()
        yield hub, peers


# ---------------------------------------------------------------------------------------- main


def run_peers(n: int, sizes: Sequence[float], matchmaking: Sequence[tuple[float, float]],
              repeats: int, big_repeats: int) -> dict[Key, Rounds]:
    """Every cell for n peers: both systems up at once, one size after another, their rounds
    interleaved (each round: every hivemind setting, then dask)."""
    methods = [f"hivemind, mm {min_time:g} s" for min_time, _ in matchmaking]
    results = {(m, n, mb): Rounds() for m in [*methods, "dask hub"] for mb in sizes}
    with hivemind_peers(n, sizes, matchmaking) as conns, dask_actors(n, sizes) as (hub, peers):
        for s, mb in enumerate(sizes):
            for round_no in range(WARMUP + repeats):
                timed = round_no >= WARMUP
                if round_no < WARMUP + (big_repeats if mb >= BIG_MB else repeats):
                    for m, method in enumerate(methods):
                        hivemind_round(conns, (s, m), round_no, results[method, n, mb], timed)
                dask_round(hub, peers, s, round_no, results["dask hub", n, mb], timed)
    return results


def table(results: dict[Key, Rounds]) -> str:
    """Markdown table: median and max round seconds, bandwidth, matchmaking, failures."""
    columns = ["method", "peers", "MB/peer", "rounds", "median s", "MB/s", "matchmaking s", "max s",
               "failed", "wrong"]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for (method, n, mb), r in sorted(results.items(), key=lambda kv: kv[0][1:] + kv[0][:1]):
        cells = "- | - | - | -"
        if r.seconds:
            median = statistics.median(r.seconds)
            mm = f"{statistics.median(r.matchmaking):.3f}" if r.matchmaking else "-"
            cells = f"{median:.3f} | {mb / median:.1f} | {mm} | {max(r.seconds):.3f}"
        lines.append(f"| {method} | {n} | {mb:g} | {len(r.seconds)} | {cells} | {len(r.errors)} "
                     f"| {r.wrong} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per cell")
    parser.add_argument("--big-repeats", type=int, default=4,
                        help=f"timed hivemind rounds at sizes >= {BIG_MB} MB")
    parser.add_argument("--sizes", default="0.5,16,100", help="MB of float32 per peer, comma list")
    parser.add_argument("--peers", default="2,4", help="peer counts, comma-separated")
    parser.add_argument("--fast-matchmaking", type=float, default=0.2,
                        help="smallest min_matchmaking_time (s) that formed the group reliably")
    args = parser.parse_args()
    sizes = [float(x) for x in args.sizes.split(",")]
    peer_counts = [int(x) for x in args.peers.split(",")]
    matchmaking = [DEFAULT_MATCHMAKING, (args.fast_matchmaking, args.fast_matchmaking / 2)]
    results: dict[Key, Rounds] = {}
    for n in peer_counts:
        results.update(run_peers(n, sizes, matchmaking, args.repeats, args.big_repeats))
    print(table(results))
    for (method, n, mb), r in results.items():
        for error in sorted(set(r.errors)):
            print(f"{method}, N={n}, {mb:g} MB: {r.errors.count(error)} rounds failed with {error}")
    n, mb = max(peer_counts), min(sizes, key=lambda x: abs(x - 16))
    dask = statistics.median(results["dask hub", n, mb].seconds)
    hivemind = min((statistics.median(r.seconds) for (m, k, x), r in results.items()
                    if m.startswith("hivemind") and (k, x) == (n, mb) and r.seconds),
                   default=float("inf"))
    print(f"averaging_choice={'dask' if dask < hivemind else 'hivemind'} "
          f"dask_over_hivemind={hivemind / dask:.2f}")


if __name__ == "__main__":
    main()
