"""The what-if pane beside the live charts: knobs, a Simulate button, a result line and a chart.

The result line gives the scaled-up swarm's answers (labkit/lab/whatif.py) and, beside them, the
same model's prediction of the live run at 1x against what the run measured (`live_error`), so a
student sees how far to trust the 10x and 100x answers::

    panel = WhatIfPanel(run); panel.widget()     # then click Simulate (or panel.simulate_button.click())
"""

from __future__ import annotations

import html
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import altair as alt

from labkit.lab.whatif import WhatIfResult, live_error, measured_speeds, what_if, whatif_chart


class WhatIfPanel:
    """Knobs, a Simulate button, a result line and a chart: the live run's swarm scaled up.

    Simulate reads the run's events and knobs on the kernel thread's click, then measures and
    simulates on a worker thread (`last` is that Future: its WhatIfResult, or the error that the
    result line shows in one line). Whoever displays the chart calls
    `alt.JupyterChart.enable_offline()` first where there is no CDN.
    """

    def __init__(self, run: Any) -> None:
        import ipywidgets as w

        self.run = run
        self.scale = w.IntText(value=10, description="peers x")
        self.rtt_ms = w.FloatText(value=100.0, description="RTT (ms)")
        self.bandwidth_mbps = w.FloatText(value=100.0, description="Mb/s")
        self.churn_per_hour = w.FloatText(value=6.0, description="churn/h")
        self.window = w.IntText(value=1, description="in flight")
        self.simulate_button = w.Button(description="Simulate", tooltip="simulate the measured swarm scaled up")
        self.result_line = w.HTML(value="")
        self.chart = alt.JupyterChart(whatif_chart(None))
        self.last: Future | None = None
        self.error: float | None = None  # the last Simulate's 1x prediction over the run's measured tokens/s, less 1
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="labkit-whatif")
        self.simulate_button.on_click(lambda _: self.simulate())

    def knobs(self) -> dict[str, Any]:
        """The knob widgets' values, as `what_if` keywords."""
        return {"scale": self.scale.value, "rtt_ms": self.rtt_ms.value, "bandwidth_mbps": self.bandwidth_mbps.value,
                "churn_per_hour": self.churn_per_hour.value, "window": self.window.value}

    def simulate(self) -> Future:
        """Start one what-if on the worker thread with the current knobs; returns (and keeps) its Future."""
        self.result_line.value = "simulating…"
        self.last = self._pool.submit(self._simulate, self.knobs())
        return self.last

    def _simulate(self, knobs: dict[str, Any]) -> WhatIfResult:
        try:
            events = self.run.events.history()
            result = what_if(measured_speeds(events, self.run.config), self.run.config, **knobs)
            check = live_error(events, self.run.config)
        except Exception as exc:
            self.result_line.value = html.escape(str(exc) if isinstance(exc, ValueError)
                                                 else f"what-if failed: {type(exc).__name__}: {exc}")
            raise
        self.chart.chart = whatif_chart(result)
        self.error = None if check is None else check[0] / check[1] - 1
        own = ("" if check is None else f" | its own error on this run: at 1x it predicts {check[0]:,.0f} tokens/s, "
               f"the run measured {check[1]:,.0f} ({self.error:+.0%})")
        self.result_line.value = html.escape(result.line() + own)
        return result

    def widget(self) -> Any:
        """The knobs, button, result line and chart as one box to display."""
        import ipywidgets as w

        knobs = w.HBox([self.scale, self.rtt_ms, self.bandwidth_mbps, self.churn_per_hour, self.window])
        return w.VBox([knobs, w.HBox([self.simulate_button, self.result_line]), self.chart])

    def close(self) -> None:
        """Let the worker thread go once the simulation in progress (if any) ends."""
        self._pool.shutdown(wait=False)
