"""Altair charts that read only events (labkit.events), so simulated and real runs render alike.

Each chart is a fixed spec over rows computed from events (`*_rows`), so a live view can swap in
new rows without rebuilding or re-validating the chart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import altair as alt

from labkit.events import Event

Row = dict[str, Any]


def loss_rows(events: Iterable[Event]) -> list[Row]:
    """Training loss per step and validation loss at each evaluation."""
    rows: list[Row] = []
    for e in events:
        if e["type"] == "step":
            rows.append({"step": e["step"], "loss": e["loss"], "kind": "train"})
        elif e["type"] == "eval":
            rows.append({"step": e["step"], "loss": e["val_loss"], "kind": "validation"})
    return rows


def loss_chart(events: Iterable[Event]) -> alt.Chart:
    """Training and validation loss against optimizer steps."""
    return alt.Chart(alt.Data(values=loss_rows(events))).mark_line().encode(
        x=alt.X("step:Q", title="optimizer step"),
        y=alt.Y("loss:Q", title="loss (nats/byte)", scale=alt.Scale(zero=False)),
        color=alt.Color("kind:N", title=None),
    ).properties(title="Loss", width=360, height=220)


def hop_shares(events: Iterable[Event], window: tuple[float, float] | None = None) -> dict[str, float]:
    """Each peer's share of its stage's forward hops (optionally within a time window)."""
    counts: dict[tuple[int, str], int] = {}
    for e in events:
        if e["type"] == "hop" and e["direction"] == "forward" and (window is None or window[0] <= e["t"] < window[1]):
            key = (e["stage"], e["peer"])
            counts[key] = counts.get(key, 0) + 1
    totals: dict[int, int] = {}
    for (stage, _), n in counts.items():
        totals[stage] = totals.get(stage, 0) + n
    return {peer: n / totals[stage] for (stage, peer), n in sorted(counts.items())}


def share_rows(events: Iterable[Event], bucket_seconds: float = 1.0) -> list[Row]:
    """Forward hops per (stage, peer, time bucket)."""
    counts: dict[tuple[int, str, float], int] = {}
    for e in events:
        if e["type"] == "hop" and e["direction"] == "forward":
            key = (e["stage"], e["peer"], round(e["t"] // bucket_seconds * bucket_seconds, 3))
            counts[key] = counts.get(key, 0) + 1
    return [{"stage": s, "peer": p, "t": t, "microbatches": n} for (s, p, t), n in counts.items()]


def share_chart(events: Iterable[Event], bucket_seconds: float = 1.0) -> alt.Chart:
    """Microbatches routed to each peer over time, one panel per stage: rerouting is visible."""
    return alt.Chart(alt.Data(values=share_rows(events, bucket_seconds))).mark_area().encode(
        x=alt.X("t:Q", title="seconds"),
        y=alt.Y("microbatches:Q", stack="normalize", title="share of microbatches"),
        color=alt.Color("peer:N"),
        row=alt.Row("stage:N"),
    ).properties(title="Stochastic wiring: who serves each stage", width=360, height=100)
