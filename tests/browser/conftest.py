"""Fixtures of the browser tests: one JupyterLab server per session, a headless Chromium page per
test. Skipped, with the reason, when chromium, playwright or JupyterLab is missing."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
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
EXECUTED = pytest.StashKey[Path]()  # where this session keeps the notebooks nbmake executed


def pytest_configure(config: pytest.Config) -> None:
    """Keep every notebook nbmake executes, as executed, for the course tests: they publish the
    tutorials from those runs instead of running each a second time (minutes on 2 cores)."""
    config.stash[EXECUTED] = Path(tempfile.mkdtemp(prefix="labkit-executed-"))
    try:
        from nbmake.nb_run import NotebookRun
    except ImportError:
        return
    execute = NotebookRun.execute

    def keeping(run: NotebookRun) -> Any:
        result = execute(run)
        if result.error is None:
            nbformat.write(result.nb, config.stash[EXECUTED] / run.filename.name)
        return result

    NotebookRun.execute = keeping
    config.add_cleanup(lambda: setattr(NotebookRun, "execute", execute))
    config.add_cleanup(lambda: shutil.rmtree(config.stash[EXECUTED], ignore_errors=True))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The course tests go last, after nbmake has run the tutorials they publish."""
    course = [item for item in items if item.path.name == "test_course.py"]
    items[:] = [item for item in items if item.path.name != "test_course.py"] + course


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
def course(jupyter_lab: JupyterLab, pytestconfig: pytest.Config) -> Path:
    """The course site of this session's tutorials run with CI's parameters, in the server's
    root: published from nbmake's runs when it ran every tutorial earlier in the session (the
    course tests go last), else built (`python -m labkit.lab.course --quick`: every tutorial
    executed). Each executed notebook is signed as trusted (JupyterLab shows an untrusted
    notebook's SVG outputs as text)."""
    import nbformat
    from nbformat.sign import NotebookNotary

    from labkit.lab.course import TUTORIALS, build, publish

    out = jupyter_lab.root / COURSE
    started = time.monotonic()
    ran = {path.name: path for path in pytestconfig.stash[EXECUTED].glob("*.ipynb")}
    tutorials = sorted(TUTORIALS.glob("[0-9]*.ipynb"))
    if all(path.name in ran for path in tutorials):
        publish(out, [(path, nbformat.read(ran[path.name], as_version=4)) for path in tutorials])
        how = "published from nbmake's runs of this session"
    else:
        build(out, quick=True)
        how = "built with CI parameters"
    print(f"[browser] course {how} in {time.monotonic() - started:.0f} s: {out}")
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
