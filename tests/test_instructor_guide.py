"""docs/instructor.md and its Chinese twin docs/zh/instructor.md: both agendas and the timing
table, generated from measured run times (the same numbers in both guides), and agendas that add
up from the same estimates."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("measure_notebooks",
                                                  ROOT / "scripts" / "measure_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _script()


@pytest.fixture(scope="module")
def data(script):
    return json.loads(script.TIMES.read_text())


def _between(text, start, end):
    return text.split(start)[1].split(end)[0].strip()


def test_the_guide_has_both_agendas_and_the_workshop_tools():
    text = (ROOT / "docs" / "instructor.md").read_text(encoding="utf-8")
    for heading in ["A 3-hour workshop", "A one-day workshop", "Common mistakes",
                    "shared JupyterHub"]:
        assert heading in text
    for command in ["make doctor", "make bundle", "make course OFFLINE=..",
                    "python -m minillm progress"]:
        assert command in text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_timing_table_is_the_measured_one_and_covers_every_lesson(script, data, lang):
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    assert sorted(data["chapters"]) == lessons, "re-run scripts/measure_notebooks.py"
    guide = script.GUIDES[lang]
    text = guide.read_text(encoding="utf-8")
    assert _between(text, script.START, script.END) == script.render(data, lang).strip(), \
        f"{guide.relative_to(ROOT)}'s table is not the one measure_notebooks.py renders from " \
        f"notebook_times.json: run it with --render"
    assert all(c["lesson_run_s"] > 0 for c in data["chapters"].values())


def test_the_chinese_guide_has_the_same_numbers_and_the_workshop_tools(script, data):
    english, chinese = script.render(data, "en"), script.render(data, "zh")
    assert re.findall(r"\d+", chinese) == re.findall(r"\d+", english)
    assert "秒" in chinese and "分钟" in chinese and "章节" in chinese
    for agenda in script.AGENDAS:
        columns = [[(row.split("|")[1], row.split("|")[3]) for row in table.splitlines()[2:]]
                   for table in (script.render_agenda(data, agenda, lang)
                                 for lang in ("en", "zh"))]
        assert columns[0] == columns[1], "the agendas' times and minutes differ between guides"
    text = script.GUIDE_ZH.read_text(encoding="utf-8")
    for command in ["make doctor", "make bundle", "make course OFFLINE=..",
                    "python -m minillm progress", "--render"]:
        assert command in text
    assert "](../instructor.md)" in text, "the Chinese guide links to the English one"
    assert "](zh/instructor.md)" in script.GUIDE.read_text(encoding="utf-8"), \
        "the English guide links to the Chinese one"


def test_every_agenda_item_has_its_chinese_and_no_translation_is_stale(script):
    items = {what for agenda in script.AGENDAS for _, _, what in agenda["slots"]}
    missing = sorted(items - set(script.AGENDA_ZH))
    assert not missing, f"agenda items without Chinese in AGENDA_ZH: {missing}"
    stale = sorted(set(script.AGENDA_ZH) - items)
    assert not stale, f"AGENDA_ZH translates items no agenda has any more: {stale}"
    with pytest.raises(SystemExit, match="no Chinese: add it to AGENDA_ZH"):
        script._agenda_item("A slot nobody translated", "zh")


def test_each_way_of_measuring_has_its_chinese(script):
    assert script._how_zh("running each notebook") == "逐个运行 notebook"
    assert script._how_zh("running each notebook with CI set (reduced sizes)") == \
        "逐个运行 notebook，设置了 CI（规模缩小）"
    assert script._how_zh("nbval cell times from junit.xml") == \
        "取自 junit.xml 中 nbval 记录的各单元格耗时"
    assert script._how_zh("2026-12-02, running each notebook") == "2026-12-02，逐个运行 notebook"
    with pytest.raises(SystemExit, match="has no Chinese"):
        script._how_zh("timed by hand")


def test_the_exercise_sizes_are_those_of_the_solution_notebooks(script, data):
    """Exercises are this change's to keep in step: tasks and solution lines as measured now. A
    chapter's second lesson (NNb_name) has no exercise of its own: its chapter's covers it, with
    2 to 5 tasks for each lesson that has tasks (09's covers 09b: 5 + 2)."""
    for name, c in data["chapters"].items():
        solution = ROOT / "solutions" / f"{name}.ipynb"
        if not solution.exists():
            assert name[2] != "_" and "tasks" not in c, f"{name} has no solution notebook"
            continue
        size = script.exercise_size(solution)
        assert {k: c[k] for k in size} == size, \
            f"{name}: run scripts/measure_notebooks.py --exercises (or --sizes)"
        lessons = _lessons_with_tasks(name)
        assert 2 <= c["tasks"] <= 5 * lessons, \
            f"{name} has {c['tasks']} exercise tasks for {lessons} lesson(s); 2 to 5 each"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("which", ["ONE_DAY", "THREE_HOURS"])
def test_each_agenda_is_rendered_from_the_estimates_and_adds_up(script, data, which, lang):
    agenda = getattr(script, which)
    text = script.GUIDES[lang].read_text(encoding="utf-8")
    shown = _between(text, *script._markers(agenda["marker"]))
    assert shown == script.render_agenda(data, agenda, lang), \
        "the guide's agenda is not the one measure_notebooks.py renders: run it with --render"
    rows = [line.split("|")[1:4] for line in shown.splitlines()[2:]]
    starts = [int(h) * 60 + int(m) for h, m in (re.match(r"\s*(\d+):(\d\d)", r[0]).groups()
                                                 for r in rows)]
    minutes = [int(r[2]) for r in rows[:-1]]
    assert rows[-1][1].strip() == script.WORDS[lang]["end"], "an agenda ends with its end time"
    assert [b - a for a, b in zip(starts, starts[1:])] == minutes, "each slot starts when the " \
                                                                   "one before it ends"
    for (chapter, parts, _), slot in zip(agenda["slots"], minutes):
        if chapter is None:
            continue
        c = data["chapters"][chapter]
        need = sum(script.lesson_minutes(c) if p == "lesson" else script.task_minutes(c, p)
                   for p in parts)
        assert need <= slot < need + script.SLOT_ROUNDING, (chapter, parts, need, slot)
    assert starts[-1] <= agenda["end by"], f"{which} runs past its end"


def test_the_task_estimates_add_up_to_the_exercise_estimate(script, data):
    for c in data["chapters"].values():
        if "tasks" not in c:  # a chapter's second lesson
            continue
        total = sum(script.task_minutes(c, t) for t in range(1, c["tasks"] + 1))
        assert abs(total - script.exercise_minutes(c)) < 1e-9


def test_learner_estimates_follow_the_stated_rules(script):
    chapter = {"words": 1500, "cjk_chars": 340, "code_lines": 100, "lesson_run_s": 60.0,
               "tasks": 3, "solution_lines": 12, "task_lines": [2, 4, 6], "exercise_run_s": 30.0}
    assert script.lesson_minutes(chapter) == 1500 / 150 + 340 / 170 + 100 / 20 + 2 * 60 / 60
    assert script.exercise_minutes(chapter) == 3 * 8 + 12 * 1 + 30 / 60
    assert script.task_minutes(chapter, 3) == 8 + 6 + 30 / 60 / 3


def test_chinese_text_counts_characters_not_clauses(script):
    assert script.text_size("你好，世界！") == {"words": 0, "cjk_chars": 4}
    assert script.text_size("prefill (预填充) and the KV cache (KV 缓存)") == \
        {"words": 6, "cjk_chars": 5}
    assert script.text_size("大模型生成为什么是自回归的？") == {"words": 0, "cjk_chars": 13}



def _lessons_with_tasks(chapter: str) -> int:
    """How many lessons a chapter's exercise has tasks for: its first lesson, and each second
    lesson that a task's heading names, as "(lesson 09b)"."""
    source = next((ROOT / "lessons").glob(f"{chapter[:2]}_*_exercise.py"))
    return 1 + len(set(re.findall(r"\(lesson (\d\d[a-z])\)", source.read_text(encoding="utf-8"))))
