"""The notebook's run controls steer a Dask run as they steer an in-process one: a peer row's
Kill and Move, the codec switch and the peer table, on the shared cluster's worker processes."""

from __future__ import annotations

import html

import pytest

import labkit
from labkit.config import RunConfig
from labkit.lab.controls import RunControls

pytestmark = pytest.mark.slow
TIMEOUT = 120


def test_controls_kill_move_and_switch_codec_on_a_dask_run(cluster, small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=(2, 2), trainers=2, steps=2000),
                        backend="dask", scheduler=cluster.scheduler_address)
    controls = RunControls(run)
    try:
        run.wait_for(step=1, timeout=TIMEOUT)
        controls.refresh(run.state(), {})
        assert sorted(controls.rows) == ["s0p0", "s0p1", "s1p0", "s1p1"]
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

        controls.refresh(run.state(), {})
        assert sorted(controls.rows) == sorted(["s0p0", "s1p0", new])
    finally:
        controls.close()
