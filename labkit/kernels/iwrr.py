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
def iwrr_route_batch(stage, prio, ema, order, banned, s, out):
    """Route len(out) microbatches through stage `s` (picks written to `out`); returns how many.

    The same picks as calling `iwrr_pick` len(out) times, in O(n + k log n), on a tournament
    (loser) tree over the stage's unbanned peers: node v keeps the loser of the match played
    there, so after charging the winner only its leaf-to-root path is replayed. Priorities are
    never negative (they start at 0 + epsilon and grow by EMAs > 0), so their IEEE bit patterns
    order like the floats; comparing those as integers lets the replay run without branches.
    """
    live = np.nonzero((stage == s) & ~banned)[0]
    n = live.shape[0]
    if n == 0:
        return 0
    m = 1
    while m < n:
        m *= 2
    kp = np.full(m, np.inf)  # leaf keys: priority, then insertion order (padding never wins)
    kp[:n] = prio[live]
    if kp.min() < 0.0:
        raise ValueError("IWRR priorities must be >= 0")
    kb = kp.view(np.int64)
    ko = np.full(m, np.iinfo(np.int64).max)
    ko[:n] = order[live]
    charge = ema[live]
    loser = np.zeros(m, np.int64)
    winner = np.zeros(2 * m, np.int64)
    winner[m:] = np.arange(m)
    for v in range(m - 1, 0, -1):  # play every match bottom-up once
        a, b = winner[2 * v], winner[2 * v + 1]
        a_wins = kb[a] < kb[b] or (kb[a] == kb[b] and ko[a] < ko[b])
        winner[v], loser[v] = (a, b) if a_wins else (b, a)
    cur = winner[1]
    for k in range(out.shape[0]):
        out[k] = live[cur]
        kp[cur] += charge[cur]  # charge the picked peer its EMA, then replay its path to the root
        pb, o = kb[cur], ko[cur]
        v = (cur + m) >> 1
        while v >= 1:
            other = loser[v]
            qb, r = kb[other], ko[other]
            mask = -np.int64((qb < pb) | ((qb == pb) & (r < o)))  # all ones if `other` wins
            loser[v] = other ^ ((other ^ cur) & mask)
            cur = cur ^ ((cur ^ other) & mask)
            pb = pb ^ ((pb ^ qb) & mask)
            o = o ^ ((o ^ r) & mask)
            v >>= 1
    for j in range(n):
        prio[live[j]] = kp[j]
    return out.shape[0]


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
