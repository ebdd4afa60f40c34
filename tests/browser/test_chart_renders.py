"""A live altair chart renders offline in JupyterLab and follows an update of its data; an
ipywidgets click reaches the kernel and its answer reaches the page."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.browser.helpers import assert_offline, open_notebook, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

UPDATED_POINTS = 7  # rows after the notebook's update cell (3 before it)


def test_live_chart_renders_offline_and_updates(page: Page) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    open_notebook(page, "live_chart.ipynb")
    run_all(page)

    # the Vega view: an SVG inside the anywidget's vega-embed element, with a size
    chart = page.locator(".jp-OutputArea-output .vega-embed")
    expect(chart).to_have_count(1)
    marks = chart.locator("svg.marks")
    expect(marks).to_be_visible(timeout=30_000)
    box = marks.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 100, box

    # the update cell's data: one point mark per row, the last one labelled with its values
    points = chart.locator(".mark-symbol path")
    expect(points).to_have_count(UPDATED_POINTS, timeout=30_000)
    last = UPDATED_POINTS - 1
    expect(points.last).to_have_attribute("aria-label", f"x: {last}; y: {last * last}")

    # a widget round trip: the click goes to the kernel, whose handler sets the HTML's value
    status = page.locator(".jp-OutputArea-output .widget-html-content")
    expect(status).to_have_text("no click yet")
    page.get_by_role("button", name="Ping the kernel", exact=True).click()
    expect(status).to_have_text("kernel saw 1 click(s)", timeout=30_000)

    screenshot(page, "live_chart")
    assert_offline(page)
    print(f"[browser] open, run all, chart, update, click, screenshot: {time.monotonic() - started:.1f} s")
