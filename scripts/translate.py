"""Keep the Chinese edition in step with the English. The Chinese of each English source is a
gettext catalog, lessons/zh/NN_name.po (scripts/catalog.py says what its messages are), which any
PO editor opens (Poedit, Lokalize, an editor's PO mode). docs/translating.md is the guide.

    python scripts/translate.py status            every chapter: messages untranslated, fuzzy, ...
    python scripts/translate.py start 03          lessons/zh/03_*.po from the English, untranslated
                                                  (a second lesson is a chapter of its own: 03b)
    python scripts/translate.py update 03         the catalogs in step with today's English, as
                                                  msgmerge does: a new message is added (fuzzy,
                                                  with the Chinese of a close one that is gone);
                                                  a rewrapped paragraph keeps its Chinese; a
                                                  message whose English is gone becomes obsolete

A fuzzy message keeps the English it was translated from (its #| msgid): revisit the Chinese,
then delete its "#, fuzzy" line. After any change: python scripts/notebook.py --all
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import polib


def load_script(name: str):
    """scripts/NAME.py as a module (imported once). By path: `notebook` alone is also the name
    of Jupyter's package."""
    module_name = f"minillm_script_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, Path(__file__).resolve().with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


_builder = load_script("notebook")
catalog = load_script("catalog")
ROOT, SOURCES, ZH_CATALOGS = _builder.ROOT, _builder.SOURCES, _builder.ZH_CATALOGS
markdown, rel = _builder.markdown, _builder.rel
TRANSLATED = ZH_CATALOGS / "translated.txt"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")
# what the prose share leaves out: fenced code, code spans, formulas, links' targets, URLs, tags
NOT_PROSE = [re.compile(p, re.S) for p in (
    r"```.*?```", r"`[^`\n]*`", r"\$\$.*?\$\$", r"\$[^$\n]+\$", r"\]\([^)]*\)",
    r"https?://\S+", r"<[^>\n]+>")]
SIMILAR = 0.6  # how close a new English message must be to a gone one to inherit its Chinese


# --- chapters and their files ----------------------------------------------------------------------

def chapter_of(source: Path) -> str:
    """A source's chapter as translate.py names it: "03" for 03_kv_cache.py and its exercise,
    "03b" for the chapter's second lesson 03b_long_context.py (translated on its own)."""
    return source.name.split("_")[0]


def chapters() -> list[str]:
    return sorted({chapter_of(p) for p in SOURCES.glob(_builder.SOURCE_GLOB)})


def chapter_sources(chapter: str) -> list[Path]:
    """The English sources of a chapter ("03"): its lesson and its exercise; of "03b", the
    second lesson."""
    found = sorted(SOURCES.glob(f"{chapter}_*.py"))
    if not re.fullmatch(r"\d\d[a-z]?", chapter) or not found:
        raise SystemExit(f"no chapter {chapter!r}: the chapters are {', '.join(chapters())}")
    return found


def zh_source(english: Path) -> Path:
    """The catalog of an English source."""
    return ZH_CATALOGS / (english.stem + ".po")


def translated_chapters() -> list[str]:
    """The chapters listed in lessons/zh/translated.txt: translated in full, so every test of the
    Chinese edition demands them."""
    if not TRANSLATED.is_file():
        return []
    lines = [line.split("#")[0].strip() for line in TRANSLATED.read_text().splitlines()]
    return [line for line in lines if line]


# --- the messages and what is wrong with a catalog -------------------------------------------------

def messages(english: Path) -> list[tuple[str, int]]:
    """The msgids of an English source, each once, with the number (from 1) of the first cell
    that has it, in order."""
    found = {}
    for number, cell in enumerate(_builder.read(english), start=1):
        texts = ([markdown(cell.source)] if cell.kind == "markdown"
                 else catalog.code_messages(cell.source))
        for text in texts:
            found.setdefault(text, number)
    return list(found.items())


def read_catalog(english: Path):
    """The catalog of `english`, filled once into its cells, so that its `missing` and `unused`
    say what the Chinese notebooks lack and what no English asks for."""
    cat = catalog.Catalog.read(zh_source(english))
    _builder.translate(_builder.read(english), cat)
    return cat


@dataclass
class Problem:
    kind: str  # "untranslated", "fuzzy", "new" (not in the catalog) or "gone" (its English is)
    cell: int | None  # the English cell's number, from 1
    message: str


def _short(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "(empty)")
    return line if len(line) <= 60 else line[:57] + "..."


def problems_of(english: Path) -> list[Problem]:
    """Every way the catalog of `english` (which must exist) is out of step with it, each named
    with what to do."""
    cat, where, chapter = read_catalog(english), rel(zh_source(english)), chapter_of(english)
    problems = []
    for msgid, number in messages(english):
        entry = cat.code.get(msgid) or cat.markdown.get(catalog.collapse(msgid))
        said = f"English cell {number} ({_short(msgid)!r})"
        if entry is None:
            problems.append(Problem("new", number, (
                f"{where} has no message for {said}: python scripts/translate.py update "
                f"{chapter} adds it")))
        elif entry.fuzzy:
            problems.append(Problem("fuzzy", number, (
                f"{where}: the message of {said} is fuzzy, its English changed since it was "
                f"translated (the old English is its #| msgid): revisit the Chinese, then delete "
                f"its '#, fuzzy' line")))
        elif not entry.msgstr:
            problems.append(Problem("untranslated", number,
                                    f"{where}: {said} is not translated yet"))
    for entry in cat.unused():
        what = f"the note ({entry.msgctxt}) of the line" if entry.msgctxt else "the message"
        problems.append(Problem("gone", None, (
            f"{where}: {what} {_short(entry.msgid)!r} is English no longer in {english.name}: "
            f"python scripts/translate.py update {chapter} makes it obsolete")))
    return problems


# --- how much of the prose is Chinese --------------------------------------------------------------

def prose(markdown_text: str) -> str:
    for pattern in NOT_PROSE:
        markdown_text = pattern.sub(" ", markdown_text)
    return markdown_text


def chinese_share(markdown_text: str) -> float:
    """Chinese characters over Chinese characters and Latin letters, in the prose (code spans,
    fenced code, formulas and URLs left out). Digits and punctuation count for neither."""
    text = prose(markdown_text)
    cjk, latin = len(CJK.findall(text)), len(LATIN.findall(text))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def chinese_prose(english: Path) -> str:
    """The markdown of a source's Chinese edition, every cell joined."""
    return "\n".join(markdown(c.source) for c in _builder.cells_of(english, "zh")
                     if c.kind == "markdown")


# --- writing a catalog -----------------------------------------------------------------------------

def start(chapter: str) -> None:
    for english in chapter_sources(chapter):
        target = zh_source(english)
        if target.exists():
            raise SystemExit(f"{rel(target)} exists already: python scripts/translate.py "
                             f"status shows what it needs")
        po = catalog.new_po(english.name)
        for msgid, _ in messages(english):
            po.append(polib.POEntry(msgid=msgid, msgstr=""))
        target.parent.mkdir(parents=True, exist_ok=True)
        po.save(str(target))
        print(f"wrote {rel(target)}: {len(po)} messages to translate")


def update(chapter: str) -> None:
    """The catalogs of a chapter in step with its English, as msgmerge does."""
    for english in chapter_sources(chapter):
        target = zh_source(english)
        if not target.exists():
            continue
        cat = read_catalog(english)
        po, wanted = cat.po, messages(english)
        wanted_ids = {m for m, _ in wanted}
        unused = {id(e) for e in cat.unused()}
        known = {e.msgid for e in po if not e.obsolete and not e.msgctxt}
        gone = [e for e in po if not e.obsolete and not e.msgctxt and e.msgid not in wanted_ids]
        added = fuzzy = rewrapped = 0
        for msgid, _ in wanted:
            if msgid in known:
                continue
            same = next((e for e in gone if catalog.collapse(e.msgid) == catalog.collapse(msgid)),
                        None)
            if same is not None:  # the same words, rewrapped: the Chinese stands
                same.msgid = msgid
                gone.remove(same)
                rewrapped += 1
                continue
            entry = polib.POEntry(msgid=msgid, msgstr="")
            close = difflib.get_close_matches(msgid, [e.msgid for e in gone], n=1,
                                              cutoff=SIMILAR)
            if close:
                old = next(e for e in gone if e.msgid == close[0])
                entry.msgstr, entry.previous_msgid = old.msgstr, old.msgid
                entry.flags.append("fuzzy")
                gone.remove(old)
                po.remove(old)
                fuzzy += 1
            po.append(entry)
            added += 1
        for entry in po:
            if entry in gone or (entry.msgctxt and id(entry) in unused):
                entry.obsolete = True
        order = {m: i for i, (m, _) in enumerate(wanted)}
        po[:] = sorted(po, key=lambda e: (e.obsolete, order.get(e.msgid, len(order))))
        po.save(str(target))
        print(f"{rel(target)}: {added} new messages ({fuzzy} fuzzy, with the Chinese of a close "
              f"one that is gone), {rewrapped} rewrapped, {sum(e.obsolete for e in po)} "
              "obsolete")


def status() -> None:
    translated = translated_chapters()
    print("chapter  source                        messages  untranslated  fuzzy  new  gone  "
          "Chinese prose")
    for chapter in chapters():
        for english in chapter_sources(chapter):
            if not zh_source(english).exists():
                print(f"{chapter:<8} {english.name:<29} not started")
                continue
            count = {k: 0 for k in ("untranslated", "fuzzy", "new", "gone")}
            for problem in problems_of(english):
                count[problem.kind] += 1
            print(f"{chapter:<8} {english.name:<29} {len(messages(english)):>8}  "
                  f"{count['untranslated']:>12}  {count['fuzzy']:>5}  {count['new']:>3}  "
                  f"{count['gone']:>4}  {100 * chinese_share(chinese_prose(english)):>5.0f}%")
    print(f"listed as translated in {rel(TRANSLATED)}: {', '.join(translated) or 'none'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="every chapter's state")
    for name, text in [("start", "begin a chapter's catalogs"),
                       ("update", "bring a chapter's catalogs in step with the English")]:
        commands.add_parser(name, help=text).add_argument("chapter")
    args = parser.parse_args(argv)
    if args.command == "status":
        status()
    else:
        {"start": start, "update": update}[args.command](args.chapter)


if __name__ == "__main__":
    main()
