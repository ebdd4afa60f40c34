"""The direct liveness checks' bookkeeping (backends/dask/liveness.py): a check that answers
teaches its kind's deadline, one that does not answer in time reports the wait it gave, and a
name is never checked twice at once."""

from __future__ import annotations

import threading

from labkit.backends.dask.liveness import LIVENESS_FLOOR, SUSPECT_AFTER, Probes, WorkerBeats, hung_suspects
from labkit.swarm.deadline import BOUNDARY_FLOOR
from tests.waiting import wait_until


def test_an_answer_teaches_the_deadline_and_a_silence_reports_its_wait() -> None:
    probes, outcomes = Probes(), []
    assert probes.deadline("alive").seconds() == BOUNDARY_FLOOR  # nothing learnt: the ceiling
    probes.start("s0p0", "alive", lambda wait: True, lambda wait: outcomes.append(("silent", wait)),
                 lambda: outcomes.append(("answered", None)))
    wait_until(lambda: outcomes, 5, "the first check")
    assert outcomes == [("answered", None)]
    assert probes.deadline("alive").seconds() == LIVENESS_FLOOR  # a fast answer: the floor
    hung = threading.Event()
    probes.start("s0p1", "alive", lambda wait: hung.wait(30), lambda wait: outcomes.append(("silent", wait)))
    wait_until(lambda: len(outcomes) == 2, 10, "the check of the hung peer")
    hung.set()
    assert outcomes[1] == ("silent", LIVENESS_FLOOR)
    assert probes.deadline("alive").seconds() == 2 * LIVENESS_FLOOR  # backed off until the next answer
    assert probes.deadline("running").seconds() == BOUNDARY_FLOOR  # each kind learns on its own
    probes.deadline("running").answered(0.01)
    assert probes.deadline("running").seconds() == BOUNDARY_FLOOR, "a trainer's check keeps its own floor"


def test_a_name_under_check_is_not_checked_again_until_its_check_ends() -> None:
    probes, calls, release = Probes(), [], threading.Event()

    def check(wait: float) -> bool:
        calls.append(wait)
        return release.wait(30)

    probes.start("t0#1", "running", check, lambda wait: None)
    wait_until(lambda: calls, 5, "the first check")
    probes.start("t0#1", "running", check, lambda wait: None)  # under way: ignored
    probes.start("t1#1", "running", check, lambda wait: None)  # another name: checked
    wait_until(lambda: len(calls) == 2, 5, "the other name's check")
    release.set()
    wait_until(lambda: not probes._running, 10, "both checks to end")
    probes.start("t0#1", "running", check, lambda wait: None)  # ended: checked again
    wait_until(lambda: len(calls) == 3, 5, "the check after the first ended")


def test_a_workers_silence_is_timed_here_from_changes_of_the_schedulers_last_seen() -> None:
    beats = WorkerBeats()
    table = {"a": {"last_seen": 1e9}, "b": {"last_seen": 5.0}}  # another clock: only compared with itself
    assert beats.update(table, now=100.0) == {"a": 0.0, "b": 0.0}
    table = {"a": {"last_seen": 1e9 + 0.5}, "b": {"last_seen": 5.0}}
    assert beats.update(table, now=104.0) == {"a": 0.0, "b": 4.0}  # a beat, b did not
    beats.answered("b", now=105.0)
    assert beats.update(table, now=106.0) == {"a": 2.0, "b": 1.0}
    assert beats.update({"a": table["a"]}, now=107.0) == {"a": 3.0}, "a worker that left is forgotten"


def test_only_a_worker_silent_well_beyond_the_typical_one_is_suspected() -> None:
    assert hung_suspects({}, ["a"]) == []
    assert hung_suspects({"a": 0.2, "b": 0.4, "c": 0.3}, "abc") == []
    assert hung_suspects({"a": 0.2, "b": SUSPECT_AFTER + 1.0, "c": 0.3}, "abc") == ["b"]
    assert hung_suspects({"a": 0.2, "b": SUSPECT_AFTER + 1.0, "c": 0.3}, "ac") == [], "only those asked about"
    lagging = {"a": SUSPECT_AFTER + 1.0, "b": SUSPECT_AFTER + 1.5, "c": SUSPECT_AFTER + 0.8}
    assert hung_suspects(lagging, "abc") == [], "every heartbeat late alike: the scheduler or this process lags"
