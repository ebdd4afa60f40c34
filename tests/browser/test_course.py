"""Every tutorial, executed once with CI's parameters (by nbmake earlier in the session, or by the
course site's quick build), shown offline: in JupyterLab as the executed notebook and as a page of
the static site. No output may hold a traceback or an error box, and every chart must be drawn and
have data. The first test waits for the course (conftest.py's `course`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest

from labkit.lab.course import PAPERS, TUTORIALS, marks
from tests.browser.conftest import COURSE
from tests.browser.helpers import logged, open_notebook, screenshot
from tests.browser.outputs import assert_outputs_shown, svg_charts, traceback_outputs

if TYPE_CHECKING:
    from playwright.sync_api import Page

BUILD_TIMEOUT_S = 1800  # the first test builds the course (every tutorial executed): ~5 min on 2 idle cores
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S)]

NAMES = sorted(path.stem for path in TUTORIALS.glob("[0-9]*.ipynb"))
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
PICTURES_READY_MS = 30_000
LOADED = """(root) => [...document.querySelectorAll(root + ' .jp-OutputArea-output img')]
    .every(img => img.complete)"""


def executed(course: Path, name: str) -> nbformat.NotebookNode:
    """The executed tutorial `name` of the built course."""
    return nbformat.read(course / f"{name}.ipynb", as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_tutorial_runs_without_a_traceback_and_draws_data(course: Path, name: str) -> None:
    nb = executed(course, name)
    assert not traceback_outputs(nb), f"{name} printed a traceback:\n" + "\n".join(traceback_outputs(nb))
    empty = [n for n, svg in enumerate(svg_charts(nb)) if marks(svg) == 0]
    assert not empty, f"{name}: charts with no data (by order among its charts): {empty}"


@pytest.mark.parametrize("name", NAMES)
def test_executed_tutorial_shows_offline_in_jupyterlab(page: Page, course: Path, name: str) -> None:
    open_notebook(page, f"{COURSE}/{name}.ipynb")
    page.locator(f"{NOTEBOOK} .jp-OutputArea-output").first.wait_for(state="attached", timeout=60_000)
    page.wait_for_function(LOADED, arg=NOTEBOOK, timeout=PICTURES_READY_MS)
    assert_outputs_shown(page, NOTEBOOK, executed(course, name))
    assert not logged(page).errors, f"uncaught errors in the page: {logged(page).errors}"
    screenshot(page, f"course-lab-{name}")


@pytest.mark.parametrize("name", NAMES)
def test_course_page_renders_offline(page: Page, course: Path, name: str) -> None:
    page.goto((course / f"{name}.html").as_uri())
    page.wait_for_function(LOADED, arg="body", timeout=PICTURES_READY_MS)
    assert_outputs_shown(page, "body", executed(course, name))
    log = logged(page)
    assert not (log.errors or log.console or log.failed), (
        f"{name}.html: errors {log.errors}, console {log.console}, failed requests {log.failed}")
    expect_link(page, "Course index", "index.html")
    screenshot(page, f"course-site-{name}")


def test_course_index_links_every_lesson_and_the_papers(page: Page, course: Path) -> None:
    page.goto((course / "index.html").as_uri())
    hrefs = page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
    expected = [f"{name}.html" for name in NAMES] + (["papers.html"] if PAPERS.exists() else [])
    assert hrefs == expected, hrefs
    assert all((course / href).is_file() for href in hrefs), hrefs
    assert not logged(page).console, logged(page).console


def expect_link(page: Page, text: str, href: str) -> None:
    """The page has a link `text` to `href`."""
    link = page.get_by_role("link", name=text, exact=True)
    assert link.count() == 1 and link.get_attribute("href") == href, f"no link {text!r} to {href}"
