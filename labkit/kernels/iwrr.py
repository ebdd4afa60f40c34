"""IWRR (SWARM Algorithm 1) over peer arrays: pick-and-charge, batched routing, entry, EMA update.

Peers live in parallel arrays indexed by slot: `stage[i]` (-1 marks a free slot), `prio[i]`,
`ema[i]`, `order[i]` (insertion order, unique, breaks priority ties) and `banned[i]`. A pick takes
the unbanned peer of the stage with the smallest (priority, order) and charges it its EMA, so a peer
twice as fast is picked twice as often. `Router`, the event simulator and the fluid model all run
these kernels; the `*_py` twins state the same rule in plain Python for the property tests.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit


@njit(cache=True)
def iwrr_pick(stage, prio, ema, order, banned, s):
    """Index of the unbanned peer of stage `s` with the smallest (prio, order), charged; -1 if none."""
    best = -1
    for i in range(stage.shape[0]):
        if stage[i] == s and not banned[i]:
            if best < 0 or prio[i] < prio[best] or (prio[i] == prio[best] and order[i] < order[best]):
                best = i
    if best >= 0:
        prio[best] += ema[best]
    return best


@njit(cache=True)
def _before(a, b, prio, order):
    return prio[a] < prio[b] or (prio[a] == prio[b] and order[a] < order[b])


@njit(cache=True)
def iwrr_route_batch(stage, prio, ema, order, banned, s, out):
    """Route len(out) microbatches through stage `s` (picks written to `out`); returns how many.

    The same picks as calling `iwrr_pick` len(out) times, in O(n + k log n): a binary heap of the
    stage's unbanned peers keyed by (prio, order).
    """
    heap = np.empty(stage.shape[0], np.int64)
    n = 0
    for i in range(stage.shape[0]):
        if stage[i] == s and not banned[i]:
            heap[n] = i
            n += 1
    if n == 0:
        return 0
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(heap, n, start, prio, order)
    for k in range(out.shape[0]):
        top = heap[0]
        out[k] = top
        prio[top] += ema[top]  # charge, then restore the heap order from the root
        _sift_down(heap, n, 0, prio, order)
    return out.shape[0]


@njit(cache=True)
def _sift_down(heap, n, pos, prio, order):
    item = heap[pos]
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and _before(heap[child + 1], heap[child], prio, order):
            child += 1
        if not _before(heap[child], item, prio, order):
            break
        heap[pos] = heap[child]
        pos = child
    heap[pos] = item


@njit(cache=True)
def iwrr_entry(stage, prio, ema, banned, s, epsilon, initial_ema):
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
def ema_fold(ema, i, seconds, gamma):
    """Fold one measured response time into peer i's EMA: ema = gamma*dt + (1-gamma)*ema."""
    ema[i] = gamma * seconds + (1.0 - gamma) * ema[i]


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
