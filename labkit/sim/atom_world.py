"""ATOM's replicas in a world, in virtual time: the step they make together.

A replica on a virtual device computes the world's whole model, one microbatch at a time, in the
simulator's service times of a one-stage world; sub-model loads are taken as hidden behind that
compute, which ATOM's partition search requires of every cut (C x its compute >= the next one's
load). At the global batch the replicas' gradients go round a ring over the world's links
(`labkit.sim.pipelines.ring_allreduce_s`). `atom_step_seconds` deals a step's microbatches as the
runtime's ledger does: a free replica takes up to C of those left; the step ends when the last is
done, and the ring follows.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from labkit.config import ConfigError


def atom_step_seconds(per_microbatch: Sequence[float], microbatches: int, accumulation: int,
                      exchange_s: float) -> float:
    """Seconds one global batch takes: replica r needs `per_microbatch[r]` a microbatch; whenever
    one is free it takes up to `accumulation` of the step's `microbatches` left (lowest index first
    on a tie, as the runtime's replicas start in order), and when every microbatch is done the
    gradients are exchanged (`exchange_s`)."""
    owner = "atom_step_seconds"
    if not per_microbatch or not all(math.isfinite(x) and x >= 0 for x in per_microbatch):
        raise ConfigError(owner, "per_microbatch", per_microbatch, "one finite time >= 0 per replica, at least one")
    for name, value in (("microbatches", microbatches), ("accumulation", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(owner, name, value, "an integer >= 1")
    if not (math.isfinite(exchange_s) and exchange_s >= 0):
        raise ConfigError(owner, "exchange_s", exchange_s, "a finite number of seconds >= 0")
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
