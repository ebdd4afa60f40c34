"""The lab panel in JupyterLab: Launch from the form, kill a peer from its row, and the routing
chart and the status line show the survivor taking the stage's traffic, offline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.browser.helpers import assert_offline, open_notebook, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = pytest.mark.browser

VICTIM, SURVIVOR = "s1p0", "s1p1"


def peer_row(page: Page, peer: str) -> Locator:
    """The peer table's row of `peer` (the innermost box holding its name and a Kill button)."""
    kill = page.get_by_role("button", name="Kill", exact=True)
    return page.locator(".widget-hbox", has=kill).filter(has=page.get_by_text(peer, exact=True)).last


def test_the_panel_launches_a_run_and_a_kill_from_its_row_reroutes_the_stage(page: Page) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    open_notebook(page, "lab_panel.ipynb")
    run_all(page)
    page.locator("button.widget-button", has_text="Launch").click()  # (its name also holds its icon)

    victim_row = peer_row(page, VICTIM)
    expect(victim_row).to_be_visible(timeout=120_000)  # the run started: its peers are in the table
    routing = page.locator(".vega-embed", has_text="Routing: who serves each stage")
    expect(routing.locator("svg.marks")).to_be_visible(timeout=30_000)
    expect(routing).to_contain_text(VICTIM, timeout=60_000)  # it served microbatches
    screenshot(page, "lab_panel_before_kill")

    victim_row.get_by_role("button", name="Kill", exact=True).click()
    expect(page.get_by_text(f"killed {VICTIM}", exact=True)).to_be_visible(timeout=30_000)
    expect(peer_row(page, VICTIM)).to_have_count(0, timeout=30_000)  # gone from the table
    # the routing window (4 s here) slides past the kill: stage 1's traffic is all the survivor's
    expect(routing).not_to_contain_text(VICTIM, timeout=60_000)
    expect(routing).to_contain_text(SURVIVOR)
    for title in ("Stage loads", "Peer timeline", "Throughput", "Loss", "Bytes on the wire"):
        expect(page.locator(".vega-embed", has_text=title).locator("svg.marks")).to_be_visible()
    screenshot(page, "lab_panel_after_kill")

    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator(".widget-html-content", has_text="run stopped at step")).to_be_visible(timeout=60_000)
    assert_offline(page)
    print(f"[browser] lab panel: launch, kill, reroute, stop: {time.monotonic() - started:.1f} s")
