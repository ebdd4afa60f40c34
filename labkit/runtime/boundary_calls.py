"""The step boundary's requests to peers: sent to all at once, answered within their kind's
deadline (learnt from earlier boundaries, `labkit.swarm.deadline`) or the peer is to be evicted,
with where the time went and the tensor bytes that crossed the coordinator (`BoundaryTimes`,
reported with the step event)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed
from typing import Any, Protocol

from labkit.runtime.links import payload_bytes
from labkit.runtime.ports import PeerHandle
from labkit.runtime.request_queue import timing


class Evictions(Protocol):
    """Where `Calls` records a peer that failed a request, and what the deadlines learn: the
    seconds each kind of request took when every peer answered it, and the kinds whose
    deadline passed (the boundary's `Commit`)."""

    evict: dict[str, str]
    took: dict[str, float]
    late: set[str]


class BoundaryTimes:
    """Where one boundary's time goes: wall seconds the boundary waited on each request sent to
    the peers (named by its method), per request the slowest peer's queue + compute (the rest is
    transport), and the bytes of tensors in the requests and answers (what crossed the
    coordinator). Reported with the step event as its "boundary"."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.peer_seconds: dict[str, float] = {}
        self.tensor_bytes = 0

    def add(self, name: str, start: float, futures: Sequence[Future] = ()) -> None:
        """Count the seconds since `start` under `name`, and the slowest of `futures`' peers."""
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        served = [t["queue"] + t["compute"] for t in map(timing, futures) if t]  # a failed request has none
        if served:
            self.peer_seconds[name] = self.peer_seconds.get(name, 0.0) + max(served)

    def report(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "peer_seconds": self.peer_seconds, "tensor_bytes": self.tensor_bytes,
                "total": time.perf_counter() - self.start}


class Sent:
    """Requests of one method sent to peers, not yet answered: (peer, future) pairs."""

    def __init__(self, method: str, futures: list[tuple[PeerHandle, Future]], start: float, kind: str) -> None:
        self.method, self.futures, self.start, self.kind = method, futures, start, kind


class Calls:
    """The boundary's requests to peers: sent all at once, each answered within its kind's
    `deadline(kind)` seconds or its peer is to be evicted (`commit.evict`); their seconds and
    tensor bytes go in `times`."""

    def __init__(self, commit: Evictions, deadline: Callable[[str], float]) -> None:
        self.commit, self.deadline, self.times = commit, deadline, BoundaryTimes()

    def send(self, method: str, calls: list[tuple[PeerHandle, tuple]], kind: str | None = None) -> Sent:
        """Call `method` on each peer with its arguments, all at once, without waiting; `kind`
        names its deadline (default: the method)."""
        start = time.perf_counter()
        self.times.tensor_bytes += payload_bytes([args for _, args in calls])
        return Sent(method, [(p, p.call(method, *args)) for p, args in calls], start, kind or method)

    def collect(self, sent: Sent, watch: Callable[[Any], str | None] | None = None,
                abort: Callable[[str], None] | None = None, scale: float = 1.0) -> list[Any]:
        """The answers of `sent` within `scale` times its kind's deadline, None in place of a peer
        that failed or timed out. The first failure, or answer `watch` objects to, calls `abort`
        (the others need not wait for it). The seconds of a request every peer answered in time
        teach its deadline (`commit.took`); one that timed out backs it off (`commit.late`)."""
        futures = [f for _, f in sent.futures]
        troubled, failed = abort is None, False
        timeout = scale * self.deadline(sent.kind)
        try:
            for f in as_completed(futures, timeout=timeout):
                if (why := _failed(f, watch)) is not None:
                    failed = True
                    if not troubled:
                        abort(why)
                        troubled = True
        except TimeoutError:
            failed = True
            self.commit.late.add(sent.kind)
            if not troubled:
                abort(f"a peer did not answer {sent.method} within {timeout:g} s")
        if not failed:
            took = time.perf_counter() - sent.start
            self.commit.took[sent.kind] = max(self.commit.took.get(sent.kind, 0.0), took)
        results = []
        for p, f in sent.futures:
            try:
                results.append(f.result(timeout=0))
            except Exception as exc:
                self.commit.evict.setdefault(p.name, f"{sent.method} failed at the step boundary: "
                                                     f"{type(exc).__name__}: {exc}")
                results.append(None)
        self.times.tensor_bytes += payload_bytes(results)
        self.times.add(sent.method, sent.start, futures)
        return results

    def gather(self, method: str, calls: list[tuple[PeerHandle, tuple]]) -> list[Any]:
        """Call `method` on each peer and wait for every answer (see `collect`)."""
        return self.collect(self.send(method, calls))

    def alive(self, peers: list[PeerHandle]) -> list[PeerHandle]:
        """`peers` less those that failed a request of this boundary."""
        return [p for p in peers if p.name not in self.commit.evict]


def _failed(future: Future, watch: Callable[[Any], str | None] | None) -> str | None:
    """Why the done `future` is trouble: its error, or what `watch` says of its answer."""
    exc = future.exception()
    if exc is not None:
        return f"{type(exc).__name__}: {exc}"
    return None if watch is None else watch(future.result())


