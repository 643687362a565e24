"""What a lesson draws and what its page shows: a plotting cell of the source must leave a figure
in the executed copy, and every figure of the copy must be on the built page.

A plotting cell draws with matplotlib's pyplot, shows one of the course's chart widgets
(CHART_WIDGETS), or calls a function of the lesson that does. A figure is an image output (PNG or
SVG) or an inline <svg>/<img> in HTML output (the widgets' charts)."""

from __future__ import annotations

import ast
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from .execute import lesson_cells

# The course's widgets and figure functions that draw a chart (minillm/course/widgets/).
CHART_WIDGETS = ("temperature_explorer", "top_k_top_p_explorer", "block_map_explorer",
                 "LatencyChart", "temperature_figure", "filter_figure", "block_map_figure",
                 "plot_latency")
DRAWING = {"plt.show", "plt.subplots", "plt.figure", *CHART_WIDGETS}
IMAGE_MIMES = ("image/png", "image/svg+xml", "image/jpeg")


def _calls(node) -> set[str]:
    """The names called anywhere inside `node`: `f(...)` as "f", `plt.show()` as "plt.show", and
    a function handed to a call, as `interact(draw, ...)` hands `draw`, which it calls."""
    names = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name):
            names.add(call.func.id)
        elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            names.add(f"{call.func.value.id}.{call.func.attr}")
        names.update(arg.id for arg in call.args if isinstance(arg, ast.Name))
    return names


def plotting_cells(nb) -> list[int]:
    """Indices (among the lesson's own cells) of the code cells that draw a figure: at their top
    level they call pyplot, a chart widget, or a function an earlier cell defined that draws."""
    helpers, found = set(), []
    for i, cell in enumerate(lesson_cells(nb)):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython syntax (a magic) draws no figure in this course
            continue
        top = []
        for statement in tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _calls(statement) & (DRAWING | helpers):
                    helpers.add(statement.name)
            else:
                top.append(statement)
        if any(_calls(statement) & (DRAWING | helpers) for statement in top):
            found.append(i)
    return found


def figures_in(outputs) -> int:
    count = 0
    for output in outputs:
        data = output.get("data", {})
        if any(mime in data for mime in IMAGE_MIMES):
            count += 1
        elif "text/html" in data:
            text = data["text/html"]
            text = "".join(text) if isinstance(text, list) else text
            count += len(re.findall(r"<svg\b", text)) + len(re.findall(r"<img\b", text))
    return count


class _OutputFigures(HTMLParser):
    """Counts <img> and outermost <svg> elements inside a page's cell outputs."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.svg_depth = 0
        self.count = 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        inside = any(flag for _, flag in self.stack) or "cell_output" in classes
        if inside and tag == "img":
            self.count += 1
        if tag == "svg":
            if inside and self.svg_depth == 0:
                self.count += 1
            self.svg_depth += 1
        if tag not in ("img", "br", "hr", "input", "meta", "link", "source", "wbr"):
            self.stack.append((tag, inside))

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg_depth = max(self.svg_depth - 1, 0)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break


def figures_on_page(page: Path) -> int:
    parser = _OutputFigures()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.count


def copy_problems(nb, name: str) -> tuple[list[str], int]:
    """A plotting cell whose output has no figure, in an executed copy. Returns (problems, the
    number of figures in the copy)."""
    cells = lesson_cells(nb)
    plotting = set(plotting_cells(nb))
    problems, count = [], 0
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        n = figures_in(cell.get("outputs", []))
        count += n
        if i in plotting and n == 0:
            problems.append(f"{name}: code cell {i} plots but its output has no figure")
        if n and i not in plotting:
            problems.append(f"{name}: code cell {i} shows a figure but is not a plotting cell by "
                            "book/figures.py's rule: add the call that draws it to DRAWING")
    return problems, count


def missing_figures(copy: Path, page: Path) -> list[str]:
    """What is wrong between an executed copy and its page: a plotting cell without a figure, or
    fewer figures on the page than in the copy or than the source has plotting cells."""
    nb = nbformat.read(copy, as_version=4)
    problems, in_copy = copy_problems(nb, copy.name)
    if not page.is_file():
        return problems + [f"{page}: no such page"]
    shown, plotting = figures_on_page(page), len(plotting_cells(nb))
    if shown < max(in_copy, plotting):
        problems.append(f"{page.name}: {shown} figures on the page, {in_copy} in the executed "
                        f"notebook, {plotting} plotting cells in the source")
    return problems


def glossary_terms(glossary: Path) -> list[tuple[str, str]]:
    """(English, 中文) from the glossary's table."""
    terms = []
    for line in glossary.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and line.startswith("|") and not set(cells[0]) <= set("-: ") \
                and cells[0] != "English":
            terms.append((cells[0], cells[1]))
    return terms
