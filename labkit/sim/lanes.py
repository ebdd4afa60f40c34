"""One step of a synchronous pipeline's lane in virtual time: what the real pipeline executor does
in a world (labkit/executors/pipeline), priced by the same device tables and links.

A lane runs its microbatches through its stages, each stage in its given order (the executor's
schedule: 1F1B or GPipe, the last stage's forward, loss and backward as one request). A request
starts once its input has arrived and its device is free, and holds the device its seconds. What
it hands on (activations up, their gradients down) leaves when it is computed, through that
direction's token bucket of the link between the two stages (FIFO behind earlier hand-offs, as
the runtime's `Link`), and arrives half the link's round trip later. The lane's step ends when its
last request does; the run's step adds the boundary (the lanes' gradient sum and the optimizer
step), which this does not price."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.sim.links import TokenBucket

FORWARD, BACKWARD, LAST = "forward", "backward", "last"  # the executor's request kinds


def lane_seconds(orders: Sequence[Sequence[tuple[str, int]]], seconds: Mapping[str, Sequence[float]],
                 links: Sequence[tuple[float, float]], nbytes: float) -> float:
    """The seconds one lane takes for its share of a step.

    orders[s]: stage s's requests in turn, as (kind, microbatch index); seconds[kind][s]: what a
    request of that kind takes at stage s on the lane's device there; links[s]: (round trip s,
    bytes/s) between stage s and s + 1; nbytes: what one hand-off carries, either way."""
    stages = len(orders)
    if len(links) != stages - 1:
        raise ValueError(f"links has {len(links)} entries: {stages - 1} allowed (one between each two stages)")
    buckets = {(cut, up): TokenBucket(rate=rate) for cut, (_, rate) in enumerate(links) for up in (True, False)}
    arrived: dict[tuple[str, int, int], float] = {}  # (what, stage, microbatch) -> when it is at that stage
    free, position, end = [0.0] * stages, [0] * stages, 0.0
    while any(position[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while position[s] < len(orders[s]):
                kind, mb = orders[s][position[s]]
                ready = 0.0 if kind == FORWARD and s == 0 else arrived.get(("grad" if kind == BACKWARD else "act", s, mb))
                if ready is None:
                    break
                done = free[s] = max(free[s], ready) + seconds[kind][s]
                position[s], progressed, end = position[s] + 1, True, max(end, done)
                target = s + 1 if kind == FORWARD else s - 1
                if 0 <= target < stages:
                    cut = min(s, target)
                    wire = buckets[cut, target > s].send(nbytes, done)
                    arrived["act" if target > s else "grad", target, mb] = done + wire + links[cut][0] / 2
        if not progressed:
            raise ValueError(f"the orders deadlock: stages wait at requests {position}")
    return end
