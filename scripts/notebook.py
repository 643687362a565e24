"""Build notebooks from a plain-text source in the "percent" format.

    python scripts/notebook.py --all        every notebook of both editions, from lessons/
                                            (English) and the catalogs in lessons/zh/
    python scripts/notebook.py SOURCE.py notebooks/NN_name.ipynb
    python scripts/notebook.py SOURCE.py --exercise exercises/NN_name.ipynb \
        --solution solutions/NN_name.ipynb [--edition zh]

Cells start with a marker line:
    # %%              a code cell
    # %% [markdown]   a markdown cell; each line's leading "# " is removed
    # %% [task]       an exercise stub; the lines before "# ==== solution ====" go to the exercise
                      notebook, the lines after it to the solution notebook
    # %% [check]      a code cell that calls a checker (tagged "check")
The notebooks are written without outputs, so that nbval runs them fresh.

The Chinese edition: lessons/zh/NN_name.po is the gettext catalog of lessons/NN_name.py (and
NN_name_exercise.po of NN_name_exercise.py): the Chinese of its prose, comments and strings, keyed
by the English (scripts/catalog.py). The Chinese notebooks are the English source with the catalog
filled in; they go to notebooks/zh/, exercises/zh/ and solutions/zh/, each with LANGUAGE_CELL
before the first code cell, and links to a chapter not translated yet lead to the English
notebook. docs/translating.md is the translator's guide.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "lessons"
# A chapter's lesson (NN_name.py), a second lesson of the same chapter (NNb_name.py) and the
# chapter's exercise (NN_name_exercise.py)
SOURCE_GLOB = "[0-9][0-9]*_*.py"
ZH_CATALOGS = SOURCES / "zh"
EDITIONS = {"en": "", "zh": "zh"}  # each edition's folder under notebooks/, exercises/, solutions/
MARKER = re.compile(r"^# %%(?P<rest>.*)$")
KIND = re.compile(r"^\s*(?:\[(\w+)\])?(?P<attributes>.*)$")
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
    if match.group("attributes").strip():
        raise ValueError(f"{where}: {match.group('attributes').strip()!r} after the cell marker; "
                         "a marker is '# %%' with at most a kind: [markdown], [task] or [check]")
    return Cell(kind, "", line=number)


def markdown(source: str) -> str:
    return "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                     for line in source.splitlines())


def catalog_of(source: Path) -> Path:
    """The Chinese catalog of an English source (which exists once its translation is begun)."""
    return ZH_CATALOGS / (source.stem + ".po")


def editions_of(source: Path) -> list[str]:
    return ["en"] + (["zh"] if catalog_of(source).is_file() else [])


def rel(path: Path) -> str:
    """A path as messages name it: from the repository's root when it lies inside."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def read(source: Path) -> list[Cell]:
    return parse(source.read_text(encoding="utf-8"), rel(source))


def commented(text: str) -> str:
    """Markdown as a source writes it, each line behind "# " (what `markdown` takes off)."""
    return "\n".join(f"# {line}" if line else "#" for line in text.split("\n"))


def translate(cells: list[Cell], catalog) -> list[Cell]:
    """The cells with the catalog's Chinese filled in (scripts/catalog.py); what the catalog lacks
    stays English and is listed in catalog.missing."""
    return [Cell(c.kind, commented(catalog.markdown_cell(markdown(c.source)))
                 if c.kind == "markdown" else catalog.code_cell(c.source), c.line) for c in cells]


def cells_of(source: Path, edition: str = "en", untranslated: list | None = None) -> list[Cell]:
    """A source's cells in one edition: the English as written, the Chinese from its catalog.
    The English of the messages the catalog does not translate yet (none, empty or fuzzy) is
    added to `untranslated`, when given."""
    cells = read(source)
    if edition == "en":
        return cells
    if not catalog_of(source).is_file():
        raise ValueError(f"{source.name} has no Chinese catalog ({catalog_of(source).name}): "
                         f"python scripts/translate.py start {source.name.split('_')[0]}")
    catalog = _catalog().Catalog.read(catalog_of(source))
    cells = translate(cells, catalog)
    if untranslated is not None:
        untranslated.extend(catalog.missing)
    return cells


def percent(cells: list[Cell]) -> str:
    """Cells written back in the percent format: the Chinese edition as one text, to read or
    search (the tests of a lesson's wording read it so)."""
    def marker(cell):
        return "# %%" + (f" [{cell.kind}]" if cell.kind != "code" else "")
    return "\n\n".join(f"{marker(c)}\n{c.source}" for c in cells) + "\n"


def _catalog():
    """scripts/catalog.py, imported by path beside this script (as translate.py imports this)."""
    import importlib.util
    name = "minillm_script_catalog"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("catalog.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def targets(source: Path, edition: str = "en") -> list[tuple[Path, str]]:
    """The notebooks built from one source in one edition: a lesson, or an exercise and its
    solution."""
    folder = EDITIONS[edition]
    if source.stem.endswith("_exercise"):
        name = source.stem.removesuffix("_exercise") + ".ipynb"
        return [(ROOT / "exercises" / folder / name, "exercise"),
                (ROOT / "solutions" / folder / name, "solution")]
    return [(ROOT / "notebooks" / folder / (source.stem + ".ipynb"), "lesson")]


def _translated(stem: str, variant: str) -> bool:
    return (ZH_CATALOGS / (stem + ("_exercise" if variant != "lesson" else "") + ".po")).is_file()


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
    """The English sources; each is built in every edition it has (editions_of)."""
    return sorted(SOURCES.glob(SOURCE_GLOB))


def build_source(source: Path) -> int:
    """Both editions' notebooks of one source; returns how many of its Chinese messages stay
    English in them (not translated yet, or fuzzy)."""
    untranslated = []
    for edition in editions_of(source):
        cells = cells_of(source, edition, untranslated)
        for path, variant in targets(source, edition):
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(build(cells, variant, edition), path)
    return len(untranslated)


def build_all() -> None:
    sources = all_sources()
    left = {source.name: build_source(source) for source in sources}
    zh = sum("zh" in editions_of(s) for s in sources)
    print(f"wrote the notebooks of {len(sources)} English sources, {zh} of them in Chinese too")
    left = {name: n for name, n in left.items() if n}
    if left:
        print(f"the Chinese notebooks show English for {sum(left.values())} messages not "
              f"translated yet or fuzzy ({', '.join(f'{n} in {name}' for name, n in left.items())}"
              "): python scripts/translate.py status")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?")
    parser.add_argument("lesson", nargs="?")
    parser.add_argument("--all", action="store_true", help="build every notebook")
    parser.add_argument("--exercise")
    parser.add_argument("--solution")
    parser.add_argument("--edition", choices=list(EDITIONS), default="en",
                        help="zh: fill in the source's catalog from lessons/zh/")
    args = parser.parse_args(argv)
    try:
        if args.all:
            return build_all()
        if not args.source:
            parser.error("give a SOURCE.py, or --all")
        source = Path(args.source)
        cells = cells_of(source.resolve(), args.edition)
        targets = [(args.lesson, "lesson"), (args.exercise, "exercise"),
                   (args.solution, "solution")]
        for path, variant in targets:
            if path:
                nbformat.write(build(cells, variant, args.edition), path)
                print(f"wrote {path}")
    except ValueError as error:
        sys.exit(f"notebook.py: {error}")


if __name__ == "__main__":
    main()
