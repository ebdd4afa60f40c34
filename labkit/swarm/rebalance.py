"""Adaptive rebalancing: SWARM's Algorithm 2 as a pure decision over published queue lengths.

Every T seconds each peer publishes its queue length under its stage's key. Each stage's load is
the sum of its peers' queues. The least-loaded peer of the least-loaded stage moves to the most
loaded stage. New peers join the stage this rule would send a mover to. No threads, no torch: the
runtime and the simulator run the same numba kernels (`labkit.kernels.rebalance`); these functions
translate peer names to the kernels' arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from labkit.kernels.rebalance import rebalance_join, rebalance_move


@dataclass(frozen=True)
class Move:
    """Move `peer` from stage `source` to stage `target`."""

    peer: str
    source: int
    target: int


def _arrays(queues: Mapping[str, tuple[int, float]], num_stages: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Peer names, stages and queue lengths as arrays in `queues` order (so loads sum alike)."""
    names = list(queues)
    stage = np.fromiter((queues[p][0] for p in names), np.int64, len(names))
    if len(names) and (stage.min() < 0 or stage.max() >= num_stages):
        bad = next(p for p in names if not 0 <= queues[p][0] < num_stages)
        raise ValueError(f"queues[{bad!r}] stage={queues[bad][0]!r} is not allowed: it must be in [0, {num_stages})")
    queue = np.fromiter((float(queues[p][1]) for p in names), np.float64, len(names))
    return names, stage, queue


def choose_move(queues: Mapping[str, tuple[int, float]], num_stages: int) -> Move | None:
    """Algorithm 2: the least-loaded peer of the least-loaded stage moves to the most-loaded one.

    A stage's load is the sum of its peers' queue lengths, as in the paper. Returns None when all
    loads are equal, or when the move would leave the source stage without peers (the paper's
    pseudocode does not guard this; an empty stage halts the pipeline). Ties break toward the
    lower stage index and then the peer name, so every peer computes the same move.
    """
    names, stage, queue = _arrays(queues, num_stages)
    rank = np.empty(len(names), np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    peer, source, target = rebalance_move(stage, queue, rank, num_stages)
    return None if peer < 0 else Move(peer=names[peer], source=int(source), target=int(target))


def join_stage(queues: Mapping[str, tuple[int, float]], num_stages: int, starting: Mapping[int, int] | None = None) -> int:
    """The stage a new peer joins: the first stage with no peers, else the most loaded one (ties:
    the fewest peers, then the lower index: with every queue empty, the thinnest stage).

    `starting`: peers already joining each stage (chosen, not yet serving). Each counts as a peer
    of its stage that will take an equal share of the stage's load, so that several workers
    joining at once spread over the stages instead of all taking the one most loaded before any
    of them serves (four restarted Dask workers once all joined one stage, leaving the other one peer)."""
    _, stage, queue = _arrays(queues, num_stages)
    pending = np.array([(starting or {}).get(s, 0) for s in range(num_stages)], np.int64)
    counts = np.bincount(stage, minlength=num_stages)
    share = counts / np.maximum(counts + pending, 1)
    queue = np.concatenate([queue * share[stage], np.zeros(int(pending.sum()))])
    stage = np.concatenate([stage, np.repeat(np.arange(num_stages), pending)])
    return int(rebalance_join(stage, queue, num_stages))
