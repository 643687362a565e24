"""docs/instructor.md: both agendas, and a timing table generated from measured run times."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("measure_notebooks",
                                                  ROOT / "scripts" / "measure_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_has_both_agendas_and_the_workshop_tools():
    text = (ROOT / "docs" / "instructor.md").read_text(encoding="utf-8")
    for heading in ["A 3-hour workshop", "A one-day workshop", "Common mistakes",
                    "shared JupyterHub"]:
        assert heading in text
    for command in ["make doctor", "make bundle", "make course OFFLINE=..",
                    "python -m minillm progress"]:
        assert command in text


def test_the_timing_table_is_the_measured_one_and_covers_every_lesson():
    script = _script()
    data = json.loads(script.TIMES.read_text())
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(data["chapters"]) == lessons, "re-run scripts/measure_notebooks.py"
    text = script.GUIDE.read_text(encoding="utf-8")
    table = text.split(script.START)[1].split(script.END)[0].strip()
    assert table == script.render(data).strip(), \
        "the guide's table is not the one measure_notebooks.py renders from notebook_times.json"
    assert all(c["lesson_run_s"] > 0 for c in data["chapters"].values())


def test_learner_estimates_follow_the_stated_rules():
    script = _script()
    chapter = {"words": 1500, "code_lines": 100, "lesson_run_s": 60.0, "tasks": 3,
               "solution_lines": 12, "exercise_run_s": 30.0}
    assert script.lesson_minutes(chapter) == 1500 / 150 + 100 / 20 + 2 * 60 / 60
    assert script.exercise_minutes(chapter) == 3 * 8 + 12 * 1 + 30 / 60
