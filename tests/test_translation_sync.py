"""The Chinese edition stays in step with the English (scripts/translate.py): each Chinese cell
carries the hash of the English cell it translates, so a changed English cell makes its
translation stale, named with the command that refreshes it; an English cell without a
translation fails too. A chapter listed as translated (lessons/zh/translated.txt) has no cell
left to translate and at least half of its prose in Chinese."""

import shutil
import subprocess
from pathlib import Path

import pytest
from script_modules import script

ROOT = Path(__file__).resolve().parents[1]
translate = script("translate")
builder = script("notebook")
ENGLISH = sorted(builder.SOURCES.glob(builder.SOURCE_GLOB))
TWINS = [p for p in ENGLISH if translate.zh_source(p).is_file()]
CHAPTERS = translate.chapters()  # "03", and "03b" for the chapter's second lesson
MIN_CHINESE_SHARE = 0.5


@pytest.mark.parametrize("english", TWINS, ids=lambda p: p.stem)
def test_each_chinese_source_translates_todays_english(english):
    problems = [p for p in translate.problems_of(english) if p.kind != "todo"]
    assert not problems, "\n".join(p.message for p in problems)


def test_every_chinese_source_has_an_english_one():
    orphans = [p.name for p in builder.ZH_SOURCES.glob("*.py")
               if not (builder.SOURCES / p.name).is_file()]
    assert not orphans, f"Chinese sources with no English source: {orphans}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_translated_chapter_is_whole_and_mostly_chinese(chapter):
    if chapter not in translate.translated_chapters():
        pytest.skip(f"chapter {chapter} is not translated yet (lessons/zh/translated.txt)")
    for english in translate.chapter_sources(chapter):
        zh = translate.zh_source(english)
        assert zh.is_file(), f"chapter {chapter} is listed as translated but {zh.name} is missing"
        todo = [p.message for p in translate.problems_of(english) if p.kind == "todo"]
        assert not todo, "\n".join(todo)
        cells = translate.read(zh)
        text = "\n".join(builder.markdown(c.source) for c in cells if c.kind == "markdown")
        share = translate.chinese_share(text)
        assert share >= MIN_CHINESE_SHARE, (
            f"{zh.name}: {100 * share:.0f}% of the prose is Chinese characters, less than "
            f"{100 * MIN_CHINESE_SHARE:.0f}% (python scripts/translate.py status)")


def test_the_translated_list_names_real_chapters():
    listed = translate.translated_chapters()
    assert "00" in listed
    assert set(listed) <= set(CHAPTERS), f"unknown chapters in translated.txt: {listed}"
    assert len(listed) == len(set(listed)), "a chapter is listed twice"


def test_the_prose_share_leaves_out_code_formulas_and_links():
    assert translate.chinese_share("预填充 `prefill_tokens_per_second` $TTFT + TPOT$") == 1.0
    assert translate.chinese_share("中文[链接](https://example.com/a_long_english_url)") == 1.0
    assert translate.chinese_share("```python\nprint('hello world')\n```\n两个") == 1.0
    assert translate.chinese_share("词元 (token)") == pytest.approx(2 / 7)


# --- proofs on a copy: what a change to the English does ------------------------------------------

@pytest.fixture
def copy(tmp_path, monkeypatch):
    """Chapter 00's English and Chinese sources in a temporary tree the script works on."""
    lessons = tmp_path / "minillm" / "course" / "lessons"
    (lessons / "zh").mkdir(parents=True)
    for english in translate.chapter_sources("00"):
        shutil.copy(english, lessons / english.name)
        shutil.copy(translate.zh_source(english), lessons / "zh" / english.name)
    monkeypatch.setattr(translate, "ROOT", tmp_path)
    monkeypatch.setattr(translate, "SOURCES", lessons)
    monkeypatch.setattr(translate, "ZH_SOURCES", lessons / "zh")
    return lessons / "00_welcome.py"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_changing_one_english_sentence_makes_its_translation_stale(copy):
    assert translate.problems_of(copy) == []
    edit(copy, "Where did the time go?", "Where did the time go, stage by stage?")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["stale"]
    message = problems[0].message
    number = problems[0].english + 1
    assert f"English cell {number} (markdown, 'The loop we wrote gives exactly" in message
    assert "lessons/zh/00_welcome.py:" in message
    assert f"python scripts/translate.py refresh 00 {number}" in message
    zh = translate.zh_source(copy)
    before = zh.read_text(encoding="utf-8").splitlines()
    translate.refresh("00", [number])
    after = zh.read_text(encoding="utf-8").splitlines()
    assert translate.problems_of(copy) == []
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 1, changed  # only the marker's hash
    assert changed[0][0].startswith("# %% [markdown] en=") and changed[0][1].startswith(
        "# %% [markdown] en=")


def test_rewrapping_an_english_paragraph_changes_nothing(copy):
    edit(copy, "The loop we wrote gives exactly the answer `generate()` gave:",
         "The loop we wrote gives exactly\n# the answer `generate()` gave:")
    assert translate.problems_of(copy) == []


def test_a_changed_code_cell_is_stale_too(copy):
    edit(copy, "max_new_tokens = 40\nnew_ids", "max_new_tokens = 30\nnew_ids")
    assert [p.kind for p in translate.problems_of(copy)] == ["stale"]


def test_a_new_english_cell_needs_a_translation_and_sync_adds_it_as_todo(copy, capsys):
    edit(copy, "# %% [markdown]\n# **Stage 4 · tokens → text.**",
         "# %% [markdown]\n# A new paragraph.\n\n# %% [markdown]\n# **Stage 4 · tokens → text.**")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["missing"]
    assert "'A new paragraph.'" in problems[0].message and "sync 00" in problems[0].message
    translate.sync("00")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["todo"]
    assert "A new paragraph." in problems[0].message
    assert "added English cell" in capsys.readouterr().out
    cells = translate.read(translate.zh_source(copy))
    assert cells[problems[0].zh].source == "# A new paragraph."
    assert cells[problems[0].zh + 1].source.startswith("# **阶段 4")


def test_a_removed_english_cell_leaves_an_orphan_that_sync_drops(copy, capsys):
    edit(copy, "# %% [markdown]\n# **Stage 4 · tokens → text.** The ids are turned back into "
               "text.\n\n", "")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["orphan"] and "阶段 4" in problems[0].message
    translate.sync("00")
    assert translate.problems_of(copy) == []
    assert "把这些 id 还原成文本" in capsys.readouterr().out  # what was dropped is shown


def test_a_marker_with_a_typo_is_refused():
    with pytest.raises(ValueError, match="line 1: 'en=12' after the cell marker"):
        builder.parse("# %% [markdown] en=12\n# text")
    with pytest.raises(ValueError, match=r"unknown cell kind \[mardown\]"):
        builder.parse("# %% [mardown]\n# text")
    cells = builder.parse("# %% [markdown] en=0123abcd todo\n# text\n# %% en=89abcdef\nx = 1")
    assert [(c.kind, c.en, c.todo, c.line) for c in cells] == [
        ("markdown", "0123abcd", True, 1), ("code", "89abcdef", False, 3)]


def test_diff_shows_what_changed_since_the_translation(copy, capsys):
    def git(*args):
        subprocess.run(["git", *args], cwd=translate.ROOT, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "then")
    edit(copy, "Where did the time go?", "Where did the time go, stage by stage?")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "now")
    translate.diff("00")
    out = capsys.readouterr().out
    assert "-# Where did the time go?" in out and "+# Where did the time go, stage by stage?" in out


# --- the built notebooks --------------------------------------------------------------------------

def test_the_chinese_notebooks_switch_the_language_first():
    cells = builder.parse("# %% [markdown]\n# # title\n\n# %%\nx = 1\n\n# %%\ny = 2")
    zh = builder.build(cells, "lesson", "zh")
    assert [c.source for c in zh.cells] == ["# title", builder.LANGUAGE_CELL, "x = 1", "y = 2"]
    en = builder.build(cells, "lesson")
    assert builder.LANGUAGE_CELL not in [c.source for c in en.cells]


def test_links_to_a_chapter_not_yet_translated_lead_to_the_english_notebook():
    translated = builder.zh_links("[00](00_welcome.ipynb)", "lesson")
    assert translated == "[00](00_welcome.ipynb)"
    missing = builder.ZH_SOURCES / "99_nothing.py"
    assert not missing.exists()
    assert builder.zh_links("see [99](99_nothing.ipynb#part)", "lesson") == \
        "see [99](../99_nothing.ipynb#part)"
