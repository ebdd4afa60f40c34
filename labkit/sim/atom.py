"""ATOM's swap schedule (the ATOM paper, §III-C, Fig. 12) in virtual time, and the timeline type the
pipeline baselines (`labkit.sim.pipelines`) share with it.

One device trains a whole model held in host memory, cut into sub-models of consecutive layers
(`sizes`, from the partition search or by hand). Two streams: a compute stream runs the current
sub-model for all C minibatches of the iteration (gradient accumulation, so forward compute grows
to hide loading); a load stream copies the next sub-model host -> device, starting when the
current one starts its turn. Forward runs sub-models 1..K, backward K..1. The last forward
sub-model is the first backward one and the last backward one is the first forward one of the
next iteration, so those stay on the device (the locality rule); every other sub-model is
swapped out when its run ends, so the device holds the current sub-model and the next at most.
Memory is checked when a load starts: when current + next (+ what is always there) exceed the
budget, the load waits until the current run ends and its sub-model is out.

The stash (each sub-model's C inputs, kept from its forward turn to its backward turn) lives where
`stash_on` says: "host", as labkit's executor keeps it (`labkit.executors.atom.swap`), leaving on
the device only the C inputs and outputs of the running turn (`boundary_bytes`); or "device",
every layer's input for C minibatches (`stash_bytes`). Swap-outs of parameters are free (the host
holds the master copy). Without `overheads` the compute stream does nothing but compute; with
them it also waits, as the executor's compute thread does, for each turn's start (`turn_s`), the
stash's copies to and from the host and each sub-model's gradients to the host after its backward
(`Overheads`). The host optimizer step is not part of an iteration
(`labkit.sim.pipelines.global_batch_time` adds it per global batch).

`analytic_profile` (in `labkit.sim.atom_profile_model`) derives a profile from a model shape;
`swap_events` turns a timeline into the `swap` events a live replica emits (the lab draws both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise

from labkit import events
from labkit.config import ConfigError
from labkit.plan.atom_profile import LayerCost, check_profile
from labkit.sim.atom_profile_model import GPT3, analytic_profile


@dataclass(frozen=True, slots=True)
class Interval:
    """One busy span of one stream. kind: "compute", "load", "send", or "overhead" (ATOM's compute
    stream busy with no compute: `Overheads`). unit: ATOM's sub-model (0-based) or a pipeline's stage
    (compute) or link stage -> stage + 1 (send); phase: the pass it serves (a load: the pass its
    sub-model is loaded for); batch: ATOM's iteration or a pipeline's microbatch."""

    kind: str
    device: int
    unit: int
    phase: str
    batch: int
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A simulated schedule and what Figures 14-15 read from it, over its steady-state `window`.

    per_minibatch_s: wall seconds per minibatch of the whole schedule (ATOM: one device; a
    pipeline: all its devices); gpu_s_per_minibatch: the ATOM paper's "per result GPU time",
    per_minibatch_s x devices; utilization: per device, compute-busy seconds inside the window /
    its length; memory: ATOM only, (time, device bytes) after every change."""

    schedule: str
    intervals: tuple[Interval, ...]
    devices: int
    window: tuple[float, float]
    minibatches: int
    makespan_s: float
    per_minibatch_s: float
    utilization: tuple[float, ...]
    memory: tuple[tuple[float, float], ...] = ()

    @property
    def gpu_s_per_minibatch(self) -> float:
        return self.per_minibatch_s * self.devices

    @property
    def mean_utilization(self) -> float:
        return sum(self.utilization) / self.devices

    @property
    def peak_memory(self) -> float:
        return max((bytes_ for _, bytes_ in self.memory), default=0.0)


def summarize(schedule: str, intervals: Sequence[Interval], devices: int, window: tuple[float, float],
              minibatches: int) -> Timeline:
    """A `Timeline` whose per-minibatch time and utilization are taken over `window`, in which
    `minibatches` minibatches complete."""
    lo, hi = window
    span = hi - lo
    busy = [0.0] * devices
    for iv in intervals:
        if iv.kind == "compute":
            busy[iv.device] += max(0.0, min(iv.end, hi) - max(iv.start, lo))
    return Timeline(schedule=schedule, intervals=tuple(intervals), devices=devices, window=window,
                    minibatches=minibatches, makespan_s=max((iv.end for iv in intervals), default=0.0),
                    per_minibatch_s=span / minibatches, utilization=tuple(b / span for b in busy))


def check_sizes(sizes: Sequence[int], n_layers: int, owner: str = "atom_timeline") -> tuple[int, ...]:
    """`sizes` as a tuple of layer counts >= 1 that cover the `n_layers` layers exactly."""
    out = tuple(sizes)
    if not out or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in out) or sum(out) != n_layers:
        raise ConfigError(owner, "sizes", out, f"layer counts >= 1 summing to the profile's {n_layers} layers")
    return out


def layer_groups(layers: Sequence[LayerCost], sizes: Sequence[int]) -> list[tuple[LayerCost, ...]]:
    """The layers of each sub-model (or stage): `sizes[k]` consecutive layers each."""
    bounds = list(accumulate(sizes, initial=0))
    return [tuple(layers[a:b]) for a, b in pairwise(bounds)]


def submodel_bytes(profile: Sequence[LayerCost], sizes: Sequence[int]) -> tuple[float, ...]:
    """Device bytes each sub-model holds while resident: the sum of its layers' `memory`."""
    layers = check_profile(profile)
    return tuple(sum(x.memory for x in g) for g in layer_groups(layers, check_sizes(sizes, len(layers))))


@dataclass(frozen=True)
class Overheads:
    """What the compute stream spends besides compute, per the ATOM paper's §IV (the compute stream
    swaps a finished sub-model out) and labkit's executor (its compute thread copies gradients and
    the stash): copy_bps, bytes/s of those device <-> host copies; turn_s, seconds before each
    sub-model turn (Python, bookkeeping, stream synchronisation)."""

    copy_bps: float
    turn_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.copy_bps, bool) or not isinstance(self.copy_bps, (int, float)) or not self.copy_bps > 0:
            raise ConfigError("Overheads", "copy_bps", self.copy_bps, "a number of bytes/s > 0")
        if isinstance(self.turn_s, bool) or not isinstance(self.turn_s, (int, float)) or not self.turn_s >= 0:
            raise ConfigError("Overheads", "turn_s", self.turn_s, "a number of seconds >= 0")


def boundary_bytes(profile: Sequence[LayerCost], accumulation: int) -> float:
    """What a turn keeps on the device when the stash is on the host: its C input tensors and its C
    outputs, each at most the largest tensor a cut moves (`out_bytes`)."""
    return 2 * accumulation * max(x.out_bytes for x in check_profile(profile))


def resident_bytes(profile: Sequence[LayerCost], accumulation: int, stash_on: str = "host") -> float:
    """Device bytes held besides the sub-models for the whole iteration: `boundary_bytes` with the
    stash on the host, `stash_bytes` with it on the device."""
    if stash_on not in ("host", "device"):
        raise ConfigError("atom_timeline", "stash_on", stash_on, '"host" or "device"')
    return (boundary_bytes if stash_on == "host" else stash_bytes)(profile, accumulation)


def stash_bytes(profile: Sequence[LayerCost], accumulation: int) -> float:
    """What the C minibatches in flight keep on the device from forward to backward: every layer's
    input (the previous layer's `out_bytes`), the rest being recomputed (activation checkpointing,
    as `analytic_profile` assumes by default)."""
    return accumulation * sum(x.out_bytes for x in check_profile(profile)[:-1])


def _runs(n_sub: int, iterations: int) -> list[tuple[int, list[tuple[int, str]]]]:
    """The compute order as runs of one sub-model: (sub-model, [(iteration, phase), ...])."""
    runs: list[tuple[int, list[tuple[int, str]]]] = []
    for it in range(iterations):
        for k, phase in [(k, "fwd") for k in range(n_sub)] + [(k, "bwd") for k in reversed(range(n_sub))]:
            if runs and runs[-1][0] == k:
                runs[-1][1].append((it, phase))
            else:
                runs.append((k, [(it, phase)]))
    return runs


def _overhead_s(groups: list[tuple[LayerCost, ...]], accumulation: int, overheads: Overheads | None,
                stash_on: str) -> dict[str, list[tuple[float, float]]]:
    """Per phase and sub-model, the compute stream's seconds before and after the pass's compute:
    the turn's start (the last sub-model's forward and backward are one turn), the stash's copy
    out (forward) or back (backward) when it lives on the host, the gradients' copy after a backward."""
    if overheads is None:
        return {phase: [(0.0, 0.0)] * len(groups) for phase in ("fwd", "bwd")}
    last, rate = len(groups) - 1, overheads.copy_bps
    stash = [0.0] + [accumulation * g[-1].out_bytes / rate if stash_on == "host" else 0.0 for g in groups[:-1]]
    return {"fwd": [(overheads.turn_s + (stash[k] if k < last else 0.0), 0.0) for k in range(len(groups))],
            "bwd": [((overheads.turn_s + stash[k]) if k < last else 0.0, sum(x.param_bytes for x in g) / rate)
                    for k, g in enumerate(groups)]}


def atom_timeline(profile: Sequence[LayerCost], sizes: Sequence[int], accumulation: int, *,
                  budget_bytes: float = math.inf, iterations: int = 3, stash_on: str = "host",
                  overheads: Overheads | None = None) -> Timeline:
    """`iterations` training iterations of one ATOM device, each C = `accumulation` minibatches.

    The window is the last iteration (end of one iteration's last backward to the next's), the
    steady state once the cold start (loading sub-model 1 into an empty device) is behind; with
    iterations = 1 it is the whole run. Raises when the largest sub-model and what is always on
    the device (`resident_bytes`) exceed `budget_bytes`."""
    layers = check_profile(profile)
    sizes = check_sizes(sizes, len(layers))
    for name, value in (("accumulation", accumulation), ("iterations", iterations)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("atom_timeline", name, value, "an integer >= 1")
    groups = layer_groups(layers, sizes)
    seconds = {"fwd": [accumulation * sum(x.fwd_s for x in g) for g in groups],
               "bwd": [accumulation * sum(x.bwd_s for x in g) for g in groups]}
    load = [sum(x.load_s for x in g) for g in groups]
    mem = submodel_bytes(layers, sizes)
    floor = resident_bytes(layers, accumulation, stash_on)
    extra = _overhead_s(groups, accumulation, overheads, stash_on)
    if max(mem) + floor > budget_bytes:
        raise ConfigError("atom_timeline", "budget_bytes", budget_bytes, f"at least the largest sub-model plus the "
                          f"{'boundary tensors' if stash_on == 'host' else 'stash'} ({max(mem) + floor:.4g} bytes)")
    runs = _runs(len(groups), iterations)
    first, (it0, phase0) = runs[0][0], runs[0][1][0]
    intervals = [Interval("load", 0, first, phase0, it0, 0.0, load[first])]
    used = floor + mem[first]
    memory = [(0.0, used)]
    free_at = load_free = load[first]
    iteration_end: list[float] = []
    for r, (k, steps) in enumerate(runs):
        start = t = max(free_at, load_free)  # the last load issued is this run's sub-model
        for it, phase in steps:
            before, after = extra[phase][k]
            for kind, span in (("overhead", before), ("compute", seconds[phase][k]), ("overhead", after)):
                if span > 0 or kind == "compute":
                    intervals.append(Interval(kind, 0, k, phase, it, t, t + span))
                    t += span
            if phase == "bwd" and k == 0:
                iteration_end.append(t)
        free_at = t
        if r + 1 == len(runs):
            break
        nxt, (it_n, phase_n) = runs[r + 1][0], runs[r + 1][1][0]
        if used + mem[nxt] <= budget_bytes:  # prefetch beside the current sub-model
            load_start = max(start, load_free)
            memory.append((load_start, used + mem[nxt]))
            memory.append((t, used + mem[nxt] - mem[k]))
        else:  # no room: wait for the current run to end and swap it out first
            load_start = max(t, load_free)
            memory.append((t, used - mem[k]))
            memory.append((load_start, used - mem[k] + mem[nxt]))
        used += mem[nxt] - mem[k]
        load_free = load_start + load[nxt]
        intervals.append(Interval("load", 0, nxt, phase_n, it_n, load_start, load_free))
    window = (iteration_end[-2], iteration_end[-1]) if iterations > 1 else (0.0, iteration_end[-1])
    return replace(summarize("atom", intervals, 1, window, accumulation), memory=tuple(memory))


def swap_events(timeline: Timeline, replica: str = "sim") -> list[events.Event]:
    """An ATOM timeline as the `swap` events a live replica emits: one per compute interval (a
    sub-model's pass over the iteration's C minibatches), with the load that brought the sub-model
    for it (None when it was still resident), so the lab's swap timeline draws a simulated
    schedule as it draws a run."""
    if timeline.schedule != "atom":
        raise ConfigError("swap_events", "timeline", timeline.schedule, "an ATOM timeline (atom_timeline)")
    loads = {(iv.unit, iv.phase, iv.batch): iv for iv in timeline.intervals if iv.kind == "load"}
    out = []
    for iv in timeline.intervals:
        if iv.kind == "compute":
            load = loads.get((iv.unit, iv.phase, iv.batch))
            start, end = (None, None) if load is None else (load.start, load.end)
            out.append(events.swap(iv.end, replica=replica, submodel=iv.unit,
                                   phase="forward" if iv.phase == "fwd" else "backward", load_start=start,
                                   load_end=end, compute_start=iv.start, compute_end=iv.end))
    return out


__all__ = ["GPT3", "Interval", "Overheads", "Timeline", "analytic_profile", "atom_timeline", "boundary_bytes",
           "check_sizes", "layer_groups", "resident_bytes", "stash_bytes", "submodel_bytes", "summarize", "swap_events"]
