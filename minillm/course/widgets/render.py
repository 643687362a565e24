"""How the widgets draw a chart: a matplotlib `Figure` made without pyplot, turned into inline SVG
and shown in an `ipywidgets.HTML`.

Why not pyplot and an Output widget: a Figure displayed before pyplot has loaded its inline
backend prints as `<Figure size 560x300 with 1 Axes>` instead of a picture (a fresh kernel's first
run), and pyplot keeps every figure it made. SVG needs no backend, and its text stays text: the
browser draws it with its own fonts (Chinese tokens included) and a test can read it. Artists given
a `gid` keep it as the `id` of their SVG group, so a browser test can find the bars marked kept.
"""

from __future__ import annotations

import io
import warnings

__all__ = ["new_figure", "to_svg", "chart_html"]


def new_figure(width: float, height: float, layout: str | None = "constrained"):
    """A Figure of `width` x `height` inches (100 px each). "constrained" lays it out so that
    nothing overlaps (at the cost of one more drawing pass); None leaves the margins to the
    caller (`fig.subplots_adjust`), for charts redrawn several times a second."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout=layout)


def to_svg(fig) -> str:
    """The figure as an inline `<svg>` element: text as text, no XML header, no date."""
    import matplotlib as mpl

    buffer = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none"}), warnings.catch_warnings():
        # matplotlib's own font has no CJK glyphs; the browser that draws the text has them.
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    # Shrink to a narrow window instead of spilling out of it.
    return svg[svg.index("<svg"):].replace("<svg ", '<svg style="max-width:100%;height:auto" ', 1)


def chart_html(fig, name: str) -> str:
    """The figure wrapped for an HTML widget: a div with class `minillm-chart` and
    `data-chart=name`, which browser tests look for."""
    return f'<div class="minillm-chart" data-chart="{name}">{to_svg(fig)}</div>'
