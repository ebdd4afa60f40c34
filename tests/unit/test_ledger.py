"""The step ledger keeps every stage at exactly the global batch through faults."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.swarm.ledger import StepLedger, Verdict, reconcile


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


# -- the reconcile rule: property-style, every branch ------------------------------------------
keys = st.tuples(st.integers(0, 3), st.integers(0, 7), st.integers(1, 50))
attempt_maps = st.dictionaries(keys, st.integers(1, 8), max_size=6)


@given(attempt_maps)
def test_a_sum_holding_exactly_its_credits_is_kept(owed: dict) -> None:
    assert reconcile({"p": owed}, {"p": dict(owed)}) == {"p": Verdict("keep")}


@given(attempt_maps, keys, st.integers(1, 8))
def test_a_sum_holding_an_uncredited_attempt_is_dropped(owed: dict, key: tuple, extra: int) -> None:
    """A new attempt, or more samples of a credited one (it accumulated twice): drop, naming it."""
    held = dict(owed)
    held[key] = held.get(key, 0) + extra
    verdict = reconcile({"p": owed}, {"p": held})["p"]
    assert verdict == Verdict("drop", extra=(key,)) and str(key) in verdict.why


@given(attempt_maps.filter(bool), st.data())
def test_a_sum_lacking_a_credited_attempt_is_broken_whatever_else_it_holds(owed: dict, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(owed)))
    held = dict(owed)
    held[key] -= data.draw(st.integers(1, owed[key]))  # fewer samples of it, or none
    if held[key] == 0 and data.draw(st.booleans()):
        del held[key]
    extra = data.draw(attempt_maps)
    for k, n in extra.items():
        if k not in owed:
            held[k] = n
    verdict = reconcile({"p": owed}, {"p": held})["p"]
    assert verdict.action == "broken" and verdict.missing == (key,) and str(key) in verdict.why


@given(attempt_maps, st.booleans())
def test_a_peer_that_reports_nothing_is_dropped_its_credits_recomputed(owed: dict, absent: bool) -> None:
    """Dead or silent (None, or missing from the reports): its credits go back, whatever they were."""
    verdict = reconcile({"p": owed}, {} if absent else {"p": None})["p"]
    assert verdict == Verdict("drop", reported=False) and verdict.why == "it reported no gradient sum"


@given(attempt_maps)
def test_a_peer_credited_nothing_keeps_an_empty_sum_and_drops_any_other(held: dict) -> None:
    assert reconcile({}, {"p": held})["p"].action == ("drop" if held else "keep")


@given(st.dictionaries(st.sampled_from("abcde"), attempt_maps, max_size=5), st.data())
def test_each_peer_is_judged_on_its_own(credited: dict, data: st.DataObject) -> None:
    """One peer's verdict depends on its own credits and report only."""
    reported = {p: dict(owed) for p, owed in credited.items()}
    odd = data.draw(st.sampled_from(sorted(credited))) if credited else None
    if odd is not None:
        reported[odd] = None
    verdicts = reconcile(credited, reported)
    assert set(verdicts) == set(credited)
    assert all(v.action == ("drop" if p == odd else "keep") for p, v in verdicts.items())


def test_credits_name_the_attempt_and_withdrawal_clears_them() -> None:
    """The ledger's credited attempts are what `reconcile` compares against; a withdrawn peer has none."""
    ledger = StepLedger(num_stages=2, microbatches=2, microbatch_size=3, step=5)
    a, b = ledger.next_task(), ledger.next_task()
    ledger.finish(a, {0: "x", 1: "y"})
    ledger.finish(b, {0: "x", 1: "z"})
    assert a.key == (5, 0, 1) and ledger.credited(0) == {"x": {a.key: 3, b.key: 3}}
    assert ledger.credited(1) == {"y": {a.key: 3}, "z": {b.key: 3}}
    assert ledger.withdraw("x") == 6 and ledger.credited(0) == {} and ledger.samples(1) == {"y": 3, "z": 3}
