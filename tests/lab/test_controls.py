"""RunControls on real small in-process runs, driven through `.value` and `.click()`.

Every test asserts the run changed as asked (its events and `state()`), waiting on the run's
events or on the verb's future, never by sleeping.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

import labkit
from labkit.config import RunConfig
from labkit.lab.controls import RunControls
from labkit.runtime.handle import RunHandle

TIMEOUT = 60


@pytest.fixture
def steered(small_run: RunConfig) -> Iterator[tuple[RunHandle, RunControls]]:
    """A long nano run (stopped at teardown by reap_runs) past its first step, and its controls."""
    run = labkit.launch(small_run.replace(steps=2000, trainers=2))
    controls = RunControls(run)
    run.wait_for(step=1)
    controls.refresh(run.state(), {})
    yield run, controls
    controls.close()


def said(controls: RunControls) -> str:
    return html.unescape(controls.status.value)


def live_peers(run: RunHandle) -> dict[str, int]:
    return {p["peer"]: s["stage"] for s in run.state()["stages"] for p in s["peers"]}


def test_peer_rows_slow_kill_and_move_peers(steered: tuple[RunHandle, RunControls]) -> None:
    run, controls = steered
    assert sorted(controls.rows) == ["s0p0", "s0p1", "s1p0", "s1p1"]

    controls.rows["s0p0"].delay.value = 0.02
    controls.rows["s0p0"].slow.click()
    controls.pending().result(TIMEOUT)
    assert {p["peer"]: p["delay"] for p in run.state()["stages"][0]["peers"]}["s0p0"] == 0.02
    assert said(controls) == "s0p0 slowed by 0.02 s per request"

    controls.rows["s1p1"].kill.click()
    controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "peer", "peer": "s1p1", "state": "killed"}, timeout=TIMEOUT)
    assert "s1p1" not in live_peers(run) and said(controls) == "killed s1p1"

    controls.rows["s0p1"].target.value = 1
    controls.rows["s0p1"].move.click()
    new = controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "peer", "peer": "s0p1", "state": "moved", "to": new}, timeout=TIMEOUT)
    assert live_peers(run) == {"s0p0": 0, "s1p0": 1, new: 1}
    assert said(controls) == f"moved s0p1 → {new}"

    controls.refresh(run.state(), {})
    assert sorted(controls.rows) == sorted(["s0p0", "s1p0", new])
    assert controls.rows["s0p0"].labels["state"].value == "slowed 0.02 s"


def test_add_rebalance_split_codec_and_diloco_apply_mid_run(steered: tuple[RunHandle, RunControls]) -> None:
    run, controls = steered
    controls.add_stage.value = 1
    controls.add_button.click()
    name = controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "peer", "peer": name, "state": "joined", "stage": 1}, timeout=TIMEOUT)
    assert live_peers(run)[name] == 1 and said(controls) == f"added {name} to stage 1"

    controls.rebalance_button.click()
    controls.pending().result(TIMEOUT)
    assert said(controls).startswith("rebalanced: ")

    controls.split[0].value, controls.split[1].value = 1, 3
    controls.split_button.click()
    controls.pending().result(TIMEOUT)
    applied = run.wait_for(event={"type": "setting", "name": "layer_split", "value": [1, 3]}, timeout=TIMEOUT)
    run.wait_for(step=run.state()["step"] + 2, timeout=TIMEOUT)  # re-cut at a step boundary after the event
    assert [s["layers"] for s in run.state()["stages"]] == [[0], [1, 2, 3]], applied

    controls.codec.value = "int8"
    controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "setting", "name": "codec", "value": "int8"}, timeout=TIMEOUT)
    assert said(controls) == "codec → int8"

    controls.sync_mode.value = "diloco"
    controls.inner_steps.value = 2
    controls.sync_button.click()
    controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "setting", "name": "sync", "value": "diloco"}, timeout=TIMEOUT)
    run.wait_for(event={"type": "sync", "kind": "diloco"}, timeout=TIMEOUT)  # an outer step happened

    # the run's own refusal, in one line: no split under DiLoCo
    controls.split_button.click()
    assert controls.pending().exception(TIMEOUT) is not None
    assert said(controls).startswith("set_layer_split: set_layer_split is not allowed with DiLoCo")


@pytest.mark.parametrize(("act", "want"), [
    (lambda c: c.rows["s1p1"].kill.click(), "kill_peer: no live peer named 's1p1'; live peers: ['s0p0', 's0p1', 's1p0']"),
    (lambda c: (setattr(c.split[1], "value", 1), c.split_button.click()),
     "set_layer_split: RunConfig.layer_split=(2, 1) is not allowed: blocks per stage summing to the model's 4 layers"),
    (lambda c: (setattr(c.rows["s0p0"].delay, "value", 99), c.rows["s0p0"].slow.click()),
     "set_peer_delay: seconds=99.0 is not allowed: a number in [0, 60)"),
    (lambda c: (setattr(c.outer_lr, "value", 5), c.sync_button.click()),
     "set_sync: SyncConfig.outer_lr=5.0 is not allowed: a finite number > 0 and <= 2: with no momentum 1 lands on "
     "the peers' average and 2 on its mirror image; a larger outer step overshoots more every round and diverges"),
], ids=["kill-a-dead-peer", "split-summing-wrong", "delay-too-long", "outer-lr-too-large"])
def test_a_failing_verb_shows_its_one_line_error(steered: tuple[RunHandle, RunControls], act, want: str) -> None:
    run, controls = steered
    controls.rows["s1p1"].kill.click()  # a first kill that works: a second kill of s1p1 fails
    controls.pending().result(TIMEOUT)
    act(controls)
    assert controls.pending().exception(TIMEOUT) is not None
    assert said(controls) == want
    assert "Traceback" not in controls.status.value and "\n" not in controls.status.value
    assert controls.status.style.text_color == "#b00020"
    assert run.state()["status"] == "running"


def test_checkpoint_reports_the_saved_path_and_stop_ends_the_run(steered: tuple[RunHandle, RunControls],
                                                                  tmp_path: Path) -> None:
    run, controls = steered
    assert controls.dashboard_link.result(TIMEOUT) is None and controls.dashboard.value == ""  # in-process: none
    path = tmp_path / "lab.pt"
    controls.checkpoint_path.value = str(path)
    controls.checkpoint_button.click()
    assert Path(controls.pending().result(TIMEOUT)) == path and path.is_file()
    assert said(controls) == f"checkpoint saved: {path}"

    controls.stop_button.click()
    controls.pending().result(TIMEOUT)
    assert run.wait(TIMEOUT)["status"] == "stopped"
    controls.refresh(run.state(), {})
    assert controls.summary.value.startswith("stopped · step ")

    controls.close()
    controls.rebalance_button.click()
    assert said(controls) == "rebalance: the controls are closed"


def test_refresh_updates_labels_in_place(steered: tuple[RunHandle, RunControls]) -> None:
    run, controls = steered
    table = controls.table.children
    rows = dict(controls.rows)
    widgets = {name: row.labels["bytes"] for name, row in rows.items()}
    totals = {"s0p0": {"microbatches": 12, "bytes": 3_456_789, "tokens_per_s": 1234.4}}
    controls.refresh(run.state(), totals)
    assert controls.table.children == table and controls.rows == rows  # same widgets: no churn per tick
    assert {name: row.labels["bytes"] for name, row in controls.rows.items()} == widgets
    labels = {column: label.value for column, label in controls.rows["s0p0"].labels.items()}
    assert labels | {"queue": "0"} == {"peer": "s0p0", "stage": "0", "state": "serving", "queue": "0",
                                       "tokens/s": "1,234", "microbatches": "12", "bytes": "3.5 MB"}
    assert controls.summary.value.startswith("running · step ")


def test_a_task_pool_runs_controls_kill_slow_and_add_clients_and_grey_out_the_other_verbs(
        small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(executor="taskpool", steps=2000))
    controls = RunControls(run)
    run.wait_for(step=1)
    controls.refresh(run.state(), {})
    assert sorted(controls.rows) == ["s0c0", "s0c1", "s1c0", "s1c1"]
    assert said(controls).startswith("task-pool run: ")
    for widget in (controls.rebalance_button, controls.codec, controls.split_button, controls.sync_button,
                   controls.rows["s0c0"].move, controls.rows["s0c0"].target):
        assert widget.disabled and widget.tooltip.startswith("not with executor='taskpool': "), widget
    assert controls.rows["s0c0"].move.tooltip == ("not with executor='taskpool': a client joins the stage it is added "
                                                  "to: kill it and add_peer(stage) elsewhere")
    row = controls.rows["s0c0"]
    assert not any(w.disabled for w in (row.kill, row.slow, row.delay, controls.add_button, controls.add_stage))

    row.delay.value = 0.01
    row.slow.click()
    controls.pending().result(TIMEOUT)
    assert {p["peer"]: p["delay"] for p in run.state()["stages"][0]["peers"]}["s0c0"] == 0.01

    controls.rows["s1c1"].kill.click()
    controls.pending().result(TIMEOUT)
    run.wait_for(event={"type": "peer", "peer": "s1c1", "state": "killed"}, timeout=TIMEOUT)
    assert "s1c1" not in live_peers(run) and said(controls) == "killed s1c1"

    controls.add_stage.value = 1
    controls.add_button.click()
    name = controls.pending().result(TIMEOUT)
    assert name == "s1c2" and said(controls) == "added s1c2 to stage 1"
    run.wait_for(event={"type": "hop", "peer": name}, timeout=TIMEOUT)  # the new client takes slices
    controls.refresh(run.state(), {})
    assert sorted(controls.rows) == ["s0c0", "s0c1", "s1c0", "s1c2"]

    controls.rows["s1c0"].kill.click()
    assert controls.pending().exception(TIMEOUT) is None
    controls.rows["s1c2"].kill.click()  # the run's own refusal, in one line
    assert controls.pending().exception(TIMEOUT) is not None
    assert said(controls) == ("kill_peer: peer='s1c2' is the last live client of stage 1: add_peer(1) another "
                              "before it leaves")
    controls.codec.value = "int8"  # greyed out in the page; set from code, the handle's reason
    assert controls.pending().exception(TIMEOUT) is not None
    assert said(controls) == ("set_compression: set_compression is not available with executor='taskpool': slices "
                              "cross stages through the servers as they are: there is no wire codec")
    controls.stop_button.click()
    assert run.wait(TIMEOUT)["status"] == "stopped"
    controls.close()


def test_a_refused_codec_or_sync_puts_the_widgets_back_on_what_the_run_has(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(steps=3))
    controls = RunControls(run)
    assert controls.inner_steps.style.description_width == "initial"   # "H" leaves the box room for "20"
    assert run.wait(TIMEOUT)["status"] == "finished"
    controls.codec.value = "int8"                   # the run has ended: refused
    assert controls.pending().exception(TIMEOUT) is not None
    assert controls.codec.value == "fp32" and said(controls).startswith("set_compression: ")
    controls.sync_mode.value, controls.inner_steps.value = "diloco", 20
    controls.sync_button.click()
    assert controls.pending().exception(TIMEOUT) is not None
    assert (controls.sync_mode.value, controls.inner_steps.value) == ("allreduce", small_run.sync.inner_steps)
    assert controls.pending() is not None and said(controls).startswith("set_sync: ")
    controls.close()

