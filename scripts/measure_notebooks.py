"""Measure how long every lesson and solution notebook takes to run on this machine, and estimate
the time a learner needs for each chapter and each exercise. Writes `docs/notebook_times.json` and
the timing table of `docs/instructor.md` (between its `times` markers).

    python scripts/measure_notebooks.py            # run every notebook (several minutes)
    python scripts/measure_notebooks.py --render   # only rewrite the table from the JSON file
    python scripts/measure_notebooks.py --from-junit report.xml
        # take the run times nbval measured in a test run (`make test PYTEST_ARGS=--junitxml=...`)

The learner estimates are rules of thumb, stated here so they can be argued with:
- a lesson: its prose read at 150 words a minute, its code read at 20 lines a minute, plus twice its
  measured run time (learners run cells more than once);
- an exercise: 8 minutes per task, plus 1 minute per line of the reference solution, plus its
  measured run time.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "docs" / "notebook_times.json"
GUIDE = ROOT / "docs" / "instructor.md"
START, END = "<!-- times:start -->", "<!-- times:end -->"
READ_WORDS_PER_MIN, READ_CODE_LINES_PER_MIN = 150, 20
MIN_PER_TASK, MIN_PER_SOLUTION_LINE = 8, 1


def run_seconds(path: Path) -> float:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def _code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def lesson_size(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    words = sum(len(re.findall(r"\w+", c.source)) for c in nb.cells if c.cell_type == "markdown")
    code = sum(_code_lines(c.source) for c in nb.cells if c.cell_type == "code")
    return {"words": words, "code_lines": code}


def exercise_size(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    tasks = [c for c in nb.cells if "task" in c.metadata.get("tags", [])]
    return {"tasks": len(tasks), "solution_lines": sum(_code_lines(c.source) for c in tasks)}


def measure() -> dict:
    chapters = {}
    for lesson in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        solution = ROOT / "solutions" / lesson.name
        entry = {"lesson_run_s": round(run_seconds(lesson), 1), **lesson_size(lesson)}
        if solution.exists():
            entry["exercise_run_s"] = round(run_seconds(solution), 1)
            entry.update(exercise_size(solution))
        chapters[lesson.stem] = entry
        print(f"{lesson.stem}: {entry}", flush=True)
    import torch

    return {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "torch": torch.__version__, "cpu_threads": torch.get_num_threads()},
            "measured": time.strftime("%Y-%m-%d"), "chapters": chapters}


def from_junit(path: Path) -> dict:
    """Run times per notebook summed from nbval's per-cell test times in a JUnit XML report."""
    import xml.etree.ElementTree as ET

    seconds: dict[tuple[str, str], float] = {}
    for case in ET.parse(path).iter("testcase"):
        match = re.match(r"^(notebooks|solutions)\.(\d\d_\w+)\.ipynb$", case.get("classname", ""))
        if match:
            key = (match.group(1), match.group(2))
            seconds[key] = seconds.get(key, 0.0) + float(case.get("time", 0))
    chapters = {}
    for lesson in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if ("notebooks", lesson.stem) not in seconds:
            raise SystemExit(f"{path} has no nbval times for notebooks/{lesson.name}")
        entry = {"lesson_run_s": round(seconds[("notebooks", lesson.stem)], 1),
                 **lesson_size(lesson)}
        solution = ROOT / "solutions" / lesson.name
        if ("solutions", lesson.stem) in seconds:
            entry["exercise_run_s"] = round(seconds[("solutions", lesson.stem)], 1)
            entry.update(exercise_size(solution))
        chapters[lesson.stem] = entry
    import torch

    mtime = time.strftime("%Y-%m-%d", time.localtime(path.stat().st_mtime))
    return {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "torch": torch.__version__, "cpu_threads": torch.get_num_threads()},
            "measured": mtime, "source": f"nbval cell times from {path.name}",
            "chapters": chapters}


def lesson_minutes(c: dict) -> float:
    return (c["words"] / READ_WORDS_PER_MIN + c["code_lines"] / READ_CODE_LINES_PER_MIN
            + 2 * c["lesson_run_s"] / 60)


def exercise_minutes(c: dict) -> float:
    if "tasks" not in c:
        return 0.0
    return (c["tasks"] * MIN_PER_TASK + c["solution_lines"] * MIN_PER_SOLUTION_LINE
            + c["exercise_run_s"] / 60)


def render(data: dict) -> str:
    rows = ["| chapter | lesson runs in | exercise runs in | learner: lesson | learner: exercises "
            "(tasks) |", "|---|---:|---:|---:|---:|"]
    for name, c in data["chapters"].items():
        exercise = f"{c['exercise_run_s']:.0f} s" if "exercise_run_s" in c else "—"
        tasks = f"{exercise_minutes(c):.0f} min ({c.get('tasks', 0)})" if "tasks" in c else "—"
        rows.append(f"| {name} | {c['lesson_run_s']:.0f} s | {exercise} | "
                    f"{lesson_minutes(c):.0f} min | {tasks} |")
    m = data["machine"]
    rows.append("")
    how = data.get("source", "running each notebook")
    rows.append(f"Measured on {data['measured']} ({how}) by `python scripts/measure_notebooks.py` "
                f"on {m['platform']}, Python {m['python']}, torch {m['torch']}.")
    return "\n".join(rows)


def write_guide_table(data: dict) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{GUIDE} has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    GUIDE.write_text(f"{head}{START}\n{render(data)}\n{END}{tail}", encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", action="store_true",
                        help="rewrite the guide's table from docs/notebook_times.json only")
    parser.add_argument("--from-junit", type=Path, metavar="XML",
                        help="take the run times from a JUnit report of a test run")
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads(TIMES.read_text())
    elif args.from_junit:
        data = from_junit(args.from_junit)
        TIMES.write_text(json.dumps(data, indent=2) + "\n")
    else:
        data = measure()
        TIMES.write_text(json.dumps(data, indent=2) + "\n")
    write_guide_table(data)
    print(f"wrote {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
