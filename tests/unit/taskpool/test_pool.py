"""One stage's bookkeeping: split by compute, the BS list, gradient routing, the task pool."""

from __future__ import annotations

import pytest

from labkit.taskpool import StagePool, Work


def _stage(samples: int = 12, **kw: float) -> StagePool:
    pool = StagePool(samples, ("fs",), ("bs",), slack=2.0, grace=1.0, **kw)
    pool.client_joined("fast", 2.0, 0.0)
    pool.client_joined("slow", 1.0, 0.0)
    return pool


def _run(pool: StagePool, client: str, now: float):
    task = pool.next_task(client, now)
    return task, pool.client_done(task, now + 1.0)


def test_forward_split_by_compute_and_gradients_routed_by_the_list() -> None:
    pool = _stage()
    pool.forward_ready(0, 0.0)
    a, done_a = _run(pool, "fast", 0.0)
    assert (a.kind, a.start, a.end) == ("forward", 0, 8) and not done_a.forward_complete
    b, done_b = _run(pool, "slow", 0.0)
    assert (b.start, b.end) == (8, 12) and done_b.forward_complete
    assert pool.route(0) == [("fast", 0, 8), ("slow", 8, 12)]
    pool.backward_ready(0, 2.0)
    ga = pool.next_task("slow", 2.0)
    assert (ga.kind, ga.start, ga.end) == ("backward", 8, 12)  # the gradient goes to its producer
    assert pool.client_done(ga, 3.0).credited
    assert pool.client_done(pool.next_task("fast", 2.0), 4.0).backward_complete
    assert pool.ready() and pool.stats()["repeated_beyond_lost"] == 0 and pool.stats()["lost_samples"] == 0


def test_a_new_speed_re_splits_the_next_microbatch_and_moves_the_deadlines() -> None:
    pool = _stage()
    pool.set_speed("slow", 6.0)  # measured: "slow" is now three times as fast as "fast"
    pool.forward_ready(0, 0.0)
    a, b = pool.next_task("fast", 0.0), pool.next_task("slow", 0.0)
    assert (a.start, a.end, b.start, b.end) == (0, 3, 3, 12)
    assert b.deadline == pytest.approx(1.0 + 2.0 * 9 / 6.0)
    with pytest.raises(ValueError, match="not live or speed 0"):
        pool.set_speed("slow", 0)
    with pytest.raises(ValueError, match="'gone' not live"):
        pool.set_speed("gone", 1.0)


def test_a_timed_out_forward_goes_to_the_pool_and_a_late_result_is_dropped() -> None:
    pool = _stage()
    pool.forward_ready(0, 0.0)
    slow = pool.next_task("slow", 0.0)
    assert slow.deadline == pytest.approx(0.0 + 1.0 + 2.0 * 4 / 1.0)
    fast, _ = _run(pool, "fast", 0.0)
    assert pool.timeout(8.9) == [] and pool.next_deadline() == pytest.approx(9.0)
    assert pool.timeout(9.0) == ["slow"] and pool.pool_depth == 1
    redo = pool.next_task("fast", 9.0)
    assert (redo.kind, redo.start, redo.end) == ("forward", 8, 12)
    assert not pool.client_done(slow, 9.5).credited  # the late answer of a client given up on
    assert pool.client_done(redo, 10.0).forward_complete
    assert pool.route(0) == [("fast", 0, 8), ("fast", 8, 12)]
    assert pool.forward_runs(0) == (1,) * 8 + (2,) * 4
    stats = pool.stats()
    assert stats["lost_samples"] == 4 and stats["discarded_samples"] == 4 and stats["repeated_beyond_lost"] == 0


def test_a_lost_producer_leaves_a_recompute_task_for_its_slice_only() -> None:
    pool = _stage()
    pool.forward_ready(0, 0.0)
    _run(pool, "fast", 0.0)
    _run(pool, "slow", 0.0)
    assert pool.client_lost("slow", 2.0) == []  # nothing held yet: its stash is lost, no task until the gradient
    pool.backward_ready(0, 3.0)
    assert pool.pool_depth == 1
    first = pool.next_task("fast", 3.0)
    assert first.kind == "backward" and (first.start, first.end) == (0, 8)  # own queue before the pool
    pool.client_done(first, 4.0)
    left = pool.next_task("fast", 4.0)
    assert (left.kind, left.start, left.end) == ("recompute", 8, 12)
    assert pool.frontal_of(left.start, left.end) == [("fs", 8, 12)]  # where it fetches the activations
    assert pool.client_done(left, 5.0).backward_complete and pool.ready()
    assert pool.forward_runs(0) == (1,) * 8 + (2,) * 4 and pool.stats()["repeated_beyond_lost"] == 0


def test_unflushed_gradients_die_with_the_client_and_flushed_ones_do_not() -> None:
    pool = _stage()
    pool.forward_ready(0, 0.0)
    for client in ("fast", "slow"):
        _run(pool, client, 0.0)
    pool.backward_ready(0, 2.0)
    for client in ("fast", "slow"):
        _run(pool, client, 2.0)
    assert pool.ready() and pool.flush("fast") == 8
    posted = pool.client_lost("fast", 4.0) + pool.client_lost("slow", 4.0)
    assert posted == [Work("recompute", 0, 8, 12)] and not pool.ready()
    assert pool.credits(0) == [("fast", 0, 8)]


def test_a_silent_client_with_pushed_work_times_out() -> None:
    pool = _stage()
    pool.forward_ready(0, 0.0)
    _run(pool, "fast", 0.0)  # "slow" never asks for its slice
    assert pool.next_deadline() == pytest.approx(0.0 + 1.0 + 2.0 * 4 / 1.0)
    assert pool.timeout(9.0) == ["slow"] and pool.next_task("fast", 9.0).start == 8


def test_without_clients_the_whole_microbatch_waits_in_the_pool_for_a_joiner() -> None:
    pool = StagePool(5, ("f1", "f2"), ("b1",))
    pool.forward_ready(7, 0.0)
    assert pool.pool_depth == 1
    pool.client_joined("late", 1.0, 3.0)
    task = pool.next_task("late", 3.0)
    assert (task.microbatch, task.start, task.end) == (7, 0, 5)
    assert pool.frontal_of(0, 5) == [("f1", 0, 2), ("f2", 2, 5)] and pool.backward_of(1, 3) == [("b1", 1, 3)]
    with pytest.raises(ValueError, match="not finished"):
        pool.advance()


def test_bad_calls_are_refused() -> None:
    pool = _stage()
    with pytest.raises(ValueError, match="already live"):
        pool.client_joined("fast", 1.0, 0.0)
    with pytest.raises(ValueError, match="not a live client"):
        pool.next_task("ghost", 0.0)
    pool.forward_ready(0, 0.0)
    with pytest.raises(ValueError, match="already entered"):
        pool.forward_ready(0, 0.0)
    with pytest.raises(ValueError, match="forward not complete"):
        pool.backward_ready(0, 0.0)
