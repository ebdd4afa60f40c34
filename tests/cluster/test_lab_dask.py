"""The lab panel drives a Dask run as it drives an in-process one: launched from the form at a
scheduler address, a peer row's Kill and Move, the codec switch, the peer table and the live
charts, on the shared cluster's worker processes."""

from __future__ import annotations

import html

import pytest

import labkit
from labkit.config import RunConfig
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
TIMEOUT = 120


def test_the_panel_launches_and_steers_a_dask_run(cluster, small_run: RunConfig) -> None:
    lab = labkit.lab.Lab(defaults=small_run.replace(stages=2, peers=(2, 2), trainers=2, steps=2000))
    lab.form.fields["backend"].value = "scheduler"
    lab.form.fields["scheduler"].value = cluster.scheduler_address
    assert lab.form.launch_options() == {"backend": "dask", "scheduler": cluster.scheduler_address}
    lab.form.launch_button.click()
    run = lab.wait_attached(TIMEOUT)
    controls = lab.controls
    try:
        run.wait_for(step=1, timeout=TIMEOUT)
        wait_until(lambda: sorted(controls.rows) == ["s0p0", "s0p1", "s1p0", "s1p1"], 30, "the peer table")
        link = controls.dashboard_link.result(TIMEOUT)
        assert link == run.dashboard() and (link is None) == (controls.dashboard.value == "")

        controls.rows["s1p1"].kill.click()
        controls.pending().result(TIMEOUT)
        run.wait_for(event={"type": "peer", "peer": "s1p1", "state": "killed"}, timeout=TIMEOUT)

        controls.rows["s0p1"].target.value = 1
        controls.rows["s0p1"].move.click()
        new = controls.pending().result(TIMEOUT)
        run.wait_for(event={"type": "peer", "peer": "s0p1", "state": "moved", "to": new}, timeout=TIMEOUT)
        live = {p["peer"]: s["stage"] for s in run.state()["stages"] for p in s["peers"]}
        assert live == {"s0p0": 0, "s1p0": 1, new: 1}
        assert html.unescape(controls.status.value) == f"moved s0p1 → {new}"

        controls.codec.value = "fp16"
        controls.pending().result(TIMEOUT)
        run.wait_for(event={"type": "setting", "name": "codec", "value": "fp16"}, timeout=TIMEOUT)
        run.wait_for(event=lambda e: e["type"] == "hop" and e["peer"] == new, timeout=TIMEOUT)  # the moved peer serves

        wait_until(lambda: sorted(controls.rows) == sorted(["s0p0", "s1p0", new]), 30, "the table after the move")
        run.wait_for(event={"type": "load", "peer": new}, timeout=TIMEOUT)  # published from the coordinator's worker
        marked = {"kill s1p1", "move s0p1", "codec fp16"}  # the view folds events on its own thread, a beat later
        wait_until(lambda: marked <= {m["what"] for m in lab.view.rows.datasets()["marks"]}, 30, "the view's marks")
        run.wait_for(step=2, timeout=TIMEOUT)  # throughput needs two steps (a loaded machine may not have had them)
        wait_until(lambda: lab.view.rows.datasets()["throughput"], 30, "the view's throughput")
        data = lab.view.rows.datasets()
        assert {r["peer"] for r in data["loads"]} >= {"s0p0", "s1p0"}
        assert data["routing"] and data["timeline"] and data["throughput"] and data["traffic"]
    finally:
        lab.close()
