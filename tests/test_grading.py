"""The exercises as an nbgrader course (scripts/assignments.py, `make assignments`), graded by
nbgrader's own commands: release, three students' submissions, autograde, feedback, export.

Nothing is mocked: nbgrader's database, its converters and its executor run the checkers. The
release must be the exercise notebook learners know; the reference solution scores full marks
(hidden tests included), a typical wrong answer loses its task's point and its feedback holds
the checker's hint in the course's language, and the untouched release scores zero."""

from __future__ import annotations

import csv
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from script_modules import script

pytestmark = pytest.mark.slow

pytest.importorskip("nbgrader", reason="nbgrader is installed by `make test` (the grading extra)")

ROOT = Path(__file__).resolve().parents[1]
COURSES = {"en": ["04"], "zh": ["06"]}  # two chapters, one per edition
NOT_WRITTEN = {"en": "not written yet", "zh": "还没有写"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def nbgrader(course: Path, *args: str) -> str:
    bin_dir = Path(sys.executable).parent  # nbgrader runs alembic, found on PATH
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(bin_dir / "nbgrader"), *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _scores(course: Path) -> dict[tuple[str, str], tuple[float, float]]:
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        return {(row["assignment"], row["student_id"]): (float(row["score"]),
                                                         float(row["max_score"]))
                for row in csv.DictReader(f)}


def _text(path: Path) -> str:
    return html.unescape(ANSI.sub("", re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8"))))


def _checks(nb) -> int:
    return sum(len(script("assignments").check_calls(c.source)) for c in nb.cells
               if "check" in c.metadata.get("tags", []))


@pytest.mark.parametrize("edition", sorted(COURSES))
def test_a_class_of_three_is_graded_by_nbgrader_with_the_checkers_hints(edition, tmp_path):
    builder = script("assignments")
    course = tmp_path / edition
    written = builder.build_course(edition, course, COURSES[edition])
    names = [path.parent.name for path in written]
    for chapter, name in zip(COURSES[edition], names):
        nbgrader(course, "generate_assignment", name)
        release = nbformat.read(course / "release" / name / f"{name}.ipynb", 4)
        exercise = nbformat.read(ROOT / "exercises" / builder.notebook.EDITIONS[edition]
                                 / f"{name}.ipynb", 4)
        assert [c.source for c in release.cells] == [c.source for c in exercise.cells], \
            f"the release of {name} is not its exercise notebook"
        assert not any("hidden=True" in c.source for c in release.cells)
        builder.sample_class(course, edition, chapter)
        nbgrader(course, "autograde", name)
        nbgrader(course, "generate_feedback", name)
    nbgrader(course, "export")
    scores = _scores(course)
    (solved, _), (wrong, _), (untouched, _) = builder.SAMPLE_CLASS
    for chapter, name in zip(COURSES[edition], names):
        points = _checks(nbformat.read(course / "release" / name / f"{name}.ipynb", 4))
        assert scores[(name, solved)] == (points, points), \
            f"{name}: the reference solution scored {scores[(name, solved)]} of {points}"
        assert scores[(name, wrong)] == (points - 1, points), \
            f"{name}: one mistake scored {scores[(name, wrong)]} of {points}"
        assert scores[(name, untouched)] == (0, points), \
            f"{name}: the untouched release scored {scores[(name, untouched)]}"
        hint = builder.MISTAKES[chapter][2][edition]
        assert hint in _text(course / "feedback" / wrong / name / f"{name}.html"), \
            f"{name}: the feedback does not give the checker's hint {hint!r}"
        assert NOT_WRITTEN[edition] in _text(course / "feedback" / untouched / name
                                             / f"{name}.html")
        graded = nbformat.read(course / "autograded" / solved / name / f"{name}.ipynb", 4)
        assert any("hidden=True" in c.source for c in graded.cells), \
            f"{name}: the graders' hidden tests did not run at autograding"
