"""Chapter 10: the interview lessons' shape (10_interview_qa, 10b_interview_engine,
10c_interview_serving and 10d_interview_frontier: questions numbered on across the four, in
Chinese and English, each proved by a cell that asserts) and the self-check quiz. The exercise
checkers are tested in test_interview_checks.py."""

import math
import re
from pathlib import Path

import nbformat
import pytest

from minillm.course.checks import ch10_interview as checks
from minillm.model.config import ModelConfig

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [ROOT / "notebooks" / f"{name}.ipynb"
           for name in ("10_interview_qa", "10b_interview_engine", "10c_interview_serving",
                        "10d_interview_frontier")]
HAN = re.compile(r"[\u4e00-\u9fff]")
QUESTION = re.compile(r"^##\s*Q(\d+)\b")

SOURCE_QUESTIONS = ["大模型生成为什么是自回归的", "Temperature 如何影响生成结果",
                    "Top-k 和 Top-p 有什么区别", "如何减少大模型生成的重复",
                    "为什么大模型推理时显存占用一直很高", "如何提高推理吞吐量"]

SMOLLM2 = ModelConfig(arch="llama", vocab_size=49152, hidden_size=576, n_layers=30, n_heads=9,
                      n_kv_heads=3, head_dim=64, intermediate_size=1536, max_seq_len=8192,
                      tie_embeddings=True)


NEW_QUESTIONS = ["FlashAttention", "预填充/解码分离", "KV 缓存可以量化", "分块预填充",
                 "动态批处理和连续批处理", "MLA", "GPTQ、AWQ 和 SmoothQuant", "EAGLE、MTP"]
# what 2026 interviews add (issue 44), and two classics
FRONTIER_QUESTIONS = ["MoE", "专家并行", "E4M3 和 E5M2", "MXFP4 和 NVFP4", "注意力汇聚点",
                      "重算和换出", "goodput", "LoRA", "缓存 K 和 V，而不缓存 Q",
                      "FlashAttention v1、v2、v3 和 Flash-Decoding"]


def _questions():
    found = []
    for lesson in LESSONS:
        cells = nbformat.read(lesson, as_version=4).cells
        for i, cell in enumerate(cells):
            if cell.cell_type == "markdown" and QUESTION.match(cell.source):
                found.append((cell, cells[i + 1] if i + 1 < len(cells) else None))
    return found


def test_the_chapter_has_at_least_40_questions_numbered_across_its_lessons():
    numbers = [int(QUESTION.match(q.source).group(1)) for q, _ in _questions()]
    assert len(numbers) >= 40, f"only {len(numbers)} questions"
    assert numbers == list(range(1, len(numbers) + 1)), f"questions out of order: {numbers}"


@pytest.mark.parametrize("topics", [NEW_QUESTIONS, FRONTIER_QUESTIONS],
                         ids=["serving", "frontier"])
def test_the_serving_and_frontier_questions_are_asked(topics):
    titles = " ".join(q.source.splitlines()[0] for q, _ in _questions())
    missing = [topic for topic in topics if topic not in titles]
    assert not missing, f"no question on {missing}"


def test_each_question_is_answered_in_chinese_and_english():
    for question, _ in _questions():
        title = question.source.splitlines()[0]
        table = [line for line in question.source.splitlines() if line.startswith("| ")]
        assert table, f"{title}: no side-by-side answer table"
        answers = [row for row in table if row.count("|") >= 3 and "---" not in row][1:]
        assert answers, f"{title}: the table has no answer row"
        for row in answers:
            chinese, english = [c.strip() for c in row.strip().strip("|").split(" | ", 1)]
            assert len(HAN.findall(chinese)) >= 40, f"{title}: the Chinese answer is too short"
            assert len(re.findall(r"[A-Za-z]+", english)) >= 40, \
                f"{title}: the English answer is too short"
        assert HAN.search(title) and re.search(r"[A-Za-z]{3,} [A-Za-z]{2,}", title), \
            f"{title}: the question should be asked in both languages"


def test_each_question_is_followed_by_a_code_cell_that_asserts():
    for question, after in _questions():
        title = question.source.splitlines()[0]
        assert after is not None and after.cell_type == "code", \
            f"{title}: the next cell is not code"
        assert re.search(r"^assert ", after.source, re.M), f"{title}: its cell has no assert"


def test_the_source_texts_six_questions_come_first():
    titles = [q.source.splitlines()[0] for q, _ in _questions()]
    for n, text in enumerate(SOURCE_QUESTIONS):
        assert text in titles[n], f"Q{n + 1} should be the source's {text!r}: {titles[n]}"


def test_the_top_k_top_p_order_and_imprecisions_are_discussed():
    text = LESSONS[0].read_text(encoding="utf-8")
    assert "TopKProcessor(k), TopPProcessor(p)" in text and "TopPProcessor(p), TopKProcessor(k)" \
        in text, "the lesson must apply both orders to real logits"
    assert text.count("⚠️") >= 3


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_has_no_outputs(lesson):
    for cell in nbformat.read(lesson, as_version=4).cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


SOURCES = ROOT / "lessons"


def test_the_old_errors_stay_fixed():
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(SOURCES.glob("10*.py")))
    assert "1/4 or 1/8" not in text and "1/4 或 1/8" not in text, "int4 here is 5 bits a weight"
    assert "chapter 07 measures it" not in text, "07 has no 16-bit SmolLM2 to measure int4 against"
    assert "abs(wall - predicted)" not in text, "TTFT + TPOT (n - 1) equals the stamps by definition"


# --- the quiz -------------------------------------------------------------------------------------

def test_quiz_numbers_come_from_the_config():
    questions = checks.build_quiz(SMOLLM2)
    kv = questions[1]
    assert kv.numeric and math.isclose(kv.answer, 2 * 30 * 3 * 64 * 8192 * 2 / 1e9)
    assert math.isclose(questions[2].answer, 3 * kv.answer)
    assert math.isclose(questions[3].answer, 2 * 30 * 3 * 64 * 2 / 1e3)
    assert any(not q.numeric for q in questions) and sum(q.numeric for q in questions) >= 3


def test_grade_numeric_within_tolerance_and_choices_by_index_or_text():
    q = checks.QuizQuestion("How many?", answer=100.0, explanation="", tolerance=0.05, unit="GB")
    assert checks.grade(q, "104")[0] and checks.grade(q, 96.0)[0]
    assert not checks.grade(q, "106")[0]
    assert "not a number" in checks.grade(q, "lots")[1]
    assert "No answer" in checks.grade(q, " ")[1]
    c = checks.QuizQuestion("Which?", answer=1, explanation="why", choices=("a", "b"))
    assert checks.grade(c, 1)[0] and checks.grade(c, "b")[0] and not checks.grade(c, "a")[0]
    ok, message = checks.grade(c, 0)
    assert not ok and "Answer: b" in message and "why" in message


def test_quiz_keeps_score_once_per_question():
    quiz = checks.Quiz(checks.build_quiz(SMOLLM2))
    assert quiz.check(None)[0] is False and quiz.results == {}  # no answer: not counted
    assert quiz.check(1)[0] and quiz.score == 1
    quiz.check(0)  # a second try does not change the score
    assert quiz.score == 1 and len(quiz.results) == 1
    quiz.next()
    quiz.check("0")  # wrong number
    assert quiz.score == 1 and len(quiz.results) == 2 and not quiz.done
    assert "score 1 / 2" in quiz.status()
    with pytest.raises(ValueError):
        checks.Quiz([])


def test_quiz_widget_buttons_change_what_is_shown():
    pytest.importorskip("ipywidgets")
    box = checks.quiz_widget(checks.build_quiz(SMOLLM2))
    title, choices, number, buttons, feedback, score = box.children
    check, nxt = buttons.children
    first_title, first_feedback = title.value, feedback.value
    check.click()
    assert feedback.value != first_feedback and "No answer" in feedback.value
    choices.value = choices.options[1]
    check.click()
    assert "Right" in feedback.value and box.quiz.score == 1
    nxt.click()
    assert title.value != first_title and number.layout.display != "none"
    number.value = f"{box.quiz.current.answer:.4f}"
    check.click()
    assert "Right" in feedback.value and box.quiz.score == 2
