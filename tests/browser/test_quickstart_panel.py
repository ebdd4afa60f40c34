"""The quick-start tutorial in JupyterLab: Run All launches a run from the panel and kills a peer
from its row; then a click on another peer's Kill button in the page, and the routing chart and
the status line show the survivor taking that stage's traffic, offline. On the way: the health
table has numbers for each live peer, the bytes chart's legend lies within its output area, the
killed peer leaves the stage-loads and router legends, and the what-if chart says to press Simulate."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import pytest

from labkit.lab.whatif import PLACEHOLDER
from tests.browser.helpers import assert_offline, open_notebook, peer_row, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = pytest.mark.browser

KILLED_BY_THE_NOTEBOOK, SURVIVOR_1 = "s1p0", "s1p1"
CLICKED, SURVIVOR_0 = "s0p0", "s0p1"
MIN_NUMBER_BOX_PX = 48  # room for a few digits beside the number input's spinner


def test_the_quick_start_kills_from_the_panel_and_the_routing_chart_follows(page: Page) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    open_notebook(page, "00-quickstart.ipynb")
    run_all(page)
    status = page.locator(".widget-html-content", has_text="killed")
    expect(status).to_have_text(f"killed {KILLED_BY_THE_NOTEBOOK}")
    routing = page.locator(".vega-embed", has_text="Routing: who serves each stage")
    expect(routing.locator("svg.marks")).to_be_visible(timeout=30_000)
    expect(routing).to_contain_text(SURVIVOR_1)
    expect(routing).not_to_contain_text(KILLED_BY_THE_NOTEBOOK, timeout=60_000)  # its 5 s window slid past the kill
    expect(peer_row(page, CLICKED)).to_be_visible()
    _check_health(page, live=(CLICKED, SURVIVOR_0, SURVIVOR_1), gone=KILLED_BY_THE_NOTEBOOK)
    screenshot(page, "quickstart_after_run_all")

    peer_row(page, CLICKED).get_by_role("button", name="Kill", exact=True).click()  # a click in the page
    expect(status).to_have_text(f"killed {CLICKED}", timeout=30_000)
    expect(peer_row(page, CLICKED)).to_have_count(0, timeout=30_000)  # gone from the table
    expect(routing).not_to_contain_text(CLICKED, timeout=60_000)  # stage 0's traffic is all the survivor's
    expect(routing).to_contain_text(SURVIVOR_0)
    _check_health(page, live=(SURVIVOR_0, SURVIVOR_1), gone=CLICKED)
    for title in ("Stage loads", "Peer timeline", "Throughput", "Loss", "Bytes on the wire"):
        expect(page.locator(".vega-embed", has_text=title).locator("svg.marks")).to_be_visible()
    screenshot(page, "quickstart_after_click")

    h_box = page.locator(".widget-text", has=page.get_by_text("H", exact=True)).locator("input")
    expect(h_box).to_have_value("20")  # DiLoCo's default H, whole: the box once showed "2"
    width = h_box.evaluate("i => [i.clientWidth, i.scrollWidth]")
    assert width[0] >= MIN_NUMBER_BOX_PX and width[1] <= width[0], \
        f"the H box is {width[0]} px wide, its text {width[1]} px"

    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator(".widget-html-content", has_text="run stopped at step")).to_be_visible(timeout=60_000)
    assert_offline(page)
    print(f"[browser] quick start: run all, kill from the page, reroute, stop: {time.monotonic() - started:.1f} s")


def _within(inner: Locator, outer: Locator) -> None:
    """`inner`'s bounding box lies inside `outer`'s (nothing of it cut off at the edge)."""
    a, b = inner.bounding_box(), outer.bounding_box()
    assert a is not None and b is not None
    assert a["x"] >= b["x"] - 1 and a["x"] + a["width"] <= b["x"] + b["width"] + 1, (a, b)


def _check_health(page: Page, live: tuple[str, ...], gone: str) -> None:
    """Each live peer has a row of numbers in the health table, the gone one none; the bytes chart's
    legend is within its output area; the gone peer is in no stage-loads or router legend; the what-if
    chart shows its placeholder."""
    from playwright.sync_api import expect

    health = page.locator("table.labkit-health")
    expect(health).to_be_visible(timeout=30_000)
    expect(health.locator("tr", has=page.get_by_text(gone, exact=True))).to_have_count(0, timeout=30_000)
    for peer in live:
        row = health.locator("tr", has=page.get_by_text(peer, exact=True))
        expect(row).to_have_count(1, timeout=30_000)
        expect(row).to_contain_text(re.compile(r"\d+(\.\d)? (ms|s) ago"), timeout=30_000)
        cells = row.locator("td").all_inner_texts()
        assert re.fullmatch(r"[\d.]+ (B|KB|MB|GB)", cells[2]) and re.fullmatch(r"[\d.]+ m?s", cells[4]), cells
        assert all(re.match(r"[\d.]+ m?s · \d+%", c) for c in cells[5:]) and len(cells) > 5, cells
    traffic = page.locator(".vega-embed", has_text="Bytes on the wire")
    legend = traffic.locator("g.role-legend").first
    expect(legend).to_be_visible(timeout=30_000)
    _within(legend, page.locator(".jp-OutputArea-output", has=traffic).last)
    for title in ("Stage loads", "Router view"):
        chart = page.locator(".vega-embed", has_text=title)
        expect(chart.locator("g.role-legend", has_text=live[0]).first).to_be_visible()  # the legend names peers
        expect(chart.locator("g.role-legend", has_text=gone)).to_have_count(0, timeout=30_000)
    expect(page.locator(".vega-embed", has_text=PLACEHOLDER)).to_be_visible()
