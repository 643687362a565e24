"""The Chinese edition is a gettext catalog per English source (lessons/zh/NN_name.po, filled in by
scripts/notebook.py, kept in step by scripts/translate.py): a changed English message makes its
translation fuzzy, named with what to do; an English message with no entry, and an entry whose
English is gone, fail too. An edit to the English code needs no edit on the Chinese side. A
chapter listed as translated (lessons/zh/translated.txt) has nothing left to translate and at
least half of its prose in Chinese."""

import shutil
from pathlib import Path

import nbformat
import polib
import pytest
from script_modules import script

ROOT = Path(__file__).resolve().parents[1]
translate = script("translate")
builder = script("notebook")
catalog = script("catalog")
ENGLISH = sorted(builder.SOURCES.glob(builder.SOURCE_GLOB))
TWINS = [p for p in ENGLISH if translate.zh_source(p).is_file()]
CHAPTERS = translate.chapters()  # "03", and "03b" for the chapter's second lesson
MIN_CHINESE_SHARE = 0.5


@pytest.mark.parametrize("english", TWINS, ids=lambda p: p.stem)
def test_each_catalog_translates_todays_english(english):
    problems = [p for p in translate.problems_of(english) if p.kind != "untranslated"]
    assert not problems, "\n".join(p.message for p in problems)


def test_every_catalog_has_an_english_source():
    orphans = [p.name for p in builder.ZH_CATALOGS.glob("*.po")
               if not (builder.SOURCES / f"{p.stem}.py").is_file()]
    assert not orphans, f"catalogs with no English source: {orphans}"
    assert not list(builder.ZH_CATALOGS.glob("*.py")), "a Chinese copy of a source: the Chinese " \
        "edition is the catalogs (docs/translating.md)"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_translated_chapter_is_whole_and_mostly_chinese(chapter):
    if chapter not in translate.translated_chapters():
        pytest.skip(f"chapter {chapter} is not translated yet (lessons/zh/translated.txt)")
    for english in translate.chapter_sources(chapter):
        zh = translate.zh_source(english)
        assert zh.is_file(), f"chapter {chapter} is listed as translated but {zh.name} is missing"
        left = [p.message for p in translate.problems_of(english)]
        assert not left, "\n".join(left)
        share = translate.chinese_share(translate.chinese_prose(english))
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


# --- what a catalog's messages are -----------------------------------------------------------------

def test_a_code_cell_gives_its_strings_and_comments_and_keeps_its_code():
    source = ('x = 1  # one\n'
              'print("a, b",\n'
              '      "c")  # why\n'
              '# first line\n'
              '# second line\n'
              '\n'
              '# after a blank line\n'
              'y = "-" * 40 + f"{x:.2f}"')
    assert catalog.code_messages(source) == [
        "# one", '"a, b"', '"c"', "# why", "# first line\n# second line", "# after a blank line"]


def test_a_string_joined_over_lines_is_one_message_without_its_indentation():
    source = 'def f():\n    print("one "\n          "two")'
    assert catalog.code_messages(source) == ['"one "\n"two"']
    po = catalog.new_po("x.py")
    po.append(polib.POEntry(msgid='"one "\n"two"', msgstr='"一"\n"二"'))
    filled = catalog.Catalog.of(po).code_cell(source)
    assert filled == 'def f():\n    print("一"\n          "二")'


def test_a_filled_cell_keeps_the_english_code_and_takes_the_chinese_words():
    po = catalog.new_po("x.py")
    po.append(polib.POEntry(msgid="# the answer", msgstr="# 答案"))
    po.append(polib.POEntry(msgid='"ask"', msgstr='"ask"'))
    po.append(polib.POEntry(msgctxt=catalog.NOTE_BEFORE, msgid='q = "ask"',
                            msgstr="# 问题的意思是“问”"))
    po.append(polib.POEntry(msgctxt=catalog.NOTE_AFTER, msgid="y = x", msgstr="# 注"))
    cat = catalog.Catalog.of(po)
    source = 'if True:\n    q = "ask"\nx = 41 + 1  # the answer\ny = x'
    assert cat.code_cell(source) == (
        'if True:\n    # 问题的意思是“问”\n    q = "ask"\nx = 41 + 1  # 答案\ny = x  # 注')
    assert cat.missing == [] and cat.unused() == []


def test_a_fuzzy_or_empty_translation_leaves_the_english():
    po = catalog.new_po("x.py")
    po.append(polib.POEntry(msgid='"hello"', msgstr='"你好"', flags=["fuzzy"]))
    po.append(polib.POEntry(msgid="# empty", msgstr=""))
    cat = catalog.Catalog.of(po)
    assert cat.code_cell('print("hello")  # empty') == 'print("hello")  # empty'
    assert cat.missing == ['"hello"', "# empty"]


# --- proofs on a copy: what a change to the English does -------------------------------------------

@pytest.fixture
def copy(tmp_path, monkeypatch):
    """Chapter 00's English sources and catalogs in a temporary tree the scripts work on."""
    lessons = tmp_path / "lessons"
    (lessons / "zh").mkdir(parents=True)
    for english in translate.chapter_sources("00"):
        shutil.copy(english, lessons / english.name)
        shutil.copy(translate.zh_source(english), lessons / "zh" / translate.zh_source(english).name)
    for module in (translate, builder):
        monkeypatch.setattr(module, "ROOT", tmp_path)
        monkeypatch.setattr(module, "SOURCES", lessons)
        monkeypatch.setattr(module, "ZH_CATALOGS", lessons / "zh")
    return lessons / "00_welcome.py"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def chinese_cell(english: Path, containing: str) -> str:
    return next(c.source for c in builder.cells_of(english, "zh") if containing in c.source)


def test_an_edit_to_the_english_code_needs_no_edit_on_the_chinese_side(copy):
    assert translate.problems_of(copy) == []
    edit(copy, "max_new_tokens = 40\nnew_ids", "max_new_tokens = 30\nnew_ids")
    edit(copy, 'messages = [{"role": "user", "content": "What is the capital of France?"}]',
         'messages = [{"role": "user", "content": "What is the capital of France?"}]\n'
         'messages = messages * 1')
    assert translate.problems_of(copy) == []
    assert "max_new_tokens = 30" in chinese_cell(copy, "new_ids")
    cell = chinese_cell(copy, "messages * 1")
    assert "# 问题的意思是“法国的首都是哪里？”" in cell  # the note stays with its line


def test_a_changed_english_sentence_is_new_and_update_makes_it_fuzzy(copy, capsys):
    edit(copy, "Where did the time go?", "Where did the time go, stage by stage?")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["new", "gone"]
    assert "English cell" in problems[0].message and "'The loop we wrote gives exactly" in \
        problems[0].message and "translate.py update 00" in problems[0].message
    assert "lessons/zh/00_welcome.po" in problems[0].message
    translate.update("00")
    assert "1 new messages (1 fuzzy" in capsys.readouterr().out
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["fuzzy"]
    assert "delete its '#, fuzzy' line" in problems[0].message
    # until it is revisited, the Chinese notebook shows the English paragraph
    assert "stage by stage" in chinese_cell(copy, "Where did the time go")
    po = polib.pofile(str(translate.zh_source(copy)))
    entry = next(e for e in po if e.fuzzy)
    assert "Where did the time go?" in entry.previous_msgid and "贪心解码" in entry.msgstr
    assert [e for e in po if e.obsolete] == []  # the old entry became the fuzzy one
    entry.flags.remove("fuzzy")
    po.save()
    assert translate.problems_of(copy) == []
    assert "贪心解码" in chinese_cell(copy, "一字不差")


def test_building_says_how_many_messages_stay_english(copy, capsys):
    builder.build_all()
    assert "not translated yet" not in capsys.readouterr().out
    edit(copy, "Where did the time go?", "Where did the time go, stage by stage?")
    builder.build_all()
    out = capsys.readouterr().out
    assert "English for 1 messages not translated yet or fuzzy (1 in 00_welcome.py)" in out
    built = nbformat.read(copy.parent.parent / "notebooks" / "zh" / "00_welcome.ipynb", 4)
    assert any("stage by stage" in c.source for c in built.cells)


def test_rewrapping_an_english_paragraph_changes_nothing(copy, capsys):
    edit(copy, "The loop we wrote gives exactly the answer `generate()` gave:",
         "The loop we wrote gives exactly\n# the answer `generate()` gave:")
    assert translate.problems_of(copy) == []
    translate.update("00")
    assert "1 rewrapped" in capsys.readouterr().out
    assert translate.problems_of(copy) == []


def test_a_new_english_cell_needs_a_translation(copy, capsys):
    edit(copy, "# %% [markdown]\n# **Stage 4 · tokens → text.**",
         "# %% [markdown]\n# A new paragraph.\n\n# %% [markdown]\n# **Stage 4 · tokens → text.**")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["new"] and "'A new paragraph.'" in problems[0].message
    translate.update("00")
    assert [p.kind for p in translate.problems_of(copy)] == ["untranslated"]
    cells = builder.cells_of(copy, "zh")
    at = next(i for i, c in enumerate(cells) if c.source == "# A new paragraph.")
    assert cells[at + 1].source.startswith("# **阶段 4")


def test_a_removed_english_cell_leaves_an_entry_that_update_makes_obsolete(copy):
    edit(copy, "# %% [markdown]\n# **Stage 4 · tokens → text.** The ids are turned back into "
               "text.\n\n", "")
    problems = translate.problems_of(copy)
    assert [p.kind for p in problems] == ["gone"] and "Stage 4" in problems[0].message
    translate.update("00")
    assert translate.problems_of(copy) == []
    obsolete = [e for e in polib.pofile(str(translate.zh_source(copy))) if e.obsolete]
    assert len(obsolete) == 1 and "把这些 id 还原成文本" in obsolete[0].msgstr  # kept, as #~


def test_a_note_whose_line_changed_is_gone():
    po = catalog.new_po("x.py")
    po.append(polib.POEntry(msgctxt=catalog.NOTE_BEFORE, msgid="q = 1", msgstr="# 注"))
    cat = catalog.Catalog.of(po)
    assert cat.code_cell("q = 2") == "q = 2"
    assert [e.msgid for e in cat.unused()] == ["q = 1"]


def test_start_writes_every_message_untranslated(copy, monkeypatch, capsys):
    for catalog_file in (copy.parent / "zh").glob("*.po"):
        catalog_file.unlink()
    translate.start("00")
    assert "messages to translate" in capsys.readouterr().out
    problems = translate.problems_of(copy)
    assert problems and {p.kind for p in problems} == {"untranslated"}
    with pytest.raises(SystemExit, match="exists already"):
        translate.start("00")


def test_a_marker_with_a_typo_is_refused():
    with pytest.raises(ValueError, match="line 1: 'en=12' after the cell marker"):
        builder.parse("# %% [markdown] en=12\n# text")
    with pytest.raises(ValueError, match=r"unknown cell kind \[mardown\]"):
        builder.parse("# %% [mardown]\n# text")


# --- the built notebooks ---------------------------------------------------------------------------

def test_the_chinese_notebooks_switch_the_language_first():
    cells = builder.parse("# %% [markdown]\n# # title\n\n# %%\nx = 1\n\n# %%\ny = 2")
    zh = builder.build(cells, "lesson", "zh")
    assert [c.source for c in zh.cells] == ["# title", builder.LANGUAGE_CELL, "x = 1", "y = 2"]
    en = builder.build(cells, "lesson")
    assert builder.LANGUAGE_CELL not in [c.source for c in en.cells]


def test_the_chinese_notebook_is_the_english_one_with_the_catalog_filled_in():
    english = builder.SOURCES / "00_welcome.py"
    built = builder.build(builder.cells_of(english, "zh"), "lesson", "zh")
    committed = nbformat.read(ROOT / "notebooks" / "zh" / "00_welcome.ipynb", as_version=4)
    assert [c.source for c in built.cells] == [c.source for c in committed.cells]


def test_links_to_a_chapter_not_yet_translated_lead_to_the_english_notebook():
    translated = builder.zh_links("[00](00_welcome.ipynb)", "lesson")
    assert translated == "[00](00_welcome.ipynb)"
    missing = builder.ZH_CATALOGS / "99_nothing.po"
    assert not missing.exists()
    assert builder.zh_links("see [99](99_nothing.ipynb#part)", "lesson") == \
        "see [99](../99_nothing.ipynb#part)"
