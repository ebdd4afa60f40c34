"""The lab's altair charts, each a fixed spec over named datasets that `labkit.lab.rows.Rows` fills.

A chart is built and validated once (`CHARTS[name]()`); drawing new data only swaps its
`datasets` (`with_data`), the cheap path LAB.md measured for live updates. The same specs render
statically in reports (`figure`), so live, replayed and simulated runs look alike. The time axes of
the SWARM charts carry the run's kills, joins, moves, splits, codec and sync changes as labelled
rules. An executor's spec names the charts a run of it draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import altair as alt

Spec = dict[str, Any]
WIDTH = 300  # two charts side by side fit JupyterLab's notebook at 1280 px


LABEL_SLOTS = 3  # marks' labels take turns at this many heights down the plot, so close ones do not overlap


def _marks(dataset: str = "marks", height: int = 160) -> alt.LayerChart:
    """Rules at the times of `dataset`'s rows, labelled with what happened: the n-th label (by
    time) starts n mod LABEL_SLOTS thirds down the plot (a kill and a split a second apart once
    printed over each other at its top); the rule's tooltip says it too."""
    base = alt.Chart(alt.Data(name=dataset)).encode(x=alt.X("t:Q", title="seconds"))
    rule = base.mark_rule(color="#888", strokeDash=[4, 3]).encode(tooltip=["what:N", "t:Q"])
    slot = height // LABEL_SLOTS
    # labels inside the plot, so they never change its size (live views resize only on a re-embed)
    text = base.transform_window(n="row_number()", sort=[alt.SortField("t")]).transform_calculate(
        y=f"((datum.n - 1) % {LABEL_SLOTS}) * {slot}").mark_text(
        angle=90, align="left", baseline="bottom", dx=2, dy=2, fontSize=9, color="#555", limit=slot - 4,
    ).encode(text="what:N", y=alt.Y("y:Q", scale=None, axis=None))
    return rule + text


def routing_chart() -> alt.Chart:
    """Microbatches each trainer sent to each peer of a stage over the sliding window: IWRR
    sends a peer twice as fast twice the work, and a killed peer's share moves to the survivors."""
    return alt.Chart(alt.Data(name="routing")).mark_bar().encode(
        y=alt.Y("peer:N", title=None),
        x=alt.X("sum(microbatches):Q", title="microbatches in the window"),
        color=alt.Color("trainer:N", title="trainer"),
        row=alt.Row("stage:N", title="stage"),
        tooltip=["stage:N", "peer:N", "trainer:N", "microbatches:Q"],
    ).resolve_scale(y="independent").properties(title="Routing: who serves each stage", width=WIDTH, height=60)


def loads_chart() -> alt.LayerChart:
    """Each peer's request-queue length over time, one panel per stage, with moves marked."""
    lines = alt.Chart(alt.Data(name="loads")).mark_line(interpolate="step-after").encode(
        x=alt.X("t:Q", title="seconds"), y=alt.Y("queue:Q", title="queued requests"),
        color=alt.Color("peer:N"), strokeDash=alt.StrokeDash("stage:N"),
        tooltip=["peer:N", "stage:N", "queue:Q", "t:Q"])
    return (lines + _marks()).properties(title="Stage loads (queue length per peer)", width=WIDTH, height=160)


def router_chart() -> alt.LayerChart:
    """Each trainer's EMA of each peer's response time over time (log scale): IWRR charges a peer
    its EMA per pick, so a peer's share of its stage is in inverse proportion to it. Above each,
    faint, the deadline the trainer learnt for the peer (how long it waits before giving up)."""
    base = alt.Chart(alt.Data(name="router")).encode(
        x=alt.X("t:Q", title="seconds"), color=alt.Color("peer:N"), detail="trainer:N",
        tooltip=["peer:N", "stage:N", "trainer:N", "ema:Q", "priority:Q", "deadline:Q", "t:Q"])
    log = alt.Scale(type="log")
    lines = base.mark_line(opacity=0.7).encode(y=alt.Y("ema:Q", title="EMA response time, deadline (s)", scale=log),
                                              strokeDash=alt.StrokeDash("stage:N"))
    deadlines = base.mark_line(opacity=0.25, strokeDash=[2, 3]).encode(y=alt.Y("deadline:Q", scale=log))
    return (lines + deadlines + _marks()).properties(title="Router view (each trainer's EMA and deadline per peer)",
                                                     width=WIDTH, height=160)


def timeline_chart() -> alt.LayerChart:
    """A Gantt of the last seconds: each bar one request on a peer, from sent to answered
    (queued and computing), forward and backward, one lane per trainer."""
    bars = alt.Chart(alt.Data(name="timeline")).mark_bar(height=6, opacity=0.8).encode(
        x=alt.X("start:Q", title="seconds", scale=alt.Scale(zero=False)), x2="end:Q",
        y=alt.Y("peer:N", title=None, sort=alt.EncodingSortField("stage")), yOffset=alt.YOffset("trainer:N"),
        color=alt.Color("direction:N", scale=alt.Scale(domain=["forward", "backward"], range=["#4c78a8", "#f58518"])),
        tooltip=["peer:N", "trainer:N", "direction:N", "start:Q", "end:Q"])
    return (bars + _marks("recent_marks")).properties(title="Peer timeline (requests in flight)", width=WIDTH,
                                                      height=160)


def throughput_chart() -> alt.LayerChart:
    """Tokens per second of the whole swarm at each optimizer step."""
    line = alt.Chart(alt.Data(name="throughput")).mark_line(point=True).encode(
        x=alt.X("t:Q", title="seconds"), y=alt.Y("tokens_per_s:Q", title="tokens/s"),
        tooltip=["step:Q", "tokens_per_s:Q"])
    return (line + _marks()).properties(title="Throughput", width=WIDTH, height=160)


def loss_chart() -> alt.LayerChart:
    """Training loss at every step and validation loss at every evaluation, over time."""
    line = alt.Chart(alt.Data(name="loss")).mark_line().encode(
        x=alt.X("t:Q", title="seconds"), y=alt.Y("loss:Q", title="loss (nats/byte)", scale=alt.Scale(zero=False)),
        color=alt.Color("kind:N", title=None), tooltip=["step:Q", "loss:Q", "kind:N"])
    return (line + _marks()).properties(title="Loss", width=WIDTH, height=160)


def traffic_chart() -> alt.Chart:
    """Megabytes on the wire per stage, pipeline vs data-parallel, split by the codec in force."""
    return alt.Chart(alt.Data(name="traffic")).mark_bar().encode(
        x=alt.X("sum(megabytes):Q", title="MB sent and received"), y=alt.Y("kind:N", title=None),
        color=alt.Color("codec:N", legend=alt.Legend(orient="bottom")), row=alt.Row("stage:N", title="stage"),
        tooltip=["stage:N", "kind:N", "codec:N", "megabytes:Q"],
    ).properties(title="Bytes on the wire", width=WIDTH, height=40)


# Figure 12's colours: compute by pass (the last sub-model's one turn does both), and on the device
# lane the copy loading host -> device, then resident until its compute ends
SWAP_COLORS = {"forward": "#4c78a8", "forward+backward": "#b279a2", "backward": "#f58518", "loading": "#54a24b",
               "resident": "#bab0ac"}
LANES = ["execution", "device"]
TURN_TOOLTIP = ("replica:N", "submodel:Q", "phase:N", "iteration:Q", "load_start:Q", "load_end:Q", "compute_start:Q",
                "compute_end:Q")


def _lane(source: alt.Chart, lane: str, what: str, start: str, end: str, label: str | None = None,
          tooltip: tuple[str, ...] = TURN_TOOLTIP) -> alt.TopLevelMixin:
    """One lane's bars over `source`'s rows (`what`, `start` and `end` are Vega expressions), each
    labelled with its sub-model's number in `label` colour when given. The device lane puts
    even and odd sub-models on alternate halves: the next one loads while the current computes."""
    chart = source.transform_calculate(lane=f"'{lane}'", what=what, start=start, end=end,
                                       middle=f"({start} + {end}) / 2", slot="datum.submodel % 2")
    y = alt.Y("lane:N", title=None, sort=LANES, scale=alt.Scale(domain=LANES))
    offset = {"yOffset": alt.YOffset("slot:N", scale=alt.Scale(domain=[0, 1]))} if lane == "device" else {}
    bars = chart.mark_bar(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("start:Q", title="seconds", scale=alt.Scale(zero=False)), x2="end:Q", y=y, tooltip=list(tooltip),
        color=alt.Color("what:N", title=None, scale=alt.Scale(domain=list(SWAP_COLORS), range=list(SWAP_COLORS.values()))),
        **offset)
    if label is None:
        return bars
    return bars + chart.mark_text(fontSize=9 if lane == "execution" else 7, color=label).encode(
        x="middle:Q", y=y, text="submodel:Q", **offset)


def swaps_chart() -> alt.FacetChart:
    """ATOM's Figure 12, one panel per ATOM replica, over its last iterations (dashed rules
    start each): on `execution`, each sub-model's compute turn coloured by pass and labelled with
    its number (0 holds the embedding); on `device`, each sub-model's copy from the start of its
    load (green) until its last compute before it is dropped (grey): the turns that found it
    still resident (the last of forward is the first of backward; the last of backward the first
    of the next forward) extend one bar. The host lane is not drawn: the host holds every
    sub-model all the time (the master copy; device copies are dropped, never written back)."""
    copies = alt.Chart().transform_aggregate(resident_to="max(compute_end)",
                                             groupby=["replica", "submodel", "resident_from"])
    resident = _lane(copies, "device", "'resident'", "datum.resident_from", "datum.resident_to", label="#333",
                     tooltip=("replica:N", "submodel:Q", "resident_from:Q", "resident_to:Q"))
    loading = _lane(alt.Chart().transform_filter("datum.load_start != null"), "device", "'loading'",
                    "datum.load_start", "datum.load_end")
    execution = _lane(alt.Chart(), "execution", "datum.phase", "datum.compute_start", "datum.compute_end", label="white")
    starts = alt.Chart().transform_filter("datum.submodel == 0 && datum.phase != 'backward'").mark_rule(
        color="#555", strokeDash=[3, 3]).encode(x="compute_start:Q")
    return alt.layer(resident, loading, execution, starts, data=alt.Data(name="swaps")).properties(
        width=2 * WIDTH, height=44).facet(row=alt.Row("replica:N", title=None, header=alt.Header(labelAngle=0)),
                                          ).properties(title="ATOM swap timeline (Figure 12)")


def taskpool_chart() -> alt.FacetChart:
    """The task pool paper's pipeline, a row of panels per stage: on the left its reliable servers (frontal +
    backward, dashed) and its live clients over time (a kill or an overdue client drops the line,
    a join raises it); on the right the samples the pass's lost clients handed to the task pool
    (dots where it held any: the servers' own count at the pass's end, then the next pass starts
    with an empty pool, so at a lab model's speed the pool drains within milliseconds)."""
    tooltip = ["stage:N", "series:N", "value:Q", "what:N", "t:Q", "lost_samples:Q", "repeated_beyond_lost:Q"]
    base = alt.Chart().encode(
        x=alt.X("t:Q", title="seconds", scale=alt.Scale(zero=False)), y=alt.Y("value:Q", title=None), tooltip=tooltip,
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom"), scale=alt.Scale(
            domain=["servers", "clients", "pool"], range=["#4c78a8", "#54a24b", "#f58518"])))
    pool, clients, servers = (base.transform_filter(f"datum.series == '{name}'") for name in ("pool", "clients", "servers"))
    return alt.layer(pool.mark_area(interpolate="step-after", opacity=0.5),
                     pool.transform_filter("datum.value > 0").mark_circle(size=30),
                     clients.mark_line(interpolate="step-after", strokeWidth=3),
                     servers.mark_line(interpolate="step-after", strokeDash=[5, 3])).properties(
        width=WIDTH // 2, height=90).facet(
        data=alt.Data(name="pool"), row=alt.Row("stage:N", title="stage"),
        column=alt.Column("panel:N", title=None, sort="descending"),
    ).transform_calculate(panel="datum.series == 'pool' ? 'samples in the pool' : 'servers and clients'").resolve_scale(
        y="independent").properties(title="Task pool: servers, clients and pooled work")


CHARTS: dict[str, Callable[[], alt.TopLevelMixin]] = {
    "routing": routing_chart, "loads": loads_chart, "timeline": timeline_chart,
    "throughput": throughput_chart, "loss": loss_chart, "traffic": traffic_chart, "swaps": swaps_chart,
    "pool": taskpool_chart, "router": router_chart,
}
WIDE = ("swaps",)  # charts drawn alone on their row of the live view


def with_data(skeleton: Spec, datasets: dict[str, list[dict[str, Any]]]) -> Spec:
    """The chart spec `skeleton` (a chart's `to_dict()`) drawing `datasets`."""
    return {**skeleton, "datasets": datasets}

