"""`python -m minillm progress`: runs the checks of the exercises a learner has worked on."""

import shutil
from pathlib import Path

import nbformat

from minillm.tools import progress

ROOT = Path(__file__).resolve().parents[1]


def _partly_solved(tmp_path: Path) -> Path:
    """Exercise 00 with its second task solved, the others left as stubs."""
    exercise = nbformat.read(ROOT / "exercises" / "00_welcome.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / "00_welcome.ipynb", as_version=4)
    tasks = [i for i, c in enumerate(exercise.cells) if "task" in c.metadata.get("tags", [])]
    exercise.cells[tasks[1]].source = solution.cells[tasks[1]].source
    path = tmp_path / "00_welcome.ipynb"
    nbformat.write(exercise, path)
    return path


def test_untouched_notebooks_are_not_started_and_not_run(tmp_path, monkeypatch):
    shutil.copy(ROOT / "exercises" / "00_welcome.ipynb", tmp_path / "00_welcome.ipynb")
    monkeypatch.setattr("nbclient.NotebookClient.execute",
                        lambda self: (_ for _ in ()).throw(AssertionError("ran a notebook")))
    [row] = progress.progress(tmp_path)
    assert (row.passed, row.left, row.worked_on) == (0, 3, False)


def test_a_partly_solved_exercise_counts_its_passing_checks(tmp_path, capsys):
    _partly_solved(tmp_path)
    assert progress.main(str(tmp_path), verbose=True) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("00_welcome")][0]
    assert row.split()[1:] == ["1", "2", "in", "progress"]
    assert "not written yet" in out, "verbose mode shows each failing check's message"


def test_an_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert progress.main(str(tmp_path)) == 2
    assert "no exercise notebooks" in capsys.readouterr().out
