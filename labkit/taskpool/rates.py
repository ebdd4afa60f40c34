"""A client's forward rate as the servers track it: what their next split follows (pure)."""

from __future__ import annotations

RATE_EMA = 0.5  # weight of a client's past forward rate against its latest slice


def smoothed_rate(previous: float | None, samples: int, seconds: float) -> float:
    """The rate after a forward slice of `samples` took `seconds` from hand-out to result: its
    samples a second, averaged with `previous` (None: the first slice's rate alone)."""
    rate = samples / max(seconds, 1e-6)
    return rate if previous is None else RATE_EMA * previous + (1 - RATE_EMA) * rate
