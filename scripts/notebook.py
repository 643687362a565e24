"""Build notebooks from a plain-text source in the "percent" format.

    python scripts/notebook.py --all        every notebook from minillm/course/lessons/
    python scripts/notebook.py SOURCE.py notebooks/NN_name.ipynb
    python scripts/notebook.py SOURCE.py --exercise exercises/NN_name.ipynb \
        --solution solutions/NN_name.ipynb

Cells start with a marker line:
    # %%              a code cell
    # %% [markdown]   a markdown cell; each line's leading "# " is removed
    # %% [task]       an exercise stub; the lines before "# ==== solution ====" go to the exercise
                      notebook, the lines after it to the solution notebook
    # %% [check]      a code cell that calls a checker (tagged "check")
The notebooks are written without outputs, so that nbval runs them fresh.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "minillm" / "course" / "lessons"
# A chapter's lesson (NN_name.py), a second lesson of the same chapter (NNb_name.py) and the
# chapter's exercise (NN_name_exercise.py)
SOURCE_GLOB = "[0-9][0-9]*_*.py"
MARKER = re.compile(r"^# %%\s*(?:\[(\w+)\])?\s*$")
SPLIT = "# ==== solution ===="


def parse(text: str) -> list[tuple[str, str]]:
    cells, kind, lines = [], None, []
    for line in text.splitlines():
        match = MARKER.match(line)
        if match:
            if kind is not None:
                cells.append((kind, "\n".join(lines).strip("\n")))
            kind, lines = match.group(1) or "code", []
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        cells.append((kind, "\n".join(lines).strip("\n")))
    return cells


def markdown(source: str) -> str:
    return "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                     for line in source.splitlines())


def build(cells, variant: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, source in cells:
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(markdown(source)))
            continue
        tags = []
        if kind == "task":
            if SPLIT not in source:
                sys.exit(f"a [task] cell has no '{SPLIT}' line:\n{source}")
            stub, solution = source.split(SPLIT)
            source = (stub if variant == "exercise" else solution).strip("\n")
            tags = ["task"]
        elif kind == "check":
            tags = ["check"]
        elif kind != "code":
            sys.exit(f"unknown cell kind [{kind}]")
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def targets(source: Path) -> list[tuple[Path, str]]:
    """The notebooks built from one source: a lesson, or an exercise and its solution."""
    if source.stem.endswith("_exercise"):
        name = source.stem.removesuffix("_exercise") + ".ipynb"
        return [(ROOT / "exercises" / name, "exercise"), (ROOT / "solutions" / name, "solution")]
    return [(ROOT / "notebooks" / (source.stem + ".ipynb"), "lesson")]


def build_all() -> None:
    for source in sorted(SOURCES.glob(SOURCE_GLOB)):
        cells = parse(source.read_text(encoding="utf-8"))
        for path, variant in targets(source):
            nbformat.write(build(cells, variant), path)
    print(f"wrote the notebooks of {len(list(SOURCES.glob(SOURCE_GLOB)))} sources")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?")
    parser.add_argument("lesson", nargs="?")
    parser.add_argument("--all", action="store_true", help="build every notebook")
    parser.add_argument("--exercise")
    parser.add_argument("--solution")
    args = parser.parse_args(argv)
    if args.all:
        return build_all()
    if not args.source:
        parser.error("give a SOURCE.py, or --all")
    with open(args.source, encoding="utf-8") as f:
        cells = parse(f.read())
    targets = [(args.lesson, "lesson"), (args.exercise, "exercise"), (args.solution, "solution")]
    for path, variant in targets:
        if path:
            nbformat.write(build(cells, variant), path)
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
