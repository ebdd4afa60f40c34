"""The panel on a short ATOM run in JupyterLab: the swap timeline (ATOM's Figure 12) renders
offline with one panel per replica, beside throughput and loss, and no SWARM-only chart."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.browser.helpers import assert_offline, open_notebook, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def test_the_swap_timeline_renders_offline(page: Page) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    open_notebook(page, "atom_swaps.ipynb")
    run_all(page)
    expect(page.locator(".widget-html-content", has_text="run finished at step 8")).to_be_visible(timeout=60_000)
    swaps = page.locator(".vega-embed", has_text="ATOM swap timeline (Figure 12)")
    expect(swaps.locator("svg.marks")).to_be_visible(timeout=30_000)
    for text in ("r0", "r1", "execution", "device", "forward+backward", "loading", "resident"):
        expect(swaps.get_by_text(text, exact=True).first).to_be_visible()
    bars = swaps.locator(".mark-rect path")
    assert bars.count() > 20, bars.count()  # execution and device bars of both replicas' last iterations
    for title in ("Throughput", "Loss"):
        expect(page.locator(".vega-embed", has_text=title).locator("svg.marks")).to_be_visible()
    expect(page.locator(".vega-embed", has_text="Routing: who serves each stage")).to_have_count(0)
    screenshot(page, "atom_swap_timeline")
    assert_offline(page)
    print(f"[browser] ATOM panel: run all, swap timeline, screenshot: {time.monotonic() - started:.1f} s")
