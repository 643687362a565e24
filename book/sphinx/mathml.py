"""Render math as MathML at build time (latex2mathml), so the browser draws it with no script:
the book opens offline without MathJax."""

from docutils import nodes
from latex2mathml.converter import convert


def _mathml(latex: str, display: str) -> str:
    return convert(latex.strip(), display=display)


def visit_inline(self, node):
    self.body.append(f'<span class="math">{_mathml(node.astext(), "inline")}</span>')
    raise nodes.SkipNode


def visit_block(self, node):
    if node.get("label"):
        self.body.append(f'<span class="eqno">({node["number"]})</span>')
    self.body.append(f'<div class="math">{_mathml(node.astext(), "block")}</div>')
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (visit_inline, None), (visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
