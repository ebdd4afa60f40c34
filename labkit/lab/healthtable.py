"""The panel's health table: per live peer its traffic, last answer, deadline and each trainer's
router view; under it, the run's moves with what each cost (labkit/lab/health.py folds them).

One HTML widget, its value set only when the text changes (a label set to its own value sends
nothing, and a table redrawn 3 times a second with the same text would).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets

from labkit.lab.health import Health, Row
from labkit.lab.peertable import human_bytes

CSS = "border-collapse:collapse;font-size:12px"
CELL = "padding:1px 10px 1px 0;text-align:right"
MAX_MOVES_SHOWN = 8  # the newest moves


def seconds(value: float | None) -> str:
    """0.0042 -> "4.2 ms", 3.25 -> "3.2 s", None -> "–"."""
    if value is None:
        return "–"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.1f} s"


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f'<th style="{CELL}">{html.escape(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f'<td style="{CELL}">{html.escape(c)}</td>' for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}" style="{CSS}"><tr>{head}</tr>{body}</table>'


def peers_html(peers: list[Row]) -> str:
    """The per-peer table: peer, stage, bytes/s (in + out), last answer, deadline, then per trainer
    its EMA and share of the peer's stage."""
    trainers = sorted({t for p in peers for t in p["router"]})
    headers = ["peer", "stage", "in+out /s", "answered", "deadline", *(f"{t} EMA · share" for t in trainers)]
    rows = []
    for p in peers:
        views = [p["router"].get(t) for t in trainers]
        rows.append([p["peer"], "–" if p["stage"] is None else str(p["stage"]), human_bytes(p["bytes_per_s"]),
                     "never" if p["answered_s_ago"] is None else f"{seconds(p['answered_s_ago'])} ago",
                     seconds(p["deadline_s"]),
                     *("–" if v is None else f"{seconds(v['ema'])} · "
                       f"{'–' if v['share'] is None else format(v['share'], '.0%')}" for v in views)])
    return _table(headers, rows, "labkit-health")


def moves_html(moves: list[Row]) -> str:
    """The newest moves: when, who went from which stage to which, the state downloaded, the
    seconds until the new peer answered, the samples its old stage lost."""
    if not moves:
        return "<i>no moves yet (a rebalance or a Move click lists here what it cost)</i>"
    rows = [[f"{m['t']:.1f} s", f"{m['peer']} → {m['to']}", f"{m['stage']} → {m['to_stage']}",
             "–" if m["state_bytes"] is None else human_bytes(m["state_bytes"]),
             "not yet" if m["down_s"] is None else seconds(m["down_s"]),
             "–" if m["lost_samples"] is None else f"{m['lost_samples']:,}"]
            for m in moves[-MAX_MOVES_SHOWN:]]
    return _table(["at", "peer", "stage", "state downloaded", "not serving", "samples lost"], rows, "labkit-moves")


def health_html(health: Health) -> str:
    """Both tables, titled."""
    peers = health.peers()
    top = peers_html(peers) if peers else "<i>no peer has answered yet</i>"
    return (f"<b>Peer health</b> (bytes over the last {health.window_s:g} s; a hop carries in and out as one sum)"
            f"{top}<div><b>Moves</b></div>{moves_html(health.moves())}")


class HealthTable:
    """The tables as one ipywidgets.HTML (`widget`); `update(health)` redraws them when they change."""

    def __init__(self) -> None:
        self.widget: Any = ipywidgets.HTML("<i>peer health: waiting for the run's events</i>")

    def update(self, health: Health) -> None:
        text = health_html(health)
        if text != self.widget.value:
            self.widget.value = text
