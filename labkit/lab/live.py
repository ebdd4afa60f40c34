"""The lab's charts live: one refresher thread folds a run's events into rows and redraws.

The training threads never touch a chart: events go to a queue; the refresher, a few times a
second, folds what arrived (`Rows`), and swaps each chart's datasets into its spec (validated
once): the cheap update path LAB.md measured (re-validating a chart per step slowed training 80x).
The same charts show a finished run's events.jsonl (`replay`) or a simulation (`charts_of`).
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import altair as alt

from labkit.events import Event
from labkit.lab.charts import CHARTS, WIDE, Spec, with_data
from labkit.lab.rows import Rows, Windows, rows_of_run
from labkit.runtime.handle import RunHandle

MAX_HZ = 4.0  # refreshes per second at most: each one resends every changed chart to the browser
Tick = Callable[[Rows], None]


class LiveView:
    """The lab charts of `run`'s executor (its spec's `charts`), refreshed `hz` times a second until
    the run ends or `close()`.

    >>> view = LiveView(run); view.widget()   # doctest: +SKIP   (routing, loads, timeline, ...)
    >>> view.rows.shares()                    # doctest: +SKIP   (each peer's share of its stage)

    on_tick: functions called with the rows after each refresh, on the refresher thread (the
    panel's peer table uses it, so one thread serves every live view).
    """

    def __init__(self, run: RunHandle, hz: float = 3.0, windows: Windows = Windows(), on_tick: Iterable[Tick] = ()) -> None:
        if not (isinstance(hz, (int, float)) and 0 < hz <= MAX_HZ):
            raise ValueError(f"hz={hz!r} is not allowed: a number in (0, {MAX_HZ:g}] (refreshes per second)")
        self.run, self._period, self.on_tick = run, 1.0 / hz, list(on_tick)
        self._queue: queue.Queue[Event] = run.events.subscribe()
        self.rows = Rows.for_config(run.config, windows).extend(run.events.history())
        self.charts = Charts(run.config.spec.charts)
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="labkit-live-view", daemon=True)
        self._thread.start()

    def widget(self) -> Any:
        return self.charts.widget()

    def refresh(self) -> None:
        """Fold the events that arrived and redraw the charts whose data moved."""
        while True:
            try:
                self.rows.add(self._queue.get_nowait())
            except queue.Empty:
                break
        self.charts.draw(self.rows)  # sends only the datasets whose versions moved
        for tick in self.on_tick:
            tick(self.rows)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.refresh()
            if self.run.done:
                self.refresh()
                return

    def close(self) -> None:
        """Stop refreshing, after one last refresh: the charts (their specs too: `settle`) and the
        ticks' widgets keep the state the run is in now (its final state, once it ended)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if not self._thread.is_alive() or self._thread is threading.current_thread():
            self.refresh()
            self.charts.settle()
        self.run.events.unsubscribe(self._queue)

    @property
    def refreshing(self) -> bool:
        """Whether the refresher thread still runs (False once closed or the run ended)."""
        return self._thread.is_alive()


class Charts:
    """One `alt.JupyterChart` per chart of `names` (of CHARTS), made when its first rows arrive
    (an empty faceted chart draws NaN sizes), so its spec embeds once; later rows go to the
    browser as data updates of its named datasets, which Vega applies to the live view:
    re-embedding a spec a few times a second per chart (a full Vega-Lite compile and render each
    time) kept headless Chromium so busy that a click took seconds to reach the kernel.
    """

    def __init__(self, names: Iterable[str] = tuple(CHARTS)) -> None:
        import ipywidgets

        enable_offline()
        self.names = tuple(names)
        unknown = [name for name in self.names if name not in CHARTS]
        if unknown:
            raise KeyError(f"no chart {unknown[0]!r}: one of {list(CHARTS)}")
        self.skeletons = skeletons()
        self.uses = {name: sorted(_dataset_names(self.skeletons[name])) for name in self.names}
        self.widgets: dict[str, alt.JupyterChart] = {}  # made at a chart's first rows, so it embeds once
        self.boxes = {name: ipywidgets.Box([ipywidgets.HTML(f"<i>{name}: waiting for the run's events</i>")])
                      for name in self.names}
        self.shown: dict[str, dict[str, list]] = {}  # per chart, the datasets it draws now
        self.drawn: dict[str, dict[str, int]] = {}  # per chart, the versions of those datasets

    def draw(self, rows: Rows) -> None:
        """Send each chart the datasets that changed since it last drew."""
        for name in self.names:
            versions = {d: rows.versions[d] for d in self.uses[name]}
            drawn = self.drawn.get(name, {})
            if versions == drawn:
                continue
            if name not in self.widgets:
                main = rows.dataset(name)
                if not main:
                    continue
                datasets = {d: main if d == name else rows.dataset(d) for d in self.uses[name]}
                # SVG: crisp at any zoom, and its marks and labels are in the page (the browser test reads them)
                jc = self.widgets[name] = alt.JupyterChart(None, embed_options={"renderer": "svg"})
                jc.spec = with_data(self.skeletons[name], datasets)  # validated once, in `skeletons`
                self.boxes[name].children = [jc]
            else:
                datasets = {d: rows.dataset(d) for d, v in versions.items() if drawn.get(d) != v}
                # altair's own channel for data updates of a live view (JupyterChart's JS applies
                # them with a Vega changeset); it has no public setter
                self.widgets[name]._py_to_js_updates = [{"namespace": "data", "name": d, "scope": [], "value": v}
                                                        for d, v in datasets.items()]
            self.shown.setdefault(name, {}).update(datasets)
            self.drawn[name] = versions

    def settle(self) -> None:
        """Put each chart's current data into its synced spec (one full resend per chart): data
        updates are messages, not widget state, so a saved notebook or the course site would
        otherwise keep each chart as first drawn."""
        for name, jc in self.widgets.items():
            jc.spec = self.spec(name)

    def spec(self, name: str) -> Spec:
        """The spec of what chart `name` draws now (data included), e.g. for a static picture."""
        return with_data(self.skeletons[name], self.shown.get(name, {d: [] for d in self.uses[name]}))

    def widget(self) -> Any:
        """The charts two by two (a WIDE one alone on its row), as one ipywidgets box to display."""
        import ipywidgets

        lines: list[list[str]] = []
        for name in self.names:
            if name in WIDE or not lines or len(lines[-1]) == 2 or lines[-1][0] in WIDE:
                lines.append([])
            lines[-1].append(name)
        return ipywidgets.VBox([ipywidgets.HBox([self.boxes[name] for name in line]) for line in lines])


@functools.cache
def skeletons() -> dict[str, Spec]:
    """Every lab chart's spec without data, built and validated once per process (altair's
    validation is most of what a panel costs to open)."""
    return {name: make().to_dict() for name, make in CHARTS.items()}


def charts_of(rows: Rows) -> Charts:
    """The lab's charts of the rows' executor drawn once from folded rows (a simulation's, a
    finished run's)."""
    charts = Charts(rows.charts)
    charts.draw(rows)
    return charts


def replay(run_dir: str | Path) -> Charts:
    """The lab's charts of a finished (or running) run, or of `labkit simulate`'s output, from
    the directory's `events.jsonl` (and `config.json`, where a real run left one)."""
    return charts_of(rows_of_run(run_dir))


_offline = threading.Lock()
_offline_done = False


def enable_offline() -> None:
    """Draw every chart without a CDN (classrooms behind firewalls, CI, a saved notebook): inline
    the Vega JavaScript in every JupyterChart, and render static `alt.Chart` outputs as SVG
    (through vl-convert), which any notebook viewer or HTML page shows with no script at all."""
    global _offline_done
    with _offline:
        if not _offline_done:
            alt.JupyterChart.enable_offline()
            alt.renderers.enable("svg")
            _offline_done = True


def _dataset_names(spec: Any) -> set[str]:
    """The named datasets a chart spec reads."""
    if isinstance(spec, dict):
        found = {spec["name"]} if set(spec) == {"name"} else set()
        return found.union(*(_dataset_names(v) for v in spec.values()))
    if isinstance(spec, list):
        return set().union(*(_dataset_names(v) for v in spec))
    return set()
