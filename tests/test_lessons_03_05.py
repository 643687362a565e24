"""Chapters 03 and 05 as two lessons each (03 + 03b, 05 + the optional appendix 05b): every lesson
is listed where a learner looks for it, each reads in 45 minutes or less, and corrected wording
does not come back."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
from script_modules import chinese_source

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "lessons"
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
SPLIT = ["03_kv_cache", "03b_long_context", "05_metrics", "05b_fast_engine"]

# Wording that was wrong, and why: none of it may appear in any lesson source again.
WRONG = {
    "with or without the cache": "attention without the cache is O(n²) per step, O(n³) in "
                                 "total; with it O(n) per step, O(n²) in total",
    "Gemma 2 and 3 mix both": "Gemma 2 alternates local and global layers 1:1, Gemma 3 5:1",
    'title="throughput rises"': "a chart's title says what was measured, not what should be",
    "8 bits of mantissa": "bf16 stores 7 mantissa bits",
}


def test_chapters_03_and_05_are_split_in_two():
    assert set(SPLIT) <= set(LESSONS)
    for name in SPLIT:
        assert (SOURCES / f"{name}.py").is_file()


def test_every_lesson_is_in_the_readme_table_and_the_chapter_map():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    welcome = (SOURCES / "00_welcome.py").read_text(encoding="utf-8")
    for name in LESSONS:
        assert f"`notebooks/{name}.ipynb`" in readme, f"README's course table lacks {name}"
        if name != "00_welcome":
            assert f"]({name}.ipynb)" in welcome, f"00's chapter map lacks {name}"


@pytest.mark.parametrize("source", sorted(SOURCES.glob("*.py")), ids=lambda p: p.stem)
def test_corrected_wording_does_not_come_back(source):
    text = re.sub(r"\n#[ ]?", " ", source.read_text(encoding="utf-8"))  # prose lines joined
    found = [f"{words!r}: {why}" for words, why in WRONG.items() if words in text]
    assert not found, f"{source.name}: " + "; ".join(found)


def _estimates():
    spec = importlib.util.spec_from_file_location("measure_notebooks",
                                                  ROOT / "scripts" / "measure_notebooks.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = json.loads(script.TIMES.read_text())
    return {name: script.lesson_minutes(data["chapters"][name]) for name in SPLIT}


def test_each_part_reads_in_45_minutes_or_less():
    too_long = {name: round(minutes) for name, minutes in _estimates().items() if minutes > 45}
    assert not too_long, f"estimated minutes over 45: {too_long}"


def test_the_cuda_graph_cell_does_not_make_minillms_shortcut_a_rule_of_graphs():
    """05b: minillm's graph reads every slot of its bucket; serving engines keep the lengths in
    device tensors (attention reads the filled part), capture per padded batch size, and vLLM V1
    captures piecewise, with attention outside the graph."""
    text = re.sub(r"\n#[ ]?", " ", (SOURCES / "05b_fast_engine.py").read_text(encoding="utf-8"))
    for words in ("minillm's shortcut, not a rule of graphs", "reads only the filled part",
                  "one graph per padded batch size", "piecewise graphs", "outside any graph"):
        assert words in text, words


def test_chapter_05_shows_the_metrics_it_uses_not_the_whole_dataclass():
    source = (SOURCES / "05_metrics.py").read_text(encoding="utf-8")
    assert "show_source(minillm.measure.metrics.RequestMetrics)" not in source
    assert "show_source(metric.fget)" in source


@pytest.mark.parametrize("lesson", ["04_decoding", "05_metrics"])
def test_the_chinese_lessons_point_at_the_chinese_exercises(lesson):
    text = chinese_source(SOURCES / f"{lesson}.py")
    assert f"exercises/zh/{lesson}.ipynb" in text
    assert not re.search(r"(?<![\w/])exercises/\d\d", text), "a link to an English exercise"
