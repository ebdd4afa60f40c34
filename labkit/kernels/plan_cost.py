"""DT-FM cost-model kernels (the DT-FM paper, Eq. 2-4), compiled with numba; `f.py_func` is the plain twin.

A partition is `groups`, an int64 array (K stages, M replicas) of device indices. Pair costs are
precomputed (N, N) symmetric matrices: `w_dp = 2(α + c_DP/(D_DP·β))`, `w_pp = 2(α + c_PP/β)`.

- Bottleneck perfect matching (Eq. 3): binary search over the sorted distinct pair costs; each
  probe asks whether a perfect matching exists using only pairs at or below the threshold, by
  Kuhn's augmenting paths (BFS form), O(M^3) per probe, O(M^3 log M) in all.
- Open-loop TSP over the coarsened graph (Eq. 4): exact Held-Karp DP, O(2^K K^2), for
  K <= EXACT_TSP_MAX stages; beyond, nearest neighbour from every start followed by 2-opt.

>>> import numpy as np
>>> bottleneck_matching(np.array([[1.0, 5.0], [2.0, 9.0]]))[0]
5.0
"""

from __future__ import annotations

import numpy as np
from numba import njit

EXACT_TSP_MAX = 12  # Held-Karp up to this many stages (2^12·144 ≈ 0.6 M steps); heuristic beyond


@njit(cache=True)
def group_dp_costs(groups: np.ndarray, w_dp: np.ndarray) -> np.ndarray:
    """Eq. 2 per stage group: the slowest member's summed exchange cost with all the others."""
    k, m = groups.shape
    out = np.zeros(k)
    for j in range(k):
        for a in range(m):
            s = 0.0
            for b in range(m):
                if a != b:
                    s += w_dp[groups[j, a], groups[j, b]]
            out[j] = max(out[j], s)
    return out


@njit(cache=True)
def _perfect_below(cost: np.ndarray, thr: float, match_l: np.ndarray) -> bool:
    """Kuhn's algorithm: is there a perfect matching using only entries <= thr? Fills match_l."""
    m = cost.shape[0]
    match_r = -np.ones(m, np.int64)
    match_l[:] = -1
    prev = np.empty(m, np.int64)
    queue = np.empty(m, np.int64)
    seen = np.empty(m, np.bool_)
    for u in range(m):
        seen[:] = False
        head, tail = 0, 1
        queue[0] = u
        free = -1
        while head < tail and free < 0:
            x = queue[head]
            head += 1
            for y in range(m):
                if not seen[y] and cost[x, y] <= thr:
                    seen[y] = True
                    prev[y] = x
                    if match_r[y] < 0:
                        free = y
                        break
                    queue[tail] = match_r[y]
                    tail += 1
        if free < 0:
            return False
        y = free
        while y >= 0:  # flip the augmenting path back to u
            x = prev[y]
            nxt = match_l[x]
            match_l[x] = y
            match_r[y] = x
            y = nxt
    return True


@njit(cache=True)
def bottleneck_value(cost: np.ndarray, match: np.ndarray) -> float:
    """The least cost at which rows and columns have a perfect matching (Eq. 3's bottleneck),
    the matching left in `match`. The lower bound (every row and column needs one edge) is tried
    first, as it is often the answer; otherwise a binary search over the costs above it."""
    m = cost.shape[0]
    bound = 0.0
    for i in range(m):
        bound = max(bound, cost[i].min(), cost[:, i].min())
    if _perfect_below(cost, bound, match):
        return bound
    values = np.unique(cost.ravel())
    lo, hi = np.searchsorted(values, bound) + 1, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _perfect_below(cost, values[mid], match):
            hi = mid
        else:
            lo = mid + 1
    _perfect_below(cost, values[lo], match)
    return values[lo]


@njit(cache=True)
def bottleneck_matching(cost: np.ndarray) -> tuple[float, np.ndarray]:
    """Perfect matching (row i -> column match[i]) minimizing the largest chosen cost (Eq. 3)."""
    match = np.empty(cost.shape[0], np.int64)
    return bottleneck_value(cost, match), match


@njit(cache=True)
def coarse_graph(groups: np.ndarray, w_pp: np.ndarray) -> np.ndarray:
    """(K, K) matrix: the bottleneck-matching PP cost if two stage groups were neighbours."""
    k, m = groups.shape
    out = np.zeros((k, k))
    sub = np.empty((m, m))
    for a in range(k):
        for b in range(a + 1, k):
            for i in range(m):
                for j in range(m):
                    sub[i, j] = w_pp[groups[a, i], groups[b, j]]
            out[a, b] = out[b, a] = bottleneck_matching(sub)[0]
    return out


@njit(cache=True)
def open_tsp_exact(c: np.ndarray) -> tuple[float, np.ndarray]:
    """Cheapest Hamiltonian path (any start, any end) by Held-Karp; returns cost and order."""
    k = c.shape[0]
    full = 1 << k
    best = np.full((full, k), np.inf)
    parent = -np.ones((full, k), np.int64)
    for v in range(k):
        best[1 << v, v] = 0.0
    for mask in range(1, full):
        for v in range(k):
            if best[mask, v] == np.inf:
                continue
            for u in range(k):
                if mask & (1 << u):
                    continue
                nm = mask | (1 << u)
                val = best[mask, v] + c[v, u]
                if val < best[nm, u]:
                    best[nm, u] = val
                    parent[nm, u] = v
    end = np.argmin(best[full - 1])
    order = np.empty(k, np.int64)
    mask, v = full - 1, end
    for pos in range(k - 1, -1, -1):
        order[pos] = v
        pv = parent[mask, v]
        mask ^= 1 << v
        v = pv
    return best[full - 1, end], order


@njit(cache=True)
def _path_cost(c: np.ndarray, order: np.ndarray) -> float:
    s = 0.0
    for i in range(len(order) - 1):
        s += c[order[i], order[i + 1]]
    return s


@njit(cache=True)
def open_tsp_heuristic(c: np.ndarray) -> tuple[float, np.ndarray]:
    """Nearest neighbour from every start, each improved by 2-opt (segment reversal) to a local optimum."""
    k = c.shape[0]
    best_cost, best_order = np.inf, np.arange(k)
    for start in range(k):
        order = np.empty(k, np.int64)
        used = np.zeros(k, np.bool_)
        order[0], used[start] = start, True
        for pos in range(1, k):
            prev, pick, pick_c = order[pos - 1], -1, np.inf
            for u in range(k):
                if not used[u] and c[prev, u] < pick_c:
                    pick, pick_c = u, c[prev, u]
            order[pos], used[pick] = pick, True
        improved = True
        while improved:
            improved = False
            for i in range(k - 1):
                for j in range(i + 1, k):
                    # reversing order[i..j] changes only the edges entering i and leaving j
                    before = (c[order[i - 1], order[i]] if i > 0 else 0.0) + (c[order[j], order[j + 1]] if j < k - 1 else 0.0)
                    after = (c[order[i - 1], order[j]] if i > 0 else 0.0) + (c[order[i], order[j + 1]] if j < k - 1 else 0.0)
                    if after < before - 1e-12:
                        order[i:j + 1] = order[i:j + 1][::-1].copy()
                        improved = True
        cost = _path_cost(c, order)
        if cost < best_cost:
            best_cost, best_order = cost, order.copy()
    return best_cost, best_order


@njit(cache=True)
def open_tsp(c: np.ndarray) -> tuple[float, np.ndarray]:
    """Open-loop TSP: exact up to EXACT_TSP_MAX nodes, heuristic beyond."""
    if c.shape[0] <= EXACT_TSP_MAX:
        return open_tsp_exact(c)
    return open_tsp_heuristic(c)


@njit(cache=True)
def comm_cost(groups: np.ndarray, w_dp: np.ndarray, w_pp: np.ndarray) -> tuple[float, float]:
    """DT-FM's COMM-COST of a partition (Eq. 1): (DP cost = max of Eq. 2, PP cost = Eq. 4)."""
    dp = group_dp_costs(groups, w_dp).max()
    if groups.shape[0] == 1:
        return dp, 0.0
    return dp, open_tsp(coarse_graph(groups, w_pp))[0]


@njit(cache=True)
def assignment_cost(sigma: np.ndarray, w_dp: np.ndarray, w_pp: np.ndarray) -> tuple[float, float]:
    """Cost of a fixed tasklet assignment sigma (M replicas, K stages in pipeline order): the same DP
    cost, and PP = sum over adjacent stages of the slowest replica's hop (no matching, no TSP)."""
    m, k = sigma.shape
    dp = group_dp_costs(sigma.T.copy(), w_dp).max()
    pp = 0.0
    for j in range(k - 1):
        worst = 0.0
        for i in range(m):
            worst = max(worst, w_pp[sigma[i, j], sigma[i, j + 1]])
        pp += worst
    return dp, pp
