"""The course as a site: every tutorial executed and converted to static HTML, with an index and
the bibliography, readable offline with no kernel (a teacher publishes the folder).

    python -m labkit.lab.course build/course            # the tutorials as written
    python -m labkit.lab.course build/course --quick    # with CI's shrunken parameters (minutes)

Built with nbclient and nbconvert (the Jupyter tools the lab already installs). Static charts are
SVG already (`enable_offline`); the live charts (`alt.JupyterChart`, also inside the panel) are
drawn as SVG from the state they ended in, since a static page has no kernel to drive widgets.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "notebooks"
PAPERS = ROOT / "docs" / "papers.md"
PAPERS_LINK = "../docs/papers.md"  # how a tutorial links the bibliography
CELL_TIMEOUT_S = 900
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_ITEM = re.compile(r'<(?:path|rect|line|text|image)\b[^>]*role="graphics-symbol"')
PANEL_NOTE = "(An interactive panel: run the notebook in JupyterLab to use it.)"
# The lab template without what it fetches from CDNs (require.js, MathJax, Mermaid, the widget
# manager): a page of the course loads nothing but itself.
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block body_header -%}{{ super() }}<nav class="course-nav"><a href="index.html">Course index</a></nav>
{%- endblock body_header -%}
"""


def with_ci_parameters(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` with a cell after each cell that has an `nbmake.mock` (the parameters
    cell) assigning the mocked values, as nbmake does in the test suite: the CI-sized course."""
    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    cells = []
    for cell in out.cells:
        cells.append(cell)
        mock = cell.get("metadata", {}).get("nbmake", {}).get("mock")
        if mock:
            lines = ["# CI parameters (nbmake.mock of the cell above): a shrunken run"]
            lines += [f"{name} = {value!r}" for name, value in mock.items()]
            cells.append(nbformat.v4.new_code_cell("\n".join(lines)))
    out.cells = cells
    return out


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: float = CELL_TIMEOUT_S) -> nbformat.NotebookNode:
    """Run every cell of `nb` in a fresh python3 kernel started in `cwd` that imports this
    checkout's labkit; the executed notebook (its widget state in its metadata). Raises
    nbclient's CellExecutionError on a failing cell."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(cwd)}})
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    client.execute(env={**os.environ, "PYTHONPATH": path})   # this checkout's labkit, not another
    return nb


def _models(state: dict[str, Any], model_id: str, seen: set[str]) -> Iterator[dict[str, Any]]:
    """The widget model `model_id` and every model it refers to (children, layouts), once each."""
    if model_id in seen or model_id not in state:
        return
    seen.add(model_id)
    model = state[model_id]
    yield model

    def refs(value: Any) -> Iterator[str]:
        if isinstance(value, str) and value.startswith("IPY_MODEL_"):
            yield value.removeprefix("IPY_MODEL_")
        elif isinstance(value, list | tuple):
            for item in value:
                yield from refs(item)

    for value in model.get("state", {}).values():
        for ref in refs(value):
            yield from _models(state, ref, seen)


def marks(svg: str) -> int:
    """How many data items (bars, points, lines, rules) a chart's SVG from vl-convert draws; axes,
    legends and titles are groups, not items."""
    return len(_ITEM.findall(svg))


def chart_svgs(state: dict[str, Any], model_id: str) -> list[str]:
    """SVG pictures of the altair charts (JupyterChart models with a spec) that widget
    `model_id` is or holds, in the order the widget tree lists them; charts still without data
    (a what-if never simulated) are left out: on a static page they say nothing."""
    import vl_convert

    specs = [m["state"]["spec"] for m in _models(state, model_id, set())
             if isinstance(m.get("state", {}).get("spec"), dict)]
    return [svg for svg in map(vl_convert.vegalite_to_svg, specs) if marks(svg)]


def static_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Replace each widget output of `nb` by SVGs of the charts it shows (or a note, for a
    panel with none) and drop the widget state: a static page has no kernel to drive widgets."""
    state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outputs.append(output)
                continue
            svgs = chart_svgs(state, view["model_id"])
            outputs += [nbformat.v4.new_output("display_data", {"image/svg+xml": svg}) for svg in svgs]
            if not svgs:
                outputs.append(nbformat.v4.new_output("display_data", {"text/plain": PANEL_NOTE}))
        if "outputs" in cell:
            cell.outputs = outputs
    return nb


def _exporter() -> Any:
    """nbconvert's HTML exporter on the lab template, minus its CDN scripts."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    return HTMLExporter(extra_loaders=[DictLoader({"course.html.j2": _TEMPLATE})],
                        template_file="course.html.j2")


def title_of(nb: nbformat.NotebookNode, fallback: str) -> str:
    """The first markdown heading of `nb`, without its #s; `fallback` when it has none."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def github_anchors(markdown: str) -> str:
    """`markdown` with an anchor before each heading named as GitHub names it ("## The task pool
    paper" -> "the-task-pool-paper"), so the tutorials' links into docs/papers.md work on the site."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            lines += [f'<a id="{slug}"></a>', ""]
        lines.append(line)
    return "\n".join(lines)


def _page(exporter: Any, nb: nbformat.NotebookNode, title: str, path: Path) -> Path:
    """Write `nb` as the HTML page `path`, titled `title`; its links to the bibliography go to
    the site's own page of it."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace(PAPERS_LINK, "papers.html")
    nb.metadata["title"] = title
    body, _ = exporter.from_notebook_node(nb)
    path.write_text(body, encoding="utf-8")
    return path


def _index(lessons: list[tuple[str, str]], papers: str | None) -> str:
    """The course's front page: the lessons in order, then the bibliography."""
    items = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(title)}</a></li>'
                      for href, title in lessons)
    biblio = f'<p><a href="{papers}">The papers the course cites</a></p>' if papers else ""
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>labkit: the course"
            f"</title></head>\n<body><h1>labkit: the course</h1>\n<p>Each lesson is a tutorial notebook "
            f"with the outputs of one run. Run it yourself with <code>jupyter lab notebooks/</code>.</p>\n"
            f"<ol>\n{items}\n</ol>\n{biblio}\n</body></html>\n")


def build(out: Path, notebooks: Iterable[Path] | None = None, quick: bool = False) -> list[Path]:
    """Execute each tutorial (`quick`: with CI's parameters) and `publish` the site under `out`;
    the pages written."""
    paths = sorted(notebooks or TUTORIALS.glob("[0-9]*.ipynb"))
    runnable = [(p, nbformat.read(p, as_version=4)) for p in paths]
    return publish(out, [(path, execute(with_ci_parameters(nb) if quick else nb, path.parent))
                         for path, nb in runnable])


def publish(out: Path, executed: list[tuple[Path, nbformat.NotebookNode]]) -> list[Path]:
    """Write under `out`, for each (tutorial path, its executed notebook), the notebook with its
    widget outputs as SVG (NN-name.ipynb) and its page (NN-name.html), then the bibliography
    (papers.html, from docs/papers.md when present) and index.html; the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    exporter, lessons, pages = _exporter(), [], []
    for path, nb in executed:
        static = static_widgets(nb)
        nbformat.write(static, out / path.name)
        title = title_of(static, path.stem)
        pages.append(_page(exporter, static, title, out / f"{path.stem}.html"))
        lessons.append((f"{path.stem}.html", title))
    papers = None
    if PAPERS.exists():
        bibliography = nbformat.v4.new_markdown_cell(github_anchors(PAPERS.read_text()))
        biblio = nbformat.v4.new_notebook(cells=[bibliography])
        pages.append(_page(exporter, biblio, "The papers", out / "papers.html"))
        papers = "papers.html"
    index = out / "index.html"
    index.write_text(_index(lessons, papers), encoding="utf-8")
    return [index, *pages]


def main(argv: list[str] | None = None) -> None:
    """The command line: build the site into a folder."""
    parser = argparse.ArgumentParser(prog="python -m labkit.lab.course", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("build/course"),
                        help="folder to write the site into (default: build/course)")
    parser.add_argument("--quick", action="store_true", help="run the tutorials with CI's shrunken parameters")
    parser.add_argument("--only", type=Path, nargs="+", metavar="NOTEBOOK",
                        help="tutorials to build (default: every notebooks/NN-*.ipynb)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.only or () if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)} "
                     "(give paths of .ipynb files, e.g. notebooks/00-quickstart.ipynb)")
    pages = build(args.out, args.only, args.quick)
    print(f"{len(pages)} pages in {args.out}; open {args.out / 'index.html'}")


if __name__ == "__main__":
    main()
