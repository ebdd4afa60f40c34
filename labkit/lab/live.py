"""Live charts of a running run in a notebook, refreshed from its events a few times a second.

The training threads never touch the charts: events go to a queue; a refresher thread folds them
into rows and swaps the rows into each chart's spec (validated once), the cheap update path that
keeps a busy run fast (../docs LAB recipe: re-validating a chart per step slowed training 80x).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import altair as alt

from labkit.events import Event
from labkit.lab.charts import loss_chart, loss_rows, share_chart, share_rows


class LiveView:
    """Loss and per-peer routing shares of `run`, live.

    >>> view = LiveView(run); view.widget()   # doctest: +SKIP   (shows the two charts)
    >>> view.close()                         # doctest: +SKIP   (stops refreshing)

    hz: refreshes per second; keep: events kept for the charts (the oldest are dropped first).
    """

    def __init__(self, run: Any, hz: float = 3.0, keep: int = 50_000) -> None:
        if not 0 < hz <= 20:
            raise ValueError(f"hz={hz!r} is not allowed: a number in (0, 20]")
        self._run, self._period, self._keep = run, 1.0 / hz, keep
        self._queue: queue.Queue[Event] = run.events.subscribe()
        self._events: list[Event] = run.events.history()
        self._charts: list[tuple[alt.JupyterChart, dict[str, Any], Callable[[list[Event]], list]]] = []
        for chart, rows in ((loss_chart([]), loss_rows), (share_chart([]), share_rows)):
            self._charts.append((alt.JupyterChart(chart), chart.to_dict(), rows))
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="labkit-live-view", daemon=True)
        self._thread.start()

    def widget(self) -> Any:
        """The charts side by side, as one ipywidgets box to display."""
        import ipywidgets

        return ipywidgets.HBox([jc for jc, _, _ in self._charts])

    def refresh(self) -> None:
        """Fold the events that arrived and push fresh rows into every chart."""
        while True:
            try:
                self._events.append(self._queue.get_nowait())
            except queue.Empty:
                break
        del self._events[: max(0, len(self._events) - self._keep)]
        for jc, skeleton, rows in self._charts:
            jc.spec = {**skeleton, "data": {"values": rows(self._events)}}

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.refresh()
            if self._run.done:
                self.refresh()
                return

    def close(self) -> None:
        """Stop refreshing (the charts keep their last data)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._run.events.unsubscribe(self._queue)

    @property
    def refreshing(self) -> bool:
        """Whether the refresher thread still runs (False once closed)."""
        return self._thread.is_alive()

    @property
    def charts(self) -> list[alt.JupyterChart]:
        return [jc for jc, _, _ in self._charts]
