"""Build the course book: `python -m book` (make book) or, for the tests, fewer lessons at the
smaller sizes: `python -m book --sizes ci --lessons 04,05 --out DIR`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from . import execute, figures, sources

ROOT = sources.ROOT
CONF = Path(__file__).parent / "sphinx"


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m book", description=__doc__)
    parser.add_argument("--sizes", choices=execute.SIZES, default="full",
                        help="full (the book) or ci (the smaller runs of the tests)")
    parser.add_argument("--lessons", default="all",
                        help="comma-separated chapter numbers, e.g. 04,05 (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book",
                        help="where the pages go (OUT/html) and what is built on the way")
    parser.add_argument("--executed", type=Path, default=None,
                        help="the executed copies (default: executed/ for full sizes, "
                             "OUT/executed for ci)")
    parser.add_argument("--force", action="store_true", help="execute every lesson again")
    parser.add_argument("--cell-timeout", type=int, default=7200,
                        help="seconds one cell may run before the book stops (default 7200: a "
                             "full-size cell on a busy 2-core machine can take half an hour)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="lessons executed at once (default 1: each lesson's timings "
                             "measured without the others competing for the cores; at full "
                             "sizes the lessons run beside each other count as busy)")
    parser.add_argument("--edition", choices=("all", "en", "zh"), default="all",
                        help="build both editions (all) or one: executing the Chinese lessons "
                             "while another run executes the English ones, for example")
    parser.add_argument("--zh-root", type=Path, default=ROOT,
                        help="the folder holding notebooks/zh, exercises/zh, README.zh-CN.md")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, got {args.jobs}")
    return args


def editions(which: str, zh_root: Path = ROOT) -> list:
    """The editions `--edition` names: "all", "en" or "zh"."""
    found = [e for e in sources.editions(zh_root.resolve()) if which in ("all", e.language[:2])]
    if not found:
        raise SystemExit(f"no {which} edition under {zh_root}")
    return found


def chosen(edition, lessons: str) -> list[Path]:
    files = edition.lesson_files()
    if lessons == "all":
        return files
    wanted = [n.strip() for n in lessons.split(",") if n.strip()]
    bad = [n for n in wanted if len(n) != 2 or not n.isdigit()]
    if bad:
        raise SystemExit(f"--lessons takes two-digit chapter numbers such as 04,05; got {bad}")
    picked = [f for f in files if f.name[:2] in wanted]
    missing = sorted(set(wanted) - {f.name[:2] for f in picked})
    if missing and edition.language == "en":
        raise SystemExit(f"no lesson numbered {', '.join(missing)} in {edition.lessons}")
    return picked


def executed_copies(edition, lessons, folder: Path, sizes: str, force: bool,
                    jobs: int = 1, cell_timeout: int = 7200) -> dict:
    """The executed copy of each lesson in `folder`, executing those whose source changed."""
    stale = []
    for lesson in lessons:
        if not force and execute.is_current(lesson, folder / lesson.name, sizes):
            if execute.prose_is_current(lesson, folder / lesson.name):
                print(f"  {edition.language} {lesson.stem}: unchanged, kept "
                      f"{_shown(folder / lesson.name)}", flush=True)
            else:
                execute.refresh_prose(lesson, folder / lesson.name)
                print(f"  {edition.language} {lesson.stem}: code unchanged, its prose copied "
                      f"into {_shown(folder / lesson.name)}", flush=True)
        else:
            stale.append(lesson)
    def done(lesson, book):
        print(f"  {edition.language} {lesson.stem}: {book['seconds']} s -> "
              f"{_shown(folder / lesson.name)}", flush=True)

    def started(lesson):
        print(f"  {edition.language} {lesson.stem}: executing ({sizes} sizes)...", flush=True)

    arguments = [(lesson, folder / lesson.name, sizes, edition.language, cell_timeout)
                 for lesson in stale]
    if jobs == 1:
        for lesson, *rest in arguments:
            started(lesson)
            done(lesson, quietly(execute.execute, lesson, *rest))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            runs = {pool.submit(quietly, execute.execute, *args): args[0] for args in arguments}
            for lesson in stale:
                started(lesson)
            for run in as_completed(runs):
                done(runs[run], run.result())
    return {lesson.name: folder / lesson.name for lesson in lessons}


BUSY_TRIES = 3
BUSY_WAIT_S = 120


def quietly(run, *args):
    """`run(*args)`, tried again (after BUSY_WAIT_S) while the machine was too busy to record
    it, BUSY_TRIES times in all; then the book stops, saying what it measured."""
    for attempt in range(1, BUSY_TRIES + 1):
        try:
            return run(*args)
        except execute.Busy as busy:
            print(f"  {busy} (try {attempt} of {BUSY_TRIES}); nothing was written", flush=True)
            if attempt < BUSY_TRIES:
                time.sleep(BUSY_WAIT_S)
    raise SystemExit("book: the machine stayed busy, or the lesson's numbers kept breaking "
                     "its claims, so no copy was recorded: stop the other programs (or the "
                     "second `make book`) and run it again; a claim that a quiet machine breaks "
                     "three times is the lesson's to fix (book/claims.py names it)")


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def search_dictionary(out: Path) -> Path:
    """The glossary's Chinese words, one a line, for jieba (the Chinese search's word cutter):
    the course's terms and the other names it lists for them (投机解码 for 推测解码)."""
    path = out / "zh-search-words.txt"
    words = dict.fromkeys(word for pair in figures.glossary_terms(ROOT / "docs" / "glossary.md")
                          for word in pair if sources.CJK_CHARACTER.search(word))
    path.write_text("".join(f"{word} 100000\n" for word in words), encoding="utf-8")
    return path


def sphinx(source: Path, target: Path, settings: dict) -> None:
    env = dict(os.environ, MINILLM_BOOK_EDITION=json.dumps(settings, ensure_ascii=False))
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-j", "2",
               "-c", str(CONF), str(source), str(target)]
    subprocess.run(command, check=True, env=env)
    for template in unfilled_templates(target):
        template.unlink()


def unfilled_templates(html: Path) -> list[Path]:
    """The themes' Jinja macro files that Sphinx copies into _static as they are (their links
    read `{{ pathto(...) }}`): no page uses them, and a reader must not meet them."""
    return [p for p in (html / "_static").rglob("*.html")
            if "{{" in p.read_text(encoding="utf-8", errors="replace")]


def main(argv=None) -> int:
    args = parse(argv)
    start = time.monotonic()
    out = args.out.resolve()
    executed_root = args.executed or (ROOT / "executed" if args.sizes == "full"
                                      else out / "executed")
    found = editions(args.edition, args.zh_root)
    print(f"book: {len(found)} edition(s) ({', '.join(e.language for e in found)}), "
          f"{args.sizes} sizes", flush=True)
    layouts = {}
    for edition in found:
        folder = executed_root if edition.language == "en" else executed_root / "zh"
        copies = executed_copies(edition, chosen(edition, args.lessons), folder, args.sizes,
                                 args.force, args.jobs, args.cell_timeout)
        layouts[edition.language] = sources.lay_out(
            edition, copies, out / "src" / edition.language, twin_built=len(found) > 1)
    executed_at = time.monotonic()
    html = out / "html"
    for edition in found:
        twin = next((e for e in found if e is not edition), None)
        zh = edition.language.startswith("zh")
        settings = {"language": edition.language,
                    "title": "minillm：从零构建 LLM 推理" if zh else
                             "minillm: LLM inference, built step by step"}
        if twin is not None:
            settings["twin"] = {"root": ".." if zh else "zh", "language": twin.language,
                                "label": "English" if zh else "中文",
                                "pages": layouts[twin.language]["pages"]}
        if zh:
            settings["search_dictionary"] = str(search_dictionary(out))
        sphinx(out / "src" / edition.language, html / "zh" if zh else html, settings)
    problems = []
    for edition in found:
        pages = html / "zh" if edition.language.startswith("zh") else html
        for page, copy in layouts[edition.language]["lessons"].items():
            problems += figures.missing_figures(copy, pages / f"{page}.html")
    total = time.monotonic() - start
    print(f"book: {html / 'index.html'} ({sum(len(l['pages']) for l in layouts.values())} pages; "
          f"executing {executed_at - start:.0f} s, building {total - (executed_at - start):.0f} s, "
          f"{total:.0f} s in all)", flush=True)
    if problems:
        print("book: figures missing from pages:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
