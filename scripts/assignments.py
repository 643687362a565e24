"""Build the exercises as an nbgrader course, one per edition: `make assignments`.

    python scripts/assignments.py                  both editions, into grading/en and grading/zh
    python scripts/assignments.py --out DIR --edition zh --chapters 04 06
    python scripts/assignments.py --sample-class 04 --edition en
                                                   three made-up students' submissions of a
                                                   released chapter (04 or 06), to try grading

Each course folder holds an `nbgrader_config.py` and `source/NN_name/NN_name.ipynb` for every
chapter: the exercise notebook of the same source (scripts/notebook.py), with nbgrader's marks.

- A task cell holds the reference solution between `### BEGIN SOLUTION` and `### END SOLUTION`,
  placed so that `nbgrader generate_assignment` gives back exactly the exercise's stub: each
  stub's "# YOUR CODE HERE / raise NotImplementedError" is where a solution region was.
- A check cell is a locked autograder cell worth one point per checker it calls. Below the
  visible calls, between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS`, each checker is
  called again with `hidden=True`: a second set of cases the students never see.
- Every other cell (the text, the set-up, the cells that try an answer) is locked read-only.

The courses are built, never edited: change the lesson sources and build again.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import shutil
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from translate import load_script  # noqa: E402

notebook = load_script("notebook")  # the parser and builder of every notebook

ROOT = notebook.ROOT
OUT = ROOT / "grading"
# What a stub says where the learner's code goes, per edition: nbgrader's code_stub.
CODE_STUBS = {"en": "# YOUR CODE HERE\nraise NotImplementedError",
              "zh": "# 在这里写你的代码\nraise NotImplementedError"}
COURSE_IDS = {"en": "minillm", "zh": "minillm-zh"}
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
SCHEMA_VERSION = 3

CONFIG = '''\
# nbgrader's settings for the minillm course ({edition} edition), made by
# scripts/assignments.py (`make assignments`): use it as it is, from this folder.
c = get_config()  # noqa: F821  (nbgrader defines it)

c.CourseDirectory.course_id = "{course_id}"
# The exercises' stubs, as the course writes them (nbgrader's default differs by a pair of
# parentheses), so that the release is the exercise notebook learners know.
c.ClearSolutions.code_stub = {{"python": {code_stub!r}}}
# A checker runs the real model in some chapters: give a cell minutes, not nbgrader's 30 s.
c.Execute.timeout = 900
# Where JupyterHub's students fetch and submit (nbgrader's exchange). Collecting the
# notebooks by hand into submitted/STUDENT/NN_name/ needs no exchange.
c.Exchange.root = "/srv/nbgrader/exchange"
'''


def _nbgrader(cell, grade_id: str, *, solution=False, grade=False, locked=False, points=None):
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked,
            "schema_version": SCHEMA_VERSION, "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def solution_regions(stub: str, solution: str, code_stub: str) -> str:
    """The task cell for nbgrader: `solution` with each part that the exercise's `stub` replaces
    by the code stub wrapped in solution marks, so that nbgrader's ClearSolutions turns it back
    into `stub` exactly. ValueError where the stub is not the solution with holes."""
    hole = code_stub.splitlines()
    a, b = stub.splitlines(), solution.splitlines()
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out += b[j1:j2]
            continue
        holed = a[i1:i2]
        indent = _indent(holed[0]) if holed else ""
        if [line[len(indent):] for line in holed] != hole or \
                any(_indent(line) != indent for line in holed):
            raise ValueError(f"a stub's lines\n{chr(10).join(holed)}\nare not the code stub "
                             f"({code_stub!r}) in place of the solution's\n"
                             f"{chr(10).join(b[j1:j2])}")
        out += [indent + BEGIN, *b[j1:j2], indent + END]
    marked = "\n".join(out)
    if clear_solutions(marked, code_stub) != stub:
        raise ValueError(f"the solution marks would not give back the stub:\n{stub}")
    return marked


def clear_solutions(source: str, code_stub: str) -> str:
    """What nbgrader's ClearSolutions makes of a marked cell (to check the marks at build time)."""
    out, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
            out += [_indent(line) + stub_line for stub_line in code_stub.splitlines()]
        elif line.strip() == END:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def check_calls(source: str) -> list[str]:
    """Each `checks.check_...(...)` call of a check cell, as source text, with `hidden=True`
    added before its closing parenthesis."""
    tree = ast.parse(source)
    lines = source.splitlines()
    calls = []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr.startswith("check_")):
            raise ValueError(f"a check cell holds something other than checker calls:\n{source}")
        text = ast.get_source_segment(source, call)
        if any(k.arg == "hidden" for k in call.keywords):
            raise ValueError(f"a check cell already passes hidden=:\n{source}")
        head = text[:-1].rstrip()
        joint = "" if head.endswith("(") else " " if head.endswith(",") else ", "
        calls.append(f"{_indent(lines[node.lineno - 1])}{head}{joint}hidden=True)")
    if not calls:
        raise ValueError(f"a check cell calls no checker:\n{source}")
    return calls


def with_hidden_tests(source: str) -> str:
    calls = check_calls(source)
    return "\n".join([source.rstrip("\n"), BEGIN_HIDDEN, *calls, END_HIDDEN])


def assignment(source: Path, edition: str = "en") -> nbformat.NotebookNode:
    """The nbgrader source notebook of one exercise source (NN_name_exercise.py), in one
    edition."""
    cells = notebook.cells_of(source, edition)
    exercise = notebook.build(cells, "exercise", edition)
    solution = notebook.build(cells, "solution", edition)
    code_stub = CODE_STUBS[edition]
    for i, (stub, solved) in enumerate(zip(exercise.cells, solution.cells)):
        tags = set(solved.metadata.get("tags", []))
        if "task" in tags:
            solved.source = solution_regions(stub.source, solved.source, code_stub)
            _nbgrader(solved, f"task-{i:03d}", solution=True)
        elif "check" in tags:
            points = len(check_calls(solved.source))
            solved.source = with_hidden_tests(solved.source)
            _nbgrader(solved, f"check-{i:03d}", grade=True, locked=True, points=points)
        else:
            _nbgrader(solved, f"{solved.cell_type}-{i:03d}", locked=True)
    return solution


# The sample class: one student hands in the reference solution, one the solution with a typical
# mistake that the chapter's checker names, one the release untouched.
SAMPLE_CLASS = (("ada", "solved"), ("bo", "wrong"), ("cy", "untouched"))
# Per chapter: (a line of the reference solution, what a learner wrote instead, the checker's
# hint for it in each edition).
MISTAKES = {
    "04": ("return logits / temperature", "return logits * temperature",
           {"en": "you multiplied by the temperature", "zh": "你乘上了温度"}),
    "06": ("        if self.ref_count[block] == 0:\n            self.free_list.append(block)",
           "        self.free_list.append(block)",
           {"en": "that block is still held by another sequence",
            "zh": "那个块还被另一条序列占用着"}),
}


def _task_cells(nb):
    return [c for c in nb.cells if "task" in c.metadata.get("tags", [])]


def submission(release: Path, solution: Path, kind: str, mistake=("", "")):
    """A student's notebook: the release with the reference solution's task cells ("solved"), the
    same with `mistake` (the solution's text, what a learner wrote instead) made once
    ("wrong"), or the release as it is ("untouched")."""
    nb = nbformat.read(release, as_version=4)
    if kind == "untouched":
        return nb
    right, wrong = mistake if kind == "wrong" else ("", "")
    made = 0
    for cell, answer in zip(_task_cells(nb), _task_cells(nbformat.read(solution, as_version=4)),
                            strict=True):
        cell.source = answer.source
        if kind == "wrong" and right in answer.source and not made:
            cell.source, made = answer.source.replace(right, wrong, 1), 1
    if kind == "wrong" and not made:
        raise ValueError(f"no task of {solution.name} holds {right!r}")
    return nb


def sample_class(course: Path, edition: str, chapter: str) -> list[Path]:
    """submitted/STUDENT/NN_name/NN_name.ipynb for the sample class, from the chapter's release
    (`nbgrader generate_assignment NN_name` first)."""
    if chapter not in MISTAKES:
        raise ValueError(f"the sample class hands in chapter {' or '.join(MISTAKES)}, not "
                         f"{chapter!r}")
    (source,) = exercise_sources(edition, [chapter])
    name = name_of(source)
    release = course / "release" / name / f"{name}.ipynb"
    if not release.is_file():
        raise ValueError(f"{release} is missing: run `nbgrader generate_assignment {name}` in "
                         f"{course} first")
    solution = ROOT / "solutions" / notebook.EDITIONS[edition] / f"{name}.ipynb"
    written = []
    for student, kind in SAMPLE_CLASS:
        path = course / "submitted" / student / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(submission(release, solution, kind, MISTAKES[chapter][:2]), path)
        written.append(path)
    return written


def exercise_sources(edition: str, chapters=None) -> list[Path]:
    sources = sorted(notebook.SOURCES.glob("[0-9][0-9]_*_exercise.py"))
    return [s for s in sources if (not chapters or s.name[:2] in chapters)
            and edition in notebook.editions_of(s)]


def name_of(source: Path) -> str:
    return source.stem.removesuffix("_exercise")


def build_course(edition: str, out: Path, chapters=None) -> list[Path]:
    """The nbgrader course of one edition in `out`: its source/ rebuilt from scratch, its
    nbgrader_config.py written where there is none. The gradebook, the releases, submissions
    and feedback already there are left as they are."""
    sources = exercise_sources(edition, chapters)
    if chapters and len(sources) != len(set(chapters)):
        found = {s.name[:2] for s in sources}
        raise ValueError(f"no exercise for chapter(s) {sorted(set(chapters) - found)}: the "
                         f"chapters with exercises are "
                         f"{[s.name[:2] for s in exercise_sources(edition)]}")
    shutil.rmtree(out / "source", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    config = out / "nbgrader_config.py"
    if not config.exists():  # an instructor's own changes to it stay
        config.write_text(CONFIG.format(
            edition={"en": "English", "zh": "Chinese"}[edition], course_id=COURSE_IDS[edition],
            code_stub=CODE_STUBS[edition]), encoding="utf-8")
    written = []
    for source in sources:
        name = name_of(source)
        path = out / "source" / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(assignment(source, edition), path)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT,
                        help="the folder of the courses (default grading/): EDITION/ in it")
    parser.add_argument("--edition", choices=["en", "zh", "all"], default="all")
    parser.add_argument("--chapters", nargs="*", metavar="NN",
                        help="only these chapters (default: every chapter with an exercise)")
    parser.add_argument("--sample-class", metavar="NN",
                        help="write three made-up students' submissions of chapter NN (04 or 06) "
                             "into the --edition's course, from its release")
    args = parser.parse_args(argv)
    editions = ["en", "zh"] if args.edition == "all" else [args.edition]
    try:
        if args.sample_class:
            if args.edition == "all":
                parser.error("--sample-class needs one course: --edition en or --edition zh")
            for path in sample_class(args.out / args.edition, args.edition, args.sample_class):
                print(f"wrote {path}")
            return
        for edition in editions:
            course = args.out / edition
            written = build_course(edition, course, args.chapters)
            print(f"{course}: an nbgrader course of {len(written)} assignments "
                  f"({', '.join(p.parent.name for p in written)})")
    except ValueError as error:
        sys.exit(f"assignments.py: {error}")


if __name__ == "__main__":
    main()
