"""scripts/assignments.py builds the nbgrader courses from the exercises' sources, without
nbgrader itself: the marks it writes, and the mistakes it refuses. tests/test_grading.py runs
nbgrader on what it builds."""

from __future__ import annotations

import nbformat
import pytest
from script_modules import script

builder = script("assignments")
ROOT = builder.ROOT


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    out = tmp_path_factory.mktemp("grading")
    return {edition: (out / edition, builder.build_course(edition, out / edition))
            for edition in ("en", "zh")}


@pytest.mark.parametrize("edition", ["en", "zh"])
def test_every_exercise_becomes_an_assignment_whose_stubs_are_the_exercises(courses, edition):
    course, written = courses[edition]
    exercises = sorted((ROOT / "exercises" / builder.notebook.EDITIONS[edition]).glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in exercises]
    assert (course / "nbgrader_config.py").is_file()
    stub = builder.CODE_STUBS[edition]
    for path, exercise_path in zip(written, exercises):
        source, exercise = nbformat.read(path, 4), nbformat.read(exercise_path, 4)
        assert len(source.cells) == len(exercise.cells)
        ids = [c.metadata.nbgrader.grade_id for c in source.cells]
        assert len(set(ids)) == len(ids), f"{path.name}: grade ids repeat"
        for cell, seen in zip(source.cells, exercise.cells):
            marks = cell.metadata.nbgrader
            tags = set(seen.metadata.get("tags", []))
            if "task" in tags:
                assert marks.solution and not marks.grade and not marks.locked
                assert builder.BEGIN in cell.source
                assert builder.clear_solutions(cell.source, stub) == seen.source
            elif "check" in tags:
                assert marks.grade and marks.locked and not marks.solution
                visible, hidden = cell.source.split(builder.BEGIN_HIDDEN + "\n")
                assert visible.rstrip("\n") == seen.source
                assert hidden.endswith(builder.END_HIDDEN)
                calls = builder.check_calls(seen.source)
                assert marks.points == len(calls) >= 1
                assert hidden.removesuffix(builder.END_HIDDEN).strip("\n") == "\n".join(calls)
            else:
                assert marks.locked and not marks.grade and not marks.solution
                assert cell.source == seen.source


def test_a_hidden_call_is_the_visible_one_with_hidden_true():
    assert builder.check_calls("checks.check_a(f)") == ["checks.check_a(f, hidden=True)"]
    assert builder.check_calls("checks.check_b(\n    f,\n    model,\n)") == \
        ["checks.check_b(\n    f,\n    model, hidden=True)"]
    assert builder.check_calls("checks.check_c()\nchecks.check_d(g)  # both") == \
        ["checks.check_c(hidden=True)", "checks.check_d(g, hidden=True)"]


@pytest.mark.parametrize("source, why", [
    ("x = checks.check_a(f)", "something other than checker calls"),
    ("print(1)", "something other than checker calls"),
    ("checks.check_a(f, hidden=False)", "already passes hidden="),
    ("# nothing", "calls no checker"),
])
def test_a_check_cell_that_cannot_take_hidden_tests_is_refused(source, why):
    with pytest.raises(ValueError, match=why):
        builder.with_hidden_tests(source)


def test_a_stub_that_is_not_the_solution_with_holes_is_refused():
    stub = "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError"
    solution = "def f(x):\n    return x + 1"
    marked = builder.solution_regions(stub, solution, builder.CODE_STUBS["en"])
    assert marked == "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"
    with pytest.raises(ValueError, match="are not the code stub"):
        builder.solution_regions("def f(x):\n    pass", solution, builder.CODE_STUBS["en"])
    with pytest.raises(ValueError, match="are not the code stub"):
        builder.solution_regions(stub.replace("# YOUR CODE HERE", "# write it"), solution,
                                 builder.CODE_STUBS["en"])


def test_the_builder_keeps_what_an_instructor_has_in_the_course(tmp_path):
    course = tmp_path / "en"
    builder.build_course("en", course, ["04"])
    (course / "nbgrader_config.py").write_text("c = get_config()\n# my own settings\n")
    (course / "gradebook.db").write_bytes(b"grades")
    (course / "source" / "old_chapter").mkdir()
    builder.build_course("en", course, ["06"])
    assert "my own settings" in (course / "nbgrader_config.py").read_text()
    assert (course / "gradebook.db").read_bytes() == b"grades"
    assert sorted(p.name for p in (course / "source").iterdir()) == ["06_batching"]


@pytest.mark.parametrize("argv, message", [
    (["--chapters", "12"], "no exercise for chapter(s) ['12']"),
    (["--sample-class", "05", "--edition", "en"], "hands in chapter 04 or 06, not '05'"),
    (["--sample-class", "04", "--edition", "en"], "generate_assignment 04_decoding"),
])
def test_bad_requests_say_what_is_allowed(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stopped:
        builder.main(["--out", str(tmp_path), *argv])
    assert message in str(stopped.value)


def test_the_sample_class_needs_one_course(tmp_path, capsys):
    with pytest.raises(SystemExit):
        builder.main(["--out", str(tmp_path), "--sample-class", "04"])
    assert "--edition en or --edition zh" in capsys.readouterr().err
