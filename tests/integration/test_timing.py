"""Where a run's time goes, as its events say: each hop's queue and compute at the peer, each step
boundary's requests (the measurements benchmarks/step_breakdown.py tabulates)."""

from __future__ import annotations

import time

import labkit
from labkit.config import RunConfig
from labkit.runtime.request_queue import RequestQueue, timing


def test_a_served_request_says_how_long_it_queued_and_ran() -> None:
    server = RequestQueue("timed", lambda: RuntimeError("gone"))
    first, second = server.submit(time.sleep, 0.05), server.submit(time.sleep, 0.0)
    second.result(5)
    assert timing(first)["compute"] >= 0.05 and timing(second)["queue"] >= 0.04  # waited for the first
    server.close()


def test_hop_and_step_events_break_their_seconds_down(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=3))
    assert run.wait(120)["status"] == "finished"
    hops = run.events.history("hop")
    assert hops and all(set(h["timing"]) == {"queue", "compute"} for h in hops)
    assert all(h["timing"]["queue"] + h["timing"]["compute"] <= h["seconds"] for h in hops)
    for step in run.events.history("step"):
        boundary = step["boundary"]
        assert set(boundary["seconds"]) == {"gradients", "reduce", "optimizer_step", "state"}
        assert set(boundary["peer_seconds"]) == {"gradients", "optimizer_step", "state"}
        waited, served = boundary["seconds"], boundary["peer_seconds"]
        assert served["gradients"] <= waited["gradients"] and served["optimizer_step"] <= waited["optimizer_step"]
        # the states are asked for right behind the step: their peers' time falls after the gather
        assert served["state"] <= boundary["total"] - waited["gradients"] - waited["reduce"]
        assert boundary["total"] >= sum(waited.values())
