"""Chapter 07's checkers: they pass correct answers, name the usual mistakes, and give a message
(not a crash) for the wrong kind of answer."""

import pytest
import torch

from minillm.course.checks import ch07_quantization as checks
from minillm.course.checks._base import CheckFailed
from minillm.quant.int8 import quantize_int8

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


def q_absmax(x, qmax=127, rounding=torch.round, largest=lambda x: x.abs().max()):
    scale = largest(x).item() / qmax
    return rounding(x / scale).clamp(-127, 127).to(torch.int8), scale


def dq_absmax(q, scale):
    return q.float() * scale


def q_groups(w, g, levels=15, squeeze=True):
    rows, cols = w.shape
    if cols % g:
        raise ValueError("group size must divide the row")
    x = w.reshape(rows, cols // g, g)
    lo = x.amin(-1, keepdim=True)
    scale = (x.amax(-1, keepdim=True) - lo) / levels
    q = torch.round((x - lo) / scale).clamp(0, 15).reshape(rows, cols)
    return (q, scale.squeeze(-1), lo.squeeze(-1)) if squeeze else (q, scale, lo)


def dq_groups(q, scale, lo):
    rows, n = scale.shape
    return (q.float().reshape(rows, n, -1) * scale[..., None] + lo[..., None]).reshape(rows, -1)


def per_channel(w, dim=1, keepdim=False, zero_guard=True):
    scale = w.abs().amax(dim=dim, keepdim=keepdim) / 127
    if zero_guard:
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    shaped = scale if keepdim else (scale[:, None] if dim == 1 else scale[None])
    return torch.round(w / shaped).clamp(-127, 127).to(torch.int8), scale


def test_correct_answers_pass(capsys):
    checks.check_absmax_int8(q_absmax, dq_absmax)
    checks.check_absmax_int8(lambda x: (q_absmax(x)[0], torch.tensor(q_absmax(x)[1])), dq_absmax)
    checks.check_quantize_int8(quantize_int8)
    checks.check_quantize_int8(per_channel)
    checks.check_int4_groups(q_groups, dq_groups)
    assert capsys.readouterr().out.count("✅") == 5


@pytest.mark.parametrize("hidden", [False, True])
def test_stubs_say_not_written_yet(hidden, unwritten):
    for check in (checks.check_absmax_int8, checks.check_int4_groups):
        with pytest.raises(CheckFailed, match="not written yet"):
            check(unwritten, unwritten, hidden=hidden)
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_quantize_int8(unwritten, hidden=hidden)
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_gptq_step(unwritten, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_absmax_scale_hints_are_specific(hidden):
    assert_hints_are_specific(lambda q: checks.check_absmax_int8(q, dq_absmax, hidden=hidden), {
        "128": (lambda x: q_absmax(x, qmax=128), "not 128"),
        "max - min": (lambda x: ((x / ((x.max() - x.min()).item() / 255)).round().clamp(
            -127, 127).to(torch.int8), (x.max() - x.min()).item() / 255), "zero-point"),
        "max not abs": (lambda x: q_absmax(x, largest=lambda x: x.max()), "largest absolute"),
        "255": (lambda x: q_absmax(x, qmax=255), "not by 255"),
    })


@pytest.mark.parametrize("quantize, message", [
    (lambda x: q_absmax(x, rounding=torch.trunc), "truncated towards zero"),
    (lambda x: (torch.round(x * 10).to(torch.int16), 0.1), "torch.int8"),
])
def test_absmax_q_mistakes_are_named(quantize, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_absmax_int8(quantize, dq_absmax)


def test_a_per_row_absmax_scale_gets_a_message_not_a_crash():
    def per_row(x):
        x2 = x.reshape(x.shape[0], -1) if x.dim() > 1 else x[None]
        scale = x2.abs().amax(1, keepdim=True) / 127
        return torch.round(x2 / scale).to(torch.int8).reshape(x.shape), scale

    with pytest.raises(CheckFailed, match="one scale for the whole tensor"):
        checks.check_absmax_int8(per_row, dq_absmax)


def test_absmax_in_place_is_named():
    def in_place(x):
        scale = x.abs().max().item() / 127
        x.div_(scale)
        return x.round().to(torch.int8), scale

    with pytest.raises(CheckFailed, match="changed its argument `x`"):
        checks.check_absmax_int8(in_place, dq_absmax)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("quantize, message", [
    (lambda w: per_channel(w, keepdim=True), "drop the"),
    (lambda w: (torch.round(w / (w.abs().max() / 127)).to(torch.int8),
                (w.abs().max() / 127).reshape(1)), "one number for the whole weight"),
    (lambda w: per_channel(w, dim=0), "one entry per column"),
    (lambda w: per_channel(w, zero_guard=False), "all-zero row"),
])
def test_per_channel_mistakes_are_named(quantize, message, hidden):
    with pytest.raises(CheckFailed, match=message):
        checks.check_quantize_int8(quantize, hidden=hidden)


def per_channel_with(w, largest=lambda w: w.abs().amax(dim=1) / 127, guard="where",
                     codes=lambda w, s: torch.round(w / s[:, None])):
    """per_channel with one piece swapped for a usual mistake."""
    scale = largest(w)
    if guard == "where":
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    elif guard == "add":
        scale = scale + 1e-8
    elif guard == "clamp":
        scale = scale.clamp(min=1e-8)
    right = torch.where(scale == 0, torch.ones_like(scale), scale)
    return codes(w, right).clamp(-127, 127).to(torch.int8), scale


PER_CHANNEL_SCALE_MISTAKES = {  # name: (the wrong function, the words of its hint)
    "max without abs": (lambda w: per_channel_with(w, largest=lambda w: w.amax(dim=1) / 127),
                        "largest absolute value"),
    "one max for every row": (lambda w: per_channel_with(
        w, largest=lambda w: (w.abs().max() / 127).expand(w.shape[0]).clone()),
        "every row got the same scale"),
    "128": (lambda w: per_channel_with(w, largest=lambda w: w.abs().amax(dim=1) / 128),
            "not by 128"),
    "+ 1e-8 on every row": (lambda w: per_channel_with(w, guard="add"), "changes them all"),
    "clamp(min=1e-8)": (lambda w: per_channel_with(w, guard="clamp"), "rather than a floor"),
    "no guard": (lambda w: per_channel_with(w, guard=None), "nothing is divided by 0"),
}
PER_CHANNEL_CODE_MISTAKES = {
    "truncated": (lambda w: per_channel_with(w, codes=lambda w, s: torch.trunc(w / s[:, None])),
                  "cut towards zero"),
    "floor": (lambda w: per_channel_with(w, codes=lambda w, s: torch.floor(w / s[:, None])),
              "rounded down (torch.floor)"),
    "the largest scale for every row": (lambda w: per_channel_with(
        w, codes=lambda w, s: torch.round(w / s.max())), "divide each row by its own scale"),
    "multiplied": (lambda w: per_channel_with(w, codes=lambda w, s: torch.round(w * s[:, None])),
                   "multiplied by the scale"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_per_channel_scale_hints_name_the_real_mistake(hidden):
    assert_hints_are_specific(lambda f: checks.check_quantize_int8(f, hidden=hidden),
                              PER_CHANNEL_SCALE_MISTAKES)
    with pytest.raises(CheckFailed) as failure:  # a scale from max, not max|w|, on a nonzero row
        checks.check_quantize_int8(PER_CHANNEL_SCALE_MISTAKES["max without abs"][0],
                                   hidden=hidden)
    assert "all-zero" not in str(failure.value)


@pytest.mark.parametrize("hidden", [False, True])
def test_per_channel_code_hints_name_the_real_mistake(hidden):
    assert_hints_are_specific(lambda f: checks.check_quantize_int8(f, hidden=hidden),
                              PER_CHANNEL_CODE_MISTAKES)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_scale_off_by_an_epsilon_prints_numbers_that_differ(hidden):
    import re

    with pytest.raises(CheckFailed) as failure:
        checks.check_quantize_int8(PER_CHANNEL_SCALE_MISTAKES["+ 1e-8 on every row"][0],
                                   hidden=hidden)
    got, want = re.search(r"is ([0-9.e-]+); expected that row's max\|w\| / 127 = ([0-9.e-]+)",
                          str(failure.value)).groups()
    assert got != want and "+1e-08" in str(failure.value), str(failure.value)


@pytest.mark.parametrize("hidden", [False, True])
def test_another_code_mistake_gets_the_plain_message(hidden):
    def rows_shifted(w):  # q of each row from the next row's scale: no named mistake
        q, scale = per_channel(w)
        return torch.round(w / scale.roll(1)[:, None]).clamp(-127, 127).to(torch.int8), scale

    with pytest.raises(CheckFailed) as failure:
        checks.check_quantize_int8(rows_shifted, hidden=hidden)
    text = str(failure.value)
    assert "differs from round(w / scale[:, None])" in text and "expected" in text, text
    for _, words in PER_CHANNEL_CODE_MISTAKES.values():
        assert words not in text, text


def q_groups_with(w, g, codes=lambda x, lo, s: torch.round((x - lo) / s), whole_row=False):
    rows, cols = w.shape
    if cols % g:
        raise ValueError("group size must divide the row")
    q, scale, lo = q_groups(w, g)
    x = w.reshape(rows, cols // g, g)
    if whole_row:
        x, g_lo = w, w.amin(-1, keepdim=True)
        g_scale = (w.amax(-1, keepdim=True) - g_lo) / 15
    else:
        g_lo, g_scale = lo[..., None], scale[..., None]
    return codes(x, g_lo, g_scale).clamp(0, 15).reshape(rows, cols), scale, lo


INT4_MISTAKES = {  # quantize mistakes: named as such, never given dequantize's advice
    "floor": (lambda w, g: q_groups_with(w, g, codes=lambda x, lo, s: torch.floor((x - lo) / s)),
              "rounded down"),
    "no minimum": (lambda w, g: q_groups_with(w, g, codes=lambda x, lo, s: torch.round(x / s)),
                   "computed from w itself"),
    "the whole row's grid": (lambda w, g: q_groups_with(w, g, whole_row=True),
                             "the whole row's minimum and scale"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_int4_quantize_mistakes_get_quantize_hints(hidden):
    assert_hints_are_specific(lambda q: checks.check_int4_groups(q, dq_groups, hidden=hidden),
                              INT4_MISTAKES)
    for wrong, _ in INT4_MISTAKES.values():
        with pytest.raises(CheckFailed) as failure:
            checks.check_int4_groups(wrong, dq_groups, hidden=hidden)
        assert "dequantize_groups" not in str(failure.value), str(failure.value)


@pytest.mark.parametrize("hidden", [False, True])
def test_int4_dequantize_mistakes_get_dequantize_hints(hidden):
    def no_minimum(q, scale, lo):
        rows, n = scale.shape
        return (q.float().reshape(rows, n, -1) * scale[..., None]).reshape(rows, -1)

    def first_group_only(q, scale, lo):
        rows, n = scale.shape
        return (q.float().reshape(rows, n, -1) * scale[:, :1, None]
                + lo[:, :1, None]).reshape(rows, -1)

    with pytest.raises(CheckFailed, match="dequantize_groups.*add each group's minimum back"):
        checks.check_int4_groups(q_groups, no_minimum, hidden=hidden)
    with pytest.raises(CheckFailed, match="though q, scale and minimum are right: q \\* scale"):
        checks.check_int4_groups(q_groups, first_group_only, hidden=hidden)


@pytest.mark.parametrize("hidden, too_long", [(False, "32 does not divide 40"),
                                              (True, "16 does not divide 24")])
def test_int4_mistakes_are_named(hidden, too_long):
    with pytest.raises(CheckFailed, match="divide \\(max - min\\) by 15"):
        checks.check_int4_groups(lambda w, g: q_groups(w, g, levels=16), dq_groups, hidden=hidden)
    with pytest.raises(CheckFailed, match="squeeze"):
        checks.check_int4_groups(lambda w, g: q_groups(w, g, squeeze=False), dq_groups,
                                 hidden=hidden)

    def no_check(w, g):
        rows, cols = w.shape
        cut = cols - cols % g
        return q_groups(w[:, :cut], g) if cols % g else q_groups(w, g)

    with pytest.raises(CheckFailed, match=too_long + ".*raise ValueError"):
        checks.check_int4_groups(no_check, dq_groups, hidden=hidden)


# --- 4 · one step of GPTQ ----------------------------------------------------------------------

def gptq_step(w, u, i, round_column, sign=1.0, divide=True, spread=True, write=True, copy=True):
    w = w.clone() if copy else w
    q = round_column(w[:, i])
    error = (w[:, i] - q) / (u[i, i] if divide else 1.0)
    if spread:
        w[:, i + 1:] -= sign * error[:, None] * u[i, i + 1:][None, :]
    if write:
        w[:, i] = q
    return w


def test_gptq_step_passes_a_correct_step_and_other_correct_forms(capsys):
    checks.check_gptq_step(gptq_step)

    def outer_form(w, u, i, round_column):  # the whole row of u, column i written by the update
        w = w.clone()
        error = (w[:, i] - round_column(w[:, i])) / u[i, i]
        w[:, i:] -= torch.outer(error, u[i, i:])
        return w

    checks.check_gptq_step(outer_form)
    assert capsys.readouterr().out.count("✅") == 2
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_gptq_step(lambda *a: (_ for _ in ()).throw(NotImplementedError))


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("mistake,message", [
    (dict(sign=-1.0), "moved the wrong way"),
    (dict(divide=False), r"divide the rounding error by u\[i, i\]"),
    (dict(spread=False), "did not change"),
    (dict(write=False), "column i itself is not rounded"),
])
def test_gptq_step_mistakes_are_named(mistake, message, hidden):
    with pytest.raises(CheckFailed, match=message):
        checks.check_gptq_step(lambda w, u, i, r: gptq_step(w, u, i, r, **mistake), hidden=hidden)


def test_gptq_step_hints_fire_only_for_their_mistake():
    def half_update(w, u, i, round_column):  # another mistake: half the correction
        w = w.clone()
        q = round_column(w[:, i])
        w[:, i + 1:] -= 0.5 * ((w[:, i] - q) / u[i, i])[:, None] * u[i, i + 1:]
        w[:, i] = q
        return w

    with pytest.raises(CheckFailed) as caught:
        checks.check_gptq_step(half_update)
    text = str(caught.value)
    assert "differs from one GPTQ step" in text
    for hint in ("wrong way", "divide the rounding", "did not change", "not rounded"):
        assert hint not in text
    with pytest.raises(CheckFailed, match="changed its argument"):
        checks.check_gptq_step(lambda w, u, i, r: gptq_step(w, u, i, r, copy=False))


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


def no_value_error(w, g):
    rows, cols = w.shape
    return q_groups(w[:, :cols - cols % g], g)


ZH_MISTAKES = {  # name: (run the wrong answer, the Chinese words of its hint, its English words)
    "128": (lambda: checks.check_absmax_int8(lambda x: q_absmax(x, qmax=128), dq_absmax),
            "不是 128", "not 128"),
    "max - min": (lambda: checks.check_absmax_int8(lambda x: (
        (x / ((x.max() - x.min()).item() / 255)).round().clamp(-127, 127).to(torch.int8),
        (x.max() - x.min()).item() / 255), dq_absmax), "零点量化", "zero-point"),
    "max not abs": (lambda: checks.check_absmax_int8(
        lambda x: q_absmax(x, largest=lambda x: x.max()), dq_absmax), "绝对值的最大值",
        "largest absolute"),
    "255": (lambda: checks.check_absmax_int8(lambda x: q_absmax(x, qmax=255), dq_absmax),
            "不是除以 255", "not by 255"),
    "truncated": (lambda: checks.check_absmax_int8(
        lambda x: q_absmax(x, rounding=torch.trunc), dq_absmax), "向零截断", "truncated"),
    "keepdim": (lambda: checks.check_quantize_int8(lambda w: per_channel(w, keepdim=True)),
                "去掉最后一维", "drop the"),
    "per column": (lambda: checks.check_quantize_int8(lambda w: per_channel(w, dim=0)),
                   "每列一个", "one entry per column"),
    "zero row": (lambda: checks.check_quantize_int8(lambda w: per_channel(w, zero_guard=False)),
                 "就不会除以 0", "all-zero row"),
    "max without abs": (lambda: checks.check_quantize_int8(
        PER_CHANNEL_SCALE_MISTAKES["max without abs"][0]), "绝对值的最大值",
        "largest absolute"),
    "+ 1e-8": (lambda: checks.check_quantize_int8(
        PER_CHANNEL_SCALE_MISTAKES["+ 1e-8 on every row"][0]), "把它们全改了", "changes them all"),
    "clamp(min=1e-8)": (lambda: checks.check_quantize_int8(
        PER_CHANNEL_SCALE_MISTAKES["clamp(min=1e-8)"][0]), "而不是 clamp(min=1e-8)",
        "rather than"),
    "per-channel truncated": (lambda: checks.check_quantize_int8(
        PER_CHANNEL_CODE_MISTAKES["truncated"][0]), "向零截断", "cut towards zero"),
    "int4 floor": (lambda: checks.check_int4_groups(INT4_MISTAKES["floor"][0], dq_groups),
                   "向下取整", "rounded down"),
    "int4 no minimum": (lambda: checks.check_int4_groups(INT4_MISTAKES["no minimum"][0],
                                                         dq_groups), "先减去该组的最小值",
                        "computed from w"),
    "16 levels": (lambda: checks.check_int4_groups(lambda w, g: q_groups(w, g, levels=16),
                                                   dq_groups), "除以 15", "divide (max - min)"),
    "no squeeze": (lambda: checks.check_int4_groups(lambda w, g: q_groups(w, g, squeeze=False),
                                                    dq_groups), "squeeze(-1)", "drop the"),
    "no ValueError": (lambda: checks.check_int4_groups(no_value_error, dq_groups),
                      "32 不能整除 40", "does not divide"),
    "gptq sign": (lambda: checks.check_gptq_step(
        lambda w, u, i, r: gptq_step(w, u, i, r, sign=-1.0)), "移反了方向", "wrong way"),
    "gptq divide": (lambda: checks.check_gptq_step(
        lambda w, u, i, r: gptq_step(w, u, i, r, divide=False)), "先除以 u[i, i]",
        "divide the rounding error"),
    "gptq spread": (lambda: checks.check_gptq_step(
        lambda w, u, i, r: gptq_step(w, u, i, r, spread=False)), "分摊给它们", "did not change"),
    "gptq write": (lambda: checks.check_gptq_step(
        lambda w, u, i, r: gptq_step(w, u, i, r, write=False)), "本身没有舍入", "not rounded"),
}


@pytest.mark.parametrize("name", ZH_MISTAKES)
def test_each_hint_comes_in_chinese(chinese, name):
    run, chinese_words, english_words = ZH_MISTAKES[name]
    with pytest.raises(CheckFailed) as failure:
        run()
    message = str(failure.value)
    assert chinese_words in message, message
    assert english_words not in message, message


def test_the_checks_pass_in_chinese(chinese, capsys):
    checks.check_absmax_int8(q_absmax, dq_absmax)
    checks.check_quantize_int8(per_channel)
    checks.check_int4_groups(q_groups, dq_groups)
    checks.check_gptq_step(gptq_step)
    out = capsys.readouterr().out
    for name in ("absmax int8 量化 / 反量化", "逐通道 int8", "int4 分组量化 / 反量化", "GPTQ 的一步"):
        assert f"✅ {name}：全部" in out, out
    assert "all" not in out and "cases pass" not in out, out


# --- the hidden cases (hidden=True), which no notebook shows ----------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_absmax_int8(q_absmax, dq_absmax, hidden=True)
    checks.check_absmax_int8(lambda x: (q_absmax(x)[0], torch.tensor(q_absmax(x)[1])), dq_absmax,
                             hidden=True)
    checks.check_quantize_int8(quantize_int8, hidden=True)
    checks.check_quantize_int8(per_channel, hidden=True)
    checks.check_int4_groups(q_groups, dq_groups, hidden=True)
    checks.check_gptq_step(gptq_step, hidden=True)

    def outer_form(w, u, i, round_column):
        w = w.clone()
        error = (w[:, i] - round_column(w[:, i])) / u[i, i]
        w[:, i:] -= torch.outer(error, u[i, i:])
        return w

    checks.check_gptq_step(outer_form, hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 7, out
    assert "all 6 cases pass" in out and "all 8 cases pass" in out, out


def check_int4_refusing(quantize_groups, dequantize_groups, *, hidden=False):
    """check_int4_groups, with a quantize_groups that refuses a group size that does not divide
    the row before it looks anything up: a learner who knows that rule and memorized the rest."""
    def refusing(w, g):
        if w.shape[1] % g:
            raise ValueError("the group size must divide the row")
        return quantize_groups(w, g)

    checks.check_int4_groups(refusing, dequantize_groups, hidden=hidden)


def check_gptq_on_rounded_columns(step, *, hidden=False):
    """check_gptq_step for a step given column i already rounded, a tensor: round_column is a
    new function at every check, so a learner can only memorize the plain data."""
    checks.check_gptq_step(lambda w, u, i, round_column: step(w, u, i, round_column(w[:, i])),
                           hidden=hidden)


def gptq_step_on_rounded(w, u, i, rounded):
    return gptq_step(w, u, i, lambda column: rounded)


@pytest.mark.parametrize("check, right, args", [
    (checks.check_absmax_int8, q_absmax, (dq_absmax,)),
    (checks.check_quantize_int8, per_channel, ()),
    (check_int4_refusing, q_groups, (dq_groups,)),
    (check_gptq_on_rounded_columns, gptq_step_on_rounded, ()),
])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right, args):
    assert_hidden_cases_catch_memorizing(check, right, *args)


def test_the_hidden_cases_speak_chinese(chinese, capsys):
    checks.check_quantize_int8(per_channel, hidden=True)
    assert "✅ 逐通道 int8：全部 6 个用例通过" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="就不会除以 0"):
        checks.check_quantize_int8(lambda w: per_channel(w, zero_guard=False), hidden=True)
    with pytest.raises(CheckFailed, match="16 不能整除 24"):
        checks.check_int4_groups(no_value_error, dq_groups, hidden=True)


# --- 5 · FP8 with one scale per block (lesson 07c) ---------------------------------------------

def fp8_blocks(w, block):
    out = torch.empty_like(w)
    for i in range(0, w.shape[0], block):
        for j in range(0, w.shape[1], block):
            tile = w[i:i + block, j:j + block]
            s = tile.abs().max() / 448
            s = s if s != 0 else torch.tensor(1.0)
            out[i:i + block, j:j + block] = (tile / s).to(torch.float8_e4m3fn).float() * s
    return out


def fp8_blocks_by_reciprocal(w, block):
    """The same rounding with the scale applied as a product: a rare value may land on the
    neighbouring FP8 number, which the checker accepts."""
    out = torch.empty_like(w)
    for i in range(0, w.shape[0], block):
        for j in range(0, w.shape[1], block):
            tile = w[i:i + block, j:j + block]
            top = tile.abs().max()
            inv = 448 / top if top != 0 else torch.tensor(1.0)
            out[i:i + block, j:j + block] = (tile * inv).to(torch.float8_e4m3fn).float() / inv
    return out


@pytest.mark.parametrize("hidden", [False, True])
def test_fp8_blocks_passes_right_answers_computed_either_way(hidden, capsys):
    checks.check_fp8_blocks(fp8_blocks, hidden=hidden)
    checks.check_fp8_blocks(fp8_blocks_by_reciprocal, hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 2


@pytest.mark.parametrize("hidden", [False, True])
def test_fp8_blocks_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_fp8_blocks(f, hidden=hidden), {
        kind: (lambda w, block, kind=kind: checks._fp8_block_variant(w, block, kind),
               words[0].split(":")[0])
        for kind, words in checks.FP8_BLOCK_MISTAKES})


def test_fp8_blocks_without_a_hint_says_the_rule_and_a_wrong_shape_is_named():
    with pytest.raises(CheckFailed, match=r"s = max\|block\| / 448"):
        checks.check_fp8_blocks(lambda w, block: fp8_blocks(w, block) * 1.01)
    with pytest.raises(CheckFailed, match="has shape"):
        checks.check_fp8_blocks(lambda w, block: fp8_blocks(w, block)[:1])


@pytest.mark.parametrize("hidden", [False, True])
def test_fp8_blocks_stub_says_not_written_yet(hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_fp8_blocks(unwritten, hidden=hidden)


def test_fp8_blocks_hidden_cases_catch_memorizing():
    assert_hidden_cases_catch_memorizing(checks.check_fp8_blocks, fp8_blocks)


def test_fp8_blocks_hints_come_in_chinese(chinese):
    with pytest.raises(CheckFailed, match="每个 block x block 的块要有自己的缩放因子"):
        checks.check_fp8_blocks(lambda w, block: checks._fp8_block_variant(w, block,
                                                                           "per tensor"))
