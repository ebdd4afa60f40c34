"""Adaptive rebalancing: SWARM's Algorithm 2 as a pure decision over published queue lengths.

Every T seconds each peer publishes its queue length under its stage's key. Each stage's load is
the sum of its peers' queues. The least-loaded peer of the least-loaded stage moves to the most
loaded stage. New peers join the stage this rule would send a mover to. No threads, no torch: the
runtime and the simulator call the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    """Move `peer` from stage `source` to stage `target`."""

    peer: str
    source: int
    target: int


def stage_loads(queues: Mapping[str, tuple[int, float]], num_stages: int) -> list[float]:
    """Sum of queue lengths per stage; `queues` maps peer -> (stage, queue length)."""
    loads = [0.0] * num_stages
    for stage, length in queues.values():
        loads[stage] += length
    return loads


def _peer_counts(queues: Mapping[str, tuple[int, float]], num_stages: int) -> list[int]:
    counts = [0] * num_stages
    for stage, _ in queues.values():
        counts[stage] += 1
    return counts


def _extremes(loads: list[float]) -> tuple[int, int]:
    """(s_min, s_max) as Algorithm 2 scans them: strict comparisons, so the first stage wins ties."""
    s_min = min(range(len(loads)), key=lambda s: (loads[s], s))
    s_max = max(range(len(loads)), key=lambda s: (loads[s], -s))
    return s_min, s_max


def choose_move(queues: Mapping[str, tuple[int, float]], num_stages: int) -> Move | None:
    """Algorithm 2: the least-loaded peer of the least-loaded stage moves to the most-loaded one.

    A stage's load is the sum of its peers' queue lengths, as in the paper. Returns None when all
    loads are equal, or when the move would leave the source stage without peers (the paper's
    pseudocode does not guard this; an empty stage halts the pipeline). Ties break toward the
    lower stage index and then the peer name, so every peer computes the same move.
    """
    if num_stages < 2:
        return None
    counts = _peer_counts(queues, num_stages)
    if 0 in counts:
        return None
    loads = stage_loads(queues, num_stages)
    s_min, s_max = _extremes(loads)
    if loads[s_max] <= loads[s_min] or counts[s_min] < 2:
        return None
    candidates = sorted((length, peer) for peer, (stage, length) in queues.items() if stage == s_min)
    return Move(peer=candidates[0][1], source=s_min, target=s_max)


def join_stage(queues: Mapping[str, tuple[int, float]], num_stages: int) -> int:
    """The stage a new peer joins: the first stage with no peers, else the most loaded one."""
    counts = _peer_counts(queues, num_stages)
    if 0 in counts:
        return counts.index(0)
    return _extremes(stage_loads(queues, num_stages))[1]
