"""SWARM Algorithm 2 over peer arrays: which peer moves where, and which stage a newcomer joins.

`stage[i]` is peer i's stage (-1 = absent), `queue[i]` its published queue length and `rank[i]`
its position in name order (ties among equal queues go to the smallest name, so every peer
computes the same move). A stage's load is the sum of its peers' queues. `choose_move` and
`join_stage` in `labkit.swarm.rebalance` and both simulators call these kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _stage_totals(stage, queue, num_stages):
    loads = np.zeros(num_stages)
    counts = np.zeros(num_stages, np.int64)
    for i in range(stage.shape[0]):
        s = stage[i]
        if s >= 0:
            loads[s] += queue[i]
            counts[s] += 1
    return loads, counts


@njit(cache=True)
def _extremes(loads):
    s_min = 0
    s_max = 0
    for s in range(1, loads.shape[0]):  # strict comparisons: the first stage wins ties
        if loads[s] < loads[s_min]:
            s_min = s
        if loads[s] > loads[s_max]:
            s_max = s
    return s_min, s_max


@njit(cache=True)
def rebalance_move(stage: np.ndarray, queue: np.ndarray, rank: np.ndarray, num_stages: int) -> tuple[int, int, int]:
    """(peer, source, target) of Algorithm 2's move, or (-1, -1, -1) when nobody should move.

    Nobody moves when there is one stage, a stage is empty, all loads are equal, or the move
    would leave the least-loaded stage without peers.
    """
    if num_stages < 2:
        return -1, -1, -1
    loads, counts = _stage_totals(stage, queue, num_stages)
    for s in range(num_stages):
        if counts[s] == 0:
            return -1, -1, -1
    s_min, s_max = _extremes(loads)
    if loads[s_max] <= loads[s_min] or counts[s_min] < 2:
        return -1, -1, -1
    best = -1
    for i in range(stage.shape[0]):
        if stage[i] == s_min:
            if best < 0 or queue[i] < queue[best] or (queue[i] == queue[best] and rank[i] < rank[best]):
                best = i
    return best, s_min, s_max


@njit(cache=True)
def rebalance_join(stage: np.ndarray, queue: np.ndarray, num_stages: int) -> int:
    """Stage a new peer joins: the first stage with no peers, else the most loaded one; among
    equally loaded stages (every queue empty, say), the one with the fewest peers, then the first."""
    loads, counts = _stage_totals(stage, queue, num_stages)
    best = 0
    for s in range(num_stages):
        if counts[s] == 0:
            return s
        if loads[s] > loads[best] or (loads[s] == loads[best] and counts[s] < counts[best]):
            best = s
    return best


def _totals_py(stage: np.ndarray, queue: np.ndarray, num_stages: int) -> tuple[list[float], list[int]]:
    loads, counts = [0.0] * num_stages, [0] * num_stages
    for s, q in zip(stage.tolist(), queue.tolist()):
        if s >= 0:
            loads[s] += q
            counts[s] += 1
    return loads, counts


def rebalance_move_py(stage: np.ndarray, queue: np.ndarray, rank: np.ndarray, num_stages: int) -> tuple[int, int, int]:
    """Plain-Python twin of `rebalance_move`."""
    if num_stages < 2:
        return -1, -1, -1
    loads, counts = _totals_py(stage, queue, num_stages)
    if 0 in counts:
        return -1, -1, -1
    s_min = min(range(num_stages), key=lambda s: (loads[s], s))
    s_max = max(range(num_stages), key=lambda s: (loads[s], -s))
    if loads[s_max] <= loads[s_min] or counts[s_min] < 2:
        return -1, -1, -1
    peer = min((i for i in range(len(stage)) if stage[i] == s_min), key=lambda i: (queue[i], rank[i]))
    return peer, s_min, s_max


def rebalance_join_py(stage: np.ndarray, queue: np.ndarray, num_stages: int) -> int:
    """Plain-Python twin of `rebalance_join`."""
    loads, counts = _totals_py(stage, queue, num_stages)
    if 0 in counts:
        return counts.index(0)
    return max(range(num_stages), key=lambda s: (loads[s], -counts[s], -s))
