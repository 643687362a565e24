"""docs/glossary.md is where every chapter takes its terms from: each "English (中文)" pair in a
lesson is in the glossary with the same Chinese, each glossary term is introduced so in the
chapter it names, and the words the glossary rules out appear in no lesson."""

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
LESSONS = sorted(p for p in (ROOT / "minillm" / "course" / "lessons").glob("[0-9][0-9]*_*.py")
                 if not p.stem.endswith("_exercise"))
CJK = r"[\u4e00-\u9fff]"
# a parenthesis holding Chinese, after a space (not a call such as encode("你好")), no quotes
PAIR = re.compile(r"(?<=\s)\(([^()\"']*" + CJK + r"[^()\"']*)\)")


@dataclass
class Term:
    english: list[str]  # every English form, lower case
    chinese: str
    chapter: str


def read_glossary():
    terms, avoid, section = [], {}, "terms"
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = "avoid" if "Not these" in line else section
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("English", "not"):
            continue
        if section == "terms":
            assert len(cells) == 4, f"a glossary row needs 4 cells: {line}"
            terms.append(Term([e.strip().lower() for e in cells[0].split(" / ")], cells[1],
                              cells[3]))
        else:
            avoid[cells[0]] = cells[1]
    return terms, avoid


def prose(path: Path) -> str:
    """A lesson source as one text, its markdown lines joined into paragraphs."""
    return re.sub(r"\n#[ ]?", " ", path.read_text(encoding="utf-8"))


def pairs(text: str):
    """(the text before the parenthesis, lower case, without markup; the Chinese name)."""
    for match in PAIR.finditer(text):
        chinese = re.split(r"[,，]", match.group(1))[0].strip()
        before = re.sub(r"[*`]", "", text[max(0, match.start() - 100):match.start()]).rstrip()
        if re.search(CJK, chinese) and re.search(r"[A-Za-z0-9]$", before):  # not "× (输出…)"
            yield before.lower(), chinese


def term_for(before: str, terms):
    """The glossary term whose English form (or its plural) ends `before` at a word boundary;
    the longest such form wins."""
    best, length = None, 0
    for term in terms:
        for form in term.english:
            for ending in (form, form + "s", form + "es"):
                if before.endswith(ending) and len(ending) > length:
                    start = len(before) - len(ending)
                    if start == 0 or not before[start - 1].isalnum():
                        best, length = term, len(ending)
    return best


def test_the_glossary_is_well_formed():
    terms, avoid = read_glossary()
    chapters = {p.name[:2] for p in LESSONS}
    forms = [f for t in terms for f in t.english]
    assert len(terms) >= 80
    assert len(forms) == len(set(forms)), "an English form is listed twice"
    assert len({t.chinese for t in terms}) == len(terms), "a Chinese name is listed twice"
    assert all(t.chapter in chapters for t in terms), "a term names a chapter that does not exist"
    assert set(avoid.values()) <= {t.chinese for t in terms} | {"延迟"}


def test_every_english_chinese_pair_in_a_lesson_is_the_glossarys():
    terms, _ = read_glossary()
    problems = []
    for lesson in LESSONS:
        for before, chinese in pairs(prose(lesson)):
            term = term_for(before, terms)
            if term is None:
                problems.append(f"{lesson.name}: '…{before[-40:]} ({chinese})' is not a "
                                f"glossary term")
            elif term.chinese != chinese:
                problems.append(f"{lesson.name}: '{term.english[0]}' is '{term.chinese}' in the "
                                f"glossary, '{chinese}' here")
    assert not problems, "\n".join(problems)


def test_each_term_is_introduced_in_its_chapter():
    terms, _ = read_glossary()
    introduced = {}
    for lesson in LESSONS:
        for before, chinese in pairs(prose(lesson)):
            term = term_for(before, terms)
            if term is not None and term.chinese == chinese:
                introduced.setdefault(term.english[0], set()).add(lesson.name[:2])
    missing = [f"{t.english[0]} ({t.chinese}): not introduced in chapter {t.chapter}"
               for t in terms if t.chapter not in introduced.get(t.english[0], set())]
    assert not missing, "\n".join(missing)


def test_the_words_the_glossary_rules_out_are_in_no_lesson():
    _, avoid = read_glossary()
    found = [f"{lesson.name}: '{word}' (use '{use}')" for lesson in LESSONS
             for word, use in avoid.items() if word in lesson.read_text(encoding="utf-8")]
    assert not found, "\n".join(found)


def test_the_matcher_takes_the_longest_form_at_a_word_boundary():
    terms = [Term(["bpe"], "字节对编码", "01"), Term(["byte-level bpe"], "字节级字节对编码", "01"),
             Term(["rank"], "进程编号", "09")]
    assert term_for("a byte-level bpe", terms).chinese == "字节级字节对编码"
    assert term_for("the ranks", terms).chinese == "进程编号"
    assert term_for("the cranks", terms) is None
    assert list(pairs("a **token** (词元, a piece) and (no Chinese)")) == [("a token", "词元")]
