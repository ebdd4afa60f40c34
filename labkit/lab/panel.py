"""`Lab`: the notebook control panel. A launch form, then the run's controls, live charts and (for
a SWARM run) a what-if simulation beside them, all driving the one run handle.

>>> lab = labkit.lab.Lab()          # doctest: +SKIP   (the form; Launch starts a run)
>>> lab = labkit.lab.Lab(run)       # doctest: +SKIP   (the same panel on a run launched from code)

Nothing here blocks the kernel: launching and every verb run on background threads, and one
refresher thread (`LiveView`, at most 4 Hz) redraws the charts and the peer table, so widget
clicks are handled while the run trains.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets

from labkit.config import RunConfig
from labkit.lab.controls import RunControls
from labkit.lab.form import LaunchForm
from labkit.lab.healthtable import HealthTable
from labkit.lab.live import LiveView
from labkit.lab.rows import Rows, Windows
from labkit.lab.whatif_panel import WhatIfPanel
from labkit.runtime.background import in_background
from labkit.runtime.handle import RunHandle

STATE_PERIOD = 0.5  # seconds between the peer table's reads of `run.state()`


class Lab:
    """The panel: `Lab()` shows the launch form, `Lab(run)` attaches to a running handle.

    run: the handle the panel drives once launched (None until then). view: its live charts.
    defaults: what the form starts from (and the fields it does not show). hz: chart refreshes per
    second. windows: how much of the run each chart keeps.
    """

    def __init__(self, run: RunHandle | None = None, *, defaults: RunConfig | None = None, hz: float = 3.0,
                 windows: Windows = Windows()) -> None:
        self.run: RunHandle | None = None
        self.view: LiveView | None = None
        self.controls: RunControls | None = None
        self.health: HealthTable | None = None
        self.whatif: WhatIfPanel | None = None
        self.launching: Any = None  # the future of the launch the form started (None: none yet)
        self._hz, self._windows = hz, windows
        self._attached = threading.Event()
        self.status = ipywidgets.HTML("")
        self.form = LaunchForm(self._launch, defaults)
        self.body = ipywidgets.VBox([self.form.widget])
        self.widget = ipywidgets.VBox([ipywidgets.HTML("<b>labkit lab</b>"), self.status, self.body])
        if run is not None:
            self.attach(run)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _launch(self, config: RunConfig, options: dict[str, Any]) -> None:
        """Launch `config` off the kernel's thread (a Dask cluster takes seconds to start)."""
        import labkit

        self.form.launch_button.disabled = True
        self.status.value = f"launching {config.spec.name}: {config.spec.shape(config)} ({options.get('backend', 'inprocess')})…"
        self.launching = in_background(lambda: labkit.launch(config, **options), name="labkit-lab-launch")
        self.launching.add_done_callback(self._launched)

    def _launched(self, future: Any) -> None:
        try:
            self.attach(future.result())
        except Exception as exc:
            self.status.value = f"launch failed: {str(exc).splitlines()[0]}"
            self.form.launch_button.disabled = False

    def attach(self, run: RunHandle) -> None:
        """Drive `run`: its controls, live charts and what-if replace the form. The what-if scales
        up the live swarm's measured peers, so only an executor whose spec says it applies gets it."""
        self.run = run
        self.controls = RunControls(run)
        self.health = health = HealthTable()
        state_clock = _Every(STATE_PERIOD)

        def tick(rows: Rows) -> None:
            try:
                health.update(rows.health)  # from the events alone: shown even when the state is unavailable
                if state_clock.due() or run.done:
                    self.controls.refresh(run.state(), rows.totals())
                self.status.value = _status_line(run)
            except Exception as exc:  # e.g. a Dask run's state while its workers shut down: keep refreshing
                self.status.value = html.escape(f"state unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")

        self.view = LiveView(run, hz=self._hz, windows=self._windows, on_tick=[tick])  # first: it turns on the offline charts
        # whole-model workers (ATOM) send no hops: no peer health to show
        parts = [self.controls.widget, *([health.widget] if run.config.spec.staged else []), self.view.widget()]
        if run.config.spec.whatif:
            self.whatif = WhatIfPanel(run)
            parts.append(self.whatif.widget())
        self.body.children = parts
        self._attached.set()

    def wait_attached(self, timeout: float = 120) -> RunHandle:
        """Block until a run is attached (after Launch) and return it; raises the launch's error."""
        if not self._attached.wait(timeout):
            if self.launching is not None and self.launching.done():
                self.launching.result()
            raise TimeoutError(f"no run attached within {timeout} s: {self.status.value}")
        assert self.run is not None
        return self.run

    def live(self) -> RunHandle:
        """The attached run, or, when it has ended (stopped from the panel, or finished before the
        reader came back to the notebook), a fresh in-process run of the same config attached in
        its place: the cells that steer the run go on instead of failing one after another."""
        run = self.run
        if run is None:
            raise RuntimeError("no run is attached yet: press Launch (lab.form.launch_button.click()) first")
        if not run.done:
            return run
        if type(run).__module__.startswith("labkit.backends."):
            raise RuntimeError(f"the run has ended ({run.summary().get('status')}) and ran on a cluster: "
                               "launch it again from its launch cell")
        import labkit

        self.close()
        print(f"The run had ended ({run.summary().get('status')} at step {run.summary().get('steps')}): "
              "a fresh run of the same config is launched, and the panel follows it.")
        self.attach(labkit.launch(run.config))
        assert self.run is not None
        return self.run

    def close(self) -> None:
        """Stop refreshing and release the controls' thread (the run itself keeps going)."""
        for part in (self.view, self.controls, self.whatif):
            if part is not None:
                part.close()


class _Every:
    """True at most once every `seconds` (monotonic clock)."""

    def __init__(self, seconds: float) -> None:
        self._seconds, self._next = seconds, 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._seconds
        return True


def _status_line(run: RunHandle) -> str:
    """The run's status in one line: state, step of steps, last loss (or why it failed)."""
    step = run.events.latest("step")
    if run.done:
        summary = run.summary()
        if summary.get("error"):
            return html.escape(f"run {summary.get('status')}: {str(summary['error']).splitlines()[0]}")
        return f"run {summary.get('status')} at step {summary.get('steps')}"
    if step is None:
        return "run starting…"
    return f"running: step {step['step']} of {run.config.steps}, loss {step['loss']:.3f} nats/byte"
