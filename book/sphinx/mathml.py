"""Render math as MathML at build time (latex2mathml), so the browser draws it with no script:
the book opens offline without MathJax."""

import re

from docutils import nodes
from latex2mathml.converter import convert

# latex2mathml keeps the escapes of \text{...} as they were typed: \text{length\_penalty}
# would show its backslash
MTEXT = re.compile(r"<mtext>(.*?)</mtext>", re.S)
TEXT_ESCAPE = re.compile(r"\\([_%&#$ {}])")


def _mathml(latex: str, display: str) -> str:
    mathml = convert(latex.strip(), display=display)

    def unescaped(match):
        text = TEXT_ESCAPE.sub(lambda e: "&amp;" if e.group(1) == "&" else e.group(1),
                               match.group(1))
        return f"<mtext>{text}</mtext>"

    return MTEXT.sub(unescaped, mathml)


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
