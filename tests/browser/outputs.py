"""Checks of what a notebook's outputs say and show: in its JSON (tracebacks, charts with data)
and in a page of the browser (error boxes, pictures that loaded, the SVG they decode to)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import nbformat

from labkit.lab.course import marks

if TYPE_CHECKING:
    from playwright.sync_api import Page

ANSI = r"\x1b\[[0-9;]*m"  # colour codes in a traceback's lines
ERROR_TEXTS = ("Error loading script", "Javascript Error", "Error displaying widget", "Traceback")

# In the page: every picture an output shows, whether it loaded, and the SVG text it decodes to.
_PICTURES_JS = """(root) => [...document.querySelectorAll(root + ' .jp-OutputArea-output img')].map(img => {
    const src = img.getAttribute('src') || '';
    let svg = '';
    if (src.startsWith('data:image/svg+xml;base64,')) svg = atob(src.slice(26));
    else if (src.startsWith('data:image/svg+xml,')) svg = decodeURIComponent(src.slice(19));
    return {loaded: img.complete && img.naturalWidth > 0, svg: svg};
})"""


def traceback_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """The outputs of `nb` that are errors or print a traceback, as 'cell N: first lines'."""
    found = []
    for n, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.output_type == "stream" else ""
            if output.output_type == "error" or "Traceback" in text:
                shown = re.sub(ANSI, "", "\n".join(output.get("traceback", []) or text.splitlines()[:5]))
                found.append(f"cell {n}: {shown[:600]}")
    return found


def svg_charts(nb: nbformat.NotebookNode) -> list[str]:
    """The SVG pictures among the outputs of `nb`, in order."""
    return [output["data"]["image/svg+xml"] for cell in nb.cells for output in cell.get("outputs", [])
            if "image/svg+xml" in output.get("data", {})]


def shown_pictures(page: Page, root: str) -> list[dict]:
    """Every picture in the outputs under CSS selector `root`: {'loaded': bool, 'svg': text}."""
    return page.evaluate(_PICTURES_JS, root)


def error_texts(page: Page, root: str) -> list[str]:
    """Lines of the outputs under `root` that an error box or a traceback shows."""
    text = page.evaluate("(root) => [...document.querySelectorAll(root + ' .jp-OutputArea-output')]"
                         ".map(o => o.innerText).join('\\n')", root)
    return [line for line in text.splitlines() if any(e in line for e in ERROR_TEXTS)]


def assert_outputs_shown(page: Page, root: str, nb: nbformat.NotebookNode) -> None:
    """Under `root` the page shows every SVG chart of `nb`, each loaded and with data, and no
    error text."""
    expected = svg_charts(nb)
    pictures = [p for p in shown_pictures(page, root) if p["svg"]]
    assert len(pictures) == len(expected), f"{len(expected)} SVG charts in the notebook, {len(pictures)} shown"
    empty = [n for n, p in enumerate(pictures) if not p["loaded"] or marks(p["svg"]) == 0]
    assert not empty, f"charts not drawn or with no data: {empty}"
    errors = error_texts(page, root)
    assert not errors, f"error texts in the page: {errors}"
