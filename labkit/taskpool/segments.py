"""Who holds which samples: contiguous index ranges split evenly over servers or by compute.

The task pool paper, §3.2.1: the servers on either side of a stage boundary each hold an even, contiguous
share of a microbatch's samples, so a sender's range overlaps one or a few receivers' ranges
(2 BS -> 3 FS: the first BS sends 2/3 of its half to FS1 and 1/3 to FS2, the second BS 1/3 to FS2
and 2/3 to FS3); a frontal server hands its samples to clients in proportion to their compute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Segment = tuple[str, int, int]  # (holder, start, end): samples [start, end)


def cuts(samples: int, parts: int) -> list[int]:
    """Boundaries of `parts` even contiguous shares of [0, samples): share i is [c[i], c[i+1])."""
    if parts < 1 or samples < 0:
        raise ValueError(f"cuts needs parts >= 1 and samples >= 0, got parts={parts}, samples={samples}")
    return [i * samples // parts for i in range(parts + 1)]


def owners(samples: int, servers: Sequence[str], start: int, end: int) -> list[Segment]:
    """The servers holding [start, end) when `servers` share [0, samples) evenly, with their parts."""
    c = cuts(samples, len(servers))
    out = []
    for i, server in enumerate(servers):
        lo, hi = max(start, c[i]), min(end, c[i + 1])
        if lo < hi:
            out.append((server, lo, hi))
    return out


def segments(samples: int, senders: Sequence[str], receivers: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """The task pool paper's even split across a boundary: (sender, receiver, start, end) for every overlap."""
    c = cuts(samples, len(senders))
    return [(a, b, lo, hi) for i, a in enumerate(senders)
            for b, lo, hi in owners(samples, receivers, c[i], c[i + 1])]


def split_by_compute(start: int, end: int, speeds: Mapping[str, float]) -> list[Segment]:
    """[start, end) cut into contiguous slices proportional to `speeds` (largest remainder), in the
    mapping's order; clients whose share rounds to nothing get no slice."""
    if not speeds or any(v <= 0 for v in speeds.values()):
        raise ValueError(f"split_by_compute needs positive speeds, got {dict(speeds)}")
    total, n = sum(speeds.values()), end - start
    exact = [n * v / total for v in speeds.values()]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    out, at = [], start
    for name, k in zip(speeds, counts):
        if k:
            out.append((name, at, at + k))
            at += k
    return out
