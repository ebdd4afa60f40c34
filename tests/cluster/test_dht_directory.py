"""The hivemind DHT directory: peers announce under their stage's key, others discover them, a
withdrawn peer vanishes at once and a peer that stops refreshing vanishes at its expiration; a
trainer's heartbeat lapses the same way."""

from __future__ import annotations

import time

import pytest

from labkit.backends.dask import dht
from tests.waiting import wait_until


@pytest.fixture
def two_nodes():
    """Two real DHT nodes on loopback (each with its own p2p daemon); shut down at the end."""
    first = dht.DhtNode([])
    second = dht.DhtNode(first.maddrs())
    yield first, second
    second.shutdown()
    first.shutdown()


def _published(directory: dht.StageDirectory) -> dict[str, dict]:
    """What the peers published, less the DHT's expiry and the age discover reads from it (which
    must be a heartbeat's: from 0 to the record's lifetime)."""
    found = directory.discover()
    assert all(0.0 <= r["age"] <= dht.ANNOUNCE_TTL for r in found.values()), found
    return {name: {k: v for k, v in r.items() if k not in ("expires", "age")} for name, r in found.items()}


def test_announce_discover_withdraw_and_expire(two_nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dht, "ANNOUNCE_TTL", 2.0)
    first, second = two_nodes
    assert all(a.startswith("/ip4/127.0.0.1/") for a in first.maddrs()), "nodes listen on loopback by default"
    mine, theirs = dht.StageDirectory(first, "run-a", 2), dht.StageDirectory(second, "run-a", 2)
    assert mine.announce("s0p0", 0, "actor-a", {"queue": 3})
    assert mine.announce("s1p0", 1, "actor-b", {"queue": 0})
    both = {"s0p0": {"name": "s0p0", "stage": 0, "key": "actor-a", "queue": 3},
            "s1p0": {"name": "s1p0", "stage": 1, "key": "actor-b", "queue": 0}}
    wait_until(lambda: _published(theirs) == both, 10, "both peers to reach the other node")
    assert dht.StageDirectory(second, "run-b", 2).discover() == {}, "runs do not see each other's peers"
    assert theirs.withdraw(1, "actor-b")
    wait_until(lambda: set(mine.discover()) == {"s0p0"}, 10, "a withdrawn peer to be gone for every node")
    assert mine.announce("s1p0", 1, "actor-c", {"queue": 0}), "rebuilt under the same name: a new actor key"
    wait_until(lambda: mine.discover().get("s1p0", {}).get("key") == "actor-c", 10, "the rebuilt peer's record")
    refreshed = time.monotonic()
    assert mine.announce("s0p0", 0, "actor-a", {"queue": 1})  # a refresh replaces the record
    wait_until(lambda: theirs.discover().get("s0p0", {}).get("queue") == 1, 10, "the refreshed record")
    age, since = theirs.discover()["s0p0"]["age"], time.monotonic() - refreshed
    assert age <= since + 0.1, f"the record's age {age:.2f} s is older than its refresh, {since:.2f} s ago"
    theirs.withdraw(1, "actor-c")
    wait_until(lambda: theirs.discover() == {}, 10, "a peer that stops refreshing to expire")
    assert time.monotonic() - refreshed >= 1.5, "...at its expiration (2 s after the refresh), not before"


def test_a_trainers_heartbeat_is_read_with_its_age_and_lapses(two_nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dht, "ANNOUNCE_TTL", 2.0)
    first, second = two_nodes
    mine, theirs = dht.StageDirectory(first, "run-a", 2), dht.StageDirectory(second, "run-a", 2)
    beat = time.monotonic()
    assert mine.beat("t0#1") and mine.beat("t1#1")
    wait_until(lambda: set(theirs.heartbeats()) == {"t0#1", "t1#1"}, 10, "both heartbeats to reach the other node")
    assert theirs.discover() == {}, "a heartbeat is no peer"
    assert all(0.0 <= age <= time.monotonic() - beat + 0.1 for age in theirs.heartbeats().values())
    wait_until(lambda: theirs.heartbeats() == {}, 10, "heartbeats that stop to lapse")
    assert time.monotonic() - beat >= 1.5, "...at their expiration (2 s after the beat), not before"


def fails() -> None:
    raise RuntimeError("a real error")


def test_a_failed_join_is_left_to_its_caller_other_failures_still_log() -> None:
    import logging

    from distributed import Client, LocalCluster

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append   # distributed's loggers do not propagate: listen on the worker's own
    worker_log = logging.getLogger("distributed.worker")
    worker_log.addHandler(handler)
    try:
        with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
            bogus = ["/ip4/127.0.0.1/tcp/9/p2p/12D3KooWDdtaPiVfGdRhFCKnSAjg1mAzF6316Fr5GLUXaw8m67wD"]
            with pytest.raises(RuntimeError, match="could not start and join through"):   # the caller gets the error ...
                client.run(dht.join, "run-nobody", bogus)
            with pytest.raises(RuntimeError, match="a real error"):
                client.run(fails)
    finally:
        worker_log.removeHandler(handler)
    failed = [r.args[0] for r in records if str(r.msg).startswith("Run Failed")]
    assert failed == ["fails"], failed                      # ... and the worker logs only the other one
