"""Fixed-width text for a terminal or a notebook: a Chinese character takes two columns on screen,
so padding counts columns, not characters.

    pad("延迟 ms", 12)          # "延迟 ms" + 5 spaces: 7 columns of text, 12 in all
    f"{Label('设备'):>12}"      # the same rule inside an f-string's format spec

An ASCII text comes out exactly as str's own padding would make it.
"""

from __future__ import annotations

import re
import unicodedata

_ALIGN = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>^]))?(?P<width>\d+)")


def columns(line: str) -> int:
    """How many columns `line` takes on screen: two for a wide or full-width character (Chinese,
    Japanese, Korean, full-width punctuation), one for any other."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def pad(label: str, width: int, right: bool = False, fill: str = " ") -> str:
    """`label` padded with `fill` to `width` columns, on the right (left-aligned) or, with
    `right`, on the left; a label already wider comes back unchanged."""
    space = fill * max(0, width - columns(label))
    return space + label if right else label + space


class Label(str):
    """A str whose alignment in a format spec (`{label:>12}`, `{label:<10}`, `{label:^8}`)
    counts screen columns: a label that may be Chinese lines up with the ASCII ones. Any other
    spec is str's own."""

    def __format__(self, spec: str) -> str:
        match = _ALIGN.fullmatch(spec)
        if not match:
            return str.__format__(self, spec)
        width, fill = int(match["width"]), match["fill"] or " "
        align = match["align"] or "<"
        space = max(0, width - columns(self))
        if align == "<":
            return str(self) + fill * space
        if align == ">":
            return fill * space + str(self)
        return fill * (space // 2) + str(self) + fill * (space - space // 2)
