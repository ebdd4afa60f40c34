"""Live notebook charts follow a run from its events, off the training threads."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig
from labkit.executors.registry import SPECS
from labkit.lab.live import LiveView, replay


def test_live_view_draws_every_chart_from_the_run_and_replays_it(small_run: RunConfig, tmp_path) -> None:
    cfg = small_run.replace(stages=2, peers=2, steps=8, eval_every=4)
    run = labkit.launch(cfg, run_dir=tmp_path / "run")
    view = LiveView(run, hz=4)
    assert run.wait(120)["status"] == "finished"
    view.close()
    view.refresh()
    loss = view.charts.spec("loss")["datasets"]["loss"]
    assert sum(r["kind"] == "train" for r in loss) == cfg.steps
    assert sum(r["kind"] == "validation" for r in loss) == 3  # before, step 4, step 8
    routing = view.charts.spec("routing")["datasets"]["routing"]
    assert {r["peer"] for r in routing} == {"s0p0", "s0p1", "s1p0", "s1p1"}
    assert sum(r["microbatches"] for r in routing if r["stage"] == 0) == cfg.steps * cfg.microbatches_per_step
    assert {r["peer"] for r in view.charts.spec("timeline")["datasets"]["timeline"]} <= {"s0p0", "s0p1", "s1p0", "s1p1"}
    assert not view.refreshing
    assert set(view.charts.widgets) == set(SPECS["swarm"].charts)
    replayed = replay(tmp_path / "run")
    for name in SPECS["swarm"].charts:  # a finished run's events.jsonl draws the same rows as the live view did
        assert replayed.spec(name)["datasets"] == view.charts.spec(name)["datasets"], name
