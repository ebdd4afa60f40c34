"""ATOM's baselines in virtual time: GPipe and PipeDream pipelines of P devices (§V, Figures
14-16), and the global-batch time of ATOM's replicas against pipelines (Fig. 16).

The model is cut into P stages of consecutive layers, one stage per device. Between stage s and
s + 1 a link carries each microbatch's activations forward and their gradients back (the cut
layer's `out_bytes` both ways): a send starts when the tensor is computed and the link direction is
free, occupies the link for bytes x 8 / bandwidth (one send at a time per direction, full duplex)
and arrives `latency_s` later. Sends overlap compute: a device computes the next microbatch while
the previous one is on the wire. A stage's forward or backward of one microbatch takes the sum of
its layers' `fwd_s` / `bwd_s`. Device -> host copies for serialization (gRPC in the ATOM paper) are not
modelled; fold them into the bandwidth.

The two schedules differ only in the order each device runs its work; one executor runs both:

- GPipe: M microbatches all forward, then all backward (last first), then a flush: the next
  iteration starts when every backward is done. Per minibatch: iteration / M.
- PipeDream (1F1B): stage s runs P - s forwards, then alternates one backward and one forward,
  with no flush (weight stashing keeps it correct); a stream of microbatches. Per minibatch: the
  time between completions (stage 0's backward) in the middle half of the stream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labkit.config import ConfigError
from labkit.plan.atom_profile import LayerCost, check_profile
from labkit.sim.atom import Interval, Overheads, Timeline, atom_timeline, check_sizes, layer_groups, summarize

SCHEDULES = ("atom", "gpipe", "pipedream")


def _check_link(owner: str, bandwidth_bps: float, latency_s: float) -> None:
    if isinstance(bandwidth_bps, bool) or not isinstance(bandwidth_bps, (int, float)) or not bandwidth_bps > 0:
        raise ConfigError(owner, "bandwidth_bps", bandwidth_bps, "a number > 0 (math.inf: a free link)")
    if isinstance(latency_s, bool) or not isinstance(latency_s, (int, float)) or not (math.isfinite(latency_s) and latency_s >= 0):
        raise ConfigError(owner, "latency_s", latency_s, "a finite number >= 0")


def _check_count(owner: str, name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(owner, name, value, "an integer >= 1")


def balanced_stages(profile: Sequence[LayerCost], devices: int) -> tuple[int, ...]:
    """Layers per stage for `devices` stages of consecutive layers with the smallest largest
    stage compute (fwd_s + bwd_s); cuts between blocks all move the same tensor, so this is the
    ATOM paper's "optimally partitioned" baseline. Ties leave the later stages the larger."""
    layers = check_profile(profile)
    _check_count("balanced_stages", "devices", devices)
    n = len(layers)
    if devices > n:
        raise ConfigError("balanced_stages", "devices", devices, f"at most the profile's {n} layers")
    prefix = [0.0]
    for x in layers:
        prefix.append(prefix[-1] + x.fwd_s + x.bwd_s)
    # best[p][i]: (largest stage, cuts) of the first i layers on p stages
    best: list[dict[int, tuple[float, tuple[int, ...]]]] = [{0: (0.0, ())}]
    for p in range(1, devices + 1):
        best.append({i: min(((max(best[p - 1][j][0], prefix[i] - prefix[j]), best[p - 1][j][1] + (i - j,))
                             for j in range(p - 1, i) if j in best[p - 1]), key=lambda c: c[0])
                     for i in range(p, n - devices + p + 1)})
    return best[devices][n][1]


def _execute(layers: tuple[LayerCost, ...], stages: tuple[int, ...], orders: list[list[tuple[str, int]]],
             bandwidth_bps: float, latency_s: float) -> tuple[list[Interval], dict[int, float]]:
    """`run_orders` with each stage's seconds summed from its layers and every cut carrying the cut
    layer's `out_bytes` over one link of `bandwidth_bps` and `latency_s`."""
    groups = layer_groups(layers, stages)
    seconds = {"fwd": [sum(x.fwd_s for x in g) for g in groups], "bwd": [sum(x.bwd_s for x in g) for g in groups]}
    wire = [g[-1].out_bytes * 8.0 / bandwidth_bps for g in groups[:-1]]
    return run_orders(orders, seconds, wire, [latency_s] * len(wire))


def run_orders(orders: Sequence[Sequence[tuple[str, int]]], seconds: Mapping[str, Sequence[float]],
               wire: Sequence[float], latency: Sequence[float]) -> tuple[list[Interval], dict[int, float]]:
    """Run each device's `orders` ("fwd" or "bwd", microbatch) as soon as its inputs are in: a pass
    holds device s `seconds[phase][s]`; what it hands on occupies that direction of the link
    between s and s + 1 `wire[s]` seconds (one send at a time, FIFO) and arrives `latency[s]` later;
    the last stage's forward turns into its backward there. Returns the intervals and, per
    microbatch, when stage 0 finished its backward."""
    n_dev = len(orders)
    arrived: dict[tuple[str, int, int], float] = {}  # (phase, stage, microbatch) -> input on the device
    link_free = {(s, phase): 0.0 for s in range(n_dev - 1) for phase in ("fwd", "bwd")}
    device_free = [0.0] * n_dev
    position = [0] * n_dev
    intervals: list[Interval] = []
    done: dict[int, float] = {}
    while any(position[s] < len(orders[s]) for s in range(n_dev)):
        progressed = False
        for s in range(n_dev):
            while position[s] < len(orders[s]):
                phase, m = orders[s][position[s]]
                ready = 0.0 if phase == "fwd" and s == 0 else arrived.get((phase, s, m))
                if ready is None:
                    break
                start = max(device_free[s], ready)
                end = device_free[s] = start + seconds[phase][s]
                intervals.append(Interval("compute", s, s, phase, m, start, end))
                position[s] += 1
                progressed = True
                target = s + 1 if phase == "fwd" else s - 1
                if phase == "fwd" and s == n_dev - 1:
                    arrived["bwd", s, m] = end  # the loss turns around on the last stage
                elif target < 0:
                    done[m] = end
                else:
                    cut = min(s, target)
                    send = max(end, link_free[cut, phase])
                    link_free[cut, phase] = send + wire[cut]
                    arrived[phase, target, m] = send + wire[cut] + latency[cut]
                    intervals.append(Interval("send", s, cut, phase, m, send, send + wire[cut] + latency[cut]))
        if not progressed:
            raise RuntimeError(f"pipeline orders deadlock at positions {position}")
    return intervals, done


def _pipeline_args(owner: str, profile: Sequence[LayerCost], stages: Sequence[int], microbatches: int,
                   bandwidth_bps: float, latency_s: float) -> tuple[tuple[LayerCost, ...], tuple[int, ...]]:
    layers = check_profile(profile)
    _check_count(owner, "microbatches", microbatches)
    _check_link(owner, bandwidth_bps, latency_s)
    return layers, check_sizes(stages, len(layers), owner)


def gpipe_timeline(profile: Sequence[LayerCost], stages: Sequence[int], microbatches: int, bandwidth_bps: float,
                   latency_s: float = 0.0) -> Timeline:
    """One GPipe iteration of `microbatches` microbatches (every iteration is the same: a flush
    separates them); `stages`: layers per device."""
    layers, stages = _pipeline_args("gpipe_timeline", profile, stages, microbatches, bandwidth_bps, latency_s)
    order = [("fwd", m) for m in range(microbatches)] + [("bwd", m) for m in reversed(range(microbatches))]
    intervals, _ = _execute(layers, stages, [order] * len(stages), bandwidth_bps, latency_s)
    makespan = max(iv.end for iv in intervals)
    return summarize("gpipe", intervals, len(stages), (0.0, makespan), microbatches)


def pipedream_timeline(profile: Sequence[LayerCost], stages: Sequence[int], microbatches: int, bandwidth_bps: float,
                       latency_s: float = 0.0) -> Timeline:
    """A PipeDream (1F1B) stream of `microbatches` microbatches; the window is its middle half
    (completions n//4 to n - n//4 at stage 0), clear of the fill and the drain once n >= 8P."""
    layers, stages = _pipeline_args("pipedream_timeline", profile, stages, microbatches, bandwidth_bps, latency_s)
    n_dev = len(stages)
    orders = []
    for s in range(n_dev):
        warm = min(n_dev - s, microbatches)
        order = [("fwd", m) for m in range(warm)]
        for m in range(microbatches):
            order.append(("bwd", m))
            if warm + m < microbatches:
                order.append(("fwd", warm + m))
        orders.append(order)
    intervals, done = _execute(layers, stages, orders, bandwidth_bps, latency_s)
    times = [0.0] + [done[m] for m in range(microbatches)]
    lo, hi = microbatches // 4, microbatches - microbatches // 4
    return summarize("pipedream", intervals, n_dev, (times[lo], times[hi]), hi - lo)


def ring_allreduce_s(nbytes: float, peers: int, bandwidth_bps: float, latency_s: float = 0.0) -> float:
    """Ring all-reduce of `nbytes` over `peers` devices, each on its own link: reduce-scatter then
    all-gather, 2(n-1) steps of nbytes / n each."""
    if peers <= 1:
        return 0.0
    return 2.0 * (peers - 1) / peers * nbytes * 8.0 / bandwidth_bps + 2.0 * (peers - 1) * latency_s


@dataclass(frozen=True)
class BatchTime:
    """Seconds one global batch takes under one schedule: forward and backward of every
    minibatch, the all-reduce, the optimizer step (in that order, none overlapped)."""

    schedule: str
    compute_s: float
    allreduce_s: float
    optimizer_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.allreduce_s + self.optimizer_s


def global_batch_time(profile: Sequence[LayerCost], *, atom_sizes: Sequence[int], stages: Sequence[int],
                      accumulation: int, microbatches: int, gpus: int, bandwidth_bps: float, latency_s: float = 0.0,
                      global_batch: int = 256, budget_bytes: float = math.inf, host_optimizer_bps: float = 1e9,
                      device_optimizer_bps: float = 5e10, atom_overheads: Overheads | None = None) -> dict[str, BatchTime]:
    """Fig. 16: `global_batch` minibatches on `gpus` devices, per schedule name in SCHEDULES.

    ATOM: every device a replica that runs ceil(G / gpus) minibatches, rounded up to whole
    iterations of C, from a cold start (the host optimizer step changed every sub-model, so
    sub-model 1 is loaded afresh), the stash on the host and `atom_overheads` on its compute
    stream; then a ring all-reduce of the whole model over all devices and Adam on the host at
    `host_optimizer_bps` bytes of parameters per second (default 1e9: 5e8 fp16 parameters/s,
    PyTorch's CPU AdamW on a many-core host, a guess). Pipelines: gpus / P
    replicas of one P-device pipeline (`gpus` a multiple of P), each running ceil(G / replicas)
    minibatches (GPipe: whole iterations of `microbatches`), then every stage all-reduces its own
    parameters over the replicas (stage rings in parallel, each device on its own link) and steps
    Adam on its device at `device_optimizer_bps` (default 5e10: a V100-class GPU's memory
    bandwidth over ~36 bytes touched per fp16 parameter, a guess)."""
    layers = check_profile(profile)
    stages = check_sizes(stages, len(layers), "global_batch_time")
    _check_link("global_batch_time", bandwidth_bps, latency_s)
    for name, value in (("gpus", gpus), ("global_batch", global_batch), ("accumulation", accumulation)):
        _check_count("global_batch_time", name, value)
    if gpus % len(stages):
        raise ConfigError("global_batch_time", "gpus", gpus, f"a multiple of the {len(stages)} pipeline stages")
    model_bytes = sum(x.param_bytes for x in layers)
    share = math.ceil(global_batch / gpus)
    atom = atom_timeline(layers, atom_sizes, accumulation, budget_bytes=budget_bytes,
                         iterations=math.ceil(share / accumulation), overheads=atom_overheads)
    out = {"atom": BatchTime("atom", atom.makespan_s, ring_allreduce_s(model_bytes, gpus, bandwidth_bps, latency_s),
                             model_bytes / host_optimizer_bps)}
    replicas = gpus // len(stages)
    per_pipeline = math.ceil(global_batch / replicas)
    stage_bytes = max(sum(x.param_bytes for x in g) for g in layer_groups(layers, stages))
    allreduce = ring_allreduce_s(stage_bytes, replicas, bandwidth_bps, latency_s)
    gpipe = gpipe_timeline(layers, stages, microbatches, bandwidth_bps, latency_s)
    compute = {"gpipe": math.ceil(per_pipeline / microbatches) * gpipe.makespan_s,
               "pipedream": pipedream_timeline(layers, stages, per_pipeline, bandwidth_bps, latency_s).makespan_s}
    for name, seconds in compute.items():
        out[name] = BatchTime(name, seconds, allreduce, stage_bytes / device_optimizer_bps)
    return out
