"""One step of a synchronous pipeline's lane in virtual time: what the real pipeline executor does
in a world (labkit/executors/pipeline), priced by the same device tables and links.

A lane runs its microbatches through its stages, each stage in its given order (the executor's
schedule: 1F1B or GPipe, the last stage's forward, loss and backward as one request). The timeline
is `pipelines.run_orders`, the one ATOM's baselines run on: a request starts once its input has
arrived and its device is free; what it hands on (activations up, their gradients down) leaves
through its direction of the link between the two stages, one at a time (as the runtime's `Link`'s
token bucket sends them), and arrives half the link's round trip later. The lane's step ends with
its last request; the run's step adds the boundary (the lanes' gradient sum and the optimizer
step), which this does not price."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.pipeline.schedule import BACKWARD, FORWARD, LAST
from labkit.sim.pipelines import run_orders


def lane_seconds(orders: Sequence[Sequence[tuple[str, int]]], seconds: Mapping[str, Sequence[float]],
                 links: Sequence[tuple[float, float]], nbytes: float) -> float:
    """The seconds one lane takes for its share of a step.

    orders[s]: stage s's requests in turn, as (kind, microbatch index); seconds[kind][s]: what a
    request of that kind takes at stage s on the lane's device there; links[s]: (round trip s,
    bytes/s) between stage s and s + 1; nbytes: what one hand-off carries, either way."""
    stages = len(orders)
    if len(links) != stages - 1:
        raise ValueError(f"links has {len(links)} entries: {stages - 1} allowed (one between each two stages)")
    # the last stage's one request is its forward (all of its seconds) turning into a backward of none
    phases = {FORWARD: ("fwd",), BACKWARD: ("bwd",), LAST: ("fwd", "bwd")}
    passes = [[(phase, mb) for kind, mb in order for phase in phases[kind]] for order in orders]
    last = stages - 1
    timed = {"fwd": [*seconds[FORWARD][:last], seconds[LAST][last]], "bwd": [*seconds[BACKWARD][:last], 0.0]}
    intervals, _ = run_orders(passes, timed, [nbytes / rate for _, rate in links], [rtt / 2 for rtt, _ in links])
    return max(iv.end for iv in intervals if iv.kind == "compute")
