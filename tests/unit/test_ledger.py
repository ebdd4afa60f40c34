"""The step ledger keeps every stage at exactly the global batch through faults."""

from __future__ import annotations

import pytest

from labkit.swarm.ledger import StepLedger


def test_full_step_is_ready_only_when_every_stage_is_credited() -> None:
    ledger = StepLedger(num_stages=2, microbatches=2, microbatch_size=4)
    a, b = ledger.next_task(), ledger.next_task()
    assert ledger.next_task() is None and a.stages == b.stages == frozenset({0, 1})
    ledger.finish(a, {0: "x", 1: "y"}, loss=1.0)
    ledger.finish(b, {1: "y"})  # backward failed before stage 0
    assert not ledger.ready()
    c = ledger.next_task()
    assert c.microbatch == b.microbatch and c.stages == frozenset({0})
    ledger.finish(c, {0: "z"})
    assert ledger.ready() and ledger.samples(0) == {"x": 4, "z": 4} and ledger.samples(1) == {"y": 8}


def test_lost_peer_credits_are_recomputed_only_where_lost() -> None:
    ledger = StepLedger(num_stages=3, microbatches=3, microbatch_size=2)
    tasks = [ledger.next_task() for _ in range(3)]
    for t in tasks:
        ledger.finish(t, {0: "a", 1: "b" if t.microbatch < 2 else "c", 2: "d"}, loss=0.5)
    assert ledger.ready()
    assert ledger.peer_lost("b") == 4
    redo = [ledger.next_task(), ledger.next_task()]
    assert [t.stages for t in redo] == [frozenset({1}), frozenset({1})]
    for t in redo:
        ledger.finish(t, {1: "c"})
    assert ledger.ready() and ledger.samples(1) == {"c": 6}
    assert ledger.loss() == pytest.approx(1.5)


def test_credits_to_a_dead_peer_are_ignored() -> None:
    ledger = StepLedger(num_stages=1, microbatches=1, microbatch_size=1)
    task = ledger.next_task()
    ledger.peer_lost("p")  # dies while the attempt is in flight
    ledger.finish(task, {0: "p"}, loss=3.0)
    assert not ledger.ready() and ledger.next_task().stages == frozenset({0})


def test_advance_starts_a_fresh_step() -> None:
    ledger = StepLedger(num_stages=1, microbatches=1, microbatch_size=1)
    ledger.finish(ledger.next_task(), {0: "p"})
    ledger.advance()
    assert ledger.step == 1 and not ledger.ready() and ledger.next_task().step == 1
