"""Keep the Chinese edition in step with the English: each Chinese cell carries the hash of the
English cell it translates (as a gettext catalog keeps each msgid), so a changed English cell is
found, named and shown. docs/translating.md is the translator's guide.

    python scripts/translate.py status            every chapter: cells to translate, stale, ...
    python scripts/translate.py start 03          lessons/zh/03_*.py from the English, all `todo`
                                                  (a second lesson is a chapter of its own: 03b)
    python scripts/translate.py diff 03           what changed in English since each stale cell
                                                  was translated (from git history)
    python scripts/translate.py refresh 03 [N..]  mark stale cells (or only the English cells
                                                  numbered N) revisited: store today's hashes
    python scripts/translate.py sync 03           add a `todo` copy of each new English cell,
                                                  drop the cells whose English cell is gone

After any of them: python scripts/notebook.py --all
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path


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
ROOT, SOURCES, ZH_SOURCES = _builder.ROOT, _builder.SOURCES, _builder.ZH_SOURCES
Cell, markdown, parse = _builder.Cell, _builder.markdown, _builder.parse
TRANSLATED = ZH_SOURCES / "translated.txt"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")
# what the prose share leaves out: fenced code, code spans, formulas, links' targets, URLs, tags
NOT_PROSE = [re.compile(p, re.S) for p in (
    r"```.*?```", r"`[^`\n]*`", r"\$\$.*?\$\$", r"\$[^$\n]+\$", r"\]\([^)]*\)",
    r"https?://\S+", r"<[^>\n]+>")]


# --- the hash and the comparison ------------------------------------------------------------------

def english_hash(cell: Cell) -> str:
    """8 hex digits of the English cell's kind and text. Markdown is hashed with its whitespace
    collapsed, so rewrapping a paragraph changes nothing; code keeps its lines."""
    if cell.kind == "markdown":
        text = " ".join(markdown(cell.source).split())
    else:
        text = "\n".join(line.rstrip() for line in cell.source.splitlines()).strip("\n")
    return hashlib.sha256(f"{cell.kind}\n{text}".encode()).hexdigest()[:8]


@dataclass
class Problem:
    kind: str  # "stale", "missing", "orphan" (its English cell is gone) or "todo"
    english: int | None  # the English cell's index
    zh: int | None  # the Chinese cell's index
    message: str


def _first_line(cell: Cell) -> str:
    lines = [line for line in (markdown(cell.source) if cell.kind == "markdown"
                               else cell.source).splitlines() if line.strip()]
    text = lines[0].strip() if lines else "(empty)"
    return text if len(text) <= 60 else text[:57] + "..."


def compare(english: list[Cell], zh: list[Cell], english_name: str, zh_name: str,
            chapter: str) -> list[Problem]:
    """Every way the Chinese cells are out of step with the English ones, each named."""
    hashes = [english_hash(c) for c in english]
    matcher = difflib.SequenceMatcher(None, hashes, [c.en for c in zh], autojunk=False)
    problems = []

    def where_en(i):
        return f"English cell {i + 1} ({english[i].kind}, {_first_line(english[i])!r})"

    def where_zh(j):
        return f"{zh_name}:{zh[j].line}"

    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs = list(zip(range(i1, i2), range(j1, j2))) if op in ("equal", "replace") else []
        for i, j in pairs:
            if zh[j].kind != english[i].kind:
                problems.append(Problem("stale", i, j, (
                    f"{where_zh(j)} is a [{zh[j].kind}] cell but translates {where_en(i)}: "
                    f"make it [{english[i].kind}]")))
            elif op == "replace":
                had = f"en={zh[j].en}" if zh[j].en else "no en=HASH"
                problems.append(Problem("stale", i, j, (
                    f"{where_zh(j)} translates an older text of {where_en(i)} ({had}, the "
                    f"English is now en={hashes[i]}): revisit the translation "
                    f"(python scripts/translate.py diff {chapter} shows what changed), then "
                    f"python scripts/translate.py refresh {chapter} {i + 1}")))
        for i in range(i1 + len(pairs), i2):
            problems.append(Problem("missing", i, None, (
                f"{where_en(i)} has no translation in {zh_name}: python scripts/translate.py "
                f"sync {chapter} adds it, marked todo")))
        for j in range(j1 + len(pairs), j2):
            problems.append(Problem("orphan", None, j, (
                f"{where_zh(j)} ({_first_line(zh[j])!r}) translates no English cell of "
                f"{english_name} (its English cell was removed or changed beyond recognition): "
                f"python scripts/translate.py sync {chapter} drops it")))
    for j, cell in enumerate(zh):
        if cell.todo:
            problems.append(Problem("todo", None, j, (
                f"{where_zh(j)} ({_first_line(cell)!r}) is marked todo: translate it, then "
                "delete the word todo from its marker")))
    return problems


# --- chapters and their files --------------------------------------------------------------------

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
    return ZH_SOURCES / english.name


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def read(path: Path) -> list[Cell]:
    return parse(path.read_text(encoding="utf-8"), rel(path))


def problems_of(english: Path) -> list[Problem]:
    """The problems of one English source's Chinese twin (which must exist)."""
    chapter = chapter_of(english)
    return compare(read(english), read(zh_source(english)), rel(english),
                   rel(zh_source(english)), chapter)


def translated_chapters() -> list[str]:
    """The chapters listed in lessons/zh/translated.txt: translated in full, so every test of the
    Chinese edition demands them."""
    if not TRANSLATED.is_file():
        return []
    lines = [line.split("#")[0].strip() for line in TRANSLATED.read_text().splitlines()]
    return [line for line in lines if line]


# --- how much of the prose is Chinese ------------------------------------------------------------

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


# --- writing a Chinese source --------------------------------------------------------------------

def marker(cell: Cell) -> str:
    parts = ["# %%"] + ([f"[{cell.kind}]"] if cell.kind != "code" else [])
    parts += [f"en={cell.en}"] + (["todo"] if cell.todo else [])
    return " ".join(parts)


def render(header: str, cells: list[Cell]) -> str:
    body = "\n\n".join(f"{marker(c)}\n{c.source}" if c.source else marker(c) for c in cells)
    return header + body + "\n"


def has_prose(cell: Cell) -> bool:
    """Whether a cell holds words to translate: markdown, or code with a comment or a string
    with a space in it."""
    if cell.kind == "markdown":
        return True
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(cell.source + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return True
    return any(t.type == tokenize.COMMENT or (t.type == tokenize.STRING and " " in t.string
                                              and LATIN.search(t.string)) for t in tokens)


def header_for(english: Path) -> str:
    return (f"# 中文版 · {english.name} 的译文。每个单元格标记里的 en=… 是它所译英文单元格的"
            "哈希；\n# 流程见 docs/translating.md。\n\n")


def start(chapter: str) -> None:
    for english in chapter_sources(chapter):
        target = zh_source(english)
        if target.exists():
            raise SystemExit(f"{rel(target)} exists already: python scripts/translate.py "
                             f"status shows what it needs")
        cells = [Cell(c.kind, c.source, english_hash(c), has_prose(c)) for c in read(english)]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(header_for(english), cells), encoding="utf-8")
        print(f"wrote {rel(target)}: {len(cells)} cells, {sum(c.todo for c in cells)} to "
              "translate (marked todo)")


def _header(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    head = []
    for line in lines:
        if line.startswith("# %%"):
            break
        head.append(line)
    return "".join(head)


def refresh(chapter: str, numbers: list[int]) -> None:
    """Store today's English hash in the stale cells (all, or those of the English cells
    numbered `numbers`): the translator has revisited them."""
    for english in chapter_sources(chapter):
        target = zh_source(english)
        if not target.exists():
            continue
        en_cells, zh_cells = read(english), read(target)
        lines = target.read_text(encoding="utf-8").splitlines()
        done = []
        for p in problems_of(english):
            if p.kind == "stale" and (not numbers or p.english + 1 in numbers):
                cell = zh_cells[p.zh]
                cell.en, cell.kind = english_hash(en_cells[p.english]), en_cells[p.english].kind
                lines[cell.line - 1] = marker(cell)
                done.append(str(p.english + 1))
        if done:
            target.write_text("\n".join(lines) + "\n", encoding="utf-8")
            print(f"{rel(target)}: refreshed the cells translating English cells "
                  f"{', '.join(done)}")


def sync(chapter: str) -> None:
    """Add a todo copy of each English cell with no translation; drop each Chinese cell whose
    English cell is gone (printed, so nothing is lost unseen)."""
    for english in chapter_sources(chapter):
        target = zh_source(english)
        if not target.exists():
            continue
        en_cells, zh_cells = read(english), read(target)
        problems = problems_of(english)
        missing = {p.english for p in problems if p.kind == "missing"}
        orphans = {p.zh for p in problems if p.kind == "orphan"}
        if not missing and not orphans:
            continue
        kept = {p.english: p.zh for p in problems if p.kind == "stale"}
        hashes = [english_hash(c) for c in en_cells]
        matcher = difflib.SequenceMatcher(None, hashes, [c.en for c in zh_cells], autojunk=False)
        for block in matcher.get_matching_blocks():
            kept.update({block.a + k: block.b + k for k in range(block.size)})
        cells = []
        for i, cell in enumerate(en_cells):
            if i in missing:
                cells.append(Cell(cell.kind, cell.source, hashes[i], has_prose(cell)))
                print(f"{rel(target)}: added English cell {i + 1} ({_first_line(cell)!r}), todo")
            elif i in kept:
                cells.append(zh_cells[kept[i]])
        for j in sorted(orphans):
            print(f"{rel(target)}: dropped line {zh_cells[j].line}, whose English cell is "
                  f"gone:\n{zh_cells[j].source}\n")
        target.write_text(render(_header(target), cells), encoding="utf-8")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def english_at(english: Path, wanted: set[str]) -> dict[str, Cell]:
    """The English cells, among older versions of the source in git history, whose hash is in
    `wanted`: hash -> cell."""
    found, versions = {}, []  # (commit, the file's path in it), newest first
    log = _git("log", "--format=commit %H", "--name-only", "--follow", "--", rel(english))
    for line in log.splitlines():
        if line.startswith("commit "):
            versions.append([line.split()[1], None])
        elif line.strip() and versions:
            versions[-1][1] = line.strip()
    for commit, path in versions:
        if not wanted - found.keys():
            break
        try:
            text = _git("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            continue
        for cell in parse(text):
            h = english_hash(cell)
            if h in wanted and h not in found:
                found[h] = cell
    return found


def diff(chapter: str) -> None:
    for english in chapter_sources(chapter):
        if not zh_source(english).exists():
            continue
        stale = [p for p in problems_of(english) if p.kind == "stale"]
        zh_cells, en_cells = read(zh_source(english)), read(english)
        old = english_at(english, {zh_cells[p.zh].en for p in stale if zh_cells[p.zh].en})
        for p in stale:
            cell, now = zh_cells[p.zh], en_cells[p.english]
            print(f"== English cell {p.english + 1}, translated at "
                  f"{rel(zh_source(english))}:{cell.line}")
            before = old.get(cell.en)
            if before is None:
                print(f"(no version of {rel(english)} in git history has en={cell.en}; the "
                      f"English cell now:)\n{now.source}\n")
                continue
            sys.stdout.writelines(difflib.unified_diff(
                before.source.splitlines(keepends=True), now.source.splitlines(keepends=True),
                "English then", "English now"))
            print()


def status() -> None:
    translated = translated_chapters()
    print("chapter  source                        cells  todo  stale  missing  orphan  "
          "Chinese prose")
    for chapter in chapters():
        for english in chapter_sources(chapter):
            target = zh_source(english)
            if not target.exists():
                print(f"{chapter:<8} {english.name:<29} not started")
                continue
            problems = problems_of(english)
            count = {k: sum(p.kind == k for p in problems)
                     for k in ("todo", "stale", "missing", "orphan")}
            cells = read(target)
            text = "\n".join(markdown(c.source) for c in cells if c.kind == "markdown")
            print(f"{chapter:<8} {english.name:<29} {len(cells):>5}  {count['todo']:>4}  "
                  f"{count['stale']:>5}  {count['missing']:>7}  {count['orphan']:>6}  "
                  f"{100 * chinese_share(text):>5.0f}%")
    print(f"listed as translated in {rel(TRANSLATED)}: {', '.join(translated) or 'none'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="every chapter's state")
    for name, text in [("start", "begin a chapter's translation"),
                       ("diff", "what changed in English since each stale cell's translation"),
                       ("sync", "add new English cells (todo), drop removed ones")]:
        commands.add_parser(name, help=text).add_argument("chapter")
    refresh_parser = commands.add_parser("refresh", help="mark stale cells revisited")
    refresh_parser.add_argument("chapter")
    refresh_parser.add_argument("cells", nargs="*", type=int,
                                help="English cell numbers, as the tests name them (default: all "
                                     "stale cells)")
    args = parser.parse_args(argv)
    if args.command == "status":
        status()
    elif args.command == "refresh":
        refresh(args.chapter, args.cells)
    else:
        {"start": start, "diff": diff, "sync": sync}[args.command](args.chapter)


if __name__ == "__main__":
    main()
