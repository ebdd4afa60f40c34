"""Preemption / join traces: lists of (time seconds, change in peer count), and a churn model.

A trace says only how many peers join or leave when; which stage a leaver came from is drawn
uniformly over the stages that still have peers (SWARM Appendix I), by the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.config import ConfigError

Trace = tuple[tuple[float, int], ...]
MAX_CHURN_EVENTS = 100_000  # expected joins plus waves of a churn model: each is a loop step and a peer slot


def _positive(owner: str, name: str, value: object, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(owner, name, value, f"a finite number {'>=' if allow_zero else '>'} 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class ChurnModel:
    """Preemptible-cloud churn: Poisson joins, per-peer preemption hazard, and preemption waves.

    Peers join at `join_per_hour`; each live peer is preempted at `leave_per_peer_hour`; waves of
    preemptions arrive at `waves_per_hour` and each takes a fraction of the live peers drawn
    uniformly from [0, 2 * `wave_fraction`]. The join rate falls linearly to (1 - `join_decay`) of
    its start by the end of the trace (a fleet that gets harder to rent). With no waves and no
    decay the population hovers around join_per_hour / leave_per_peer_hour.
    """

    hours: float = 32.0  # trace length
    join_per_hour: float = 30.0  # Poisson rate of single-peer joins
    leave_per_peer_hour: float = 0.1  # preemption hazard of each live peer
    waves_per_hour: float = 0.0  # Poisson rate of preemption waves
    wave_fraction: float = 0.0  # mean share of live peers a wave removes
    join_decay: float = 0.0  # share of the join rate lost, linearly, by the end of the trace

    def __post_init__(self) -> None:
        o = "ChurnModel"
        _positive(o, "hours", self.hours)
        _positive(o, "join_per_hour", self.join_per_hour, allow_zero=True)
        _positive(o, "leave_per_peer_hour", self.leave_per_peer_hour, allow_zero=True)
        _positive(o, "waves_per_hour", self.waves_per_hour, allow_zero=True)
        if not (isinstance(self.wave_fraction, (int, float)) and 0.0 <= self.wave_fraction <= 0.5):
            raise ConfigError(o, "wave_fraction", self.wave_fraction, "a number in [0, 0.5]")
        if not (isinstance(self.join_decay, (int, float)) and 0.0 <= self.join_decay <= 1.0):
            raise ConfigError(o, "join_decay", self.join_decay, "a number in [0, 1]")
        expected = self.hours * (self.join_per_hour + self.waves_per_hour)
        if expected > MAX_CHURN_EVENTS:
            raise ConfigError(o, "hours", self.hours, f"hours x (join_per_hour + waves_per_hour) at most "
                                                      f"{MAX_CHURN_EVENTS:,} (here {expected:,.0f}): each join is a "
                                                      "peer the simulator keeps")

    def trace(self, initial_peers: int, seed: int) -> Trace:
        """A trace starting from `initial_peers` live peers; at most one event per second."""
        rng = np.random.default_rng(seed)
        horizon = self.hours * 3600.0
        live, t, events = initial_peers, 0.0, []
        rate_wave = self.waves_per_hour / 3600.0
        while True:
            rate_join = self.join_per_hour / 3600.0 * (1.0 - self.join_decay * t / horizon)
            rate_leave = live * self.leave_per_peer_hour / 3600.0
            total = rate_join + rate_leave + rate_wave
            if total <= 0.0:
                break
            t += rng.exponential(1.0 / total)
            if t >= horizon:
                break
            u = rng.random() * total
            if u < rate_join:
                delta = 1
            elif u < rate_join + rate_leave:
                delta = -1
            else:
                delta = -int(round(live * rng.uniform(0.0, 2.0 * self.wave_fraction)))
            delta = max(delta, 1 - live)  # the trace keeps at least one peer alive
            if delta:
                live += delta
                events.append((float(math.floor(t)), delta))
        return _merge(events)


def _merge(events: list[tuple[float, int]]) -> Trace:
    """Sum the changes that fall on the same second."""
    out: list[tuple[float, int]] = []
    for t, d in events:
        if out and out[-1][0] == t:
            out[-1] = (t, out[-1][1] + d)
        else:
            out.append((t, d))
    return tuple((t, d) for t, d in out if d)


def check_trace(trace: object, owner: str = "Scenario", name: str = "trace") -> Trace:
    """A validated trace: (time >= 0, nonzero integer change) pairs in non-decreasing time."""
    try:
        pairs = tuple((float(t), d) for t, d in trace)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ConfigError(owner, name, trace, "a list of (time seconds, change in peers) pairs") from None
    last = 0.0
    for t, d in pairs:
        if not (math.isfinite(t) and t >= last and isinstance(d, int) and not isinstance(d, bool) and d != 0):
            raise ConfigError(owner, name, (t, d), "pairs of a finite time >= 0, non-decreasing, and a nonzero integer")
        last = t
    return pairs
