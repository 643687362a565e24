"""Measure how long every lesson and solution notebook takes to run on this machine, estimate the
time a learner needs for each chapter and each exercise task, and lay out the workshop agendas
from those estimates. Writes `docs/notebook_times.json` and, in `docs/instructor.md` and its Chinese
twin `docs/zh/instructor.md`, the timing table and both agendas (each between its markers; the
same numbers in both, the headers and the agenda items in each guide's language).

    python scripts/measure_notebooks.py              # run every notebook (several minutes)
    python scripts/measure_notebooks.py --exercises  # run only the solution notebooks; the
                                                     # lesson times stay as they were measured
    python scripts/measure_notebooks.py --sizes      # only recount the notebooks' words, lines
                                                     # and tasks; every run time stays
    python scripts/measure_notebooks.py --lessons 03_kv_cache 03b_long_context
        # run only these lessons (and their solution notebooks); every other time stays
    python scripts/measure_notebooks.py --render     # only rewrite both guides from the JSON file
    python scripts/measure_notebooks.py --from-junit report.xml
        # take the run times nbval measured in a test run (`make test PYTEST_ARGS=--junitxml=...`)

The learner estimates are rules of thumb, stated here so they can be argued with:
- a lesson: its English prose read at 150 words a minute, its Chinese (CJK) text at 170
  characters a minute (a character is not a word: the IReST study measured 255 characters a
  minute in Chinese against 228 words in English for the same texts; scaled to our 150 words),
  its code read at 20 lines a minute, plus twice its measured run time (learners run cells more
  than once);
- an exercise task: 8 minutes, plus 1 minute per line of its reference solution, plus its share
  of the exercise notebook's measured run time.
The agendas give each slot the estimate of what it covers (a lesson, some exercise tasks, a
break), rounded up to 5 minutes, so the day adds up.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "docs" / "notebook_times.json"
GUIDE = ROOT / "docs" / "instructor.md"
GUIDE_ZH = ROOT / "docs" / "zh" / "instructor.md"
GUIDES = {"en": GUIDE, "zh": GUIDE_ZH}
START, END = "<!-- times:start -->", "<!-- times:end -->"
READ_WORDS_PER_MIN, READ_CJK_CHARS_PER_MIN, READ_CODE_LINES_PER_MIN = 150, 170, 20
MIN_PER_TASK, MIN_PER_SOLUTION_LINE = 8, 1
SLOT_ROUNDING = 5  # minutes

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


# --- the agendas: what each slot covers; its length comes from the estimates ----------------------
# A slot is (chapter, parts, what): parts are "lesson" and/or exercise task numbers; a chapter of
# None is a break of `parts` minutes. An agenda must end by its "end by" time (a test checks).

ONE_DAY = {
    "marker": "agenda-day",
    "start": 9 * 60,
    "end by": 17 * 60 + 30,
    "slots": [
        ("00_welcome", ("lesson", 1), "00 welcome + exercise task 1; `make doctor` problems "
                                      "fixed"),
        ("01_tokenization", ("lesson", 1, 2), "01 tokenization + exercise tasks 1–2 (counting "
                                              "and merging pairs)"),
        (None, 15, "Break"),
        ("02_forward_pass", ("lesson", 1, 3, 4), "02 forward pass + exercise tasks 1, 3 and 4 "
                                                 "(RMSNorm, causal attention, one block)"),
        (None, 60, "Lunch"),
        ("03_kv_cache", ("lesson", 3), "03 KV cache + exercise task 3 (the decode loop)"),
        ("04_decoding", ("lesson", 1, 2), "04 decoding strategies + exercise tasks 1–2 (the "
                                          "widgets are the favourite part: leave time)"),
        (None, 15, "Break"),
        ("05_metrics", ("lesson", 1), "05 measuring inference + exercise task 1 (one request's "
                                      "metrics)"),
        ("06_batching", ("lesson",), "06 batching and paged attention (its exercises are "
                                     "homework); or 07 quantization, by the group's interest"),
        ("10_interview_qa", (1,), "10 interview questions in pairs (exercise task 1: the decode "
                                  "bound of a 70B model on 4 GPUs); `python -m minillm progress` "
                                  "to see what is left"),
    ],
}

THREE_HOURS = {
    "marker": "agenda-short",
    "start": 0,
    "end by": 3 * 60,
    "slots": [
        ("00_welcome", ("lesson", 1), "Set-up check (`make doctor`), the inference path end to "
                                      "end: 00 lesson, exercise task 1"),
        ("01_tokenization", ("lesson", 1), "Tokenization: BPE by hand, why Chinese costs more "
                                           "tokens: 01 lesson, exercise task 1"),
        (None, 10, "Break"),
        ("03_kv_cache", ("lesson",), "Prefill, decode and the KV cache: the O(n²) loop and its "
                                     "fix: 03 lesson"),
        ("04_decoding", ("lesson",), "Decoding strategies with the widgets: temperature, "
                                     "top-k, top-p, min-p, repetition: 04 lesson (its widgets "
                                     "are the hands-on part)"),
        ("10_interview_qa", (1,), "Interview round: the decode bound of a 70B fp8 model on 4 "
                                  "GPUs, at the whiteboard (10, exercise task 1)"),
    ],
}

AGENDAS = (ONE_DAY, THREE_HOURS)

# Each agenda item's Chinese, keyed by its English: an item whose English changes has no Chinese
# until this table is brought along (rendering the Chinese guide then stops and names it).
AGENDA_ZH = {
    "Break": "休息",
    "Lunch": "午餐",
    "00 welcome + exercise task 1; `make doctor` problems fixed":
        "00 欢迎 + 练习任务 1；解决 `make doctor` 报出的问题",
    "01 tokenization + exercise tasks 1–2 (counting and merging pairs)":
        "01 分词 + 练习任务 1–2（统计字节对、合并字节对）",
    "02 forward pass + exercise tasks 1, 3 and 4 (RMSNorm, causal attention, one block)":
        "02 前向传播 + 练习任务 1、3、4（RMSNorm、因果注意力、一个完整的 Transformer 块）",
    "03 KV cache + exercise task 3 (the decode loop)": "03 KV 缓存 + 练习任务 3（解码循环）",
    "04 decoding strategies + exercise tasks 1–2 (the widgets are the favourite part: leave "
    "time)": "04 解码策略 + 练习任务 1–2（交互控件最受学员欢迎，多留些时间）",
    "05 measuring inference + exercise task 1 (one request's metrics)":
        "05 性能指标 + 练习任务 1（单个请求的各项指标）",
    "06 batching and paged attention (its exercises are homework); or 07 quantization, by the "
    "group's interest": "06 批处理与分页注意力（练习留作课后作业）；也可以按学员的兴趣改讲 07 量化",
    "10 interview questions in pairs (exercise task 1: the decode bound of a 70B model on 4 "
    "GPUs); `python -m minillm progress` to see what is left":
        "10 面试题，两人一组（练习任务 1：70B 模型在 4 张 GPU 上的解码速度上限）；"
        "用 `python -m minillm progress` 查看还剩哪些没做",
    "Set-up check (`make doctor`), the inference path end to end: 00 lesson, exercise task 1":
        "检查环境（`make doctor`），从头到尾走一遍推理路径：00 课程，练习任务 1",
    "Tokenization: BPE by hand, why Chinese costs more tokens: 01 lesson, exercise task 1":
        "分词：手算字节对编码（BPE），看中文为什么更费词元：01 课程，练习任务 1",
    "Prefill, decode and the KV cache: the O(n²) loop and its fix: 03 lesson":
        "预填充、解码与 KV 缓存：O(n²) 的生成循环及其解法：03 课程",
    "Decoding strategies with the widgets: temperature, top-k, top-p, min-p, repetition: 04 "
    "lesson (its widgets are the hands-on part)":
        "借助交互控件学解码策略：温度、top-k、top-p、min-p、重复惩罚：04 课程"
        "（动手环节就是这些控件）",
    "Interview round: the decode bound of a 70B fp8 model on 4 GPUs, at the whiteboard (10, "
    "exercise task 1)":
        "面试环节：在白板上估算 70B fp8 模型在 4 张 GPU 上的解码速度上限（10，练习任务 1）",
}


# --- sizes ----------------------------------------------------------------------------------------

def text_size(markdown: str) -> dict:
    """English words and CJK characters of a text: a Chinese clause is many characters, not one
    word."""
    cjk = len(CJK.findall(markdown))
    words = len(re.findall(r"\w+", CJK.sub(" ", markdown)))
    return {"words": words, "cjk_chars": cjk}


def _code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines()
               if line.strip() and not line.strip().startswith("#"))


def lesson_size(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = sum(_code_lines(c.source) for c in nb.cells if c.cell_type == "code")
    return {**text_size(prose), "code_lines": code}


def exercise_size(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    lines = [_code_lines(c.source) for c in nb.cells if "task" in c.metadata.get("tags", [])]
    return {"tasks": len(lines), "solution_lines": sum(lines), "task_lines": lines}


def _lessons():
    """Every lesson: each chapter's (NN_name) and a chapter's second lesson (NNb_name), which
    has no exercise notebook of its own."""
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def recount(data: dict) -> dict:
    """`data` with every chapter's sizes counted again from the notebooks (run times kept)."""
    for lesson in _lessons():
        entry = data["chapters"].setdefault(lesson.stem, {})
        entry.update(lesson_size(lesson))
        solution = ROOT / "solutions" / lesson.name
        if solution.exists():
            entry.update(exercise_size(solution))
    order = [lesson.stem for lesson in _lessons()]  # a split-off lesson sits after its first half
    data["chapters"] = dict(sorted(data["chapters"].items(),
                                   key=lambda item: order.index(item[0]) if item[0] in order
                                   else len(order)))
    return data


# --- run times ----------------------------------------------------------------------------------

def run_seconds(path: Path) -> float:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def _machine() -> dict:
    import torch

    return {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_threads": torch.get_num_threads()}


def _how(source: str) -> str:
    import os

    return source + (" with CI set (reduced sizes)" if os.environ.get("CI") else "")


def measure(lessons: bool = True, old: dict | None = None,
            only: list[str] | None = None) -> dict:
    """Run the solution notebooks (and the lessons, unless `lessons` is False: then their times
    come from `old`). With `only`, run just those lessons and their solutions; the others keep
    their times from `old`, and the guide names the lessons timed later."""
    data = {"chapters": {}} if old is None else json.loads(json.dumps(old))
    today = time.strftime("%Y-%m-%d")
    names = [lesson.stem for lesson in _lessons()]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise SystemExit(f"no lesson named {', '.join(unknown)}; the lessons are "
                         f"{', '.join(names)}")
    for lesson in _lessons():
        if only and lesson.stem not in only:
            continue
        entry = data["chapters"].setdefault(lesson.stem, {})
        if lessons:
            entry["lesson_run_s"] = round(run_seconds(lesson), 1)
        solution = ROOT / "solutions" / lesson.name
        if solution.exists():
            entry["exercise_run_s"] = round(run_seconds(solution), 1)
        print(f"{lesson.stem}: {entry}", flush=True)
    data["machine"] = _machine()
    how = _how("running each notebook")
    if only:
        data.setdefault("retimed", {}).update({name: f"{today}, {how}" for name in only})
        return recount(data)
    if lessons:
        data.update(measured=today, source=how)
        data.pop("retimed", None)
    data.update(exercises_measured=today, exercises_source=how)
    return recount(data)


def from_junit(path: Path) -> dict:
    """Run times per notebook summed from nbval's per-cell test times in a JUnit XML report."""
    import xml.etree.ElementTree as ET

    seconds: dict[tuple[str, str], float] = {}
    for case in ET.parse(path).iter("testcase"):
        match = re.match(r"^(notebooks|solutions)\.(\d\d_\w+)\.ipynb$", case.get("classname", ""))
        if match:
            key = (match.group(1), match.group(2))
            seconds[key] = seconds.get(key, 0.0) + float(case.get("time", 0))
    chapters = {}
    for lesson in _lessons():
        if ("notebooks", lesson.stem) not in seconds:
            raise SystemExit(f"{path} has no nbval times for notebooks/{lesson.name}")
        entry = {"lesson_run_s": round(seconds[("notebooks", lesson.stem)], 1)}
        if ("solutions", lesson.stem) in seconds:
            entry["exercise_run_s"] = round(seconds[("solutions", lesson.stem)], 1)
        chapters[lesson.stem] = entry
    mtime = time.strftime("%Y-%m-%d", time.localtime(path.stat().st_mtime))
    how = f"nbval cell times from {path.name}"
    return recount({"machine": _machine(), "measured": mtime, "source": how,
                    "exercises_measured": mtime, "exercises_source": how, "chapters": chapters})


# --- estimates ------------------------------------------------------------------------------------

def lesson_minutes(c: dict) -> float:
    return (c["words"] / READ_WORDS_PER_MIN + c.get("cjk_chars", 0) / READ_CJK_CHARS_PER_MIN
            + c["code_lines"] / READ_CODE_LINES_PER_MIN + 2 * c["lesson_run_s"] / 60)


def task_minutes(c: dict, task: int) -> float:
    """Exercise task `task` (counted from 1): its own work and its share of the run time."""
    lines = c.get("task_lines") or [c["solution_lines"] / c["tasks"]] * c["tasks"]
    if not 1 <= task <= len(lines):
        raise ValueError(f"exercise task {task} does not exist: the chapter has {len(lines)}")
    return (MIN_PER_TASK + lines[task - 1] * MIN_PER_SOLUTION_LINE
            + c["exercise_run_s"] / 60 / len(lines))


def exercise_minutes(c: dict) -> float:
    if "tasks" not in c:
        return 0.0
    return (c["tasks"] * MIN_PER_TASK + c["solution_lines"] * MIN_PER_SOLUTION_LINE
            + c["exercise_run_s"] / 60)


def slot_minutes(data: dict, chapter, parts) -> int:
    """A slot's length: the estimate of what it covers, rounded up to SLOT_ROUNDING minutes."""
    if chapter is None:
        return parts
    c = data["chapters"][chapter]
    total = sum(lesson_minutes(c) if part == "lesson" else task_minutes(c, part)
                for part in parts)
    return SLOT_ROUNDING * math.ceil(total / SLOT_ROUNDING)


# --- the guide ------------------------------------------------------------------------------------

# The generated parts' words in each guide's language; the numbers are the same in both.
WORDS = {
    "en": {"header": "| chapter | lesson runs in | exercise runs in | learner: lesson | "
                     "learner: exercises (tasks) |",
           "s": " s", "min": " min", "tasks": " ({})",
           "agenda header": "| time | what | minutes |", "end": "End"},
    "zh": {"header": "| 章节 | 课程运行时间 | 练习运行时间 | 学习者：课程 | 学习者：练习（任务数） |",
           "s": " 秒", "min": " 分钟", "tasks": "（{} 个任务）",
           "agenda header": "| 时间 | 内容 | 分钟 |", "end": "结束"},
}


def _how_zh(how: str) -> str:
    """The Chinese of a "how it was measured" note as measure() and from_junit() write it."""
    ci = " with CI set (reduced sizes)"
    if how.endswith(ci):
        return _how_zh(how[:-len(ci)]) + "，设置了 CI（规模缩小）"
    if how == "running each notebook":
        return "逐个运行 notebook"
    match = re.fullmatch(r"nbval cell times from (\S+)", how)
    if match:
        return f"取自 {match.group(1)} 中 nbval 记录的各单元格耗时"
    match = re.fullmatch(r"(\d{4}-\d\d-\d\d), (.+)", how)
    if match:
        return f"{match.group(1)}，{_how_zh(match.group(2))}"
    raise SystemExit(f"{TIMES.name} says a time was measured by {how!r}, which has no Chinese "
                     f"in measure_notebooks.py: add it to _how_zh")


def _measured_line(data: dict, lang: str) -> str:
    m = data["machine"]
    how = data.get("source", "running each notebook")
    later = data.get("retimed", {})
    if lang == "zh":
        line = f"课程于 {data['measured']} 测得（{_how_zh(how)}）"
        if data.get("exercises_measured"):
            line += (f"；练习（即其参考答案 notebook）于 {data['exercises_measured']} 测得"
                     f"（{_how_zh(data['exercises_source'])}）")
        if later:
            line += "；之后重新计时：" + "；".join(f"{name} 于 {_how_zh(when)}"
                                           for name, when in later.items())
        return (f"{line}。测量命令为 `python scripts/measure_notebooks.py`，机器为 "
                f"{m['platform']}，Python {m['python']}，torch {m['torch']}。")
    line = f"Lessons measured on {data['measured']} ({how})"
    if data.get("exercises_measured"):
        line += (f"; exercises (their solution notebooks) on {data['exercises_measured']} "
                 f"({data['exercises_source']})")
    if later:
        line += "; timed later: " + "; ".join(f"{name} on {when}" for name, when in later.items())
    return (f"{line}, by `python scripts/measure_notebooks.py` on {m['platform']}, Python "
            f"{m['python']}, torch {m['torch']}.")


def render(data: dict, lang: str = "en") -> str:
    w = WORDS[lang]
    rows = [w["header"], "|---|---:|---:|---:|---:|"]
    for name, c in data["chapters"].items():
        exercise = f"{c['exercise_run_s']:.0f}{w['s']}" if "exercise_run_s" in c else "—"
        tasks = (f"{exercise_minutes(c):.0f}{w['min']}{w['tasks'].format(c.get('tasks', 0))}"
                 if "tasks" in c else "—")
        rows.append(f"| {name} | {c['lesson_run_s']:.0f}{w['s']} | {exercise} | "
                    f"{lesson_minutes(c):.0f}{w['min']} | {tasks} |")
    rows += ["", _measured_line(data, lang)]
    return "\n".join(rows)


def _clock(minutes: int, relative: bool) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}" if relative else \
        f"{minutes // 60:02d}:{minutes % 60:02d}"


def _agenda_item(what: str, lang: str) -> str:
    if lang == "en":
        return what
    if what not in AGENDA_ZH:
        raise SystemExit(f"the agenda item {what!r} has no Chinese: add it to AGENDA_ZH in "
                         f"scripts/measure_notebooks.py (keyed by the English)")
    return AGENDA_ZH[what]


def render_agenda(data: dict, agenda: dict, lang: str = "en") -> str:
    relative = agenda["start"] == 0
    rows = [WORDS[lang]["agenda header"], "|---|---|---:|"]
    now = agenda["start"]
    for chapter, parts, what in agenda["slots"]:
        minutes = slot_minutes(data, chapter, parts)
        rows.append(f"| {_clock(now, relative)} | {_agenda_item(what, lang)} | {minutes} |")
        now += minutes
    rows.append(f"| {_clock(now, relative)} | {WORDS[lang]['end']} | |")
    return "\n".join(rows)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def _replace(text: str, start: str, end: str, body: str, guide: Path = GUIDE) -> str:
    if start not in text or end not in text:
        raise SystemExit(f"{guide} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def guide_text(data: dict, lang: str) -> str:
    """The guide in `lang` with its generated parts rendered from `data`."""
    guide = GUIDES[lang]
    text = _replace(guide.read_text(encoding="utf-8"), START, END, render(data, lang), guide)
    for agenda in AGENDAS:
        text = _replace(text, *_markers(agenda["marker"]), render_agenda(data, agenda, lang),
                        guide)
    return text


def write_guide(data: dict) -> None:
    """Both guides, each rendered before either is written: a missing translation leaves both
    as they were."""
    texts = {lang: guide_text(data, lang) for lang in GUIDES}
    for lang, text in texts.items():
        GUIDES[lang].write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--render", action="store_true",
                      help="rewrite both guides from docs/notebook_times.json only")
    mode.add_argument("--sizes", action="store_true",
                      help="recount the notebooks' sizes; keep every measured run time")
    mode.add_argument("--exercises", action="store_true",
                      help="run only the solution notebooks; keep the lessons' run times")
    mode.add_argument("--lessons", nargs="+", metavar="NAME",
                      help="run only these lessons and their solutions; keep the other times")
    mode.add_argument("--from-junit", type=Path, metavar="XML",
                      help="take the run times from a JUnit report of a test run")
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads(TIMES.read_text())
    else:
        if args.sizes:
            data = recount(json.loads(TIMES.read_text()))
        elif args.exercises:
            data = measure(lessons=False, old=json.loads(TIMES.read_text()))
        elif args.lessons:
            data = measure(old=json.loads(TIMES.read_text()), only=args.lessons)
        elif args.from_junit:
            data = from_junit(args.from_junit)
        else:
            data = measure()
        TIMES.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    write_guide(data)
    print("wrote " + " and ".join(str(guide.relative_to(ROOT)) for guide in GUIDES.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
