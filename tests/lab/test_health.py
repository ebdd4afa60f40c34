"""Peer health, move costs and the panel's glitch fixes, on known event sequences (hand-checked numbers)."""

from __future__ import annotations

import json
import re

import pytest
import vl_convert

from labkit import events as ev
from labkit.config import RunConfig
from labkit.lab.charts import CHARTS, WIDTH, with_data
from labkit.lab.health import Health, router_shares, state_bytes
from labkit.lab.healthtable import HealthTable, moves_html, peers_html, seconds
from labkit.lab.report import cell, write_report
from labkit.lab.rows import Rows, Windows
from labkit.lab.whatif import PLACEHOLDER, whatif_chart

MODEL = RunConfig().model


def hop(t: float, peer: str, nbytes: int) -> ev.Event:
    return ev.hop(t, trainer="t0", stage=int(peer[1]), peer=peer, direction="forward", nbytes=nbytes, seconds=0.1,
                  microbatch=0)


def view(*peers: tuple[str, float, float]) -> list[dict]:
    return [{"peer": p, "stage": int(p[1]), "ema": ema, "priority": 0.0, "deadline": d} for p, ema, d in peers]


def moving_run() -> list[ev.Event]:
    """s0p0 and s1p0 serve all along; s0p1 serves until t=6, when it moves to stage 1 as s1p1,
    which first answers at 7.5; two trainers' router views at 9 and 9.5; the last event at 10.5."""
    out = [ev.peer(0.0, peer=p, stage=int(p[1]), state="joined", queue=0) for p in ("s0p0", "s0p1", "s1p0")]
    out += [hop(1.2 + k, "s0p1", 1000) for k in range(5)]
    out.append(ev.peer(6.0, peer="s1p1", stage=1, state="joined", queue=0))
    out.append(ev.peer(6.0, peer="s0p1", stage=0, state="moved", queue=0) | {"to": "s1p1", "to_stage": 1,
                                                                            "lost_samples": 3})
    out += [hop(7.5, "s1p1", 1000), hop(8.0, "s1p1", 1000)]
    out.append(ev.router(9.0, trainer="t0", peers=view(("s0p0", 0.1, 1.0), ("s1p0", 0.2, 2.0), ("s1p1", 0.6, 3.0))))
    out.append(ev.router(9.5, trainer="t1", peers=view(("s0p0", 0.2, 1.5), ("s1p0", 0.3, 1.0), ("s1p1", 0.3, 0.5))))
    out += [hop(1.0 + k, "s0p0", 1000) for k in range(10)] + [hop(1.5 + k, "s1p0", 2000) for k in range(10)]
    return sorted(out, key=lambda e: e["t"])


def test_peer_health_counts_recent_bytes_last_answers_deadlines_and_router_views() -> None:
    health = Health(window_s=4.0, model=MODEL, split=[2, 2])
    for e in moving_run():
        health.add(e)
    rows = {r["peer"]: r for r in health.peers()}
    assert list(rows) == ["s0p0", "s1p0", "s1p1"]  # the moved s0p1 is gone
    # now = 10.5, hops at t >= 6.5 count over 4 s; s1p1 joined at 6, so also 4 s
    assert rows["s0p0"]["bytes_per_s"] == pytest.approx(4000 / 4)  # 7, 8, 9, 10
    assert rows["s1p0"]["bytes_per_s"] == pytest.approx(5 * 2000 / 4)  # 6.5 .. 10.5
    assert rows["s1p1"]["bytes_per_s"] == pytest.approx(2000 / 4)
    assert [rows[p]["answered_s_ago"] for p in rows] == pytest.approx([0.5, 0.0, 2.5])
    assert [rows[p]["deadline_s"] for p in rows] == [1.5, 2.0, 3.0]  # the longest any trainer gave
    assert rows["s1p1"]["router"] == {"t0": {"ema": 0.6, "share": pytest.approx(0.25)},
                                      "t1": {"ema": 0.3, "share": pytest.approx(0.5)}}
    assert rows["s0p0"]["router"]["t0"]["share"] == 1.0


def test_a_move_costs_its_stage_state_and_the_seconds_until_the_new_peer_answers() -> None:
    health = Health(window_s=4.0, model=MODEL, split=[2, 2])
    for e in moving_run():
        health.add(e)
    expected = MODEL.stage_params(2, 2) * 12  # stage 1: blocks 2-3 and the head, fp32 + Adam's two moments
    assert health.moves() == [{"t": 6.0, "peer": "s0p1", "stage": 0, "to": "s1p1", "to_stage": 1, "lost_samples": 3,
                               "down_s": 1.5, "state_bytes": expected}]
    assert state_bytes(MODEL, [2, 2], 1, "sgd") == expected * 8 // 12


def test_a_move_uses_the_split_in_force_and_waits_for_the_first_answer() -> None:
    health = Health(model=MODEL, split=[2, 2])
    health.add(ev.setting(1.0, name="layer_split", value=[1, 3]))
    health.add(ev.peer(2.0, peer="s0p0", stage=0, state="moved", queue=0) | {"to": "s1p9", "to_stage": 1,
                                                                            "lost_samples": 0})
    assert health.moves()[0]["state_bytes"] == MODEL.stage_params(1, 3) * 12
    assert health.moves()[0]["down_s"] is None  # not answered yet
    assert "not yet" in moves_html(health.moves())
    health.add(hop(2.75, "s1p9", 10))
    assert health.moves()[0]["down_s"] == 0.75
    unknown = Health()  # a simulation's events: no model, the state is unknown
    unknown.add(ev.peer(1.0, peer="s0p0", stage=0, state="moved", queue=0) | {"to": "s1p9", "to_stage": 1})
    assert unknown.moves()[0]["state_bytes"] is None and unknown.moves()[0]["lost_samples"] is None


def test_router_shares_are_inverse_to_the_ema_within_each_stage() -> None:
    assert router_shares(view(("s0p0", 0.1, 1), ("s0p1", 0.3, 1), ("s1p0", 2.0, 1))) == pytest.approx(
        {"s0p0": 0.75, "s0p1": 0.25, "s1p0": 1.0})
    assert router_shares(view(("s0p0", 0.0, 1))) == {}  # an EMA not measured yet has no share


def test_the_health_tables_show_the_numbers() -> None:
    health = Health(window_s=4.0, model=MODEL, split=[2, 2])
    for e in moving_run():
        health.add(e)
    text = peers_html(health.peers())
    assert text.count("<tr>") == 4  # header and three live peers
    for value in ("1.0 KB", "2.5 KB", "500 B", "500.0 ms ago", "2.5 s ago", "t0 EMA · share", "t1 EMA · share",
                  "600.0 ms · 25%", "300.0 ms · 50%"):
        assert value in text, value
    moves = moves_html(health.moves())
    assert "s0p1 → s1p1" in moves and "1.5 s" in moves and "0 → 1" in moves
    table = HealthTable()
    table.update(health)
    assert "Peer health" in table.widget.value and "s1p1" in table.widget.value
    assert [seconds(None), seconds(0.0042), seconds(3.25)] == ["–", "4.2 ms", "3.2 s"]


def test_rows_of_a_config_fold_health_with_its_model_and_split() -> None:
    cfg = RunConfig(stages=2, peers=2)
    rows = Rows.for_config(cfg, Windows(routing_s=4.0)).extend(moving_run())
    assert rows.health.window_s == 4.0
    assert rows.health.moves()[0]["state_bytes"] == MODEL.stage_params(cfg.layer_split[0], cfg.layer_split[1]) * 12
    assert [r["peer"] for r in rows.health.peers()] == ["s0p0", "s1p0", "s1p1"]


def _label_positions(svg: str, words: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    found = {}
    for m in re.finditer(r'<text[^>]*transform="translate\(([\d.]+),([\d.]+)\)[^"]*"[^>]*>([^<]*)</text>', svg):
        if any(w in m.group(3) for w in words):
            found[m.group(3)] = (float(m.group(1)), float(m.group(2)))
    return found


def test_close_marks_are_labelled_at_different_heights() -> None:
    marks = [{"t": 10.0, "what": "kill s1p0"}, {"t": 10.3, "what": "split 1,3"}, {"t": 10.6, "what": "move s0p1"}]
    loads = [{"t": float(t), "peer": "s0p0", "stage": 0, "queue": t % 3} for t in range(30)]
    svg = vl_convert.vegalite_to_svg(with_data(CHARTS["loads"]().to_dict(), {"loads": loads, "marks": marks}))
    at = _label_positions(svg, ("kill", "split", "move"))
    assert len(at) == 3
    heights = sorted(y for _, y in at.values())
    assert heights[1] - heights[0] > 40 and heights[2] - heights[1] > 40, at  # apart by more than a label's length


def test_the_bytes_chart_keeps_its_legend_under_the_plot() -> None:
    traffic = [{"stage": s, "kind": k, "codec": c, "megabytes": 3.0} for s in (0, 1)
               for k in ("pipeline-parallel", "data-parallel") for c in ("fp32", "int8")]
    svg = vl_convert.vegalite_to_svg(with_data(CHARTS["traffic"]().to_dict(), {"traffic": traffic}))
    width = float(re.search(r'<svg[^>]*width="([\d.]+)"', svg).group(1))
    assert width < WIDTH + 150, width  # plot, row headers and axis labels; a legend on the right made it 495 px


def test_the_what_if_chart_says_to_press_simulate_before_the_first_run() -> None:
    svg = vl_convert.vegalite_to_svg(whatif_chart(None).to_dict())
    assert PLACEHOLDER in svg


def test_the_report_shows_byte_counts_as_bytes(tmp_path) -> None:
    summary = {"status": "finished", "steps": 30, "pipeline_bytes": [32_354_304, 32_747_520], "dp_bytes_total": 56_957_952}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "events.jsonl").write_text("")
    text = write_report(tmp_path).read_text()
    assert "32.4 MB, 32.7 MB" in text and "57.0 MB" in text and "32,354,304" not in text
    assert cell("steps", 30) == "30" and cell("bytes_label", "x") == "x"


def test_a_view_from_before_a_kill_shares_the_stage_among_the_peers_left() -> None:
    health = Health()
    health.add(ev.router(1.0, trainer="t0", peers=view(("s1p0", 0.1, 1.0), ("s1p1", 0.1, 1.0))))
    assert [r["router"]["t0"]["share"] for r in health.peers()] == [0.5, 0.5]
    health.add(ev.peer(1.5, peer="s1p0", stage=1, state="killed", queue=0))
    assert [(r["peer"], r["router"]["t0"]["share"]) for r in health.peers()] == [("s1p1", 1.0)]
