"""Sync rules as pure logic: what each stage does at a step boundary (no threads, no torch).

SWARM all-reduces gradients at every step boundary. DiLoCo takes a local (inner) step at every
boundary and an outer step every H of them. A switch between the two, requested at any time,
takes effect at the next boundary where the current mode is at rest: any step for all-reduce,
an outer step for DiLoCo. The runtime and the simulator both follow these decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.config import SyncConfig


@dataclass(frozen=True)
class Decision:
    """What to do at one step boundary."""

    allreduce: bool  # average gradients over the stage and step every peer identically
    outer: bool  # DiLoCo: after the local step, average pseudo-gradients and take the outer step
    switch_to: SyncConfig | None  # the mode in force from the next step on, if it changes


class SyncSchedule:
    """Counts inner steps and applies requested mode switches at outer-step boundaries."""

    def __init__(self, cfg: SyncConfig) -> None:
        self.cfg = cfg
        self.inner = 0  # local steps taken since the last outer step
        self.pending: SyncConfig | None = None  # a requested switch not yet in force

    def request(self, cfg: SyncConfig) -> None:
        """Ask for `cfg` from the next boundary where the current mode can stop."""
        self.pending = cfg

    def boundary(self) -> Decision:
        """Decide the current boundary and advance the counters."""
        if self.cfg.mode == "allreduce":
            decision = Decision(allreduce=True, outer=False, switch_to=self.pending)
        else:
            self.inner += 1
            outer = self.inner >= self.cfg.inner_steps
            decision = Decision(allreduce=False, outer=outer, switch_to=self.pending if outer else None)
            if outer:
                self.inner = 0
        if decision.switch_to is not None:
            self.cfg, self.pending, self.inner = decision.switch_to, None, 0
        return decision


def sample_weights(samples: Mapping[str, int]) -> dict[str, float]:
    """Each peer's weight in the pseudo-gradient average: its share of the samples it processed
    this round (stochastic wiring gives peers unequal shares). Equal weights if none processed."""
    total = sum(samples.values())
    if total == 0:
        return {peer: 1.0 / len(samples) for peer in samples} if samples else {}
    return {peer: n / total for peer, n in samples.items()}


def sum_over_peers(per_peer: Sequence[Sequence[Any]]) -> list[Any]:
    """The stage's gradient: per parameter, the sum of every peer's accumulated sum, added in
    the peers' order (any type with `+`: tensors in the runtime, floats in tests)."""
    total = list(per_peer[0])
    for grads in per_peer[1:]:
        total = [a + b for a, b in zip(total, grads)]
    return total


def weighted_average(per_peer: Mapping[str, Sequence[Any]], samples: Mapping[str, int]) -> list[Any]:
    """DiLoCo's outer gradient: per parameter, the peers' pseudo-gradients weighted by
    `sample_weights(samples)`, so that peers that processed more samples count more."""
    weights = sample_weights(samples)
    names = list(per_peer)
    total = [weights[names[0]] * d for d in per_peer[names[0]]]
    for name in names[1:]:
        total = [a + weights[name] * d for a, d in zip(total, per_peer[name])]
    return total
