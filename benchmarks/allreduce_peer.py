"""The peer processes of `benchmarks/allreduce.py`: each holds gradients and sums them with the
others by one of three methods (star through the driver, labkit's ring, a gloo process group).

A peer is a process forked from a forkserver (1 torch thread) serving requests on a
`SocketServer` (labkit's TCP data plane, runtime/sockets.py) on 127.0.0.1. Ring chunks (`post`)
and aborts go into the peer's `Mailbox` at once, on the reading thread (`runtime/ring.deliver`);
every other request runs in order on the peer's one work thread, which may block inside a ring
or a gloo all-reduce.
"""

from __future__ import annotations

import datetime
import itertools
import math
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue

import torch
import torch.distributed as dist

from labkit.runtime.ring import IMMEDIATE as RING_TRAFFIC
from labkit.runtime.ring import Mailbox, deliver, ring_allreduce
from labkit.runtime.sockets import SocketClient, SocketServer

HOST = "127.0.0.1"
TIMEOUT_S = 120.0  # a peer that does not start, answer or deliver a chunk in this long fails the run
IMMEDIATE = (*RING_TRAFFIC, "hello", "stop")  # requests taken on the reading thread, never queued

Shapes = list[tuple[int, ...]]
_GROUPS = itertools.count()  # each `peers` forms its gloo group under a fresh store prefix


def died(rank: int) -> Callable[[], Exception]:
    """The error a request to peer `rank` fails with once its connection breaks."""
    return lambda: ConnectionError(f"peer {rank} died")


class Peer:
    """One peer process's gradients (a tensor list per size), its place in the ring and its gloo
    group. `origin` is its rank at start, which its gradients depend on; `rank` and `n` are its
    place in the current ring or group (they change when the survivors of a kill re-form)."""

    def __init__(self, origin: int, n: int, sizes: Sequence[Shapes]) -> None:
        self.origin, self.rank, self.n = origin, origin, n
        self.bases = [[torch.randn(shape, generator=torch.Generator().manual_seed(100 * s + i))
                       for i, shape in enumerate(shapes)] for s, shapes in enumerate(sizes)]
        self.grads = [[torch.empty_like(b) for b in base] for base in self.bases]
        self.work = ThreadPoolExecutor(1, thread_name_prefix=f"peer{origin}")
        self.mailbox = Mailbox()
        self.right: SocketClient | None = None
        self.links: dict[str, SocketClient] = {}  # right neighbours' addresses -> open clients
        self.store: dist.TCPStore | None = None
        self.group: dist.ProcessGroupGloo | None = None
        self.parked = threading.Event()
        self.stopped = threading.Event()  # set by the driver's "stop": the process then ends

    def serve(self, method: str, args: tuple) -> Future:
        """The `SocketServer` handler: IMMEDIATE requests at once, the others on the work thread."""
        if method not in IMMEDIATE:
            return self.work.submit(getattr(self, method), *args)
        done: Future = Future()
        if method in RING_TRAFFIC:
            deliver(self.mailbox, method, args, same_process=False)  # a chunk off the wire is ours
        elif method == "stop":
            self.stopped.set()
        done.set_result(None)
        return done

    def link(self, rank: int, n: int, right: str, right_origin: int) -> None:
        """Take place `rank` of a ring of `n` whose right neighbour (peer `right_origin`) serves
        at `right` (a link already open to that address is kept)."""
        self.rank, self.n = rank, n
        if right not in self.links:
            self.links[right] = SocketClient(right, died(right_origin))
            self.links[right].call("hello").result(TIMEOUT_S)
        self.right = self.links[right]

    def join(self, port: int, prefix: str, rank: int, n: int) -> None:
        """Form (with the others, each calling this at once) a gloo group of `n` on the driver's
        TCPStore at `port`, under `prefix`, as `rank`; any earlier group is dropped."""
        if self.store is None:
            self.store = dist.TCPStore(HOST, port, None, False, datetime.timedelta(seconds=TIMEOUT_S))
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=HOST)]
        options._timeout = datetime.timedelta(seconds=TIMEOUT_S)
        self.rank, self.n, self.group = rank, n, None
        self.group = dist.ProcessGroupGloo(dist.PrefixStore(prefix, self.store), rank, n, options)

    def park(self) -> None:
        """Block the work thread until the process ends: the peer that is killed mid-reduce
        (its server still takes chunks, its ring or group waits for it)."""
        self.parked.wait()

    def load(self, size: int, round_no: int) -> None:
        """Write this round's gradients: base * (origin + 1) + origin + round_no."""
        for g, b in zip(self.grads[size], self.bases[size]):
            torch.mul(b, self.origin + 1, out=g).add_(self.origin + round_no)

    def verify(self, size: int, round_no: int, members: Sequence[int]) -> bool:
        """Whether the gradients are the exact sum of the `load`s of the peers whose origins are
        `members`."""
        scale, shift = sum(r + 1 for r in members), sum(members) + len(members) * round_no
        return all(torch.allclose(g, b * scale + shift, rtol=1e-5, atol=1e-4)
                   for g, b in zip(self.grads[size], self.bases[size]))

    def gradients(self, size: int) -> list[torch.Tensor]:
        """Star, first request: this peer's gradients."""
        return self.grads[size]

    def apply(self, size: int, summed: list[torch.Tensor]) -> None:
        """Star, second request: take the coordinator's sum."""
        for g, s in zip(self.grads[size], summed):
            g.copy_(s)

    def _reduce_flat(self, size: int, reduce: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Flatten the gradients of `size` into one tensor, reduce it, copy the result back."""
        grads = self.grads[size]
        summed = reduce(torch.cat([g.reshape(-1) for g in grads]))
        for g, part in zip(grads, summed.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))

    def ring(self, size: int, tag: int) -> None:
        """labkit's ring all-reduce (runtime/ring.py) with the current neighbours, as ring `tag`."""
        right = self.right
        assert right is not None, "link first"

        def send(step: int, chunk: torch.Tensor) -> Future:
            return right.call("post", tag, step, chunk)

        self._reduce_flat(size, lambda flat: ring_allreduce(flat, self.rank, self.n, tag, send,
                                                            self.mailbox, TIMEOUT_S))

    def gloo(self, size: int) -> None:
        """torch.distributed's all-reduce (sum) over the current gloo group."""
        group = self.group
        assert group is not None, "join first"

        def reduce(flat: torch.Tensor) -> torch.Tensor:
            group.allreduce([flat]).wait()
            return flat

        self._reduce_flat(size, reduce)


def peer_main(origin: int, n: int, sizes: Sequence[Shapes], ready: Queue) -> None:
    """Peer process: serve until the driver's "stop" (a request, not a multiprocessing Event:
    setting one waits for every process waiting on it, a killed one included)."""
    torch.set_num_threads(1)
    peer = Peer(origin, n, sizes)
    server = SocketServer(peer.serve, HOST, f"peer{origin}")
    ready.put((origin, server.address))
    peer.stopped.wait()
    server.close()
    os._exit(0)  # a gloo group left mid-operation after a kill must not hold the exit


def wait(futures: Sequence[Future]) -> list:
    """Every future's result, in order."""
    return [f.result(TIMEOUT_S) for f in futures]


class Peers:
    """n running peer processes, the driver's client of each, and their servers' addresses."""

    def __init__(self, procs: list[BaseProcess], clients: list[SocketClient], addresses: list[str]):
        self.procs, self.clients, self.addresses = procs, clients, addresses

    def link(self, members: Sequence[int]) -> None:
        """Link the peers whose origins are `members`, in that order, into a ring."""
        n = len(members)
        rights = [members[(i + 1) % n] for i in range(n)]
        wait([self.clients[m].call("link", i, n, self.addresses[r], r)
              for i, (m, r) in enumerate(zip(members, rights))])

    def join(self, port: int, prefix: str, members: Sequence[int]) -> list[Future]:
        """Ask the peers `members` to form a gloo group under `prefix`; their futures."""
        return [self.clients[m].call("join", port, prefix, i, len(members))
                for i, m in enumerate(members)]


@contextmanager
def peers(n: int, sizes: Sequence[Shapes], store_port: int) -> Iterator[Peers]:
    """n peer processes (forkserver: torch is imported once) linked in a ring and joined in a
    gloo group on the driver's TCPStore at `store_port`; all reaped on exit."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    ready = ctx.Queue()
    procs = [ctx.Process(target=peer_main, args=(r, n, sizes, ready), name=f"peer{r}", daemon=True)
             for r in range(n)]
    clients: list[SocketClient] = []
    try:
        for p in procs:
            p.start()
        found = dict(ready.get(timeout=TIMEOUT_S) for _ in procs)
        addresses = [found[r] for r in range(n)]
        clients = [SocketClient(addresses[r], died(r)) for r in range(n)]
        group = Peers(procs, clients, addresses)
        group.link(range(n))
        wait(group.join(store_port, f"n{n}-{next(_GROUPS)}", range(n)))
        yield group
    finally:
        for c in clients:
            c.call("stop")  # fails at once for a killed peer
            c.close()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()


def payload_mb(shapes: Shapes) -> float:
    """MB (10**6 bytes) of float32 in tensors of `shapes`."""
    return 4 * sum(map(math.prod, shapes)) / 1e6
