"""Build notebooks from a plain-text source in the "percent" format.

    python scripts/notebook.py --all        every notebook of both editions, from
                                            minillm/course/lessons/ (English) and lessons/zh/
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

The Chinese edition: lessons/zh/NN_name.py (and NN_name_exercise.py) has the English source's
cells in the same order, each marker followed by the hash of the English cell it translates and,
while the cell is still English, the word `todo`:
    # %% [markdown] en=3f2a9c1e
    # %% en=77b0c2d4 todo
scripts/translate.py keeps the hashes in step (docs/translating.md). Its notebooks go to
notebooks/zh/, exercises/zh/ and solutions/zh/, each with LANGUAGE_CELL before the first code
cell, and links to a chapter not translated yet lead to the English notebook.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "minillm" / "course" / "lessons"
# A chapter's lesson (NN_name.py), a second lesson of the same chapter (NNb_name.py) and the
# chapter's exercise (NN_name_exercise.py)
SOURCE_GLOB = "[0-9][0-9]*_*.py"
ZH_SOURCES = SOURCES / "zh"
EDITIONS = {"en": "", "zh": "zh"}  # each edition's folder under notebooks/, exercises/, solutions/
MARKER = re.compile(r"^# %%(?P<rest>.*)$")
KIND = re.compile(r"^\s*(?:\[(\w+)\])?(?P<attributes>.*)$")
HASH = re.compile(r"^en=([0-9a-f]{8})$")
SPLIT = "# ==== solution ===="
KINDS = ("code", "markdown", "task", "check")
LANGUAGE_CELL = """\
# 中文版：检查器的提示、控件的标签和打印的句子都用中文
from minillm.course import set_language

set_language("zh")"""
# a link to a notebook of the same folder: [text](NN_name.ipynb) or (NN_name.ipynb#part)
LOCAL_LINK = re.compile(r"\]\((\d\d[a-z]?_\w+)\.ipynb(#[^)]*)?\)")


@dataclass
class Cell:
    kind: str
    source: str
    en: str | None = None  # a translation: the hash of the English cell it was made from
    todo: bool = False  # a translation not made yet: the cell still holds the English
    line: int = 0  # the marker's line in the source file, from 1


def parse(text: str, where: str = "the source") -> list[Cell]:
    cells, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        match = MARKER.match(line)
        if match:
            if cells:
                cells[-1].source = "\n".join(lines).strip("\n")
            cells.append(_marker(match.group("rest"), f"{where}, line {number}", number))
            lines = []
        elif cells:
            lines.append(line)
    if cells:
        cells[-1].source = "\n".join(lines).strip("\n")
    return cells


def _marker(rest: str, where: str, number: int) -> Cell:
    match = KIND.match(rest)
    kind = match.group(1) or "code"
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown cell kind [{kind}]; the kinds are "
                         f"{', '.join(KINDS)}")
    cell = Cell(kind, "", line=number)
    for word in match.group("attributes").split():
        if word == "todo":
            cell.todo = True
        elif HASH.match(word):
            cell.en = HASH.match(word).group(1)
        else:
            raise ValueError(f"{where}: {word!r} after the cell marker; a marker may carry only "
                             "en=HASH (8 hex digits) and todo")
    return cell


def markdown(source: str) -> str:
    return "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                     for line in source.splitlines())


def edition_of(source: Path) -> str:
    return "zh" if source.parent.name == "zh" else "en"


def targets(source: Path) -> list[tuple[Path, str]]:
    """The notebooks built from one source: a lesson, or an exercise and its solution, in the
    source's edition."""
    folder = EDITIONS[edition_of(source)]
    if source.stem.endswith("_exercise"):
        name = source.stem.removesuffix("_exercise") + ".ipynb"
        return [(ROOT / "exercises" / folder / name, "exercise"),
                (ROOT / "solutions" / folder / name, "solution")]
    return [(ROOT / "notebooks" / folder / (source.stem + ".ipynb"), "lesson")]


def _translated(stem: str, variant: str) -> bool:
    return (ZH_SOURCES / (stem + ("_exercise" if variant != "lesson" else "") + ".py")).is_file()


def zh_links(text: str, variant: str) -> str:
    """Links from a Chinese notebook to a chapter with no Chinese edition yet lead to the
    English notebook beside it (../NN_name.ipynb)."""
    return LOCAL_LINK.sub(lambda m: m.group(0) if _translated(m.group(1), variant)
                          else f"](../{m.group(1)}.ipynb{m.group(2) or ''})", text)


def build(cells: list[Cell], variant: str, edition: str = "en"):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for cell in cells:
        kind, source = cell.kind, cell.source
        if kind == "markdown":
            text = markdown(source)
            nb.cells.append(nbformat.v4.new_markdown_cell(
                zh_links(text, variant) if edition == "zh" else text))
            continue
        if edition == "zh" and not any(c.cell_type == "code" for c in nb.cells):
            nb.cells.append(nbformat.v4.new_code_cell(LANGUAGE_CELL))
        tags = []
        if kind == "task":
            if SPLIT not in source:
                raise ValueError(f"a [task] cell has no '{SPLIT}' line:\n{source}")
            stub, solution = source.split(SPLIT)
            source = (stub if variant == "exercise" else solution).strip("\n")
            tags = ["task"]
        elif kind == "check":
            tags = ["check"]
        code = nbformat.v4.new_code_cell(source)
        if tags:
            code.metadata["tags"] = tags
        nb.cells.append(code)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def all_sources() -> list[Path]:
    return sorted(SOURCES.glob(SOURCE_GLOB)) + sorted(ZH_SOURCES.glob(SOURCE_GLOB))


def build_source(source: Path) -> None:
    cells = parse(source.read_text(encoding="utf-8"), str(source.relative_to(ROOT)))
    for path, variant in targets(source):
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(build(cells, variant, edition_of(source)), path)


def build_all() -> None:
    sources = all_sources()
    for source in sources:
        build_source(source)
    zh = sum(edition_of(s) == "zh" for s in sources)
    print(f"wrote the notebooks of {len(sources) - zh} English and {zh} Chinese sources")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?")
    parser.add_argument("lesson", nargs="?")
    parser.add_argument("--all", action="store_true", help="build every notebook")
    parser.add_argument("--exercise")
    parser.add_argument("--solution")
    args = parser.parse_args(argv)
    try:
        if args.all:
            return build_all()
        if not args.source:
            parser.error("give a SOURCE.py, or --all")
        source = Path(args.source)
        cells = parse(source.read_text(encoding="utf-8"), args.source)
        targets = [(args.lesson, "lesson"), (args.exercise, "exercise"),
                   (args.solution, "solution")]
        for path, variant in targets:
            if path:
                nbformat.write(build(cells, variant, edition_of(source.resolve())), path)
                print(f"wrote {path}")
    except ValueError as error:
        sys.exit(f"notebook.py: {error}")


if __name__ == "__main__":
    main()
