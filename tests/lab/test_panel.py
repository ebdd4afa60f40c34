"""`Lab()` end to end, headless: the form launches a real run, the controls steer it, and the one
refresher keeps the charts and the peer table current."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig
from labkit.lab.charts import chart_names
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
    assert lab.controls.status.value == "killed s1p0"

    def routed_after_kill() -> bool:  # the 2 s routing window has slid past the kill
        rows = lab.view.charts.spec("routing")["datasets"]["routing"]
        return lab.view.rows.now > killed["t"] + 2.5 and {r["peer"] for r in rows if r["stage"] == 1} == {"s1p1"}

    wait_until(routed_after_kill, 60, "stage 1's traffic all on the survivor in the routing chart")
    marks = lab.view.charts.spec("loads")["datasets"]["marks"]
    assert {"t": killed["t"], "what": "kill s1p0"} in marks
    assert set(lab.view.charts.widgets) == set(chart_names("swarm")) and lab.view.refreshing
    assert lab.status.value.startswith("running: step")
    lab.controls.stop_button.click()
    assert run.wait(60)["status"] == "stopped"
    wait_until(lambda: lab.status.value.startswith("run stopped"), 10, "the status line to say the run stopped")
    lab.close()
