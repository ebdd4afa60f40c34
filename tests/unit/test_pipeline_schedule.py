"""The synchronous pipeline's pure schedule: dealing, each stage's order under 1F1B and GPipe, the bubble."""

from __future__ import annotations

import pytest

from labkit.pipeline.schedule import BACKWARD, FORWARD, LAST, bubble, deal, stage_order


def test_microbatches_are_dealt_to_the_lanes_round_robin() -> None:
    assert deal(5, 2) == [[0, 2, 4], [1, 3]]
    assert deal(4, 1) == [[0, 1, 2, 3]]


def _held(order: list[tuple[str, int]]) -> int:
    """The most microbatches whose activations a stage holds at once under `order`."""
    held = most = 0
    for kind, _ in order:
        held += {FORWARD: 1, BACKWARD: -1, LAST: 0}[kind]
        most = max(most, held)
    return most


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("stages", "count"), [(1, 4), (2, 1), (2, 4), (4, 2), (4, 8)])
def test_every_stage_runs_each_microbatch_forward_then_backward_once(schedule: str, stages: int, count: int) -> None:
    for stage in range(stages):
        order = stage_order(schedule, stages, stage, count)
        if stage == stages - 1:
            assert order == [(LAST, i) for i in range(count)]
            continue
        assert sorted(order) == sorted([(FORWARD, i) for i in range(count)] + [(BACKWARD, i) for i in range(count)])
        assert [i for k, i in order if k == FORWARD] == [i for k, i in order if k == BACKWARD] == list(range(count))
        assert all(order.index((FORWARD, i)) < order.index((BACKWARD, i)) for i in range(count))
        assert _held(order) == (min(stages - stage, count) if schedule == "1f1b" else count)


def test_1f1b_warms_up_then_alternates_then_cools_down() -> None:
    f, b = FORWARD, BACKWARD
    assert stage_order("1f1b", 3, 0, 4) == [(f, 0), (f, 1), (f, 2), (b, 0), (f, 3), (b, 1), (b, 2), (b, 3)]
    assert stage_order("1f1b", 3, 1, 4) == [(f, 0), (f, 1), (b, 0), (f, 2), (b, 1), (f, 3), (b, 2), (b, 3)]


def test_the_bubble_is_the_idle_share_of_every_peers_step() -> None:
    assert bubble([1.0, 1.0], 1.0) == 0.0
    assert bubble([1.0, 0.5], 1.0) == pytest.approx(0.25)
    assert bubble([0.0, 0.0, 0.0, 0.0], 2.0) == 1.0
    assert bubble([1.0], 0.0) == 0.0
