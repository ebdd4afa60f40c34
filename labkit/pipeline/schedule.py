"""The pure part of a synchronous pipeline: which lane gets which microbatch, the order a stage
runs its share (1F1B or GPipe), and the bubble of a step. No torch, no threads."""

from __future__ import annotations

from collections.abc import Sequence

FORWARD, BACKWARD, LAST = "forward", "backward", "last"  # LAST: the last stage's forward, loss and backward at once


def deal(microbatches: int, lanes: int) -> list[list[int]]:
    """The step's microbatches dealt to the lanes round-robin: lane r gets r, r + lanes, ..."""
    return [list(range(lane, microbatches, lanes)) for lane in range(lanes)]


def stage_order(schedule: str, stages: int, stage: int, count: int) -> list[tuple[str, int]]:
    """The order in which `stage` of a lane runs its `count` microbatches (0..count-1), as (kind, index).

    1F1B: stages - 1 - stage warm-up forwards, then one forward and one backward in turn, then the
    cool-down backwards; at most stages - stage microbatches are held at once. GPipe: every
    forward, then every backward. The last stage runs each microbatch's forward, loss and backward
    as one request (LAST), so its turn is the same in both."""
    if stage == stages - 1:
        return [(LAST, i) for i in range(count)]
    if schedule == "gpipe":
        return [(FORWARD, i) for i in range(count)] + [(BACKWARD, i) for i in range(count)]
    warm = min(stages - 1 - stage, count)
    order = [(FORWARD, i) for i in range(warm)]
    for i in range(warm, count):
        order += [(FORWARD, i), (BACKWARD, i - warm)]
    return order + [(BACKWARD, i) for i in range(count - warm, count)]


def bubble(busy: Sequence[float], seconds: float) -> float:
    """The idle share of a step: the time the peers (stages x lanes of them) were not computing,
    over stages x lanes x the step's seconds; 0 for a step that took no time."""
    if seconds <= 0 or not busy:
        return 0.0
    return max(0.0, 1.0 - sum(busy) / (len(busy) * seconds))
