"""A synchronous pipeline lane in virtual time (`labkit.sim.lanes`), checked against timelines
worked out by hand, with the executor's own 1F1B order."""

from __future__ import annotations

import pytest

from labkit.pipeline.schedule import stage_order
from labkit.sim.lanes import lane_seconds

SECONDS = {"forward": [1.0, 0.0], "backward": [2.0, 0.0], "last": [0.0, 3.0]}


def orders(count: int) -> list[list[tuple[str, int]]]:
    return [stage_order("1f1b", 2, s, count) for s in range(2)]


def test_a_lane_waits_on_compute_and_on_its_link_each_way() -> None:
    # stage 0 forwards 0-1 and 1-2; each hand-off takes 0.1 s on the wire and 0.1 s of latency:
    # stage 1 runs 1.2-4.2 and 4.2-7.2; gradients arrive 4.4 and 7.4; stage 0's backwards 4.4-6.4, 7.4-9.4
    assert lane_seconds(orders(2), SECONDS, [(0.2, 10.0)], 1.0) == pytest.approx(9.4)


def test_hand_offs_queue_behind_each_other_on_a_slow_link() -> None:
    # 1.5 s on the wire each: the second activation waits for the first to leave (arrives 4.1, not 2.6)
    # stage 1 runs 2.6-5.6 and 5.6-8.6; gradients arrive 7.2 and 10.2; stage 0's last backward ends 12.2
    assert lane_seconds(orders(2), SECONDS, [(0.2, 10.0)], 15.0) == pytest.approx(12.2)


def test_links_must_join_every_two_stages() -> None:
    with pytest.raises(ValueError, match="links has 0 entries: 1 allowed"):
        lane_seconds(orders(1), SECONDS, [], 1.0)
