"""Where a run's time goes, as its events say: each hop's queue and compute at the peer, each step
boundary's requests (the measurements benchmarks/step_breakdown.py tabulates)."""

from __future__ import annotations

import time

import pytest

import labkit
from labkit.config import RunConfig
from labkit.runtime.request_queue import RequestQueue, timing


def test_a_served_request_says_how_long_it_queued_and_ran() -> None:
    server = RequestQueue("timed", lambda: RuntimeError("gone"))
    first, second = server.submit(time.sleep, 0.05), server.submit(time.sleep, 0.0)
    second.result(5)
    assert timing(first)["compute"] >= 0.05 and timing(second)["queue"] >= 0.04  # waited for the first
    server.close()


@pytest.mark.parametrize(("peers", "requests"), [(1, {"prepare"}), (2, {"prepare", "commit_step"})])
def test_hop_and_step_events_break_their_seconds_down(small_run: RunConfig, peers: int, requests: set[str]) -> None:
    """One peer a stage: the step is one round trip (`prepare` applies it); more: the stage's peers
    reduce among themselves in `prepare`, then every peer applies in `commit_step`. Either way no
    tensor crosses the coordinator."""
    run = labkit.launch(small_run.replace(stages=2, peers=peers, steps=3))
    assert run.wait(120)["status"] == "finished"
    hops = run.events.history("hop")
    assert hops and all(set(h["timing"]) == {"queue", "compute"} for h in hops)
    assert all(h["timing"]["queue"] + h["timing"]["compute"] <= h["seconds"] for h in hops)
    for step in run.events.history("step"):
        boundary = step["boundary"]
        assert set(boundary["seconds"]) == set(boundary["peer_seconds"]) == requests
        assert all(boundary["peer_seconds"][r] <= boundary["seconds"][r] for r in requests)
        assert boundary["total"] >= sum(boundary["seconds"].values())
        assert boundary["tensor_bytes"] == 0
