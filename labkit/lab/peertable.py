"""The peer table's pieces: one row of labels and buttons per live peer, and the greying out of
verbs an executor refuses (with the run handle's reason as the tooltip).

Kept apart from `RunControls`, which wires these widgets to the run's verbs.
"""

from __future__ import annotations

from typing import Any

import ipywidgets

from labkit.executors.spec import ExecutorSpec

COLUMNS = ("peer", "stage", "state", "queue", "tokens/s", "microbatches", "bytes")
HEADERS = {"microbatches": "served"}  # short headers where the column's name is wider than its cell
CELL = {"width": "5.6em", "flex": "0 0 auto"}  # fixed: a squeezed row would cut its buttons short


def human_bytes(n: float) -> str:
    """12_300 -> "12.3 KB"."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def stage_options(count: int) -> list[tuple[str, int]]:
    return [(f"stage {s}", s) for s in range(count)]


def button(description: str, style: str = "") -> ipywidgets.Button:
    return ipywidgets.Button(description=description, button_style=style, layout={"width": "auto", "flex": "0 0 auto"})


def refused(spec: ExecutorSpec, **widgets: list[ipywidgets.Widget]) -> None:
    """Grey out the widgets (by verb) of the verbs the executor of `spec` refuses, each tooltip the
    handle's reason; the verbs it accepts keep their widgets."""
    for verb, group in widgets.items():
        if why := spec.refused.get(verb):
            for widget in group:
                widget.disabled, widget.tooltip = True, f"not with executor={spec.name!r}: {why}"


class PeerRow:
    """One live peer: its labels (`labels` by column) and its Kill, slow (`delay` + `slow`) and
    Move (`target` + `move`) controls."""

    def __init__(self, name: str, stage: int, stages: int, delay: float) -> None:
        self.name = name
        self.labels = {column: ipywidgets.Label(layout=CELL) for column in COLUMNS}
        self.labels["peer"].value, self.labels["stage"].value = name, str(stage)
        self.kill = button("Kill", "danger")
        self.delay = ipywidgets.FloatText(value=delay, step=0.05, layout={"width": "5em"},
                                          tooltip="seconds added to every request this peer serves, in [0, 60)")
        self.slow = button("slow")
        self.target = ipywidgets.Dropdown(options=stage_options(stages), value=(stage + 1) % stages,
                                          layout={"width": "7em"})
        self.move = button("Move")
        self.widget = ipywidgets.HBox([*self.labels.values(), self.kill, self.delay, self.slow, self.target, self.move])

    def update(self, state: str, peer: dict[str, Any], totals: dict[str, float]) -> None:
        """Set the labels (a label set to its own value sends nothing to the browser)."""
        values = {"state": state, "queue": str(peer.get("queue", 0)),
                  "tokens/s": f"{totals['tokens_per_s']:,.0f}" if "tokens_per_s" in totals else "–",
                  "microbatches": f"{totals.get('microbatches', 0):,.0f}", "bytes": human_bytes(totals.get("bytes", 0))}
        for column, value in values.items():
            self.labels[column].value = value

    def close(self) -> None:
        """Close the row's widgets (the peer left the run)."""
        for widget in (*self.labels.values(), self.kill, self.delay, self.slow, self.target, self.move, self.widget):
            widget.close()
