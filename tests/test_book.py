"""The book's machinery (book/): cached execution with the machine on every page, widgets frozen
into static HTML, the front page from the README, figures counted; and the committed executed
copies (executed/) in step with the lessons. The built book in a browser: test_book_browser.py."""

import json
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from book import claims, execute, figures, quiet, sources, widgets  # noqa: E402
import book.__main__ as book_main  # noqa: E402

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
ZH_LESSONS = sorted((ROOT / "notebooks" / "zh").glob("[0-9][0-9]*_*.ipynb"))


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, source in cells:
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(new(source))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


WIDGET_LESSON = _notebook(
    ("markdown", "# 99 · A tiny lesson\n\nA slider and a chart."),
    ("code", "import ipywidgets as w\n"
             "slider = w.IntSlider(value=3, min=0, max=9, description='k')\n"
             "chart = w.HTML('<div data-chart=\"demo\">'\n"
             "               '<svg width=\"20\" height=\"10\"></svg></div>')\n"
             "hidden = w.Label('hidden', layout=w.Layout(display='none'))\n"
             "w.VBox([slider, chart, hidden])"),
    ("code", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"),
    ("code", "w.HBox([w.HTML('done'), w.FloatProgress(value=5, max=5)])"),
    ("code", "print('# plt.show() in a string draws nothing')"),
)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The tiny lesson executed by the book's own executor (a real kernel; a few seconds)."""
    folder = tmp_path_factory.mktemp("book-execute")
    lesson = folder / "99_tiny.ipynb"
    nbformat.write(WIDGET_LESSON, lesson)
    copy = folder / "executed" / "99_tiny.ipynb"
    book = execute.execute(lesson, copy, "ci")
    return lesson, copy, book


def test_an_executed_copy_records_its_machine_and_says_it_under_the_title(executed):
    lesson, copy, book = executed
    nb = nbformat.read(copy, as_version=4)
    assert nb.metadata["minillm_book"] == book
    machine = book["machine"]
    import torch

    assert machine["torch"] == torch.__version__ and machine["threads"] >= 1
    assert machine["cores"] and machine["cpu"] and book["sizes"] == "ci"
    note = nb.cells[1]
    assert execute.NOTE_TAG in note.metadata["tags"] and note.cell_type == "markdown"
    assert nb.cells[0].source.startswith("# 99")
    for shown in (machine["cpu"], f"torch {machine['torch']}", f"{machine['threads']} threads",
                  book["executed"], "smaller sizes"):
        assert shown in note.source, shown
    assert "import json as _json" not in json.dumps(nb), "the machine probe stays out of the copy"


def test_a_copy_is_current_until_its_lesson_changes(executed):
    lesson, copy, _ = executed
    assert execute.is_current(lesson, copy, "ci")
    assert not execute.is_current(lesson, copy, "full"), "a CI-size copy is not the full book's"
    changed = nbformat.read(lesson, as_version=4)
    changed.cells[2].source += "\n# a new comment"
    nbformat.write(changed, lesson.parent / "changed.ipynb")
    assert not execute.is_current(lesson.parent / "changed.ipynb", copy, "ci")
    assert not execute.is_current(lesson, lesson.parent / "absent.ipynb", "ci")


def test_a_change_to_the_prose_alone_is_copied_in_without_executing(executed, tmp_path):
    lesson, copy, book = executed
    nb = nbformat.read(lesson, as_version=4)
    nb.cells[0].source = "# 99 · A tiny lesson, retitled\n\nNew words."
    nb.cells.insert(3, nbformat.v4.new_markdown_cell("A paragraph added between two code cells."))
    edited, kept = tmp_path / "99_tiny.ipynb", tmp_path / "copy.ipynb"
    nbformat.write(nb, edited)
    kept.write_bytes(copy.read_bytes())
    assert execute.is_current(edited, kept, "ci"), "the key covers the code only"
    assert not execute.prose_is_current(edited, kept)
    execute.refresh_prose(edited, kept)
    assert execute.prose_is_current(edited, kept) and execute.is_current(edited, kept, "ci")
    refreshed, ran = nbformat.read(kept, as_version=4), nbformat.read(copy, as_version=4)
    assert refreshed.cells[0].source.startswith("# 99 · A tiny lesson, retitled")
    assert execute.NOTE_TAG in refreshed.cells[1].metadata["tags"], "the note stays under the title"
    assert refreshed.cells[4].source == "A paragraph added between two code cells."
    code = [c for c in refreshed.cells if c.cell_type == "code"]
    assert code == [c for c in ran.cells if c.cell_type == "code"], "outputs kept as they ran"
    assert refreshed.metadata["minillm_book"] == book


def test_the_book_note_does_not_change_the_key():
    nb = nbformat.read(LESSONS[0], as_version=4)
    key = execute.source_key(nb, "full")
    nb.cells.insert(1, execute.measured_note(
        {"machine": {"cpu": "c", "cores": 2, "threads": 1, "gpu": None, "torch": "t",
                     "python": "p", "load_average": 0.1},
         "executed": "now", "sizes": "full", "seconds": 1, "commit": "abc"}, "en"))
    assert execute.source_key(nb, "full") == key
    with pytest.raises(ValueError, match="sizes must be one of"):
        execute.source_key(nb, "huge")


def _clocks(busy_per_tick, ours_per_tick):
    """Two fake CPU clocks that advance by the given seconds at each read."""
    state = {"busy": 0.0, "ours": 0.0}

    def busy():
        state["busy"] += busy_per_tick
        return state["busy"]

    def ours():
        state["ours"] += ours_per_tick
        return state["ours"]
    return busy, ours


def test_the_watch_counts_what_others_took_from_the_machine(monkeypatch):
    """The machine's busy CPU time less this process tree's is what other programs took; over
    QUIET_SHARE of the cores is busy."""
    monkeypatch.setattr(quiet.os, "cpu_count", lambda: 2)
    with quiet.CpuWatch(interval=60, busy=_clocks(1.0, 0)[0], ours=_clocks(0, 1.0)[1]) as w:
        pass  # the busy clock and our clock each advance 1 s a read: nothing is others'
    assert w.result.others_seconds == 0 and w.result.quiet
    found = quiet.Quiet(others_seconds=2.0, wall=2.0, cores=2, load_start=1.0, load_max=1.5)
    assert found.share == 0.5 and not found.quiet  # another program kept one core of two busy
    assert found.record() == {"others_share": 0.5, "load_average": 1.0,
                              "load_average_max": 1.5, "quiet": False}
    assert "other programs took 50% of the 2 cores" in found.sentence()
    assert 0 <= quiet.probe(0.2).share <= 1
    # a busy machine's clocks, read 0.2 s apart, once gave 0.42 s of others' time on 2 cores
    ticks_past_the_wall = quiet.Quiet(others_seconds=0.42, wall=0.206, cores=2, load_start=5.7,
                                      load_max=5.7)
    assert ticks_past_the_wall.share == 1.0 and not ticks_past_the_wall.quiet


def test_a_busy_machine_records_no_copy_and_the_book_stops(tmp_path, monkeypatch, capsys):
    busy = quiet.Quiet(others_seconds=3.0, wall=3.0, cores=2, load_start=2.5, load_max=2.5)
    monkeypatch.setattr(quiet, "probe", lambda: busy)
    copy = tmp_path / "copy.ipynb"
    with pytest.raises(execute.Busy, match="busy before it started: other programs took 50%"):
        execute.execute(LESSONS[0], copy, "full")
    assert not copy.exists()
    monkeypatch.setattr(book_main, "BUSY_WAIT_S", 0)
    with pytest.raises(SystemExit, match="the machine stayed busy, or the lesson's numbers kept"):
        book_main.quietly(execute.execute, LESSONS[0], copy, "full")
    assert capsys.readouterr().out.count("nothing was written") == book_main.BUSY_TRIES
    assert not copy.exists()


def test_a_quiet_run_whose_numbers_break_a_claim_is_not_written(tmp_path, monkeypatch):
    """Quiet by the CPU's count, disturbed all the same: the copy is measured again, not kept."""
    calm = quiet.Quiet(0.0, 1.0, 2, 0.1, 0.1)

    class CalmWatch:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.result = calm

    monkeypatch.setattr(quiet, "probe", lambda: calm)
    monkeypatch.setattr(quiet, "CpuWatch", CalmWatch)
    lesson = tmp_path / "06_batching.ipynb"
    nbformat.write(_notebook(("markdown", "# 06 · A lesson"),
                             ("code", "print('continuous / static throughput: 0.22x')")), lesson)
    with pytest.raises(execute.Busy, match="its numbers were disturbed .*below static's"):
        execute.execute(lesson, tmp_path / "copy.ipynb", "full")
    assert not (tmp_path / "copy.ipynb").exists()


def test_the_note_says_how_quiet_the_run_was():
    machine = {"cpu": "c", "cores": 2, "threads": 1, "gpu": None, "torch": "t", "python": "p",
               **quiet.Quiet(0.1, 10.0, 2, 0.3, 2.1).record()}
    book = {"machine": machine, "executed": "now", "sizes": "full", "seconds": 10,
            "commit": "abc"}
    assert "load average 0.3 at the start, other programs taking 0% of the CPU through the " \
           "run (quiet)" in execute.measured_note(book, "en").source
    assert "运行期间其他程序占用了 0% 的 CPU（足够安静）" in execute.measured_note(book, "zh").source


def test_widgets_become_static_html_of_their_last_state(executed):
    _, copy, _ = executed
    nb = nbformat.read(copy, as_version=4)
    assert "widgets" not in nb.metadata
    text = json.dumps(nb)
    assert widgets.VIEW_MIME not in text
    shown = "".join(o["data"]["text/html"] for o in nb.cells[2].outputs)
    assert 'data-chart="demo"' in shown and "<svg" in shown
    assert '<label>k</label><input type="range" disabled' in shown and "<output>3</output>" in shown
    assert "hidden" not in shown, "a widget its layout hides is not drawn"
    assert widgets.NOTE["en"] in shown, "a widget with a control says the notebook moves it"
    progress = "".join(o["data"]["text/html"] for o in nb.cells[4].outputs)
    assert '<progress value="5.0" max="5.0"' in progress
    assert widgets.NOTE["en"] not in progress, "a widget without controls has nothing to move"


def test_a_widget_whose_model_is_gone_leaves_nothing():
    nb = _notebook(("code", "x"))
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={
        widgets.VIEW_MIME: {"model_id": "gone", "version_major": 2, "version_minor": 0},
        "text/plain": "VBox(children=...)"})]
    assert widgets.freeze_widgets(nb) == 0
    assert nb.cells[0].outputs == []


def test_plotting_cells_leave_figures_and_comments_do_not_count(executed):
    _, copy, _ = executed
    nb = nbformat.read(copy, as_version=4)
    # among the lesson's own cells (the note left out): the matplotlib cell; the widget cells do
    # not call a chart widget of the course, and plt.show() inside a string is not a call
    assert figures.plotting_cells(nb) == [2]
    problems, count = figures.copy_problems(nb, copy.name)
    assert count == 2  # the PNG and the widget's SVG
    # an SVG from a widget the rule does not know is reported, so that the rule keeps up
    unknown = (f"{copy.name}: code cell 1 shows a figure but is not a plotting cell by "
               "book/figures.py's rule: add the call that draws it to DRAWING")
    assert problems == [unknown]
    nb.cells[3].outputs = []
    assert figures.copy_problems(nb, copy.name)[0] == [
        unknown, f"{copy.name}: code cell 2 plots but its output has no figure"]


def test_a_lesson_function_that_draws_makes_its_callers_plotting_cells():
    nb = _notebook(("code", "import matplotlib.pyplot as plt\n\ndef draw(k):\n    plt.show()"),
                   ("code", "draw(3);"),
                   ("code", "interact(draw, k=IntSlider(1, 0, 9));"),
                   ("code", "def table():\n    return draw"),
                   ("code", "%time x = 1"))
    assert figures.plotting_cells(nb) == [1, 2], "a definition alone draws nothing"


def test_figures_on_a_page_are_counted_inside_cell_outputs_only(tmp_path):
    page = tmp_path / "page.html"
    page.write_text('<svg id="logo"></svg><div class="cell_output docutils">'
                    '<img src="a.png"><div><svg><svg></svg></svg></div></div><img src="b.png">')
    assert figures.figures_on_page(page) == 2


def test_the_front_page_is_the_readme_chapter_table_with_links():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = sources.chapter_table(readme, {"04_decoding.ipynb"}, {"04_decoding.ipynb"},
                                  "exercises")
    assert "[](notebooks/04_decoding.ipynb) · [exercises](exercises/04_decoding.ipynb)" in table
    assert "`notebooks/05_metrics.ipynb`" in table, "a lesson not in the book stays plain text"
    assert table.count("\n| ") >= 12  # the header and the eleven chapters
    zh = "## 课程\n\n| 04 | `notebooks/zh/04_decoding.ipynb` | 解码 |\n"
    assert "[](notebooks/04_decoding.ipynb)" in sources.chapter_table(
        zh, {"04_decoding.ipynb"}, set(), "练习")


def test_glossary_terms_feed_the_chinese_search():
    terms = dict(figures.glossary_terms(ROOT / "docs" / "glossary.md"))
    assert terms["prefill"] == "预填充" and terms["inference"] == "推理"
    assert "English" not in terms and not any(set(t) <= set("-: ") for t in terms)


@pytest.mark.parametrize("lesson", LESSONS + ZH_LESSONS,
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_executed_copies_are_in_step_with_the_lessons(lesson):
    """executed/ holds each lesson as `make book` ran it at full size, for readers on the
    repository host; a lesson changed since then must be executed again."""
    folder = ROOT / "executed" / lesson.relative_to(ROOT / "notebooks").parent
    copy = folder / lesson.name
    assert copy.is_file(), f"{copy.relative_to(ROOT)} is missing: run `make book`, commit executed/"
    assert execute.is_current(lesson, copy, "full"), \
        (f"{copy.relative_to(ROOT)} was executed from an older {lesson.relative_to(ROOT)}: run "
         "`make book` (it executes only the lessons whose code changed) and commit executed/")
    assert execute.prose_is_current(lesson, copy), \
        (f"{copy.relative_to(ROOT)} has older prose than {lesson.relative_to(ROOT)}: run "
         "`make book` (it copies the prose in without executing) and commit executed/")
    nb = nbformat.read(copy, as_version=4)
    assert figures.copy_problems(nb, copy.name)[0] == []
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert errors == []
    assert widgets.VIEW_MIME not in json.dumps(nb), "widgets are kept as static HTML"


def _copy_printing(tmp_path, name, *lines, quiet_run=True):
    nb = _notebook(("markdown", "# A lesson"), ("code", "print('...')"))
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                  text="\n".join(lines) + "\n")]
    nb.metadata["minillm_book"] = {"commit": "abc", "machine": {
        "cpu": "c", **quiet.Quiet(0.1 if quiet_run else 9.0, 10.0, 2, 0.3, 1.0).record()}}
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("name, line, says", [
    ("06_batching.ipynb", "speed-up: too noisy to call: close other programs", "could not call"),
    ("06_batching.ipynb", "continuous / static throughput:      0.22x", "below static's"),
    ("zh_06_batching.ipynb", "连续 / 静态的吞吐量：             0.22x", "below static's"),
    ("08_speculative.ipynb", "chat   prompt lookup k=8   0.42 s speed-up 2.31x accepted   1.3% "
                             "tokens/pass 1.02 same tokens=True", "above its tokens per"),
    ("08_speculative.ipynb", "chat   prompt lookup k=8   0.42 s speed-up disturbed (2.31x "
                             "measured, above what 1.02 tokens/pass allow; load average 9.1 on 2 "
                             "CPUs) accepted   1.3%", "shown as disturbed"),
    ("07_quantization.ipynb", "int8 at batch 1: 8.52x fp32, 1.21x bf16", "byte ratio"),
    ("00_welcome.ipynb", "at 7561.7 ms a step: 0.1 GB/s", "below 1 GB/s"),
    ("10_interview_qa.ipynb", "at 256 tokens recomputing was not slower (load average 0.4 "
                              "on 2 CPUs)", "no slower than a cached one"),
    ("10_interview_qa.ipynb", "256 个词元时，重算并没有更慢（2 个 CPU 的负载均值 0.4）",
     "no slower than a cached one"),
    ("09_scaling_out.ipynb", "/tmp/ipykernel_1/9.py:14: UserWarning: Glyph 36755 (\\N{CJK "
                             "UNIFIED IDEOGRAPH-8F93}) missing from font(s) DejaVu Sans.",
     "without a font"),
    ("00_welcome.ipynb", "/root/.cache/minillm/SmolLM2-135M-Instruct.Q4_1.gguf", "a path of"),
])
def test_a_copy_that_contradicts_its_claim_is_named(tmp_path, name, line, says):
    name = name.removeprefix("zh_")
    found = claims.problems(_copy_printing(tmp_path, name, line))
    assert any(says in f for f in found) and all(line.strip() in f for f in found), found


def test_a_copy_that_keeps_its_claims_and_was_quiet_has_no_problem(tmp_path):
    fine = _copy_printing(tmp_path, "08_speculative.ipynb", "edit prompt lookup k=4 0.78 s "
                          "speed-up 1.37x accepted 69.6% tokens/pass 3.00 same tokens=True",
                          "continuous / static throughput: 0.22x")  # 06's rule: not lesson 08
    assert claims.problems(fine) == []
    busy = _copy_printing(tmp_path, "05_metrics.ipynb", "x", quiet_run=False)
    assert "not recorded under the quiet rule" in claims.problems(busy)[0]


@pytest.mark.parametrize("lesson", LESSONS + ZH_LESSONS,
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_published_copy_shows_no_contradiction(lesson):
    """What a reader of the book sees keeps the lesson's claims: no verdict the run could not
    call, none against the claim, no number outside its bound, recorded on a quiet machine."""
    copy = ROOT / "executed" / lesson.relative_to(ROOT / "notebooks")
    assert claims.problems(copy) == []


def test_the_published_copies_were_measured_with_this_engine_on_one_machine():
    """A reader compares numbers across pages: every copy ran the engine as it is now (its
    sources, `execute.engine_key`), on one machine."""
    copies = [ROOT / "executed" / p.relative_to(ROOT / "notebooks") for p in LESSONS + ZH_LESSONS]
    assert claims.book_problems(copies, execute.engine_key()) == []


def test_the_engine_key_follows_the_engine_and_not_the_lessons(tmp_path, monkeypatch):
    fake = tmp_path / "minillm"
    fake.mkdir()
    (tmp_path / "lessons").mkdir()
    (fake / "engine.py").write_text("x = 1\n")
    (tmp_path / "lessons" / "00_welcome.py").write_text("# prose\n")
    monkeypatch.setattr(execute, "ROOT", tmp_path)
    before = execute.engine_key()
    (tmp_path / "lessons" / "00_welcome.py").write_text("# other prose\n")
    assert execute.engine_key() == before
    (fake / "engine.py").write_text("x = 2\n")
    assert execute.engine_key() != before


def test_the_command_refuses_bad_choices_with_what_is_allowed(capsys):
    from book import __main__ as command

    with pytest.raises(SystemExit):
        command.parse(["--jobs", "0"])
    assert "--jobs must be 1 or more, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.parse(["--edition", "fr"])
    assert "invalid choice: 'fr' (choose from 'all', 'en', 'zh')" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no zh edition under"):
        command.main(["--edition", "zh", "--zh-root", "/nonexistent", "--sizes", "ci"])
    assert [e.language for e in command.editions("zh")] == ["zh_CN"]
    assert [e.language for e in command.editions("all")] == ["en", "zh_CN"]
    english = sources.editions()[0]
    with pytest.raises(SystemExit, match="two-digit chapter numbers such as 04,05; got"):
        command.chosen(english, "4,x")
    with pytest.raises(SystemExit, match="no lesson numbered 99"):
        command.chosen(english, "04,99")
    assert [p.name for p in command.chosen(english, "05,04")] == [
        "04_decoding.ipynb", "05_metrics.ipynb", "05b_fast_engine.ipynb"], "a chapter's lessons"


def test_a_chapters_second_lesson_is_a_page_of_its_own():
    names = [p.name for p in sources.editions()[0].lesson_files()]
    assert "03b_long_context.ipynb" in names and "05b_fast_engine.ipynb" in names
    assert names == sorted(names), "in course order: 03, 03b, 04"


def test_a_line_break_between_chinese_characters_is_joined_on_the_pages():
    """A browser shows a source's line break as a space, which Chinese text has none of ("被提出，
    正是为了"); a break next to Latin text, a list's next item and fenced code stay."""
    text = ("被提出，\n正是为了\n中文\nEnglish\n中文\n- 列表\n- 第二项\n```python\n# 中文\n# 注释\n```\n"
            "结尾")
    assert sources.join_cjk_lines(text) == ("被提出，正是为了中文\nEnglish\n中文\n- 列表\n- 第二项\n"
                                            "```python\n# 中文\n# 注释\n```\n结尾")
    assert sources.join_cjk_lines("An English\nparagraph") == "An English\nparagraph"


def test_text_in_a_formula_shows_its_characters_not_their_escapes():
    sys.path.insert(0, str(ROOT / "book" / "sphinx"))
    from mathml import _mathml

    shown = _mathml(r"\text{length}^{\text{length\_penalty}} + \text{a\&b}", "inline")
    assert "<mtext>length_penalty</mtext>" in shown and "<mtext>a&amp;b</mtext>" in shown


def test_a_guide_links_its_twin_page_and_the_chinese_edition_says_which_are_english():
    english, chinese = sources.editions()
    instructor = ROOT / "docs" / "instructor.md"
    assert '<a href="../zh/docs/instructor.html">中文版</a>' in sources.guide_page(
        english, instructor, twin_built=True)
    alone = sources.guide_page(english, instructor, twin_built=False)
    assert "中文版" in alone and "](zh/instructor.md)" not in alone and "<a " not in alone
    assert '<a href="../../docs/instructor.html">English</a>' in sources.guide_page(
        chinese, ROOT / "docs" / "zh" / "instructor.md", twin_built=True)
    server = ROOT / "docs" / "server.md"
    assert chinese.english_only(server) and not english.english_only(server)
    page = sources.guide_page(chinese, server, twin_built=True)
    heading, rest = page.split("\n", 1)
    assert heading.startswith("# ") and rest.lstrip().startswith(":::{note}\n本指南尚无中文版")
    assert not chinese.english_only(ROOT / "docs" / "zh" / "instructor.md")


def test_the_chinese_search_dictionary_holds_the_terms_and_their_other_names(tmp_path):
    words = book_main.search_dictionary(tmp_path).read_text(encoding="utf-8").split("\n")
    assert {"预填充 100000", "推测解码 100000", "投机解码 100000"} <= set(words)
    assert not any(w.startswith(("English", "prefill")) for w in words)
