"""docs/glossary.md is where every chapter takes its terms from: each "English (中文)" pair in an
English lesson or exercise, and each "中文（English）" pair in the Chinese edition and the checkers'
messages, is in the glossary with the same Chinese; each glossary term is introduced so in the
chapter it names (in both editions); the words the glossary rules out appear nowhere in the
course, and the variants it lists ("also seen as") only right after the course's own term."""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from script_modules import chinese_source, script

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
SOURCES = ROOT / "lessons"
LESSONS = sorted(p for p in SOURCES.glob("[0-9][0-9]*_*.py") if not p.stem.endswith("_exercise"))
EXERCISES = sorted(SOURCES.glob("[0-9][0-9]*_*_exercise.py"))
# the Chinese edition of each source that has a catalog, named lessons/zh/NN_name.py (text_of)
ZH_SOURCES = sorted(SOURCES / "zh" / p.name for p in SOURCES.glob("[0-9][0-9]*_*.py")
                    if (SOURCES / "zh" / f"{p.stem}.po").is_file())
MESSAGES = sorted((ROOT / "minillm" / "course").glob("checks/*.py")) + sorted(
    (ROOT / "minillm" / "course").glob("widgets/*.py"))
# the Chinese README and guides (docs/zh/) take their terms from the glossary too
ZH_DOCS = [ROOT / "README.zh-CN.md"] + sorted((ROOT / "docs" / "zh").glob("*.md"))
EVERYTHING = LESSONS + EXERCISES + ZH_SOURCES + MESSAGES + ZH_DOCS
CJK = r"[\u4e00-\u9fff]"
# a parenthesis holding Chinese, after a space (not a call such as encode("你好")), no quotes
PAIR = re.compile(r"(?<=\s)\(([^()\"']*" + CJK + r"[^()\"']*)\)")
# the Chinese edition's pair: a full-width parenthesis whose text starts with English words
ZH_PAIR = re.compile(r"（([A-Za-z][A-Za-z0-9 \-/]*)(?:[，,][^（）]*)?）")
WIDE = r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
VARIANT_WINDOW = 40  # characters after the course's term in which its variant may be named


@dataclass
class Term:
    english: list[str]  # every English form, lower case
    chinese: str
    chapter: str


def read_glossary():
    """(terms, the words ruled out -> the term to use, the variants also seen -> the term)."""
    terms, avoid, variants, section = [], {}, {}, "terms"
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = ("avoid" if "Not these" in line else "variants" if "Also seen" in line
                       else section)
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("English", "not", "also seen as"):
            continue
        if section == "terms":
            assert len(cells) == 4, f"a glossary row needs 4 cells: {line}"
            terms.append(Term([e.strip().lower() for e in cells[0].split(" / ")], cells[1],
                              cells[3]))
        else:
            (avoid if section == "avoid" else variants)[cells[0]] = cells[1]
    return terms, avoid, variants


def text_of(path: Path) -> str:
    """A file's text; of a Chinese source (lessons/zh/NN_name.py), the Chinese edition its
    catalog makes of the English source."""
    if path in ZH_SOURCES:
        return chinese_source(SOURCES / path.name)
    return path.read_text(encoding="utf-8")


def prose(path: Path) -> str:
    """A source as one text, its markdown (and comment) lines joined into paragraphs; a line
    break between two Chinese characters joins them without a space."""
    text = re.sub(r"\n[ ]*#[ ]?", " ", text_of(path))
    return re.sub(f"(?<={WIDE}) (?={WIDE})", "", text)


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


def zh_pairs(text: str):
    """(the English of a "中文（English）" pair, lower case; the text before it, without
    markup)."""
    for match in ZH_PAIR.finditer(text):
        before = re.sub(r"[*`]", "", text[max(0, match.start() - 100):match.start()]).rstrip()
        yield match.group(1).strip().lower(), before


def zh_term_for(english: str, terms):
    return next((t for t in terms for form in t.english
                 if english in (form, form + "s", form + "es")), None)


def translated() -> list[str]:
    return script("translate").translated_chapters()


def test_the_glossary_is_well_formed():
    terms, avoid, variants = read_glossary()
    chapters = {p.name[:2] for p in LESSONS}
    forms = [f for t in terms for f in t.english]
    assert len(terms) >= 80
    assert len(forms) == len(set(forms)), "an English form is listed twice"
    assert len({t.chinese for t in terms}) == len(terms), "a Chinese name is listed twice"
    assert all(t.chapter in chapters for t in terms), "a term names a chapter that does not exist"
    assert set(avoid.values()) <= {t.chinese for t in terms} | {"延迟"}
    assert set(variants.values()) <= {t.chinese for t in terms} | {"延迟"}
    assert {"投机解码", "访存密集型", "时延", "贪心搜索"} <= set(variants)
    # the words Chinese interviews use every day are variants to name, not words ruled out
    assert {"计算密集型": "计算受限", "访存受限": "带宽受限", "PD 分离": "预填充/解码分离",
            "首 token 时延": "首个词元生成时间", "首字延迟": "首个词元生成时间"}.items() \
        <= variants.items()
    assert not set(avoid) & set(variants), "a word is both ruled out and a variant"
    assert not any(word in variant for word in avoid for variant in variants), \
        "a variant contains a word the glossary rules out"


@pytest.mark.parametrize("path", LESSONS + EXERCISES, ids=lambda p: p.stem)
def test_every_english_chinese_pair_is_the_glossarys(path):
    """In a lesson every pair is a glossary term; an exercise may also name other things so
    (a task's heading), but a glossary term always with the glossary's Chinese."""
    terms, _, _ = read_glossary()
    problems = []
    for lesson in [path]:
        for before, chinese in pairs(prose(lesson)):
            term = term_for(before, terms)
            if term is None and path in EXERCISES:
                continue
            if term is None:
                problems.append(f"{lesson.name}: '…{before[-40:]} ({chinese})' is not a "
                                f"glossary term")
            elif term.chinese != chinese:
                problems.append(f"{lesson.name}: '{term.english[0]}' is '{term.chinese}' in the "
                                f"glossary, '{chinese}' here")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", ZH_SOURCES + MESSAGES + ZH_DOCS,
                         ids=lambda p: p.parent.name + "/" + p.stem)
def test_every_chinese_english_pair_is_the_glossarys(path):
    terms, _, _ = read_glossary()
    problems = []
    for english, before in zh_pairs(prose(path)):
        term = zh_term_for(english, terms)
        if term is not None and not before.endswith(term.chinese):
            problems.append(f"{path.name}: '{english}' is '{term.chinese}' in the glossary: "
                            f"'…{before[-20:]}（{english}）'")
    assert not problems, "\n".join(problems)


def test_each_term_is_introduced_in_its_chapter():
    terms, _, _ = read_glossary()
    introduced = {}
    for lesson in LESSONS:
        for before, chinese in pairs(prose(lesson)):
            term = term_for(before, terms)
            if term is not None and term.chinese == chinese:
                introduced.setdefault(term.english[0], set()).add(lesson.name[:2])
    missing = [f"{t.english[0]} ({t.chinese}): not introduced in chapter {t.chapter}"
               for t in terms if t.chapter not in introduced.get(t.english[0], set())]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("chapter", sorted({p.name[:2] for p in LESSONS}))
def test_each_term_is_introduced_in_its_chapter_of_the_chinese_edition(chapter):
    if chapter not in translated():
        pytest.skip(f"chapter {chapter} is not translated yet (lessons/zh/translated.txt)")
    terms, _, _ = read_glossary()
    lesson = SOURCES / "zh" / next(p.name for p in LESSONS if p.name.startswith(chapter))
    assert lesson in ZH_SOURCES, (f"chapter {chapter} is listed as translated but has no "
                                  f"{lesson.stem}.po")
    # the chapter's lessons in Chinese: its lesson, and its second lesson (03b) where translated
    lessons = [SOURCES / "zh" / p.name for p in LESSONS
               if p.name[:2] == chapter and SOURCES / "zh" / p.name in ZH_SOURCES]
    introduced = {zh_term_for(english, terms).english[0]
                  for zh in lessons for english, before in zh_pairs(prose(zh))
                  if zh_term_for(english, terms) is not None
                  and before.endswith(zh_term_for(english, terms).chinese)}
    missing = [f"{t.chinese}（{t.english[0]}）: not introduced in "
               f"{' or '.join(zh.name for zh in lessons)}" for t in terms
               if t.chapter == chapter and t.english[0] not in introduced]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("path", EVERYTHING, ids=lambda p: p.parent.name + "/" + p.stem)
def test_the_words_the_glossary_rules_out_are_nowhere(path):
    _, avoid, _ = read_glossary()
    text = text_of(path)
    found = [f"{path.name}: '{word}' (use '{use}')" for word, use in avoid.items()
             if word in text]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", EVERYTHING, ids=lambda p: p.parent.name + "/" + p.stem)
def test_a_variant_is_named_once_right_after_the_courses_term(path):
    _, _, variants = read_glossary()
    text = prose(path)
    problems = []
    for variant, term in variants.items():
        places = variant_places(variant, text, variants)
        if len(places) > 1:
            problems.append(f"{path.name}: '{variant}' appears {len(places)} times; name it once, "
                            f"after '{term}', and use '{term}' elsewhere")
        for at in places:
            if term not in text[max(0, at - VARIANT_WINDOW):at]:
                problems.append(f"{path.name}: '{variant}' without '{term}' in the "
                                f"{VARIANT_WINDOW} characters before it: "
                                f"'…{text[max(0, at - 30):at + len(variant)]}'")
    assert not problems, "\n".join(problems)


def _places(word: str, text: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(word), text)]


def variant_places(variant: str, text: str, variants) -> list[int]:
    """Where `variant` stands in `text` on its own: an occurrence inside a longer variant (时延 in
    首 token 时延) is that variant's, not this one's."""
    inside = {at + offset for longer in variants if longer != variant and variant in longer
              for at in _places(longer, text) for offset in _places(variant, longer)}
    return [at for at in _places(variant, text) if at not in inside]


def test_a_variant_inside_a_longer_variant_counts_as_the_longer_one():
    """时延 is a variant of 延迟, and also part of 首 token 时延, TTFT's variant: named after
    首个词元生成时间, it is that one, not a stray 时延."""
    _, _, variants = read_glossary()
    text = "首个词元生成时间（time to first token，TTFT；也常说首 token 时延）"
    assert variant_places("首 token 时延", text, variants) == [text.index("首 token")]
    assert variant_places("时延", text, variants) == []
    assert variant_places("时延", text + "，时延", variants) == [len(text) + 1]


def test_the_chinese_pairs_are_read_with_their_english_and_what_comes_before():
    text = "存进 KV 缓存（KV cache），再算**首个词元生成时间**（time to first token，TTFT）（见下）"
    assert list(zh_pairs(text)) == [("kv cache", "存进 KV 缓存"),
                                    ("time to first token", "存进 KV 缓存（KV cache），再算首个词元生成时间")]
    terms = [Term(["token"], "词元", "01")]
    assert zh_term_for("tokens", terms).chinese == "词元"
    assert zh_term_for("token budget", terms) is None


def test_the_matcher_takes_the_longest_form_at_a_word_boundary():
    terms = [Term(["bpe"], "字节对编码", "01"), Term(["byte-level bpe"], "字节级字节对编码", "01"),
             Term(["rank"], "进程编号", "09")]
    assert term_for("a byte-level bpe", terms).chinese == "字节级字节对编码"
    assert term_for("the ranks", terms).chinese == "进程编号"
    assert term_for("the cranks", terms) is None
    assert list(pairs("a **token** (词元, a piece) and (no Chinese)")) == [("a token", "词元")]
