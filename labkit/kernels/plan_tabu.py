"""Tabu search over balanced partitions with every single swap priced incrementally (numba).

A partition is `groups` (K stages, M replicas) of device indices, priced by DT-FM's COMM-COST
(`plan_cost.comm_cost`: DP = the worst group's Eq. 2, PP = open-loop TSP over bottleneck
matchings). Swapping device a (group ja) with b (group jb) changes only groups ja and jb, so a swap
is priced from kept state: the summed DP cost of every device to its own group (two groups
updated in O(M)), the (K, K) coarse graph (rows ja and jb recomputed: 2K-3 bottleneck matchings of
M x M) and one Held-Karp over K stages.

Why tabu: on matrices with few distinct values (DT-FM's cases) whole regions of the space cost
the same, and a search that takes only strict gains stops on the first plateau. Each iteration
takes the best non-tabu swap even when it is sideways or uphill; the two devices it moves stay put
for `tenure` iterations, so the walk cannot undo itself. Ties on the cost are broken by a smooth
secondary score, `lam` x (mean group DP cost + along the pipeline, per boundary, how many devices
keep its bottleneck from dropping, see `_pair_costs`), which keeps moving toward partitions whose
groups match well before any bottleneck drops. Devices with identical rows in both cost matrices are
interchangeable: swapping two of them, or a second copy of one into the same group, is skipped.

>>> import numpy as np
>>> w = np.ones((4, 4)); np.fill_diagonal(w, 0.0)
>>> g, c = tabu_search(np.array([[0, 1], [2, 3]]), w, w, np.arange(4), 5, 5, 2, 0.05, 0)
>>> float(c)
3.0
"""

from __future__ import annotations

import numpy as np
from numba import njit

from labkit.kernels.plan_cost import bottleneck_value, open_tsp

EPS = 1e-12


@njit(cache=True)
def device_classes(w_dp: np.ndarray, w_pp: np.ndarray) -> np.ndarray:
    """Class id per device; two devices share one when their costs to every third device agree
    (and their link cost is symmetric), so swapping them changes no cost."""
    n = w_dp.shape[0]
    cls = -np.ones(n, np.int64)
    for a in range(n):
        if cls[a] >= 0:
            continue
        cls[a] = a
        for b in range(a + 1, n):
            if cls[b] >= 0 or w_dp[a, b] != w_dp[b, a] or w_pp[a, b] != w_pp[b, a]:
                continue
            same = True
            for x in range(n):
                if x != a and x != b and (w_dp[a, x] != w_dp[b, x] or w_dp[x, a] != w_dp[x, b]
                                          or w_pp[a, x] != w_pp[b, x] or w_pp[x, a] != w_pp[x, b]):
                    same = False
                    break
            if same:
                cls[b] = a
    return cls


@njit(cache=True)
def _matching_size(cost: np.ndarray, thr: float) -> int:
    """Size of a maximum matching using only entries <= thr (Kuhn's augmenting paths)."""
    m = cost.shape[0]
    match_r = -np.ones(m, np.int64)
    seen = np.empty(m, np.bool_)
    size = 0
    for u in range(m):
        seen[:] = False
        if _augment(cost, thr, u, match_r, seen):
            size += 1
    return size


@njit(cache=True)
def _augment(cost: np.ndarray, thr: float, u: int, match_r: np.ndarray, seen: np.ndarray) -> bool:
    for y in range(cost.shape[0]):
        if cost[u, y] <= thr and not seen[y]:
            seen[y] = True
            if match_r[y] < 0 or _augment(cost, thr, match_r[y], match_r, seen):
                match_r[y] = u
                return True
    return False


@njit(cache=True)
def _pair_costs(ga: np.ndarray, gb: np.ndarray, w_pp: np.ndarray, sub: np.ndarray,
                match: np.ndarray) -> tuple[float, float]:
    """(bottleneck matching cost, how far the bottleneck is from dropping) between two groups.

    The second number is (bottleneck - next lower pair cost) x sqrt(share of devices a matching
    below the bottleneck leaves out): zero when one more good pairing would lower the bottleneck,
    and concave in the devices still in the way, so gathering them in few boundaries pays."""
    m = ga.shape[0]
    for i in range(m):
        for j in range(m):
            sub[i, j] = w_pp[ga[i], gb[j]]
    bott = bottleneck_value(sub, match)
    below = -np.inf
    for i in range(m):
        for j in range(m):
            if sub[i, j] < bott - EPS:
                below = max(below, sub[i, j])
    if below == -np.inf:
        return bott, 0.0
    missing = m - _matching_size(sub, below)
    return bott, (bott - below) * np.sqrt(missing / m)


@njit(cache=True)
def _group_dp(group: np.ndarray, w_dp: np.ndarray) -> float:
    worst = 0.0
    for a in group:
        s = 0.0
        for b in group:
            if a != b:
                s += w_dp[a, b]
        worst = max(worst, s)
    return worst


@njit(cache=True)
def _state(groups: np.ndarray, w_dp: np.ndarray, w_pp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group DP cost and the coarse bottleneck / soft graphs of a partition."""
    k, m = groups.shape
    gdp = np.zeros(k)
    bott, soft = np.zeros((k, k)), np.zeros((k, k))
    sub, match = np.empty((m, m)), np.empty(m, np.int64)
    for j in range(k):
        gdp[j] = _group_dp(groups[j], w_dp)
        for jj in range(j + 1, k):
            b, s = _pair_costs(groups[j], groups[jj], w_pp, sub, match)
            bott[j, jj] = bott[jj, j] = b
            soft[j, jj] = soft[jj, j] = s
    return gdp, bott, soft


@njit(cache=True)
def _cost(gdp: np.ndarray, bott: np.ndarray) -> float:
    """COMM-COST from kept state: the worst group's DP cost plus the open-loop TSP over bottlenecks."""
    return gdp.max() + (open_tsp(bott)[0] if bott.shape[0] > 1 else 0.0)


@njit(cache=True)
def _score(gdp: np.ndarray, bott: np.ndarray, soft: np.ndarray, lam: float) -> float:
    """Search score: the cost with `lam` x the secondary terms folded into the DP and TSP parts
    (the TSP then prefers, among equally cheap orders, the one whose neighbours have cheap partners)."""
    return gdp.max() + lam * gdp.mean() + (open_tsp(bott + lam * soft)[0] if bott.shape[0] > 1 else 0.0)


@njit(cache=True)
def _swap_rows(groups: np.ndarray, ja: int, ia: int, jb: int, ib: int, w_dp: np.ndarray, w_pp: np.ndarray,
               gdp: np.ndarray, bott: np.ndarray, soft: np.ndarray, sub: np.ndarray, match: np.ndarray) -> None:
    """Write into gdp/bott/soft (copies of the kept state) what swapping groups[ja, ia] and
    groups[jb, ib] makes of them; `groups` is swapped and restored."""
    a, b = groups[ja, ia], groups[jb, ib]
    groups[ja, ia], groups[jb, ib] = b, a
    k = groups.shape[0]
    gdp[ja] = _group_dp(groups[ja], w_dp)
    gdp[jb] = _group_dp(groups[jb], w_dp)
    for j in (ja, jb):
        for jj in range(k):
            if jj != j and not (j == jb and jj == ja):
                bb, ss = _pair_costs(groups[j], groups[jj], w_pp, sub, match)
                bott[j, jj] = bott[jj, j] = bb
                soft[j, jj] = soft[jj, j] = ss
    groups[ja, ia], groups[jb, ib] = a, b


@njit(cache=True)
def tabu_search(groups: np.ndarray, w_dp: np.ndarray, w_pp: np.ndarray, cls: np.ndarray, iters: int,
                stall: int, tenure: int, lam: float, seed: int, sample: int = 0) -> tuple[np.ndarray, float]:
    """Run the tabu walk from `groups`; returns the cheapest partition it visited and its cost.

    Stops after `iters` moves, or `stall` moves without a new best cost or score. A tabu move is
    still taken if its score beats the best score seen (aspiration). Tenure is `tenure` plus a
    random 0..tenure. With `sample` > 0 an iteration prices about that many distinct swaps drawn
    at random instead of all of them (large networks whose devices all differ).
    """
    np.random.seed(seed)
    g = groups.copy()
    k, m = g.shape
    gdp, bott, soft = _state(g, w_dp, w_pp)
    cost, score = _cost(gdp, bott), _score(gdp, bott, soft, lam)
    best_g, best_cost, best_score = g.copy(), cost, score
    if k < 2:
        return best_g, best_cost
    tabu_until = np.zeros(w_dp.shape[0], np.int64)
    sub, match = np.empty((m, m)), np.empty(m, np.int64)
    t_gdp, t_bott, t_soft = gdp.copy(), bott.copy(), soft.copy()
    last_gain = 0
    keep = 1.0
    if sample > 0:
        total = 0
        for a in range(w_dp.shape[0]):
            for b in range(a + 1, w_dp.shape[0]):
                total += cls[a] != cls[b]
        keep = min(1.0, sample / max(total, 1))
    for it in range(iters):
        pick_f, pick, ties = np.inf, (-1, -1, -1, -1), 0
        for ja in range(k):
            for ia in range(m):
                a = g[ja, ia]
                if _seen_before(g[ja], ia, cls):
                    continue
                for jb in range(ja + 1, k):
                    for ib in range(m):
                        b = g[jb, ib]
                        if cls[a] == cls[b] or _seen_before(g[jb], ib, cls):
                            continue
                        if keep < 1.0 and np.random.random() > keep:
                            continue
                        t_gdp[:] = gdp
                        t_bott[:, :] = bott
                        t_soft[:, :] = soft
                        _swap_rows(g, ja, ia, jb, ib, w_dp, w_pp, t_gdp, t_bott, t_soft, sub, match)
                        f = _score(t_gdp, t_bott, t_soft, lam)
                        if (tabu_until[a] > it or tabu_until[b] > it) and f >= best_score - EPS:
                            continue
                        if f < pick_f - EPS:
                            pick_f, pick, ties = f, (ja, ia, jb, ib), 1
                        elif f <= pick_f + EPS:
                            ties += 1
                            if np.random.randint(ties) == 0:
                                pick = (ja, ia, jb, ib)
        if pick[0] < 0:
            break
        ja, ia, jb, ib = pick
        _swap_rows(g, ja, ia, jb, ib, w_dp, w_pp, gdp, bott, soft, sub, match)
        a, b = g[ja, ia], g[jb, ib]
        g[ja, ia], g[jb, ib] = b, a
        tabu_until[a] = tabu_until[b] = it + 1 + tenure + np.random.randint(tenure + 1)
        cost, score = _cost(gdp, bott), _score(gdp, bott, soft, lam)
        if score < best_score - EPS:  # progress on the secondary terms counts: it leads off a plateau
            best_score, last_gain = score, it
        if cost < best_cost - EPS:
            best_g, best_cost, last_gain = g.copy(), cost, it
        elif it - last_gain >= stall:
            break
    return best_g, best_cost


@njit(cache=True)
def _seen_before(group: np.ndarray, i: int, cls: np.ndarray) -> bool:
    """Whether a device of the same class as group[i] sits earlier in the group (its swaps are copies)."""
    for x in range(i):
        if cls[group[x]] == cls[group[i]]:
            return True
    return False
