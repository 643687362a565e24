"""Lay out one edition of the book as a Sphinx source folder: the front page (the README's
chapter table), one page per executed lesson, the exercises (tasks and checks, unexecuted: no
solutions), and the guides in docs/. Pages have the same names in every edition, so that the
language switch links each page to its twin."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LESSON_NAME = re.compile(r"^\d\d[a-z]?_\w+\.ipynb$")  # 03b_long_context: a second lesson
GUIDE_ORDER = ["architecture", "glossary", "server", "instructor", "benchmarks", "book"]
WORDS = {
    "en": {"chapters": "Chapters", "exercises": "Exercises", "guides": "Guides",
           "exercise": "exercises",
           "exercise_link": "The exercises of this chapter: [{title}](../exercises/{name})",
           "intro": "Every lesson below ran on the real model; its page shows what it printed "
                    "and drew, and on which machine. The exercises are the tasks with their "
                    "checks, without the solutions; the guides follow.",
           "english_only": ""},
    "zh": {"chapters": "章节", "exercises": "练习", "guides": "指南", "exercise": "练习",
           "exercise_link": "本章练习：[{title}](../exercises/{name})",
           "intro": "下面每一课都在真实模型上运行过；每页显示它打印和绘制的内容，以及在哪台机器上测得。"
                    "练习页只有题目和检查，没有答案；其后是各篇指南。",
           "english_only": "（英文）",
           "english_only_note": "本指南尚无中文版，下面是英文原文。"},
}


@dataclass
class Edition:
    """Where one edition's sources are: `language` "en" or "zh"."""
    language: str
    lessons: Path            # the clean lesson notebooks
    exercises: Path
    readme: Path
    guides: list[Path] = field(default_factory=list)

    @property
    def words(self) -> dict:
        return WORDS["zh" if self.language.startswith("zh") else "en"]

    def english_only(self, guide: Path) -> bool:
        """Whether `guide` is shown in this edition in English, having no translation."""
        return self.language.startswith("zh") and guide.parent.name != "zh"

    def lesson_files(self) -> list[Path]:
        return sorted(p for p in self.lessons.glob("*.ipynb") if LESSON_NAME.match(p.name))


def editions(zh_root: Path = ROOT) -> list[Edition]:
    """English always; Chinese when `zh_root` has notebooks/zh/ with lessons in it."""
    en = Edition("en", ROOT / "notebooks", ROOT / "exercises", ROOT / "README.md",
                 guides(ROOT / "docs"))
    found = [en]
    zh_lessons = zh_root / "notebooks" / "zh"
    if zh_lessons.is_dir() and any(LESSON_NAME.match(p.name) for p in zh_lessons.iterdir()):
        readme = zh_root / "README.zh-CN.md"
        zh_guides = guides(zh_root / "docs" / "zh")
        names = {p.stem for p in zh_guides}
        found.append(Edition("zh_CN", zh_lessons, zh_root / "exercises" / "zh",
                             readme if readme.is_file() else en.readme,
                             zh_guides + [g for g in en.guides if g.stem not in names]))
    return found


def guides(folder: Path) -> list[Path]:
    found = {p.stem: p for p in folder.glob("*.md")} if folder.is_dir() else {}
    order = [n for n in GUIDE_ORDER if n in found] + sorted(set(found) - set(GUIDE_ORDER))
    return [found[n] for n in order]


def title(path: Path) -> str:
    """A page's first heading (a notebook's first markdown heading)."""
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                         if c.cell_type == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    match = re.search(r"^#\s+(.+)$", text, re.M)
    return match.group(1).strip() if match else path.stem


def chapter_table(readme: str, lessons: set[str], exercises: set[str],
                  exercise_word: str) -> str:
    """The README's section that holds the chapter table, its lesson and exercise names turned
    into links to their pages (a lesson left out of this build stays plain text)."""
    sections = re.split(r"(?m)^(?=## )", readme)
    section = next((s for s in sections if re.search(r"notebooks/(zh/)?\d\d_\w+\.ipynb", s)), "")

    def link(match):
        folder, name = match.group(1), match.group(3)
        present = lessons if folder == "notebooks" else exercises
        if name not in present:
            return match.group(0)
        page = f"[]({folder}/{name})"  # MyST writes the page's title
        if folder == "notebooks" and name in exercises:
            page += f" · [{exercise_word}](exercises/{name})"
        return page

    return re.sub(r"`(notebooks|exercises)/(zh/)?(\d\d[a-z]?_\w+\.ipynb)`", link, section)


def front_page(edition: Edition, lessons: list[str], exercises: list[str],
               guide_pages: list[str]) -> str:
    """The front page; `guide_pages` are toctree entries ("docs/glossary.md", or
    "Title <docs/glossary>")."""
    readme = edition.readme.read_text(encoding="utf-8")
    heading = re.search(r"^# .+$", readme, re.M)
    w = edition.words
    parts = [heading.group(0) if heading else "# minillm", "", w["intro"], "",
             chapter_table(readme, set(lessons), set(exercises), w["exercise"])]
    for caption, pages in ((w["chapters"], [f"notebooks/{n}" for n in lessons]),
                           (w["exercises"], [f"exercises/{n}" for n in exercises]),
                           (w["guides"], guide_pages)):
        if pages:
            entries = "\n".join(p.removesuffix(".ipynb").removesuffix(".md") for p in pages)
            parts += ["", "```{toctree}", ":hidden:", f":caption: {caption}", "", entries, "```"]
    return "\n".join(parts) + "\n"


# Chinese characters and full-width punctuation: a line break between two of them is a space in
# HTML, which Chinese text does not have
CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
CJK_CHARACTER = re.compile(f"[{CJK}]")
CJK_BREAK = re.compile(f"(?<=[{CJK}])[ \t]*\n[ \t]*(?=[{CJK}])")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)


def join_cjk_lines(text: str) -> str:
    """`text` (Markdown) with each line break between two Chinese characters removed, outside
    fenced code: the source wraps at 100 columns, and a browser shows such a break as a space."""
    pieces, last = [], 0
    for fence in FENCE.finditer(text):
        pieces += [CJK_BREAK.sub("", text[last:fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join(pieces + [CJK_BREAK.sub("", text[last:])])


# a guide's link to its twin in the other edition, as written for reading the repository:
# docs/instructor.md -> zh/instructor.md, docs/zh/instructor.md -> ../instructor.md
TWIN_LINK = re.compile(r"\[([^\]]+)\]\((zh/|\.\./)([\w-]+)\.md\)")


def guide_page(edition: Edition, guide: Path, twin_built: bool) -> str:
    """A guide's Markdown as its book page: Chinese line breaks joined, the link to its twin
    pointed at the twin's page (or left as text where the other edition is not built), and in
    the Chinese edition a guide not yet translated says that it is in English."""
    zh = edition.language.startswith("zh")

    def twin(match):
        text, folder, name = match.groups()
        if not twin_built or (folder == "zh/") == zh:
            return text
        href = f"../../docs/{name}.html" if zh else f"../zh/docs/{name}.html"
        return f'<a href="{href}">{text}</a>'

    text = TWIN_LINK.sub(twin, join_cjk_lines(guide.read_text(encoding="utf-8")))
    if edition.english_only(guide):
        note = f"\n\n:::{{note}}\n{edition.words['english_only_note']}\n:::\n"
        text = re.sub(r"^(# .+)$", lambda m: m.group(1) + note, text, count=1, flags=re.M)
    return text


def _joined_markdown(nb):
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = join_cjk_lines(cell.source)
    return nb


def lay_out(edition: Edition, executed: dict[str, Path], target: Path,
            twin_built: bool = True) -> dict:
    """Write the edition's source folder at `target`: `executed` maps a lesson's file name to its
    executed copy; `twin_built`, whether the other edition is built beside it. Returns
    {"pages": [page names], "lessons": {page: executed copy}}."""
    if target.exists():
        shutil.rmtree(target)
    (target / "notebooks").mkdir(parents=True)
    (target / "exercises").mkdir()
    (target / "docs").mkdir()
    exercise_names = sorted(p.name for p in edition.exercises.glob("*.ipynb")
                            if LESSON_NAME.match(p.name)) if edition.exercises.is_dir() else []
    exercise_names = [n for n in exercise_names if n in executed]
    for name in exercise_names:
        nbformat.write(_joined_markdown(nbformat.read(edition.exercises / name, as_version=4)),
                       target / "exercises" / name)
    for name, copy in executed.items():
        nb = _joined_markdown(nbformat.read(copy, as_version=4))
        if name in exercise_names:
            text = edition.words["exercise_link"].format(
                title=title(edition.exercises / name), name=name)
            cell = nbformat.v4.new_markdown_cell(text)
            cell["id"] = "book-exercise-link"
            nb.cells.append(cell)
        nbformat.write(nb, target / "notebooks" / name)
    guide_pages, guide_entries = [], []
    for guide in edition.guides:
        (target / "docs" / guide.name).write_text(guide_page(edition, guide, twin_built),
                                                  encoding="utf-8")
        guide_pages.append(f"docs/{guide.name}")
        guide_entries.append(f"{title(guide)}{edition.words['english_only']} <docs/{guide.stem}>"
                             if edition.english_only(guide) else f"docs/{guide.name}")
    lessons = sorted(executed)
    (target / "index.md").write_text(
        join_cjk_lines(front_page(edition, lessons, exercise_names, guide_entries)),
        encoding="utf-8")
    pages = (["index"] + [f"notebooks/{n[:-6]}" for n in lessons]
             + [f"exercises/{n[:-6]}" for n in exercise_names]
             + [p.removesuffix(".md") for p in guide_pages])
    return {"pages": pages, "lessons": {f"notebooks/{n[:-6]}": executed[n] for n in lessons}}
