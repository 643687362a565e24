"""The chapter 10 exercise checkers: the right answers pass; each usual mistake gets its own hint
(and no other mistake gets it); the formulas the lesson and the quiz use."""

import math

import pytest

from minillm.course.checks import ch10_interview as checks
from minillm.course.checks._base import CheckFailed
from minillm.speculative import expected_tokens_per_pass

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


def tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth):
    return bandwidth * n_gpus / (n_params * bytes_per_param)


def max_batch(pool_bytes, c, tokens, bytes_per_value):
    return int(pool_bytes // (2 * c.n_layers * c.n_kv_heads * c.head_dim * tokens
                              * bytes_per_value))


def speculative_speedup(alpha, k, draft_cost):
    closed = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return closed / (1 + k * draft_cost)


def test_right_answers_pass(capsys):
    checks.check_tp_decode_bound(tp_decode_bound)
    checks.check_max_batch(max_batch)
    checks.check_speculative_speedup(speculative_speedup)
    assert capsys.readouterr().out.count("✅") == 3


def test_the_worked_numbers():
    assert checks.parameter_count_reference(checks.PARAM_CONFIGS["SmolLM2-135M"]) == 134_515_008
    assert checks.weight_memory_gb_reference(70e9, 4) == 35
    assert math.isclose(checks.kv_cache_gb_reference(32, 32, 128, 4096, 1, 2), 2.147483648)
    assert math.isclose(checks.decode_bound_reference(14e9, 3350), 239.2857142857, rel_tol=1e-9)
    # the exercise's three headline questions
    assert math.isclose(checks.tp_decode_bound_reference(70e9, 1, 4, 3.35e12), 3.35e12 / 17.5e9)
    llama70 = checks.PARAM_CONFIGS["Llama-3-70B"]
    assert checks.max_batch_reference(80e9, llama70, 8192, 2) == 29  # 2.68 GB a sequence
    assert math.isclose(checks.speculative_speedup_reference(0.7, 4, 0), (1 - 0.7 ** 5) / 0.3)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_tp_decode_bound, checks.check_max_batch,
                                   checks.check_speculative_speedup])
def test_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_tp_decode_bound_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_tp_decode_bound(f, hidden=hidden), {
        "one GPU reads everything": (lambda n, s, g, b: b / (n * s), "divide the weight bytes"),
        "bits": (lambda *a: tp_decode_bound(*a) / 8, "do not multiply by 8"),
        "seconds": (lambda *a: 1 / tp_decode_bound(*a), "its inverse"),
        "always fp16": (lambda n, s, g, b: tp_decode_bound(n, 2, g, b), "as given"),
    })


def test_tp_decode_bound_an_unnamed_mistake_gets_the_formula_only():
    with pytest.raises(CheckFailed) as failure:
        checks.check_tp_decode_bound(lambda *a: 2 * tp_decode_bound(*a))
    message = str(failure.value)
    assert "n_params x bytes_per_param / n_gpus" in message
    assert "do not multiply" not in message and "inverse" not in message


@pytest.mark.parametrize("hidden", [False, True])
def test_max_batch_hints_are_specific(hidden):
    def per_sequence(c, t, s, heads, factor=2):
        return factor * c.n_layers * heads * c.head_dim * t * s

    assert_hints_are_specific(lambda f: checks.check_max_batch(f, hidden=hidden), {
        "query heads": (lambda p, c, t, s: int(p // per_sequence(c, t, s, c.n_heads)),
                        "not n_heads"),
        "no factor 2": (lambda p, c, t, s: int(p // per_sequence(c, t, s, c.n_kv_heads, 1)),
                        "a key AND a value"),
        "rounded up": (lambda p, c, t, s: math.ceil(p / per_sequence(c, t, s, c.n_kv_heads)),
                       "round down: a sequence"),
    })


def test_max_batch_a_fraction_is_refused_plainly():
    with pytest.raises(CheckFailed, match="whole number of sequences"):
        checks.check_max_batch(lambda p, c, t, s: p / (2 * c.n_layers * c.n_kv_heads
                                                       * c.head_dim * t * s))


def test_max_batch_a_whole_float_is_accepted(capsys):
    checks.check_max_batch(lambda *a: float(max_batch(*a)))
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("hidden", [False, True])
def test_speculative_speedup_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_speculative_speedup(f, hidden=hidden), {
        "linear": (lambda a, k, c: (1 + k * a) / (1 + k * c), "alpha^i, not alpha"),
        "no bonus token": (lambda a, k, c: sum(a ** i for i in range(k)) / (1 + k * c),
                           "one token of the target's own"),
        "free draft": (lambda a, k, c: expected_tokens_per_pass(a, k), "take time too"),
    })


@pytest.mark.parametrize("hidden", [False, True])
def test_speculative_speedup_closed_form_that_divides_by_zero_is_told_why(hidden):
    with pytest.raises(CheckFailed, match="every draft is accepted"):
        checks.check_speculative_speedup(
            lambda a, k, c: (1 - a ** (k + 1)) / (1 - a) / (1 + k * c), hidden=hidden)


def test_messages_print_enough_digits_to_tell_answers_apart():
    with pytest.raises(CheckFailed) as failure:
        checks.check_speculative_speedup(lambda *a: speculative_speedup(*a) * (1 + 1e-4))
    message = str(failure.value)
    got, want = message.split("returned ")[1].split(", expected ")
    assert got.split()[0] != want.split()[0].rstrip(":"), message


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


def per_sequence(c, t, s, heads, factor=2):
    return factor * c.n_layers * heads * c.head_dim * t * s


ZH_CASES = {  # mistake: (check, wrong function, words of its Chinese hint)
    "one GPU reads everything": (checks.check_tp_decode_bound,
                                 lambda n, s, g, b: b / (n * s), "权重字节数要除以 n_gpus"),
    "bits": (checks.check_tp_decode_bound, lambda *a: tp_decode_bound(*a) / 8, "不要再乘以 8"),
    "seconds": (checks.check_tp_decode_bound, lambda *a: 1 / tp_decode_bound(*a), "是它的倒数"),
    "always fp16": (checks.check_tp_decode_bound, lambda n, s, g, b: tp_decode_bound(n, 2, g, b),
                    "按给定的 bytes_per_param"),
    "tp unnamed": (checks.check_tp_decode_bound, lambda *a: 2 * tp_decode_bound(*a),
                   "每一步每块 GPU 都要读自己那份权重"),
    "query heads": (checks.check_max_batch,
                    lambda p, c, t, s: int(p // per_sequence(c, t, s, c.n_heads)),
                    "不是 n_heads 个"),
    "no factor 2": (checks.check_max_batch,
                    lambda p, c, t, s: int(p // per_sequence(c, t, s, c.n_kv_heads, 1)),
                    "既存键也存值"),
    "rounded up": (checks.check_max_batch,
                   lambda p, c, t, s: math.ceil(p / per_sequence(c, t, s, c.n_kv_heads)),
                   "向下取整"),
    "a fraction": (checks.check_max_batch,
                   lambda p, c, t, s: p / per_sequence(c, t, s, c.n_kv_heads),
                   "批里的序列数是整数"),
    "linear": (checks.check_speculative_speedup, lambda a, k, c: (1 + k * a) / (1 + k * c),
               "而不是 1 + k x alpha"),
    "no bonus token": (checks.check_speculative_speedup,
                       lambda a, k, c: sum(a ** i for i in range(k)) / (1 + k * c),
                       "目标模型自己的词元"),
    "free draft": (checks.check_speculative_speedup,
                   lambda a, k, c: expected_tokens_per_pass(a, k), "草稿的 k 步也要花时间"),
    "divides by zero": (checks.check_speculative_speedup,
                        lambda a, k, c: (1 - a ** (k + 1)) / (1 - a) / (1 + k * c),
                        "每个草稿词元都被接受"),
}


@pytest.mark.parametrize("name", ZH_CASES)
def test_each_hint_comes_in_chinese(chinese, name):
    check, wrong, words = ZH_CASES[name]
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert words in message, message
    assert "返回了" in message or "抛出" in message, message
    assert "returned" not in message and "expected" not in message, message


def test_the_quiz_speaks_chinese(chinese):
    smollm2 = checks.PARAM_CONFIGS["SmolLM2-135M"]
    quiz = checks.Quiz(checks.build_quiz(smollm2))
    assert "温度" in quiz.current.prompt and quiz.current.choices[1] == "贪心解码"
    ok, message = quiz.check(1)
    assert ok and message.startswith("✅ 答对了。答案：贪心解码。"), message
    assert "不是一个数" in checks.grade(checks.build_quiz(smollm2)[1], "lots")[1]
    assert "还没有作答" in checks.grade(quiz.current, None)[1]
    assert quiz.status() == "第 1 题，共 9 题 · 得分 1 / 已答 1 题"


# --- the hidden cases (hidden=True), which no notebook shows ----------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_tp_decode_bound(tp_decode_bound, hidden=True)
    checks.check_max_batch(max_batch, hidden=True)
    checks.check_max_batch(lambda *a: float(max_batch(*a)), hidden=True)
    checks.check_speculative_speedup(speculative_speedup, hidden=True)
    assert capsys.readouterr().out.count("✅") == 4


def test_the_hidden_cases_hold_the_edges_the_tasks_name():
    assert any(checks.max_batch_reference(p, checks.PARAM_CONFIGS[n], t, s) == 0
               for p, n, t, s in checks.HIDDEN_BATCH_CASES)  # not one sequence fits
    assert any(a == 1 for a, _, _ in checks.HIDDEN_SPEC_CASES)  # the closed form's 0 / 0
    assert any(g == 1 for _, _, g, _ in checks.HIDDEN_TP_CASES)
    assert not set(checks.HIDDEN_TP_CASES) & set(checks.TP_CASES)
    assert not set(checks.HIDDEN_BATCH_CASES) & set(checks.BATCH_CASES)
    assert not set(checks.HIDDEN_SPEC_CASES) & set(checks.SPEC_CASES)


@pytest.mark.parametrize("check, right", [
    (checks.check_tp_decode_bound, tp_decode_bound),
    (checks.check_max_batch, max_batch),
    (checks.check_speculative_speedup, speculative_speedup),
])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_hidden_hints_come_in_chinese(chinese):
    with pytest.raises(CheckFailed) as failure:
        checks.check_max_batch(
            lambda p, c, t, s: math.ceil(p / per_sequence(c, t, s, c.n_kv_heads)), hidden=True)
    message = str(failure.value)
    assert "Mistral-7B 的配置" in message and "向下取整" in message, message


# --- 4 · goodput under an SLO (lesson 10d) -------------------------------------------------------

def goodput(requests, ttft_slo, tpot_slo):
    met = sum(r.ttft <= ttft_slo and r.tpot <= tpot_slo for r in requests)
    return met / (max(r.start + r.latency for r in requests) - min(r.start for r in requests))


def goodput_with_numpy(requests, ttft_slo, tpot_slo):
    import numpy as np

    rows = np.array([(r.start, r.ttft, r.tpot, r.latency) for r in requests])
    met = ((rows[:, 1] <= ttft_slo) & (rows[:, 2] <= tpot_slo)).sum()
    return np.float32(met / ((rows[:, 0] + rows[:, 3]).max() - rows[:, 0].min()))


@pytest.mark.parametrize("hidden", [False, True])
def test_goodput_passes_right_answers(hidden, capsys):
    checks.check_goodput(goodput, hidden=hidden)
    checks.check_goodput(goodput_with_numpy, hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 2


@pytest.mark.parametrize("hidden", [False, True])
def test_goodput_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_goodput(f, hidden=hidden), {
        kind: (lambda r, t, p, kind=kind: checks._goodput_variant(r, t, p, kind), words[0][:25])
        for kind, words in checks.GOODPUT_MISTAKES})


def test_goodput_without_a_named_mistake_says_the_rule():
    with pytest.raises(CheckFailed, match=r"divide by max\(start \+ latency\) - min\(start\)"):
        checks.check_goodput(lambda r, t, p: 2 * goodput(r, t, p))


@pytest.mark.parametrize("hidden", [False, True])
def test_goodput_stub_says_not_written_yet(hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_goodput(unwritten, hidden=hidden)


def test_goodput_hidden_cases_catch_memorizing():
    assert_hidden_cases_catch_memorizing(checks.check_goodput, goodput)


def test_goodput_hints_come_in_chinese(chinese):
    with pytest.raises(CheckFailed, match="请求要同时满足两个上限才算数"):
        checks.check_goodput(lambda r, t, p: checks._goodput_variant(r, t, p, "or"))
