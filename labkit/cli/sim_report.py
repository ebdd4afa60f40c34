"""HTML report of a simulated (or real) run: altair charts of throughput, peers and stage load."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import altair as alt

from labkit.events import Event


def peers_per_stage(events: Iterable[Event]) -> list[dict[str, Any]]:
    """Peers on each stage after every peer event (joined, moved, killed/left), from events alone."""
    where: dict[str, int] = {}
    rows = []
    for e in events:
        if e["type"] != "peer":
            continue
        if e["state"] in ("killed", "left"):
            where.pop(e["peer"], None)
        elif e["state"] in ("joined", "moved", "alive"):
            where[e["peer"]] = e["stage"]
        counts: dict[int, int] = {}
        for stage in where.values():
            counts[stage] = counts.get(stage, 0) + 1
        rows += [{"t": e["t"], "stage": str(s), "peers": counts.get(s, 0)} for s in sorted(set(counts) | {e["stage"]})]
    return rows


def write_report(path: Path, *, title: str, summary: dict[str, Any], series: list[dict[str, float]],
                 events: list[Event]) -> None:
    """Write one self-contained HTML page: summary table and three charts."""
    melted = [{"t": r["t"], "kind": k, "samples_per_s": r[k]} for r in series for k in ("samples_per_s", "optimal_samples_per_s")]
    throughput = alt.Chart(alt.Data(values=melted)).mark_line().encode(
        x=alt.X("t:Q", title="time (s)"), y=alt.Y("samples_per_s:Q", title="samples / s"), color="kind:N").properties(
        width=640, height=220, title="Throughput over time, achieved vs optimal")
    peers = alt.Chart(alt.Data(values=peers_per_stage(events))).mark_line(interpolate="step-after").encode(
        x=alt.X("t:Q", title="time (s)"), y="peers:Q", color="stage:N").properties(
        width=640, height=220, title="Peers per stage (from peer events)")
    stages = alt.Chart(alt.Data(values=summary["stages"])).mark_bar().encode(
        x=alt.X("stage:O"), y=alt.Y("utilization:Q", title="device utilisation")).properties(
        width=300, height=200, title="Per-stage utilisation")
    spec = alt.vconcat(throughput, peers, stages).to_json()
    table = html.escape(json.dumps({k: v for k, v in summary.items() if k != "stages"}, indent=2))
    path.write_text(f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-embed@6"></script></head>
<body><h1>{html.escape(title)}</h1><pre>{table}</pre><div id="charts"></div>
<script type="application/json" id="spec">{spec}</script>
<script>vegaEmbed("#charts", JSON.parse(document.getElementById("spec").textContent));</script>
</body></html>
""")
