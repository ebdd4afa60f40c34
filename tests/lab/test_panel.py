"""`Lab()` end to end, headless: the form launches a real run (SWARM, ATOM or the task pool), the controls steer
it, and the one refresher keeps the charts and the peer table current."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

import labkit
from labkit.config import RunConfig
from labkit.executors.registry import SPECS
from labkit.lab.live import replay
from labkit.lab.report import write_report
from labkit.lab.rows import Windows
from tests.waiting import wait_until


def test_the_form_launches_a_run_whose_controls_and_charts_follow_it(small_run: RunConfig) -> None:
    lab = labkit.lab.Lab(defaults=small_run.replace(steps=5000, rebalance_period=0), hz=4,
                         windows=Windows(routing_s=2.0))
    lab.form.fields["stages"].value = "2"
    lab.form.fields["peers"].value = "2"
    assert not lab.form.launch_button.disabled
    lab.form.launch_button.click()
    run = lab.wait_attached(timeout=120)
    assert run.config.stages == 2 and run.config.steps == 5000
    run.wait_for(step=2)

    wait_until(lambda: set(lab.controls.rows) == {"s0p0", "s0p1", "s1p0", "s1p1"}, 30, "the peer table")
    lab.controls.rows["s1p0"].kill.click()
    killed = run.wait_for(event={"type": "peer", "peer": "s1p0", "state": "killed"})
    run.wait_for(step=run.state()["step"] + 2)
    wait_until(lambda: "s1p0" not in lab.controls.rows, 30, "the killed peer leaving the table")
    wait_until(lambda: [r["peer"] for r in lab.view.rows.health.peers()] == ["s0p0", "s0p1", "s1p1"], 30,
               "the health table's live peers")
    assert all(r["bytes_per_s"] > 0 and r["deadline_s"] and r["router"] for r in lab.view.rows.health.peers())
    wait_until(lambda: "s1p1" in lab.health.widget.value and "s1p0" not in lab.health.widget.value, 10,
               "the health table's widget")
    assert lab.controls.status.value == "killed s1p0"

    def routed_after_kill() -> bool:  # the 2 s routing window has slid past the kill
        rows = lab.view.charts.spec("routing")["datasets"]["routing"]
        return lab.view.rows.now > killed["t"] + 2.5 and {r["peer"] for r in rows if r["stage"] == 1} == {"s1p1"}

    wait_until(routed_after_kill, 60, "stage 1's traffic all on the survivor in the routing chart")
    marks = lab.view.charts.spec("loads")["datasets"]["marks"]
    assert {"t": killed["t"], "what": "kill s1p0"} in marks
    assert set(lab.view.charts.widgets) == set(SPECS["swarm"].charts) and lab.view.refreshing
    assert lab.status.value.startswith("running: step")
    lab.controls.stop_button.click()
    assert run.wait(60)["status"] == "stopped"
    wait_until(lambda: lab.status.value.startswith("run stopped"), 10, "the status line to say the run stopped")
    lab.close()


def _launch_from_form(small_run: RunConfig, executor: str, values: dict[str, str]) -> tuple[labkit.lab.Lab, labkit.RunHandle]:
    """A long run of `executor` launched by the panel's form with `values` typed in; the panel and its run."""
    lab = labkit.lab.Lab(defaults=small_run.replace(steps=5000), hz=4)
    lab.form.fields["executor"].value = executor
    for name, value in values.items():
        lab.form.fields[name].value = value
    lab.form.launch_button.click()
    return lab, lab.wait_attached(timeout=120)


def test_the_form_launches_an_atom_run_whose_panel_draws_its_swaps_and_steers_its_replicas(
        small_run: RunConfig) -> None:
    lab, run = _launch_from_form(small_run, "atom", {"atom.replicas": "2"})
    assert run.config.executor.name == "atom" and lab.whatif is None  # the what-if scales a swarm's measured peers
    run.wait_for(step=2, timeout=120)

    wait_until(lambda: "swaps" in lab.view.charts.widgets, 30, "the swap timeline's first rows")
    assert set(lab.view.charts.boxes) == set(SPECS["atom"].charts)
    wait_until(lambda: {r["replica"] for r in lab.view.charts.spec("swaps")["datasets"]["swaps"]} == {"r0", "r1"},
               30, "both replicas' turns in the swap timeline")
    wait_until(lambda: set(lab.controls.rows) == {"r0", "r1"}, 30, "the replicas in the peer table")
    controls = lab.controls
    assert controls.codec.disabled and controls.rows["r0"].move.disabled and not controls.rows["r0"].kill.disabled
    assert controls.rows["r0"].move.tooltip.startswith("not with executor='atom': every replica holds the whole model")
    controls.codec.value = "int8"  # greyed out in the page; set from code, the handle's reason, in one line
    assert controls.pending().exception(60) is not None
    assert html.unescape(controls.status.value) == ("set_compression: set_compression is not available with "
                                                    "executor='atom': replicas send nothing between layers: there "
                                                    "is no wire codec")

    controls.rows["r1"].kill.click()
    controls.pending().result(60)
    assert html.unescape(controls.status.value) == "killed r1"
    controls.add_button.click()
    joined = controls.pending().result(60)
    assert html.unescape(controls.status.value) == f"added {joined} to the replicas"
    run.wait_for(event={"type": "swap", "replica": joined}, timeout=60)
    wait_until(lambda: set(controls.rows) == {"r0", joined}, 30, "the table to follow the replicas")
    wait_until(lambda: joined in {r["replica"] for r in lab.view.charts.spec("swaps")["datasets"]["swaps"]},
               30, "the joiner's turns in the swap timeline")
    wait_until(lambda: controls.rows[joined].labels["microbatches"].value not in ("", "0"), 30, "the joiner's work")
    controls.stop_button.click()
    assert run.wait(60)["status"] == "stopped"
    lab.close()


def test_the_form_launches_a_task_pool_run_whose_chart_follows_a_client_killed_from_its_row(
        small_run: RunConfig) -> None:
    lab, run = _launch_from_form(small_run, "taskpool", {"taskpool.backward": "2"})
    assert run.config.executor.name == "taskpool" and run.config.executor.backward == 2 and lab.whatif is None
    assert set(lab.view.charts.boxes) == set(SPECS["taskpool"].charts)
    run.wait_for(step=2, timeout=120)
    wait_until(lambda: set(lab.controls.rows) == {"s0c0", "s0c1", "s1c0", "s1c1"}, 30, "the clients in the peer table")
    lab.controls.rows["s1c1"].kill.click()
    killed = run.wait_for(event={"type": "peer", "peer": "s1c1", "state": "killed"}, timeout=60)
    ended = run.wait_for(event=lambda e: e["type"] == "setting" and e["name"] == "pool" and e["t"] > killed["t"]
                         and e["value"]["stage"] == 1, timeout=60)

    def drawn() -> list[dict]:
        return [r for r in lab.view.charts.spec("pool")["datasets"]["pool"] if r["stage"] == 1]

    wait_until(lambda: any(r["t"] == ended["t"] for r in drawn()), 30, "the pass after the kill in the task-pool chart")
    at_kill = {r["series"]: r["value"] for r in drawn() if r["t"] == killed["t"]}
    assert at_kill == {"servers": 3, "clients": 1, "pool": killed["pooled_samples"]}
    assert {r["series"]: r["value"] for r in drawn() if r["t"] == ended["t"]} == {"servers": 3, "clients": 1, "pool": 0}
    wait_until(lambda: "s1c1" not in lab.controls.rows, 30, "the killed client leaving the table")
    lab.controls.stop_button.click()
    assert run.wait(60)["status"] == "stopped"
    lab.close()


def test_an_atom_runs_report_and_replay_draw_the_swap_timeline(small_run: RunConfig, tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(executor="atom"), run_dir=tmp_path)
    lab = labkit.lab.Lab(run, hz=4)
    assert run.wait(120)["status"] == "finished"
    wait_until(lambda: not lab.view.refreshing, 10, "the refresher's last draw")
    swaps = lab.view.charts.spec("swaps")["datasets"]["swaps"]
    assert swaps and swaps == replay(tmp_path).spec("swaps")["datasets"]["swaps"]
    report = write_report(tmp_path).read_text()
    assert [name for name in ("swaps", "throughput", "loss", "routing", "loads") if f"<h2>{name}</h2>" in report] == [
        "swaps", "throughput", "loss"]
    assert "ATOM swap timeline (Figure 12)" in report and "<script" not in report
    lab.close()


def test_an_atom_run_that_cannot_start_says_why_in_the_status_line(small_run: RunConfig) -> None:
    lab = labkit.lab.Lab(defaults=small_run.replace(executor="atom"))
    lab.form.fields["atom.budget_mb"].value = "0.01"  # a valid number, below the least budget that works
    lab.form.launch_button.click()
    run = lab.wait_attached(timeout=120)
    assert run.wait(60)["status"] == "failed"
    wait_until(lambda: lab.status.value.startswith("run failed: "), 10, "the status line to say why")
    status = html.unescape(lab.status.value)
    assert status.startswith("run failed: ValueError: atom.budget_mb=0.01 is not allowed: ") and "budget_mb >= " in status
    lab.close()


def test_a_closed_panel_shows_the_final_state_of_its_run(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(steps=3))
    lab = labkit.lab.Lab(run, hz=0.5)       # a slow refresher: its last periodic tick is before the end
    summary = run.wait(60)
    lab.close()
    assert lab.status.value == f"run finished at step {summary['steps']}"
    assert lab.controls.summary.value.startswith(f"finished · step {summary['steps']}/3")
    assert not lab.view.refreshing
    charts = lab.view.charts
    steps_drawn = [r["step"] for r in charts.widgets["throughput"].spec["datasets"]["throughput"]]
    assert charts.widgets and all(jc.spec == charts.spec(name) for name, jc in charts.widgets.items())
    assert max(steps_drawn) == summary["steps"], steps_drawn   # the synced spec holds the last step


def test_live_gives_the_running_run_or_relaunches_one_that_ended(small_run: RunConfig,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    first = labkit.launch(small_run.replace(steps=3))
    lab = labkit.lab.Lab(first, hz=2)
    first.wait(60)
    again = lab.live()
    assert again is not first and lab.run is again and lab.controls.run is again and not again.done
    assert again.config == first.config
    assert "The run had ended (finished at step 3)" in capsys.readouterr().out
    assert lab.live() is again             # running: the same handle
    again.stop()
    again.wait(60)
    lab.close()
