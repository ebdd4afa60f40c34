"""Fixtures of the browser tests: one JupyterLab server per session, a headless Chromium page per
test. Skipped, with the reason, when chromium, playwright or JupyterLab is missing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.browser.helpers import (CHROMIUM, CHROMIUM_ARGS, VIEWPORT, JupyterLab, assert_offline,
                                   login, missing_prerequisite, start_lab, stop_lab, watch)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ASSETS = Path(__file__).parent / "assets"
COURSE = "course"  # the folder under the server's root holding the built course
TUTORIALS = Path(__file__).parents[2] / "notebooks"
collect_ignore_glob = ["assets/*"]  # notebooks these tests drive in the browser, not nbmake items


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory,
                kept_processes: list[Callable[[], set[int]]]) -> Iterator[JupyterLab]:
    """JupyterLab on a free loopback port over a temp dir holding tests/browser/assets/*.ipynb and
    the tutorials (notebooks/*.ipynb);
    kept from the process reaper, its kernels and itself shut down when the session ends."""
    if reason := missing_prerequisite():
        pytest.skip(reason)
    lab = start_lab(tmp_path_factory.mktemp("lab"), tmp_path_factory.mktemp("jupyter"),
                    sorted(ASSETS.glob("*.ipynb")) + sorted(TUTORIALS.glob("*.ipynb")))
    kept_processes.append(lambda: {lab.process.pid})
    print(f"[browser] JupyterLab at {lab.url}/lab?token={lab.token} over {lab.root}, log {lab.log}")
    yield lab
    stop_lab(lab)


@pytest.fixture(scope="session")
def course(jupyter_lab: JupyterLab) -> Path:
    """The course site built once per session with CI's parameters (every tutorial executed,
    `python -m labkit.lab.course --quick`) into the server's root, each executed notebook signed
    as trusted (JupyterLab shows an untrusted notebook's SVG outputs as text)."""
    import nbformat
    from nbformat.sign import NotebookNotary

    from labkit.lab.course import build

    out = jupyter_lab.root / COURSE
    started = time.monotonic()
    build(out, quick=True)
    print(f"[browser] course built with CI parameters in {time.monotonic() - started:.0f} s: {out}")
    notary = NotebookNotary()
    for path in out.glob("*.ipynb"):
        notary.sign(nbformat.read(path, as_version=4))
    return out


@pytest.fixture(scope="session")
def browser(kept_processes: list[Callable[[], set[int]]]) -> Iterator[Browser]:
    """Debian's headless Chromium driven by playwright (never `playwright install`); the
    playwright driver it runs under is kept from the process reaper."""
    if reason := missing_prerequisite():
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    with sync_playwright() as pw:
        driver = {p.pid for p in me.children()} - before
        kept_processes.append(lambda: driver)
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, jupyter_lab: JupyterLab) -> Iterator[Page]:
    """A logged-in page of a fresh browser context (tall viewport, base URL the server's),
    its network and console logged; at teardown the page must have stayed offline and every
    kernel is shut down."""
    context = browser.new_context(viewport=VIEWPORT, base_url=jupyter_lab.url)
    page = context.new_page()
    watch(page)
    login(page, jupyter_lab)
    yield page
    context.close()
    jupyter_lab.shutdown_kernels()
    assert_offline(page)
