"""Move generators for DT-FM's local searches (the DT-FM paper, Section 3.4), numba-compiled.

`groups` is (K stages, M replicas) of device indices; `w` a symmetric (N, N) pair-cost matrix.
A move is scored by a gain (higher = better expected cost); the searches confirm with the full
cost model, so these gains only order the candidates.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def fastest_links(groups: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(K, 2) positions inside each group of the two devices joined by its cheapest link."""
    k, m = groups.shape
    out = np.zeros((k, 2), np.int64)
    for j in range(k):
        best = np.inf
        for a in range(m):
            for b in range(a + 1, m):
                c = w[groups[j, a], groups[j, b]]
                if c < best:
                    best, out[j, 0], out[j, 1] = c, a, b
    return out


@njit(cache=True)
def _expected_link(w: np.ndarray, d: int, group: np.ndarray) -> float:
    """Mean cost from device d to the devices of a group: its expected PP link if placed beside it."""
    s = 0.0
    for x in group:
        s += w[d, x]
    return s / len(group)


@njit(cache=True)
def pair_swap_moves(groups: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The paper's four swap candidates per pair of groups with their gain.

    For groups j, j' with fastest links d1-d2 and d1'-d2', swapping d1 <-> d1' gains
    mean_{x in C_j'} w(d1, x) - w(d1, d2) + mean_{x in C_j} w(d1', x) - w(d1', d2'):
    the fast link d1-d2 now crosses the boundary and can carry pipeline traffic.
    Rows: (gain, j, pos in j, j', pos in j').
    """
    k = groups.shape[0]
    fast = fastest_links(groups, w)
    out = np.zeros((k * (k - 1) // 2 * 4, 5))
    r = 0
    for j in range(k):
        for jj in range(j + 1, k):
            for s in range(2):
                for t in range(2):
                    a, pa = fast[j, s], fast[j, 1 - s]
                    b, pb = fast[jj, t], fast[jj, 1 - t]
                    da, dpa = groups[j, a], groups[j, pa]
                    db, dpb = groups[jj, b], groups[jj, pb]
                    gain = (_expected_link(w, da, groups[jj]) - w[da, dpa]
                            + _expected_link(w, db, groups[j]) - w[db, dpb])
                    out[r, 0], out[r, 1], out[r, 2], out[r, 3], out[r, 4] = gain, j, a, jj, b
                    r += 1
    return out


@njit(cache=True)
def cycle_moves(groups: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Circular variant: for groups j1 -> j2 -> j3 -> j1, one fastest-link end of each group moves
    to the next group. Gain is the sum of the three one-way gains above.
    Rows: (gain, j1, p1, j2, p2, j3, p3)."""
    k = groups.shape[0]
    fast = fastest_links(groups, w)
    n_rows = k * (k - 1) * (k - 2) * 8 if k >= 3 else 0
    out = np.zeros((n_rows, 7))
    r = 0
    for j1 in range(k):
        for j2 in range(k):
            for j3 in range(k):
                if j1 == j2 or j2 == j3 or j1 == j3:
                    continue
                for code in range(8):
                    js = np.array((j1, j2, j3))
                    gain = 0.0
                    for q in range(3):
                        s = (code >> q) & 1
                        j, nxt = js[q], js[(q + 1) % 3]
                        d, partner = groups[j, fast[j, s]], groups[j, fast[j, 1 - s]]
                        gain += _expected_link(w, d, groups[nxt]) - w[d, partner]
                    out[r, 0], out[r, 1], out[r, 3], out[r, 5] = gain, j1, j2, j3
                    out[r, 2] = fast[j1, code & 1]
                    out[r, 4] = fast[j2, (code >> 1) & 1]
                    out[r, 6] = fast[j3, (code >> 2) & 1]
                    r += 1
    return out


@njit(cache=True)
def kl_best_swap(labels: np.ndarray, locked: np.ndarray, w: np.ndarray, k: int) -> tuple[int, int, float]:
    """Kernighan-Lin step: the unlocked pair (a, b) in different groups whose swap most reduces the
    summed intra-group cost, gain = I_a - E_a + I_b - E_b + 2 w_ab (I: own group, E: other's)."""
    n = len(labels)
    s = np.zeros((n, k))  # s[x, g] = summed cost from x to the devices of group g
    for x in range(n):
        for y in range(n):
            if x != y:
                s[x, labels[y]] += w[x, y]
    best_a, best_b, best_gain = -1, -1, -np.inf
    for a in range(n):
        if locked[a]:
            continue
        for b in range(a + 1, n):
            if locked[b] or labels[a] == labels[b]:
                continue
            ga, gb = labels[a], labels[b]
            gain = s[a, ga] - s[a, gb] + s[b, gb] - s[b, ga] + 2 * w[a, b]
            if gain > best_gain:
                best_a, best_b, best_gain = a, b, gain
    return best_a, best_b, best_gain
