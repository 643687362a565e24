"""The exercise machinery, in both editions (exercises/ and exercises/zh/): exercises and
solutions stay in step, an unsolved exercise fails in every check cell with the checker's own
message (in the edition's language), and every notebook is built from its source."""

from pathlib import Path

import nbformat
import pytest
from script_modules import script

ROOT = Path(__file__).resolve().parents[1]
EDITIONS = ["", "zh"]
EXERCISES = sorted(p for e in EDITIONS for p in (ROOT / "exercises" / e).glob("[0-9][0-9]_*.ipynb"))
NOT_WRITTEN = {"exercises": "not written yet", "zh": "还没有写"}  # by the notebook's folder


def _tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def _read(path):
    return nbformat.read(path, as_version=4)


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _solution(exercise: Path) -> Path:
    return ROOT / "solutions" / exercise.relative_to(ROOT / "exercises")


@pytest.mark.parametrize("edition", EDITIONS)
def test_every_lesson_has_an_exercise_and_a_solution(edition):
    for lesson in sorted((ROOT / "notebooks" / edition).glob("[0-9][0-9]_*.ipynb")):
        for folder in ("exercises", "solutions"):
            assert (ROOT / folder / edition / lesson.name).is_file(), \
                f"no {folder}/{edition}{'/' if edition else ''}{lesson.name}"
    for part in sorted((ROOT / "notebooks" / edition).glob("[0-9][0-9][a-z]_*.ipynb")):
        # a chapter's second lesson (03b_...): its chapter's exercise notebook covers it (in
        # Chinese, or in English while the chapter's exercise is not translated yet: 05b before 05)
        assert any((ROOT / "exercises" / e).glob(f"{part.name[:2]}_*.ipynb")
                   for e in {edition, ""}), \
            f"{part.name} belongs to chapter {part.name[:2]}, which has no exercise notebook"


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
def test_exercise_and_solution_differ_only_in_task_cells(exercise):
    ex, sol = _read(exercise), _read(_solution(exercise))
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


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
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
            assert NOT_WRITTEN[exercise.parent.name] in errors[0]["evalue"], errors[0]["evalue"]
        else:
            assert not errors, f"cell {i} raised {errors[0]['ename']}: {errors[0]['evalue']}"


EDITIONS = [(source, edition) for source in script("notebook").all_sources()
            for edition in script("notebook").editions_of(source)]


@pytest.mark.parametrize("source,edition", EDITIONS,
                         ids=[f"{edition}-{source.stem}" for source, edition in EDITIONS])
def test_notebooks_are_built_from_their_sources(source, edition):
    """The committed notebooks of both editions are what the sources build: the English source,
    and for the Chinese edition the English source with its catalog filled in."""
    builder = script("notebook")
    cells = builder.cells_of(source, edition)
    for target, variant in builder.targets(source, edition):
        assert target.is_file(), f"{target.relative_to(ROOT)} is missing: run python " \
                                 "scripts/notebook.py --all"
        built = builder.build(cells, variant, edition)
        committed = _read(target)
        assert [c.source for c in committed.cells] == [c.source for c in built.cells], (
            f"{target.relative_to(ROOT)} is out of date with {source.relative_to(ROOT)}: run "
            f"python scripts/notebook.py --all")
        assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code"), \
            f"{target.relative_to(ROOT)} is committed with outputs"
