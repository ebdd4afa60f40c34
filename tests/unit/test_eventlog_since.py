"""EventLog.since: what the Dask handle polls the coordinator's events with."""

from __future__ import annotations

from labkit.runtime.eventlog import EventLog


def test_since_hands_every_event_once_and_skips_what_the_bounded_history_dropped() -> None:
    log = EventLog(keep=5)
    for i in range(3):
        log.emit({"type": "x", "i": i})
    first, index = log.since(0)
    assert [e["i"] for e in first] == [0, 1, 2] and index == 3
    assert log.since(index) == ([], 3)
    for i in range(3, 9):
        log.emit({"type": "x", "i": i})
    batch, index = log.since(index)
    assert [e["i"] for e in batch] == [4, 5, 6, 7, 8] and index == 9, "event 3 fell out of the history"
    assert [e["i"] for e in log.since(7)[0]] == [7, 8]
