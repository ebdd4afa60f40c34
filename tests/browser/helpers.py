"""Driving JupyterLab in headless Chromium (recipe: ../shared/docs/LAB.md, "A real browser test").

Import-safe without playwright: the fixtures in conftest.py skip the tests with the reason."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import psutil

from tests.processes import reap

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Locator, Page, Request

CHROMIUM = Path("/usr/lib/chromium/chromium")  # not /usr/bin/chromium: that wrapper adds flags
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-default-apps", "--disable-extensions", "--disable-sync", "--no-first-run"]
CHROMIUM_MISSING = ("chromium not installed: /usr/lib/chromium/chromium missing; "
                    ".ci/run installs it with apt-get")
PLAYWRIGHT_MISSING = "playwright not installed: pip install -e \".[test]\" installs it"
JUPYTERLAB_MISSING = "jupyterlab not installed: pip install -e \".[test]\" installs it"
VIEWPORT = {"width": 1280, "height": 2400}  # JupyterLab scrolls inside its panel: tall, not full_page
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
SERVER_START_S = 60
KERNEL_READY_S = 60
RUN_ALL_S = 180
POLL_S = 0.1
# JupyterLab settings for a quiet, deterministic page: no news toast over the page, no update
# check, every cell attached to the DOM (windowing would detach the off-screen ones).
OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}


def missing_prerequisite() -> str | None:
    """Why the browser tests cannot run here, or None when chromium, playwright and JupyterLab
    are all present."""
    if not CHROMIUM.exists():
        return CHROMIUM_MISSING
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return PLAYWRIGHT_MISSING
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return JUPYTERLAB_MISSING
    return None


@dataclass
class JupyterLab:
    """A JupyterLab server on loopback, serving `root` (notebooks are copied there)."""

    process: subprocess.Popen
    port: int
    token: str
    root: Path
    log: Path

    @property
    def url(self) -> str:
        """The server's base URL, without the token."""
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str) -> object:
        """Call the server's REST API with the token; the decoded JSON reply (None when empty)."""
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session and its kernel (a test's notebooks start from fresh kernels)."""
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")


def free_port() -> int:
    """A TCP port on loopback nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, home: Path, notebooks: list[Path]) -> JupyterLab:
    """Start `jupyter lab` over `root` (with `notebooks` copied in) on a free loopback port with a
    token, its settings in root/settings and its config, workspaces, runtime files and log under
    `home` (a fresh workspace: no tabs restored from an earlier session); return once its API
    answers."""
    settings = root / "settings"
    settings.mkdir(parents=True)
    (settings / "overrides.json").write_text(json.dumps(OVERRIDES))
    for notebook in notebooks:
        shutil.copy(notebook, root / notebook.name)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    port, token, log = free_port(), secrets.token_hex(16), home / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
             f"--LabApp.app_settings_dir={settings}"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    lab = JupyterLab(process, port, token, root, log)
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{log.read_text()}")
        try:
            lab.api("GET", "/api/status")
            return lab
        except OSError:
            if time.monotonic() > deadline:
                stop_lab(lab)
                raise RuntimeError(f"jupyter lab did not answer in {SERVER_START_S} s:\n"
                                   f"{log.read_text()}") from None
            time.sleep(POLL_S)


def stop_lab(lab: JupyterLab) -> None:
    """Shut down the kernels and the server; end whatever of its process tree is left."""
    try:
        tree = [psutil.Process(lab.process.pid), *psutil.Process(lab.process.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    try:
        lab.shutdown_kernels()
        lab.api("POST", "/api/shutdown")
    except OSError:
        lab.process.terminate()
    try:
        lab.process.wait(30)
    except subprocess.TimeoutExpired:
        lab.process.kill()
        lab.process.wait()
    reap(tree, grace=10)  # kernels the server did not take down with it


@dataclass
class PageLog:
    """What the page asked the network for and said on its console."""

    external: list[str] = field(default_factory=list)  # requests to a non-loopback host
    failed: list[str] = field(default_factory=list)  # every failed request, with its reason
    console: list[str] = field(default_factory=list)  # console messages of type error/warning
    errors: list[str] = field(default_factory=list)  # uncaught exceptions in the page


_LOGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _external(url: str) -> bool:
    """Whether `url` goes over the network to a host other than loopback."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOOPBACK


def watch(page: Page) -> PageLog:
    """Log the page's requests to non-loopback hosts, failed requests, console errors and
    warnings and uncaught exceptions (printed as they come); `assert_offline` reads the log."""
    log = PageLog()

    def on_request(request: Request) -> None:
        if _external(request.url):
            log.external.append(request.url)
            print(f"[browser] external request: {request.url}")

    def on_failed(request: Request) -> None:
        log.failed.append(f"{request.url}: {request.failure}")
        print(f"[browser] requestfailed: {request.url}: {request.failure}")

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            log.console.append(f"{message.type}: {message.text}")
            print(f"[browser] console {message.type}: {message.text}")

    def on_error(error: Exception) -> None:
        log.errors.append(str(error))
        print(f"[browser] pageerror: {error}")

    page.on("request", on_request)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror", on_error)
    _LOGS[page] = log
    return log


def logged(page: Page) -> PageLog:
    """What `watch` has logged of `page` so far."""
    return _LOGS[page]


def assert_offline(page: Page) -> None:
    """Fail when the page asked any non-loopback host for anything (what it shows rendered from
    the server alone), or logged an error about vega or anywidget."""
    log: PageLog = _LOGS[page]
    assert not log.external, f"the page reached beyond loopback: {log.external}"
    chart_errors = [m for m in log.console if m.startswith("error:") and re.search("vega|anywidget", m, re.I)]
    chart_errors += [e for e in log.errors if re.search("vega|anywidget", e, re.I)]
    assert not chart_errors, f"chart errors in the page: {chart_errors}"


def login(page: Page, lab: JupyterLab) -> None:
    """Give the page's context the server's login cookie (the token in one URL sets it), so
    later navigations need no token."""
    reply = page.request.get(f"{lab.url}/api/status?token={lab.token}")
    assert reply.ok, f"login failed: {reply.status} {reply.text()}"


def open_notebook(page: Page, name: str) -> None:
    """Open notebook `name` (relative to the server's root) in JupyterLab, alone (`?reset`: the
    server-side workspace would reopen an earlier test's notebooks beside it), and wait until
    its cells are shown."""
    page.goto(f"/lab/tree/{name}?reset")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="visible", timeout=60_000)


def _kernels(page: Page) -> list[dict] | None:
    """The server's kernels, as /api/kernels reports them; None for a 500, which jupyter_server
    answers while a kernel is still starting (its `last_activity` is not set yet:
    jupyter-server/enterprise_gateway#1395; seen here under load, 2026-11-28)."""
    reply = page.request.get("/api/kernels")
    if reply.status == 500:
        return None
    assert reply.ok, f"/api/kernels: {reply.status}"
    return reply.json()


def wait_kernels_idle(page: Page, timeout: float = KERNEL_READY_S) -> None:
    """Wait until the server has a kernel and every kernel is idle with a connection (a page's
    Run All before that was silently dropped, LAB.md)."""
    deadline = time.monotonic() + timeout
    while True:
        kernels = _kernels(page)  # None: a kernel is starting
        if kernels and all(k["execution_state"] == "idle" and k["connections"] > 0 for k in kernels):
            return
        assert time.monotonic() < deadline, (f"kernels not idle and connected in {timeout} s: "
                                             f"{'/api/kernels answered 500' if kernels is None else kernels}")
        page.wait_for_timeout(POLL_S * 1000)


def run_all(page: Page, timeout: float = RUN_ALL_S) -> None:
    """Run → Run All Cells from the menu once the kernel is ready; return when every code cell
    of the open notebook shows an execution count and the kernel is idle again."""
    wait_kernels_idle(page)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll(
                '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""", timeout=timeout * 1000)
    wait_kernels_idle(page)


def screenshot(page: Page, name: str) -> Path:
    """Save the viewport as `<name>.png` under $LABKIT_SCREENSHOTS (default: a labkit-screenshots
    folder in the temp dir); print and return the path."""
    folder = Path(os.environ.get("LABKIT_SCREENSHOTS") or Path(tempfile.gettempdir()) / "labkit-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"[browser] screenshot: {path}")
    return path


def peer_row(page: Page, peer: str) -> Locator:
    """The peer table's row of `peer` (the innermost box holding its name and a Kill button)."""
    kill = page.get_by_role("button", name="Kill", exact=True)
    return page.locator(".widget-hbox", has=kill).filter(has=page.get_by_text(peer, exact=True)).last
