"""Live notebook charts follow a run from its events, off the training threads."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig
from labkit.lab.live import LiveView


def test_live_view_tracks_loss_and_routing(small_run: RunConfig) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=8, eval_every=4)
    run = labkit.launch(cfg)
    view = LiveView(run, hz=10)
    assert run.wait(120)["status"] == "finished"
    view.close()
    view.refresh()
    loss_values = view.charts[0].spec["data"]["values"]
    assert sum(r["kind"] == "train" for r in loss_values) == cfg.steps
    assert sum(r["kind"] == "validation" for r in loss_values) == 3  # before, step 4, step 8
    shares = view.charts[1].spec["data"]["values"]
    assert {r["peer"] for r in shares} == {"s0p0", "s0p1", "s1p0", "s1p1"}
    assert not view.refreshing
    assert view.widget().children == tuple(view.charts)
