"""Reading an executed copy back for what a reader must never see: a verdict the run could not
call, a verdict that contradicts the lesson's claim, or a number outside its physical bound.

A copy is checked line by line against the rules below (each names its lesson by number, "" for
every lesson, and reads the English and the Chinese wording of one printed line). `problems`
lists what a copy breaks; tests/test_book.py holds every committed copy to none, and to having
been recorded on a quiet machine, all with the current engine on one machine (`book_problems`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat

NUMBER = r"([-+]?\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class Rule:
    lesson: str  # the lesson's number ("06", "10"), "" for all
    pattern: re.Pattern
    holds: Callable[..., bool]  # the matched wording's numbers, as floats
    says: str  # what a line that breaks it shows


def _rule(lesson, pattern, holds, says) -> Rule:
    return Rule(lesson, re.compile(pattern), holds, says)


RULES = [
    _rule("", r"too noisy to call|噪声太大", lambda: False,
          "a verdict the run could not call"),
    _rule("", r"disturbed \(|受干扰（", lambda: False,
          "a measurement outside its physical bound, shown as disturbed"),
    _rule("", r"Glyph \d+ .*missing from", lambda: False,
          "a chart drawn without a font for its characters (boxes in place of them)"),
    _rule("", r"(?:^|[\s'\"(])/(?:root|home|tmp|work|Users)/", lambda: False,
          "a path of the machine that ran it"),
    # a 135 M model's decode step reads its half a gigabyte at gigabytes a second on a quiet
    # machine of any kind: below 1 GB/s the step was slowed by something else
    _rule("00", NUMBER + r" GB/s", lambda gb: gb >= 1.0,
          "a decode step's read bandwidth below 1 GB/s"),
    _rule("06", r"continuous / static throughput:\s+" + NUMBER + "x|连续 / 静态的吞吐量：\\s*"
          + NUMBER + "x", lambda ratio: ratio > 1.0,
          "continuous batching below static's throughput, against the chapter's claim"),
    # a speculative round of t tokens per target pass cannot beat plain decoding by more than t
    # (the pass costs at least a step), give or take the timing's spread
    _rule("08", r"speed-up " + NUMBER + r"x .*tokens/pass " + NUMBER + "|加速比 " + NUMBER
          + r"x .*每次传播词元数 " + NUMBER,
          lambda speedup, per_pass: speedup <= 1.15 * per_pass,
          "a speculative speed-up above its tokens per target pass"),
    # int8 weights are a quarter of fp32's bytes: batch 1 cannot gain much more than 4x
    _rule("07", r"int8 at batch 1: " + NUMBER + "x fp32|批大小 1 时 int8 是 fp32 的 " + NUMBER + "x",
          lambda ratio: ratio <= 4.5,
          "int8 over fp32 above the byte ratio"),
    # the KV cache can only save work: at the longest length Q11 times, a step that feeds every
    # token again must be the slower one
    _rule("10", r"tokens recomputing was not slower|个词元时，重算并没有更慢", lambda: False,
          "a step without the KV cache no slower than a cached one"),
]


def _numbers(groups):
    """The numbers of the branch (English or Chinese wording) that matched."""
    return [float(g) for g in groups if g is not None]


def output_lines(nb) -> list[tuple[int, str]]:
    """(cell index, line) for each line a code cell printed or displayed as text."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            found += [(i, line) for line in text.splitlines()]
    return found


def problems(copy: Path) -> list[str]:
    """What `copy` (an executed lesson) shows that a reader must not see, one line each."""
    nb = nbformat.read(copy, as_version=4)
    found = []
    machine = nb.metadata.get("minillm_book", {}).get("machine", {})
    if machine.get("quiet") is not True:
        found.append(f"{copy.name}: not recorded under the quiet rule (book/quiet.py): "
                     f"{machine.get('others_share', 'no measure of other programs')!s}")
    return found + broken_claims(nb, copy.name)


def broken_claims(nb, name: str) -> list[str]:
    """The printed lines of the executed notebook `nb` (lesson file `name`) that break a rule."""
    number = name[:2]
    found = []
    for i, line in output_lines(nb):
        for rule in RULES:
            if rule.lesson not in ("", number):
                continue
            for match in rule.pattern.finditer(line):
                if not rule.holds(*_numbers(match.groups())):
                    found.append(f"{name} cell {i}: {rule.says}: {line.strip()}")
    return found


def book_problems(copies: list[Path], engine: str | None = None) -> list[str]:
    """What the copies of one book break together: every copy measured with one engine (the same
    minillm sources, book/execute.py's `engine_key`; `engine`, when given, the current one) on one
    machine."""
    records = {c: nbformat.read(c, as_version=4).metadata.get("minillm_book", {}) for c in copies}
    found = []
    if engine is not None:
        old = sorted(c.name for c, r in records.items() if r.get("engine") != engine)
        if old:
            found.append(f"{len(old)} copies were measured with another version of minillm than "
                         f"this one ({', '.join(old[:4])}{', ...' if len(old) > 4 else ''}): "
                         f"`make book BOOK_ARGS=--force` records them again")
    for field, of in (("engine", lambda r: r.get("engine")),
                      ("machine", lambda r: r.get("machine", {}).get("cpu"))):
        values = {}
        for copy, record in records.items():
            values.setdefault(of(record), []).append(copy.name)
        if len(values) > 1:
            found.append(f"the copies were made at more than one {field}: "
                         + "; ".join(f"{v}: {len(names)} copies" for v, names in values.items()))
    return found
