"""The panel on a task-pool run in JupyterLab: the task-pool chart (servers, clients and the pool,
a row of panels per stage) renders offline beside the clients' slices, and a client killed by a
click in the page leaves the peer table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.browser.helpers import assert_offline, open_notebook, peer_row, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def test_the_task_pool_chart_renders_offline_and_a_client_is_killed_from_the_page(page: Page) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    open_notebook(page, "task_pool.ipynb")
    run_all(page)
    expect(page.get_by_text("killed s1c1, s1c2 joined stage 1")).to_be_visible(timeout=60_000)
    pool = page.locator(".vega-embed", has_text="Task pool: servers, clients and pooled work")
    expect(pool.locator("svg.marks")).to_be_visible(timeout=30_000)
    for text in ("servers and clients", "samples in the pool", "servers", "clients", "pool", "stage"):
        expect(pool.get_by_text(text, exact=True).first).to_be_visible()
    lines = pool.locator(".mark-line path")
    assert lines.count() == 4, lines.count()  # servers and clients of both stages
    assert pool.locator(".mark-area path").count() == 2  # the pool of both stages
    routing = page.locator(".vega-embed", has_text="Routing: who serves each stage")
    expect(routing).to_contain_text("s1c2", timeout=30_000)  # the joiner takes slices
    for title in ("Peer timeline", "Throughput", "Loss"):
        expect(page.locator(".vega-embed", has_text=title).locator("svg.marks")).to_be_visible()
    for title in ("Stage loads", "Bytes on the wire"):
        expect(page.locator(".vega-embed", has_text=title)).to_have_count(0)
    screenshot(page, "task_pool_panel")

    peer_row(page, "s0c1").get_by_role("button", name="Kill", exact=True).click()  # a click in the page
    expect(page.locator(".widget-html-content", has_text="killed s0c1")).to_be_visible(timeout=30_000)
    expect(peer_row(page, "s0c1")).to_have_count(0, timeout=30_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator(".widget-html-content", has_text="run stopped at step")).to_be_visible(timeout=60_000)
    assert_offline(page)
    print(f"[browser] task-pool panel: run all, chart, kill from the page, stop: {time.monotonic() - started:.1f} s")
