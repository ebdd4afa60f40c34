"""A request deadline learned from a peer's answers (labkit/swarm/deadline.py), as TCP's RTO."""

from __future__ import annotations

import pytest

from labkit.swarm.deadline import FLOOR, Deadline, Deadlines, busy_not_hung


def test_the_first_request_waits_the_ceiling_and_later_ones_what_the_answers_say() -> None:
    d = Deadline(ceiling=30.0)
    assert d.seconds() == 30.0
    for _ in range(200):
        d.answered(2.0)  # a steady peer: the deviation decays, the deadline goes to 2 x its time
    assert d.srtt == pytest.approx(2.0) and d.rttvar < 1e-6
    assert d.seconds() == pytest.approx(4.0)


def test_a_jittery_peer_gets_four_deviations_of_slack() -> None:
    d = Deadline(ceiling=30.0)
    for k in range(400):
        d.answered(1.0 if k % 2 else 3.0)  # 2 s on average, 1 s either way
    assert 1.8 < d.srtt < 2.2 and 0.8 < d.rttvar < 1.2
    assert d.seconds() == pytest.approx(d.srtt + 4 * d.rttvar)
    assert d.seconds() > 3.0  # the slow answers are not late


def test_fast_answers_stop_at_the_floor_and_expiries_double_to_the_ceiling() -> None:
    d = Deadline(ceiling=10.0)
    for _ in range(50):
        d.answered(0.01)
    assert d.seconds() == FLOOR
    waits = []
    for _ in range(6):
        d.expired()
        waits.append(d.seconds())
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    d.answered(0.01)  # an answer forgets the back-off
    assert d.seconds() == FLOOR


def test_a_ceiling_under_the_floor_is_both_and_a_bad_value_is_one_clear_error() -> None:
    assert Deadline(ceiling=0.2).seconds() == 0.2
    d = Deadline(ceiling=0.2)
    d.answered(0.01)
    assert d.seconds() == 0.2
    for bad in ({"ceiling": 0.0}, {"ceiling": 1.0, "floor": -1.0}):
        with pytest.raises(ValueError, match=r"are not allowed: both must be > 0 seconds"):
            Deadlines(**bad)


def test_each_kind_learns_its_own_deadline() -> None:
    kinds = Deadlines(ceiling=30.0, floor=5.0)
    for _ in range(100):
        kinds["prepare"].answered(0.05)
        kinds["outer_reduce"].answered(4.0)
    kinds["commit_step"]  # asked for, never answered
    assert kinds["prepare"].seconds() == 5.0 and kinds["outer_reduce"].seconds() == pytest.approx(8.0)
    assert {k: d.seconds() for k, d in kinds.items()} == {"prepare": 5.0, "outer_reduce": pytest.approx(8.0),
                                                          "commit_step": 30.0}


def test_a_late_request_waits_on_only_while_its_peer_answers_others_and_never_past_the_ceiling() -> None:
    """Sent at 10 s, past its deadline at 12 s: a peer that answered another request at 11 s is
    working through a queue; one whose last answer came before the send (or never) is hung; at
    the next deadline (16 s) only an answer after 12 s counts; nothing waits past the ceiling."""
    assert busy_not_hung(11.0, since=10.0, sent=10.0, now=12.0, ceiling=30.0)
    assert not busy_not_hung(9.5, since=10.0, sent=10.0, now=12.0, ceiling=30.0)
    assert not busy_not_hung(None, since=10.0, sent=10.0, now=12.0, ceiling=30.0)
    assert not busy_not_hung(11.0, since=12.0, sent=10.0, now=16.0, ceiling=30.0)
    assert busy_not_hung(15.0, since=12.0, sent=10.0, now=16.0, ceiling=30.0)
    assert not busy_not_hung(39.0, since=24.0, sent=10.0, now=40.0, ceiling=30.0)
