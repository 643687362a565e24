"""The exercise machinery: exercises and solutions stay in step, and an unsolved exercise fails in
every check cell with the checker's own message."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
SOURCES = ROOT / "minillm" / "course" / "lessons"


def _tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def _read(path):
    return nbformat.read(path, as_version=4)


def test_every_lesson_has_an_exercise_and_a_solution():
    for lesson in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert (ROOT / "exercises" / lesson.name).is_file(), f"no exercises/{lesson.name}"
        assert (ROOT / "solutions" / lesson.name).is_file(), f"no solutions/{lesson.name}"
    for part in sorted((ROOT / "notebooks").glob("[0-9][0-9][a-z]_*.ipynb")):
        # a chapter's second lesson (03b_...): its chapter's exercise notebook covers it
        assert list((ROOT / "exercises").glob(f"{part.name[:2]}_*.ipynb")), \
            f"{part.name} belongs to chapter {part.name[:2]}, which has no exercise notebook"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda p: p.stem)
def test_exercise_and_solution_differ_only_in_task_cells(exercise):
    ex, sol = _read(exercise), _read(ROOT / "solutions" / exercise.name)
    assert len(ex.cells) == len(sol.cells), "exercise and solution have different cell counts"
    tasks = 0
    for i, (a, b) in enumerate(zip(ex.cells, sol.cells)):
        assert _tags(a) == _tags(b), f"cell {i}: tags differ"
        assert a.cell_type == b.cell_type, f"cell {i}: cell types differ"
        if "task" in _tags(a):
            tasks += 1
            assert "raise NotImplementedError" in a.source, f"cell {i}: a task without a stub"
            assert "raise NotImplementedError" not in b.source, f"cell {i}: solution is a stub"
        else:
            assert a.source == b.source, f"cell {i} differs but is not a task cell"
    checks = sum("check" in _tags(c) for c in ex.cells)
    assert tasks >= 1 and checks >= tasks, "each task needs a check cell after it"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda p: p.stem)
def test_unsolved_exercise_fails_each_check_with_the_checkers_message(exercise):
    from nbclient import NotebookClient

    nb = _read(exercise)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(exercise.parent)}}).execute()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if "check" in _tags(cell):
            assert errors, f"check cell {i} passed on an unsolved exercise"
            assert errors[0]["ename"] == "CheckFailed", \
                f"check cell {i} failed with {errors[0]['ename']}: {errors[0]['evalue']}"
            assert "not written yet" in errors[0]["evalue"], errors[0]["evalue"]
        else:
            assert not errors, f"cell {i} raised {errors[0]['ename']}: {errors[0]['evalue']}"


def _builder():
    spec = importlib.util.spec_from_file_location("notebook_builder",
                                                  ROOT / "scripts" / "notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("source", sorted(SOURCES.glob("*.py")), ids=lambda p: p.stem)
def test_notebooks_are_built_from_their_sources(source):
    builder = _builder()
    cells = builder.parse(source.read_text(encoding="utf-8"))
    for target, variant in builder.targets(source):
        built = builder.build(cells, variant)
        committed = _read(target)
        assert [c.source for c in committed.cells] == [c.source for c in built.cells], (
            f"{target.relative_to(ROOT)} is out of date with {source.relative_to(ROOT)}: run "
            f"python scripts/notebook.py --all")
        assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code"), \
            f"{target.relative_to(ROOT)} is committed with outputs"
