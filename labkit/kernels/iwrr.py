"""IWRR (SWARM Algorithm 1) over peer arrays: pick-and-charge, batched routing, entry, EMA update.

Peers live in parallel arrays indexed by slot: `stage[i]` (-1 marks a free slot), `prio[i]`,
`ema[i]` (with `weight[i]`, the share of it that is measured), `order[i]` (insertion order,
unique, breaks priority ties) and `banned[i]`. A pick takes the unbanned peer of the stage with
the smallest (priority, order) and charges it its EMA, so a peer twice as fast is picked twice as
often; a router's first pick of a stage may first skip a phase (`iwrr_skip`), so routers that
start together start their rounds at different peers. `Router`, the event simulator and the fluid
model all run these kernels; the `*_py` twins state the same rule in plain Python for the
property tests.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

INITIAL_EMA = 1.0  # seconds: the EMA a router gives the first peer of a stage before any answer


@njit(cache=True)
def iwrr_pick(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, order: np.ndarray, banned: np.ndarray,
              s: int) -> int:
    """Index of the unbanned peer of stage `s` with the smallest (prio, order), charged; -1 if none."""
    best = -1
    for i in range(stage.shape[0]):
        if stage[i] == s and not banned[i]:
            if best < 0 or prio[i] < prio[best] or (prio[i] == prio[best] and order[i] < order[best]):
                best = i
    if best >= 0:
        prio[best] += ema[best]
    return best


ROTATE_STEP = 1e-9  # how far behind the stage's last priority a skipped peer goes (relative, at least 1e-9 s)


@njit(cache=True)
def iwrr_skip(stage: np.ndarray, prio: np.ndarray, order: np.ndarray, banned: np.ndarray, s: int,
              phase: int) -> bool:
    """Rotate stage s's round by `phase` mod (its live peers): the peer that would be picked next
    moves just behind the stage's largest priority, that many times, so a router starts its round
    that far in without charging anyone an EMA. Routers that start together (trainer k skipping k)
    then spread their first microbatches over the stage and keep alternating out of step, instead
    of all sending them to its first peer. Returns whether the stage had a live peer (a router
    skips once per stage, at its first pick)."""
    n = 0
    for i in range(stage.shape[0]):
        if stage[i] == s and not banned[i]:
            n += 1
    for _ in range(phase % n if n > 0 else 0):
        best, top = -1, -np.inf
        for i in range(stage.shape[0]):
            if stage[i] == s and not banned[i]:
                if best < 0 or prio[i] < prio[best] or (prio[i] == prio[best] and order[i] < order[best]):
                    best = i
                top = max(top, prio[i])
        prio[best] = top + ROTATE_STEP * max(1.0, abs(top))
    return n > 0


@njit(cache=True)
def iwrr_route_batch(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, order: np.ndarray,
                     banned: np.ndarray, s: int, out: np.ndarray) -> int:
    """Route len(out) microbatches through stage `s` (picks written to `out`); returns how many.

    The same picks as calling `iwrr_pick` len(out) times, in about O(1) per pick: a calendar
    queue. Within a batch every priority stays in [min, min + R) with R = initial spread + the
    largest EMA, so peers sit in ~2n circular buckets of width R / 2n by floor(prio / width);
    the smallest (prio, order) is in the first non-empty bucket from the current minimum's, and
    a charged peer only moves forward.
    """
    live = np.nonzero((stage == s) & ~banned)[0]
    n = live.shape[0]
    if n == 0:
        return 0
    kp, ko, charge = prio[live].copy(), order[live], ema[live]
    low = kp.min()  # priorities never fall below the batch's first minimum
    span = kp.max() - low + charge.max()
    buckets = 2 * n + 4  # covers span / width = 2n buckets plus rounding at both ends
    inv_width = (2 * n) / span if span > 0 else 1.0
    head = np.full(buckets, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    for j in range(n - 1, -1, -1):
        b = int((kp[j] - low) * inv_width) % buckets
        nxt[j] = head[b]
        head[b] = j
    b = 0
    for k in range(out.shape[0]):
        while head[b] < 0:  # advance to the first non-empty bucket
            b = b + 1 if b + 1 < buckets else 0
        best, before, prev = head[b], -1, head[b]
        j = nxt[best]
        while j >= 0:  # the bucket's smallest (priority, insertion order)
            if kp[j] < kp[best] or (kp[j] == kp[best] and ko[j] < ko[best]):
                best, before = j, prev
            prev, j = j, nxt[j]
        if before < 0:
            head[b] = nxt[best]
        else:
            nxt[before] = nxt[best]
        out[k] = live[best]
        kp[best] += charge[best]  # charge the picked peer its EMA and file it under its new bucket
        nb = int((kp[best] - low) * inv_width) % buckets
        nxt[best] = head[nb]
        head[nb] = best
    for j in range(n):
        prio[live[j]] = kp[j]
    return out.shape[0]


@njit(cache=True)
def iwrr_entry(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, banned: np.ndarray, s: int, epsilon: float,
               initial_ema: float) -> tuple[float, float]:
    """(priority, ema) for a peer entering stage `s`: stage-min priority + epsilon, stage-mean EMA."""
    floor = 0.0
    total = 0.0
    n = 0
    for i in range(stage.shape[0]):
        if stage[i] == s and not banned[i]:
            floor = prio[i] if n == 0 else min(floor, prio[i])
            total += ema[i]
            n += 1
    return floor + epsilon, (total / n if n > 0 else initial_ema)


@njit(cache=True)
def ema_fold(ema: np.ndarray, weight: np.ndarray, i: int, seconds: float, gamma: float) -> None:
    """Fold one measured response time into peer i's EMA, bias-corrected as Adam corrects its
    moments: `weight[i]` is how much of the EMA is measured (0 for a prior, so the first answer
    replaces it; 1 for the classic fold `ema = gamma*dt + (1-gamma)*ema`)."""
    folded = gamma + (1.0 - gamma) * weight[i]
    ema[i] = (gamma * seconds + (1.0 - gamma) * weight[i] * ema[i]) / folded
    weight[i] = folded


def iwrr_pick_py(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, order: np.ndarray,
                 banned: np.ndarray, s: int) -> int:
    """Plain-Python twin of `iwrr_pick`."""
    live = [i for i in range(len(stage)) if stage[i] == s and not banned[i]]
    if not live:
        return -1
    best = min(live, key=lambda i: (prio[i], order[i]))
    prio[best] += ema[best]
    return best


def iwrr_route_batch_py(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, order: np.ndarray,
                        banned: np.ndarray, s: int, count: int) -> list[int]:
    """Plain-Python twin of `iwrr_route_batch` on `heapq`: pop the smallest, charge, push back."""
    heap = [(float(prio[i]), int(order[i]), i) for i in range(len(stage)) if stage[i] == s and not banned[i]]
    if not heap:
        return []
    heapq.heapify(heap)
    picks = []
    for _ in range(count):
        p, o, i = heap[0]
        picks.append(i)
        heapq.heapreplace(heap, (p + float(ema[i]), o, i))
    for p, _, i in heap:
        prio[i] = p
    return picks


def iwrr_entry_py(stage: np.ndarray, prio: np.ndarray, ema: np.ndarray, banned: np.ndarray, s: int, epsilon: float,
                  initial_ema: float) -> tuple[float, float]:
    """Plain-Python twin of `iwrr_entry`."""
    live = [i for i in range(len(stage)) if stage[i] == s and not banned[i]]
    floor = min((float(prio[i]) for i in live), default=0.0)
    return floor + epsilon, (sum(float(ema[i]) for i in live) / len(live) if live else initial_ema)


def ema_fold_py(ema: np.ndarray, weight: np.ndarray, i: int, seconds: float, gamma: float) -> None:
    """Plain-Python twin of `ema_fold`."""
    folded = gamma + (1.0 - gamma) * float(weight[i])
    ema[i] = (gamma * seconds + (1.0 - gamma) * float(weight[i]) * float(ema[i])) / folded
    weight[i] = folded
