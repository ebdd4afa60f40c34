"""Per-sample counts over index ranges: how often each sample was covered, and the forward work
repeated beyond what a lost client took with it (the task pool's claim is that this stays 0)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def coverage(ranges: Iterable[tuple[int, int]], samples: int) -> np.ndarray:
    """(samples,) how many of `ranges` ([start, end) pairs) cover each sample."""
    diff = np.zeros(samples + 1, np.int64)
    for start, end in ranges:
        diff[start] += 1
        diff[end] -= 1
    return np.cumsum(diff[:-1])


def repeated_beyond_lost(computed: Iterable[tuple[int, int]], lost: Iterable[tuple[int, int]], samples: int) -> int:
    """Forward runs of samples beyond one per sample plus one per loss of that sample's result."""
    extra = coverage(computed, samples) - 1 - coverage(lost, samples)
    return int(np.maximum(extra, 0).sum())
