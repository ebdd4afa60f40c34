"""The tutorials' exercises: each starts unanswered, and the suite supplies the teacher's answer.

Every tutorial's exercise cell sets `answer = None`; its `nbmake.post_cell_execute` metadata reads
the answer from tests/solutions.py when nbmake runs the notebook, and the check cell after it
prints "Not answered yet" for None, "Right!" for the right answer and fails, saying why, on a
wrong one. The last three tests run ATOM's exercise (10) and its check, cut out of the tutorial,
in a real kernel through nbmake with the right, a wrong and no answer."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbmake.nb_run import NotebookRun

from tests.solutions import SOLUTIONS

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((REPO / "notebooks").glob("*.ipynb"))
HOOK = "post_cell_execute"
KERNEL_TIMEOUT_S = 120
ATOM_IMPORTS = ("from labkit.plan.atom_partition import NoFeasiblePartition, least_budget, partition\n"
                "from labkit.sim.atom import analytic_profile")


def exercise(path: Path) -> tuple[nbformat.NotebookNode, int]:
    """The tutorial and the index of its one exercise cell (the cell carrying the answers hook)."""
    nb = nbformat.read(path, as_version=4)
    hooked = [i for i, cell in enumerate(nb.cells) if HOOK in cell.metadata.get("nbmake", {})]
    assert len(hooked) == 1, f"{path.name}: {len(hooked)} cells with an nbmake {HOOK} hook, want 1"
    return nb, hooked[0]


def test_every_tutorial_has_a_solution_and_no_other() -> None:
    assert TUTORIALS, "no tutorials found"
    assert sorted(SOLUTIONS) == [path.stem for path in TUTORIALS]


@pytest.mark.parametrize("path", TUTORIALS, ids=[path.stem for path in TUTORIALS])
def test_exercise_starts_unanswered_and_ci_supplies_its_own_answer(path: Path) -> None:
    nb, i = exercise(path)
    cell, check = nb.cells[i], nb.cells[i + 1]
    assert cell.source.rstrip().endswith("answer = None"), f"{path.name}: the exercise cell must end unanswered"
    assert "# Your answer" in cell.source, f"{path.name}: the exercise cell says what to write, with a hint"
    hook = "\n".join(cell.metadata["nbmake"][HOOK])
    assert f"['SOLUTIONS']['{path.stem}']" in hook and "../tests/solutions.py" in hook
    assert check.cell_type == "code" and "if answer is None:" in check.source
    assert "Not answered yet" in check.source and 'print(f"Right!' in check.source


def _atom_exercise(root: Path, solution: object | None) -> Path:
    """A notebook under `root`/notebooks of tutorial 10's exercise and check cells after their
    imports; `root`/tests/solutions.py holds `solution` (None: the hook is removed, as in Jupyter)."""
    nb, i = exercise(REPO / "notebooks" / "10-atom-swapping.ipynb")
    cells = [nbformat.v4.new_code_cell(ATOM_IMPORTS), nb.cells[i], nb.cells[i + 1]]
    if solution is None:
        del cells[1].metadata["nbmake"]
    (root / "tests").mkdir()
    (root / "tests" / "solutions.py").write_text(f"SOLUTIONS = {{'10-atom-swapping': {solution!r}}}\n")
    (root / "notebooks").mkdir()
    path = root / "notebooks" / "exercise.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=nb.metadata), path)
    return path


def _run(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[nbformat.NotebookNode, object]:
    """Run `path` as the suite does (nbmake), with this checkout's labkit in the kernel."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = NotebookRun(path, KERNEL_TIMEOUT_S).execute()
    return result.nb, result.error


def _printed(nb: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for out in nb.cells[-1].outputs if out.output_type == "stream")


def test_the_right_answer_passes_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb, error = _run(_atom_exercise(tmp_path, SOLUTIONS["10-atom-swapping"]), monkeypatch)
    assert error is None, error
    assert _printed(nb).startswith("Right! C = 3")


def test_a_wrong_answer_fails_the_notebook_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb, error = _run(_atom_exercise(tmp_path, 2), monkeypatch)
    assert error is not None and error.failing_cell_index == 2
    failure = next(out for out in nb.cells[-1].outputs if out.output_type == "error")
    assert failure.ename == "AssertionError"
    assert failure.evalue.startswith("Not quite: C = 2 is infeasible")


def test_no_answer_says_so_without_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb, error = _run(_atom_exercise(tmp_path, None), monkeypatch)
    assert error is None, error
    assert _printed(nb).startswith("Not answered yet")
