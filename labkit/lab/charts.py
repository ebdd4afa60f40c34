"""Altair charts that read only events (labkit.events), so simulated and real runs render alike."""

from __future__ import annotations

from collections.abc import Iterable

import altair as alt

from labkit.events import Event


def loss_chart(events: Iterable[Event]) -> alt.Chart:
    """Training loss per step and validation loss at each evaluation."""
    rows = [{"step": e["step"], "loss": e["loss"], "kind": "train"} for e in events if e["type"] == "step"]
    rows += [{"step": e["step"], "loss": e["val_loss"], "kind": "validation"} for e in events if e["type"] == "eval"]
    return alt.Chart(alt.Data(values=rows)).mark_line(point=False).encode(
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


def share_chart(events: Iterable[Event], bucket_seconds: float = 1.0) -> alt.Chart:
    """Microbatches routed to each peer over time, one panel per stage: rerouting is visible."""
    rows: dict[tuple[int, str, float], int] = {}
    for e in events:
        if e["type"] == "hop" and e["direction"] == "forward":
            key = (e["stage"], e["peer"], round(e["t"] // bucket_seconds * bucket_seconds, 3))
            rows[key] = rows.get(key, 0) + 1
    values = [{"stage": s, "peer": p, "t": t, "microbatches": n} for (s, p, t), n in rows.items()]
    return alt.Chart(alt.Data(values=values)).mark_area().encode(
        x=alt.X("t:Q", title="seconds"),
        y=alt.Y("microbatches:Q", stack="normalize", title="share of microbatches"),
        color=alt.Color("peer:N"),
        row=alt.Row("stage:N"),
    ).properties(title="Stochastic wiring: who serves each stage", width=360, height=100)
