"""The course site's build (labkit.lab.course) on a two-cell notebook: CI parameters injected
after the parameters cell, a real kernel, static charts as SVG, pages that fetch nothing."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import nbformat
import pytest

from labkit.lab.course import (PANEL_NOTE, build, github_anchors, main, marks, static_widgets,
                                with_ci_parameters)
from labkit.lab.live import enable_offline

CDNS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "<script src=")


def tutorial(path: Path) -> Path:
    """A notebook like the tutorials: a mocked parameters cell, then a static chart of it."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · A lesson\n\nPaper: [SWARM](../docs/papers.md#swarm)."),
        nbformat.v4.new_code_cell("points = 50", metadata={"tags": ["parameters"], "nbmake": {"mock": {"points": 4}}}),
        nbformat.v4.new_code_cell(
            "import altair as alt\nfrom labkit.lab.live import enable_offline\nenable_offline()\n"
            "alt.Chart(alt.Data(values=[{'x': i} for i in range(points)])).mark_point().encode(x='x:Q')"),
    ])
    nbformat.write(nb, path)
    return path


def test_static_charts_render_as_svg_with_their_data_once_offline_is_enabled() -> None:
    enable_offline()
    bundle = alt.Chart(alt.Data(values=[{"x": 1}, {"x": 2}])).mark_point().encode(x="x:Q")._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml"}
    assert marks(bundle["image/svg+xml"]) == 2


def test_ci_parameters_follow_the_parameters_cell(tmp_path: Path) -> None:
    nb = with_ci_parameters(nbformat.read(tutorial(tmp_path / "99-a.ipynb"), as_version=4))
    assert [c.source.splitlines()[-1] for c in nb.cells[1:3]] == ["points = 50", "points = 4"]


def test_a_widget_output_becomes_its_charts_or_a_note() -> None:
    chart = {"model_name": "AnyModel", "state": {"spec": alt.Chart(alt.Data(values=[{"x": 1}])).mark_point()
                                                 .encode(x="x:Q").to_dict()}}
    box = {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_c", "IPY_MODEL_b"]}}
    button = {"model_name": "ButtonModel", "state": {"description": "Kill"}}
    view = lambda model: nbformat.v4.new_output(  # noqa: E731
        "display_data", {"application/vnd.jupyter.widget-view+json": {"model_id": model}, "text/plain": "VBox()"})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("lab", outputs=[view("a")]),
                                         nbformat.v4.new_code_cell("button", outputs=[view("b")])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"a": box, "b": button, "c": chart}}}
    static_widgets(nb)
    assert "widgets" not in nb.metadata
    assert [list(o.data) for o in nb.cells[0].outputs] == [["image/svg+xml"]]
    assert marks(nb.cells[0].outputs[0].data["image/svg+xml"]) == 1
    assert nb.cells[1].outputs[0].data == {"text/plain": PANEL_NOTE}


def test_build_writes_pages_that_load_nothing_from_the_network(tmp_path: Path) -> None:
    pages = build(tmp_path / "site", [tutorial(tmp_path / "99-a.ipynb")], quick=True)
    assert [p.name for p in pages][:2] == ["index.html", "99-a.html"]
    lesson = (tmp_path / "site" / "99-a.html").read_text()
    assert "data:image/svg+xml" in lesson and not [cdn for cdn in CDNS if cdn in lesson]
    assert 'href="papers.html#swarm"' in lesson and "../docs/papers.md" not in lesson
    executed = nbformat.read(tmp_path / "site" / "99-a.ipynb", as_version=4)
    assert marks(executed.cells[3].outputs[0].data["image/svg+xml"]) == 4   # the CI parameter: 4 points
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<a href="99-a.html">99 · A lesson</a>' in index


def test_the_command_names_a_missing_notebook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([str(tmp_path / "site"), "--only", "notebooks/nope.ipynb"])
    assert "no such notebook: notebooks/nope.ipynb" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_the_bibliography_gets_githubs_heading_anchors_outside_code() -> None:
    assert github_anchors("## The task pool paper\n```\n# a comment\n```") == (
        '<a id="the-task-pool-paper"></a>\n\n## The task pool paper\n```\n# a comment\n```')
