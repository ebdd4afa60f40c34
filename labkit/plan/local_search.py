"""Local searches used inside DT-FM's hybrid genetic algorithm (the DT-FM paper, Section 3.4).

`dtfm_local_search`: the paper's strategy. Only the fastest intra-group links are considered,
four swap candidates per pair of groups ranked by the paper's gain; when no pair swap improves,
the circular variant moves one device around a cycle of three groups. Moves are tried best gain
first and kept only if the full cost model (Eq. 1) says the cost went down.

`kl_local_search`: the Kernighan-Lin baseline. Passes of greedy best-gain swaps on the summed
intra-group DP link cost, each swapped pair locked; a pass keeps its best prefix by true cost.

`tabu_local_search`: labkit's search (`labkit.kernels.plan_tabu`). Every single swap is priced
with the full cost model, incrementally; the best non-tabu one is taken even when it is sideways
or uphill, so plateaus are crossed. `structured_partitions` gives it starting points that follow
the network's own clusters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labkit.kernels.plan_moves import cycle_moves, kl_best_swap, pair_swap_moves
from labkit.kernels.plan_tabu import tabu_search

CostFn = Callable[[np.ndarray], float]
EPS = 1e-12


def dtfm_local_search(cost: CostFn, groups: np.ndarray, w_pp: np.ndarray, *, tries: int = 12,
                      max_moves: int = 200) -> tuple[np.ndarray, float]:
    """Improve a partition with the paper's moves until none of the `tries` best-gain moves helps.

    >>> import numpy as np
    >>> w = np.ones((4, 4)); g = np.array([[0, 1], [2, 3]])
    >>> dtfm_local_search(lambda g: 1.0, g, w)[1]
    1.0
    """
    groups = groups.copy()
    current = cost(groups)
    for _ in range(max_moves):
        moved = False
        # 1. pair swaps between two groups: d1 <-> d1' among the fastest-link ends
        moves = pair_swap_moves(groups, w_pp)
        for row in moves[np.argsort(-moves[:, 0], kind="stable")][:tries]:
            j, a, jj, b = (int(v) for v in row[1:])
            trial = groups.copy()
            trial[j, a], trial[jj, b] = groups[jj, b], groups[j, a]
            c = cost(trial)
            if c < current - EPS:
                groups, current, moved = trial, c, True
                break
        if moved:
            continue
        # 2. circular variant: each of three groups hands one device to the next
        moves = cycle_moves(groups, w_pp)
        for row in moves[np.argsort(-moves[:, 0], kind="stable")][:tries]:
            (j1, p1, j2, p2, j3, p3) = (int(v) for v in row[1:])
            trial = groups.copy()
            trial[j2, p2], trial[j3, p3], trial[j1, p1] = groups[j1, p1], groups[j2, p2], groups[j3, p3]
            c = cost(trial)
            if c < current - EPS:
                groups, current, moved = trial, c, True
                break
        if not moved:
            break
    return groups, current


def labels_of(groups: np.ndarray) -> np.ndarray:
    """Device -> group index."""
    labels = np.empty(groups.size, np.int64)
    for j, row in enumerate(groups):
        labels[row] = j
    return labels


def groups_of(labels: np.ndarray, k: int) -> np.ndarray:
    """Group index per device -> (K, M) device indices (ascending inside each group)."""
    return np.stack([np.flatnonzero(labels == j) for j in range(k)])


def kl_local_search(cost: CostFn, groups: np.ndarray, w_dp: np.ndarray, *,
                    passes: int = 4) -> tuple[np.ndarray, float]:
    """Kernighan-Lin passes; stops when a pass does not lower the true cost."""
    k = groups.shape[0]
    best_groups, best = groups.copy(), cost(groups)
    for _ in range(passes):
        start = best
        labels = labels_of(best_groups)
        locked = np.zeros(len(labels), np.bool_)
        for _ in range(len(labels) // 2):
            a, b, _gain = kl_best_swap(labels, locked, w_dp, k)
            if a < 0:
                break
            labels[a], labels[b] = labels[b], labels[a]
            locked[a] = locked[b] = True
            trial = groups_of(labels, k)
            c = cost(trial)
            if c < best - EPS:
                best_groups, best = trial, c
        if best >= start - EPS:
            break
    return best_groups, best


def tabu_local_search(groups: np.ndarray, w_dp: np.ndarray, w_pp: np.ndarray, classes: np.ndarray, *,
                      seed: int = 0, iters: int = 300, stall: int = 30, tenure: int = 7,
                      lam: float = 0.3, sample: int = 400) -> np.ndarray:
    """The cheapest partition a tabu walk from `groups` visits (see `labkit.kernels.plan_tabu`)."""
    return tabu_search(groups, w_dp, w_pp, classes, iters, stall, tenure, lam, seed, sample)[0]


def cluster_order(w: np.ndarray, gap: float = 1.25) -> np.ndarray:
    """Devices with each cluster (machine, region) contiguous, biggest clusters first.

    Two devices are linked when their pair cost is within `gap` x the cheaper of their own cheapest
    links; clusters are the connected parts. Inside the order, devices follow a nearest-neighbour
    walk on `w` from device 0, which also orders clusters of equal size by how close they are."""
    n = w.shape[0]
    off = w + np.diag(np.full(n, np.inf))
    nearest = off.min(axis=1)
    linked = off <= gap * np.minimum.outer(nearest, nearest)
    label = -np.ones(n, np.int64)
    for start in range(n):
        if label[start] >= 0:
            continue
        label[start], stack = start, [start]
        while stack:
            for y in np.flatnonzero(linked[stack.pop()] & (label < 0)):
                label[y] = start
                stack.append(int(y))
    walk = np.empty(n, np.int64)
    free = np.ones(n, bool)
    walk[0], free[0] = 0, False
    for i in range(1, n):
        walk[i] = int(np.argmin(np.where(free, off[walk[i - 1]], np.inf)))
        free[walk[i]] = False
    size = np.bincount(label, minlength=n)
    first = np.empty(n, np.int64)
    first[walk[::-1]] = np.arange(n)[::-1]  # first[d]: position of d in the walk
    first_of_cluster = np.full(n, n)
    np.minimum.at(first_of_cluster, label, first)
    return walk[np.lexsort((first[walk], first_of_cluster[label[walk]], -size[label[walk]]))]


def structured_partitions(w: np.ndarray, k: int) -> list[np.ndarray]:
    """Starting partitions shaped by the network: devices in `cluster_order` are cut into
    b consecutive blocks for every divisor b of k, and each block is dealt round-robin over k / b
    groups. b = k keeps clusters together (cheap DP), b = 1 spreads every cluster over all groups
    (cheap matchings between stages), the others mix the two."""
    n = w.shape[0]
    order = cluster_order(w)
    out = []
    for b in (d for d in range(1, k + 1) if k % d == 0):
        size = n // b
        rows = [order[i * size:(i + 1) * size].reshape(-1, k // b).T for i in range(b)]
        out.append(np.sort(np.concatenate(rows), axis=1))
    return out
