"""README.zh-CN.md is the README for Chinese readers, written in Chinese rather than word for
word; where the two can be compared mechanically they must agree: the same commands in their code
blocks, the same chapters in the course table (the Chinese pointing at notebooks/zh/), the same
figures where the English states measured ones, the same files linked, and every link resolving."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGLISH, CHINESE = ROOT / "README.md", ROOT / "README.zh-CN.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _commands(text: str) -> list[str]:
    """Every line of the bash and python code blocks, comments left out."""
    lines = []
    for language, body in FENCE.findall(text):
        if language in ("bash", "python"):
            lines += [re.sub(r"\s+#.*$", "", line).rstrip() for line in body.splitlines()
                      if line.strip() and not line.lstrip().startswith("#")]
    return lines


def _course_rows(text: str) -> dict[str, list[str]]:
    """The course table: each row's chapter number(s) and the notebooks it names."""
    return {match.group(1): re.findall(r"`(notebooks/[^`]+\.ipynb)`", match.group(2))
            for match in re.finditer(r"^\| (\d\d[^|]*?) \|(.*)$", text, re.M)}


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _anchors(text: str) -> set[str]:
    """The anchors a repository host gives the headings (code blocks left out)."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.M)}


def _file_links(text: str) -> set[str]:
    return {link.split("#")[0] for link in LINK.findall(text)
            if not link.startswith("#") and "://" not in link}


def test_the_readmes_link_to_each_other_from_their_first_lines():
    assert "](README.zh-CN.md)" in _text(ENGLISH).splitlines()[0]
    assert "](README.md)" in _text(CHINESE).splitlines()[0]


def test_the_code_blocks_hold_the_same_commands():
    english, chinese = _commands(_text(ENGLISH)), _commands(_text(CHINESE))
    assert chinese == english, (
        "README.zh-CN.md's code blocks differ from README.md's (comments aside): only in "
        f"README.md {[c for c in english if c not in chinese]}, only in README.zh-CN.md "
        f"{[c for c in chinese if c not in english]}")
    assert "make course LANG=zh" in chinese


def test_the_course_tables_have_the_same_chapters_and_the_chinese_opens_the_zh_notebooks():
    english, chinese = _course_rows(_text(ENGLISH)), _course_rows(_text(CHINESE))
    assert list(chinese) == list(english), "the two READMEs' course tables list other chapters"
    for chapter, notebooks in english.items():
        assert notebooks, f"README.md's row {chapter} names no notebook"
        zh = [path.replace("notebooks/", "notebooks/zh/", 1) for path in notebooks]
        assert chinese[chapter] == zh, f"README.zh-CN.md's row {chapter} should name {zh}"


def test_the_figures_the_english_states_are_the_chinese_ones():
    english, chinese = _text(ENGLISH), _text(CHINESE)
    sizes = re.search(r"The engine is ([\d,]+) lines of Python in (\d+) files \(the course wing "
                      r"([\d,]+), the tools wing ([\d,]+)\)", english)
    zh_sizes = re.search(r"推理引擎本身是 (\d+) 个文件、([\d,]+) 行 Python 代码（课程侧翼 ([\d,]+) "
                         r"行，工具侧翼 ([\d,]+) 行）", chinese)
    assert sizes and zh_sizes, "a README no longer states the wings' sizes in its layout section"
    lines, files, course, tools = sizes.groups()
    assert zh_sizes.groups() == (files, lines, course, tools)
    figure = re.compile(r"\d+\.\d+|\d+ GB/s|\d+%")
    assert set(figure.findall(_section(chinese, "速度一览"))) == \
        set(figure.findall(_section(english, "Speed, in short")))


@pytest.mark.parametrize("readme", [ENGLISH, CHINESE], ids=lambda p: p.name)
def test_every_link_resolves(readme):
    text = _text(readme)
    for link in LINK.findall(text):
        if "://" in link:
            continue
        if link.startswith("#"):
            assert link[1:] in _anchors(text), f"{readme.name}: no heading for the link {link}"
        else:
            assert (ROOT / link.split("#")[0]).exists(), f"{readme.name} links to {link}, absent"


def test_both_readmes_link_the_same_files():
    """The Chinese may link a guide's Chinese twin (docs/zh/...) where the English links the
    guide."""
    english = _file_links(_text(ENGLISH)) - {"README.zh-CN.md"}
    chinese = {link.replace("docs/zh/", "docs/", 1)
               for link in _file_links(_text(CHINESE)) - {"README.md"}}
    assert chinese == english
