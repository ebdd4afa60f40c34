"""ATOM's replicas in a world, in virtual time: what a replica's iteration and the global batch's
all-reduce take on the world's devices and links, and the step they make together.

A replica on a virtual device computes the world's whole model, one microbatch at a time, in
the simulator's service times of a one-stage world (`service_seconds`): C microbatches an
iteration take C x (forward + backward). Sub-model loads are taken as hidden behind that compute,
which ATOM's partition search requires of every sub-model (C x its compute >= the next one's
load). At the global batch the replicas' gradients (the world's model's parameters, in fp16) go
round a ring in replica order over the world's links, reduce-scatter then all-gather: 2(N - 1)
steps, each one chunk of 1/N of the bytes over every hop at once, as long as its slowest hop.
`atom_step_seconds` deals a step's microbatches as the runtime's ledger does: a free replica
takes up to C of those left.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from labkit.config import ConfigError

WIRE_BYTES = 2.0  # bytes a gradient value takes on the wire (fp16)


def ring_allreduce_seconds(hops: Sequence[tuple[float, float]], nbytes: float) -> float:
    """A ring all-reduce of `nbytes` over the ring whose i-th hop (replica i to i + 1, the last
    back to the first) is `hops[i]` = (round trip seconds, bytes per second): 2(N - 1) steps, each
    half the slowest hop's round trip plus 1/N of the bytes through it; 0 for one replica."""
    n = len(hops)
    if n <= 1:
        return 0.0
    if nbytes < 0:
        raise ConfigError("ring_allreduce_seconds", "nbytes", nbytes, "a number of bytes >= 0")
    return 2 * (n - 1) * max(rtt / 2 + nbytes / n / rate for rtt, rate in hops)


def atom_step_seconds(per_microbatch: Sequence[float], microbatches: int, accumulation: int,
                      exchange_s: float) -> float:
    """Seconds one global batch takes: replica r needs `per_microbatch[r]` a microbatch; whenever
    one is free it takes up to `accumulation` of the step's `microbatches` left (lowest index first
    on a tie, as the runtime's replicas start in order), and when every microbatch is done the
    gradients are exchanged (`exchange_s`)."""
    if not per_microbatch:
        raise ConfigError("atom_step_seconds", "per_microbatch", per_microbatch, "one time per replica, at least one")
    for name, value in (("microbatches", microbatches), ("accumulation", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("atom_step_seconds", name, value, "an integer >= 1")
    free = [(0.0, r) for r in range(len(per_microbatch))]
    left, end = microbatches, 0.0
    while left:
        t, r = heapq.heappop(free)
        take = min(accumulation, left)
        left -= take
        done = t + take * per_microbatch[r]
        end = max(end, done)
        heapq.heappush(free, (done, r))
    return end + exchange_s
