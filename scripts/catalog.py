"""The Chinese edition as gettext catalogs: lessons/zh/NN_name.po holds the Chinese of one English
source, keyed by the English it translates, and the Chinese notebooks are the English source with
the catalog filled in. The code is the English code, so the two editions cannot differ in it.

What a catalog translates (its messages, each msgid the English text):
- a markdown cell: the whole cell. It is found again after the English is rewrapped: the lookup
  compares text with its whitespace collapsed.
- in a code cell, each run of string literals and comments that only line breaks separate (an
  implicitly joined string over three lines is one message; so is a block of comment lines). A
  run's later lines are written without the indentation of the run's first line, so a block that
  moves in or out keeps its translation. The spaces before a comment at the end of a line are
  the code's, not the message's.
- a note: comment lines the Chinese adds before a line of code, or a comment at its end (the
  meaning of an English prompt, which the model must read in English). Its msgctxt says which
  (NOTE_BEFORE, NOTE_AFTER) and its msgid is the line of code, stripped.

A message is translated when its msgstr is set and it is not fuzzy (a string the Chinese keeps in
English has msgstr equal to msgid); the notebooks take the English for any other, as gettext does.
docs/translating.md is the translator's guide; scripts/translate.py updates the catalogs.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import polib

# the msgctxt of a note: comment lines the Chinese adds before a line of code, or a comment it
# adds at the line's end; the msgid is the line of English code, stripped
NOTE_BEFORE, NOTE_AFTER = "comment before", "comment at the end"
NOTES = (NOTE_BEFORE, NOTE_AFTER)
# what makes a string or comment a message: a letter, or punctuation the Chinese writes full-width
WORDS = re.compile(r"[A-Za-z\u3400-\u9fff,:;!?()]")
SPLIT = "# ==== solution ===="  # a task cell's divider (scripts/notebook.py): code, never a message
_TEXT = (tokenize.STRING, tokenize.COMMENT)
_BETWEEN = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT)


def collapse(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Run:
    start: int  # character offsets in the cell's source
    end: int
    column: int  # the column of the run's first character
    kind: int  # tokenize.STRING or tokenize.COMMENT: the kind of its first token

    def margin(self, source: str) -> int:
        """The indentation its later lines share, at most its first column: what the message
        leaves out and the filling puts back."""
        rest = [line for line in source[self.start:self.end].split("\n")[1:] if line.strip()]
        return min([self.column] + [len(line) - len(line.lstrip(" ")) for line in rest])

    def message(self, source: str) -> str:
        return dedent(source[self.start:self.end], self.margin(source))


def dedent(text: str, margin: int) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first] + [line[margin:] for line in rest])


def indent(text: str, margin: int) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * margin + line if line else line for line in rest])


def runs(source: str, verbatim: list[tuple[int, int]] = ()) -> list[Run]:
    """The runs of strings and comments of a code cell, in order. Tokens inside a `verbatim`
    range (a note, already Chinese) belong to no run."""
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    found, current = [], None
    breaks, alone = 0, False  # line breaks since the run's last token; it began its line
    for token in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]
        text = (token.type in _TEXT and token.string.strip() != SPLIT
                and not any(a <= start < b for a, b in verbatim))
        # Over a line break a run goes on only with its own kind: the next line of a string
        # joined implicitly, or of a block of comment lines (no blank line between). A comment at
        # the end of a line of code ends its run.
        if text and current is not None and breaks and (
                token.type != current.kind or breaks > 1
                or (token.type == tokenize.COMMENT and not alone)):
            found.append(current)
            current = None
        if text:
            if current is None:
                current = Run(start, end, token.start[1], token.type)
                alone = not source[offsets[token.start[0] - 1]:start].strip()
            else:
                current.end = end
            breaks = 0
        elif token.type in _BETWEEN and current is not None:
            breaks += token.type == tokenize.NL
        elif current is not None:
            found.append(current)
            current = None
    if current is not None:
        found.append(current)
    return found


def is_message(text: str) -> bool:
    """Whether a run holds words: a string with neither letters nor commas, colons and the like
    ("-" * 40, f"{x:.2f}") is code, the same in every edition."""
    words = re.sub(r"(?<![\w\"'])[rbfuRBFU]{1,2}(?=[\"'])", "", text)  # a prefix: f"...
    return bool(WORDS.search(re.sub(r"\{[^{}\"']*\}", "", words)))  # a field with no string


def code_messages(source: str) -> list[str]:
    return [m for m in (r.message(source) for r in runs(source)) if is_message(m)]


# --- a catalog ------------------------------------------------------------------------------------

@dataclass
class Catalog:
    """One .po file, indexed for filling: markdown by collapsed text, code runs exactly, notes by
    their line of code."""
    po: polib.POFile
    markdown: dict[str, polib.POEntry] = field(default_factory=dict)
    code: dict[str, polib.POEntry] = field(default_factory=dict)
    notes: dict[tuple[str, str], polib.POEntry] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)  # id() of the entries a fill looked up
    missing: list[str] = field(default_factory=list)  # msgids a fill found no translation of

    @classmethod
    def read(cls, path: Path) -> "Catalog":
        return cls.of(polib.pofile(str(path), wrapwidth=0))

    @classmethod
    def of(cls, po: polib.POFile) -> "Catalog":
        catalog = cls(po)
        for entry in po:
            if entry.obsolete:
                continue
            if entry.msgctxt in NOTES:
                catalog.notes[(entry.msgctxt, entry.msgid)] = entry
            else:
                catalog.code[entry.msgid] = entry
                catalog.markdown.setdefault(collapse(entry.msgid), entry)
        return catalog

    def _translate(self, entry: polib.POEntry | None, english: str) -> str:
        if entry is not None:
            self.used.add(id(entry))
        if entry is None or not entry.msgstr or entry.fuzzy:
            self.missing.append(english)
            return english
        return entry.msgstr

    def markdown_cell(self, english: str) -> str:
        return self._translate(self.code.get(english) or self.markdown.get(collapse(english)),
                               english)

    def code_cell(self, english: str) -> str:
        source, verbatim = self._with_notes(english)
        out, last = [], 0
        for run in runs(source, verbatim):
            message = run.message(source)
            out.append(source[last:run.start])
            chinese = (self._translate(self.code.get(message), message)
                       if is_message(message) else message)
            out.append(indent(chinese, run.margin(source)))
            last = run.end
        out.append(source[last:])
        return "".join(out)

    def _note(self, context: str, line: str) -> str | None:
        entry = self.notes.get((context, line.strip()))
        if entry is None:
            return None
        self.used.add(id(entry))
        return entry.msgstr if entry.msgstr and not entry.fuzzy else None

    def _with_notes(self, source: str) -> tuple[str, list[tuple[int, int]]]:
        """The English source with the catalog's notes written in, and where they are."""
        if not self.notes:
            return source, []
        out, verbatim, at = [], [], 0
        for line in source.split("\n"):
            before, after = self._note(NOTE_BEFORE, line), self._note(NOTE_AFTER, line)
            if before is not None:
                pad = line[:len(line) - len(line.lstrip())]
                text = "\n".join(pad + note for note in before.split("\n")) + "\n"
                verbatim.append((at, at + len(text)))
                out.append(text)
                at += len(text)
            if after is not None:
                verbatim.append((at + len(line), at + len(line) + 2 + len(after)))
                line = f"{line}  {after}"
            out.append(line + "\n")
            at += len(line) + 1
        return "".join(out)[:-1], verbatim

    def unused(self) -> list[polib.POEntry]:
        """Entries no fill looked up: their English is gone from the source."""
        return [e for e in self.po if not e.obsolete and id(e) not in self.used]


def new_po(english_name: str) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": "minillm",
        "Language": "zh_CN",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    po.header = (f"The Chinese edition of lessons/{english_name}: docs/translating.md says how "
                 "to work on it.")
    return po
