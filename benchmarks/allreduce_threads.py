"""Whether a gloo group forms among threads of ONE process (the in-process backend's peers are
threads): two threads, each building a `ProcessGroupGloo` of 2 on a store and all-reducing once,
on one `HashStore` both share, and on one `TCPStore` client each (one client object is one
connection: two threads waiting on it at once break it). Part of `benchmarks/allreduce.py`; also
runs on its own.

    python -m benchmarks.allreduce_threads
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

HOST = "127.0.0.1"
TIMEOUT = datetime.timedelta(seconds=10)  # a rendezvous that does not complete fails in this long
WAYS = ("one HashStore shared", "a TCPStore client per thread")


def _stores(way: str) -> Callable[[], dist.Store]:
    """What each thread calls for its store, for one way of sharing it."""
    if way == "one HashStore shared":
        shared: dist.Store = dist.HashStore()
        return lambda: shared
    master = dist.TCPStore(HOST, 0, None, True, TIMEOUT, wait_for_workers=False)
    return lambda: dist.TCPStore(HOST, master.port, None, False, TIMEOUT)


def attempt(way: str) -> str:
    """"works" if both threads' all-reduce of 1 + 2 gives 3, else each thread's error."""
    store = _stores(way)
    outcome: dict[int, str] = {}

    def member(rank: int) -> None:
        try:
            group = dist.ProcessGroupGloo(dist.PrefixStore(way, store()), rank, 2, TIMEOUT)
            x = torch.full((1000,), float(rank + 1))
            group.allreduce([x]).wait()
            outcome[rank] = "ok" if bool((x == 3).all()) else "a wrong sum"
        except RuntimeError as exc:  # c10d and gloo errors: what happened is the finding
            outcome[rank] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"

    threads = [threading.Thread(target=member, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if all(outcome.get(r) == "ok" for r in range(2)):
        return "works"
    return "; ".join(f"thread {r}: {outcome.get(r)}" for r in range(2))


def report() -> list[str]:
    """One line per way of sharing the store."""
    return [f"gloo among 2 threads of one process, {way}: {attempt(way)}" for way in WAYS]


if __name__ == "__main__":
    print("\n".join(report()))
