"""Checkers for exercises/07_quantization.ipynb: absmax int8 for a whole tensor and its inverse,
int8 with one scale per output channel (what minillm's Int8Linear stores,
`minillm.quant.int8.quantize_int8`), and group-wise int4 with a scale and a minimum (GGUF Q4_1's
idea, `minillm.quant.basics.zeropoint_quantize`), one step of GPTQ (`minillm.quant.gptq`), and
FP8 with one scale per block (lesson 07c, `minillm.quant.float_formats`), each compared with
minillm on random tensors. Every message says both languages side by side (`say`)."""

from __future__ import annotations

import torch

from ...quant.basics import zeropoint_quantize
from ...quant.gptq import hessian, inverse_cholesky
from ...quant.grid import fit, snap
from ...quant.int8 import dequantize_int8, quantize_int8
from ...quant.float_formats import Scheme, fake_quantize
from ._base import (CheckFailed, call, checker, end_variant_check, expect, expect_raises,
                    matching_mistake, number_or_none, passed, short, with_hint)
from ..language import say


def _rand(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _tensor(value, what, shape=None):
    if not isinstance(value, torch.Tensor):
        raise CheckFailed(say(f"{what} is {type(value).__name__} {short(value)}; return a "
                              "torch.Tensor",
                              f"{what} 是 {type(value).__name__} {short(value)}；"
                              "请返回一个 torch.Tensor"))
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailed(say(f"{what} has shape {tuple(value.shape)}; expected {tuple(shape)}",
                              f"{what} 的形状是 {tuple(value.shape)}，应为 {tuple(shape)}"))
    return value


# --- 1 · absmax int8 for a whole tensor ----------------------------------------------------------

def _int8_cases(hidden=False):
    if hidden:
        return _hidden_int8_cases()
    outlier = _rand(64, seed=2)
    outlier[10] = 25.0
    return [(say("a random tensor of 100 numbers", "一个含 100 个随机数的张量"),
             _rand(100, seed=0)),
            (say("a random (8, 16) weight", "一个随机的 (8, 16) 权重"),
             _rand(8, 16, seed=1, scale=0.05)),
            (say("a tensor with one outlier", "一个带一个离群值的张量"), outlier),
            (say("an all-negative tensor", "一个全为负数的张量"), -_rand(20, seed=3).abs() - 1.0),
            (say("a (3, 4, 5) tensor", "一个 (3, 4, 5) 的张量"),
             _rand(3, 4, 5, seed=4, scale=7.0)),
            (say("a tensor whose largest value is positive", "一个最大值为正数的张量"),
             _rand(50, seed=5).abs() + 0.1)]


def _hidden_int8_cases():
    outlier = _rand(48, seed=52)
    outlier[5] = -40.0  # the largest |x| is a negative number
    return [(say("a random tensor of 257 numbers", "一个含 257 个随机数的张量"),
             _rand(257, seed=50)),
            (say("a random (16, 8) weight", "一个随机的 (16, 8) 权重"),
             _rand(16, 8, seed=51, scale=0.02)),
            (say("a tensor with one negative outlier", "一个带一个负离群值的张量"), outlier),
            (say("an all-positive (4, 6) tensor", "一个全为正数的 (4, 6) 张量"),
             _rand(4, 6, seed=53).abs() + 0.5),
            (say("a (2, 3, 7) tensor", "一个 (2, 3, 7) 的张量"),
             _rand(2, 3, 7, seed=54, scale=0.3)),
            (say("a tensor of one negative number", "一个只含一个负数的张量"),
             torch.tensor([-2.5]))]


def _one_scale(scale, what) -> float:
    value = number_or_none(scale)
    if value is not None:
        return value
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        return float(scale.reshape(()).item())
    if isinstance(scale, torch.Tensor):
        raise CheckFailed(say(f"{what} has shape {tuple(scale.shape)}: this task uses one scale "
                              "for the whole tensor, max|x| / 127 (a scale per row is the "
                              "per-channel int8 of the next task)",
                              f"{what} 的形状是 {tuple(scale.shape)}：这一题整个张量只用一个缩放"
                              "因子，即 max|x| / 127（每行一个缩放因子是下一题的逐通道 int8）"))
    raise CheckFailed(say(f"{what} is {type(scale).__name__} {short(scale)}; return a number (a "
                          "Python float or a 0-d tensor)",
                          f"{what} 是 {type(scale).__name__} {short(scale)}；请返回一个数"
                          "（Python 的 float 或 0 维张量）"))


@checker
def check_absmax_int8(quantize_absmax, dequantize_absmax, *, hidden=False) -> None:
    """`quantize_absmax(x)` -> (q, scale): int8 q = round(x / scale) with scale = max|x| / 127;
    `dequantize_absmax(q, scale)` -> q * scale, the float tensor q stands for."""
    cases = _int8_cases(hidden)
    scales, qs = [], []
    for what, x in cases:
        got = call(quantize_absmax, x, what=f"quantize_absmax({what})")
        expect(isinstance(got, tuple) and len(got) == 2,
               say(f"quantize_absmax({what}) returned {type(got).__name__}; return a pair "
                   "(q, scale)",
                   f"quantize_absmax({what}) 返回了 {type(got).__name__}；请返回一对 (q, scale)"))
        q = _tensor(got[0], say(f"q for {what}", f"{what}的 q"), x.shape)
        expect(q.dtype == torch.int8,
               say(f"q for {what} has dtype {q.dtype}; store it as torch.int8 "
                   "(.to(torch.int8)) so it takes one byte a number",
                   f"{what}的 q 的 dtype 是 {q.dtype}；请存成 torch.int8（.to(torch.int8)），"
                   "这样每个数只占一个字节"))
        scales.append(_one_scale(got[1], say(f"the scale for {what}", f"{what}的缩放因子")))
        qs.append(q)
    wants = [x.abs().max().item() / 127 for _, x in cases]
    wrong = [i for i, (g, w) in enumerate(zip(scales, wants)) if abs(g - w) > 1e-6 * w]
    if wrong:
        i = wrong[0]
        close = lambda a, b: abs(a - b) <= 1e-6 * max(abs(b), 1e-12)  # noqa: E731
        hint = matching_mistake(scales, [
            (say("divide max|x| by 127, the largest int8 value used on both sides (-127..127), "
                 "not 128",
                 "要用 max|x| 除以 127（int8 正负两边都用到的最大值，范围 -127..127），不是 128"),
             [x.abs().max().item() / 128 for _, x in cases]),
            (say("max - min over 255 is zero-point quantization; absmax uses max|x| / 127",
                 "(max - min) / 255 是零点量化的做法；absmax 用的是 max|x| / 127"),
             [(x.max() - x.min()).item() / 255 for _, x in cases]),
            (say("take the largest absolute value, max|x| (x.abs().max()), not the largest value",
                 "要取绝对值的最大值 max|x|（x.abs().max()），而不是最大值"),
             [x.max().item() / 127 for _, x in cases]),
            (say("divide max|x| by 127, not by 255", "要用 max|x| 除以 127，不是除以 255"),
             [x.abs().max().item() / 255 for _, x in cases]),
        ], close)
        raise CheckFailed(say(f"the scale for {cases[i][0]} is {scales[i]:.6g}; expected "
                              f"max|x| / 127 = {wants[i]:.6g}" + (f": {hint}" if hint else ""),
                              f"{cases[i][0]}的缩放因子是 {scales[i]:.6g}，应为 max|x| / 127 = "
                              f"{wants[i]:.6g}" + (f"：{hint}" if hint else "")))
    for (what, x), q, scale in zip(cases, qs, wants):
        want_q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
        if torch.equal(q, want_q):
            continue
        if torch.equal(q, torch.trunc(x / scale).to(torch.int8)):
            raise CheckFailed(say(f"q for {what} is truncated towards zero; round to the nearest "
                                  "integer (torch.round) so the error is at most half a step",
                                  f"{what}的 q 是向零截断的；请四舍五入到最近的整数"
                                  "（torch.round），这样误差最多半个步长"))
        off = (q.int() - want_q.int()).abs()
        expect(off.max().item() <= 1 and (off > 0).float().mean().item() < 0.01,
               say(f"q for {what} differs from round(x / scale) in {int((off > 0).sum())} places",
                   f"{what}的 q 有 {int((off > 0).sum())} 处与 round(x / scale) 不同"))
    for (what, x), q, scale in zip(cases, qs, wants):
        back = call(dequantize_absmax, q, scale, what=f"dequantize_absmax(q, {scale:.4g})")
        back = _tensor(back, say(f"dequantize_absmax(q of {what}, scale)",
                                 f"dequantize_absmax({what}的 q, scale)"), x.shape)
        expect(back.is_floating_point(),
               say(f"dequantize_absmax must return a float tensor, got {back.dtype}: convert q "
                   "first (q.float() * scale)",
                   f"dequantize_absmax 应当返回浮点张量，却得到 {back.dtype}：先把 q 转成浮点数"
                   "（q.float() * scale）"))
        err = (back.float() - x).abs().max().item()
        expect(err <= scale / 2 + 1e-6,
               say(f"the round trip of {what} is off by up to {err:.3g}, more than half a step "
                   f"({scale / 2:.3g}); dequantize with q * scale",
                   f"{what}量化再反量化后误差最大达 {err:.3g}，超过了半个步长"
                   f"（{scale / 2:.3g}）；反量化用 q * scale"))
    passed(say("absmax int8 quantize / dequantize", "absmax int8 量化 / 反量化"), len(cases))


# --- 2 · int8 with one scale per output channel ----------------------------------------------

def _channel_cases(hidden=False):
    if hidden:
        return _hidden_channel_cases()
    rows = _rand(6, 16, seed=11, scale=0.05)
    rows[2] *= 40  # one row much larger than the others
    zero = _rand(4, 8, seed=12)
    zero[1] = 0.0  # an all-zero row
    return [(say("a (8, 16) weight", "一个 (8, 16) 的权重"), _rand(8, 16, seed=10, scale=0.1)),
            (say("a weight with one large row", "一个有一行特别大的权重"), rows),
            (say("a weight with an all-zero row", "一个有一行全为 0 的权重"), zero),
            (say("a (3, 64) weight", "一个 (3, 64) 的权重"), _rand(3, 64, seed=13)),
            (say("a (1, 5) weight", "一个 (1, 5) 的权重"), _rand(1, 5, seed=14, scale=3.0))]


def _hidden_channel_cases():
    rows = _rand(5, 12, seed=61, scale=0.02)
    rows[0] *= 100  # the first row much larger than the others
    zero = _rand(5, 6, seed=62)
    zero[0] = 0.0  # two all-zero rows, the first and the last
    zero[4] = 0.0
    return [(say("a (5, 12) weight", "一个 (5, 12) 的权重"), _rand(5, 12, seed=60, scale=0.2)),
            (say("a weight with one large row", "一个有一行特别大的权重"), rows),
            (say("a weight with two all-zero rows", "一个有两行全为 0 的权重"), zero),
            (say("a (7, 3) weight", "一个 (7, 3) 的权重"), _rand(7, 3, seed=63)),
            (say("a (2, 32) weight", "一个 (2, 32) 的权重"), _rand(2, 32, seed=64, scale=0.5)),
            (say("a (6, 6) weight", "一个 (6, 6) 的权重"), _rand(6, 6, seed=65, scale=2.0))]


@checker
def check_quantize_int8(quantize_per_channel, *, hidden=False) -> None:
    """`quantize_per_channel(w)` -> (q int8 (out, in), scale (out,)): the row's max|w| / 127 for
    each row (1 for an all-zero row), q = round(w / scale[:, None]), as quantize_int8."""
    cases = _channel_cases(hidden)
    answers = []
    for what, w in cases:
        got = call(quantize_per_channel, w, what=f"quantize_per_channel({what})")
        expect(isinstance(got, tuple) and len(got) == 2,
               say(f"quantize_per_channel({what}) returned {type(got).__name__}; return "
                   "(q, scale)",
                   f"quantize_per_channel({what}) 返回了 {type(got).__name__}；"
                   "请返回 (q, scale)"))
        q = _tensor(got[0], say(f"q for {what}", f"{what}的 q"), w.shape)
        scale_what = say(f"the scale for {what}", f"{what}的缩放因子")
        scale = _tensor(got[1], scale_what)
        if tuple(scale.shape) == (w.shape[0], 1):
            raise CheckFailed(say(f"the scale for {what} has shape {tuple(scale.shape)}: drop the "
                                  f"last axis (amax(dim=1) without keepdim) to get "
                                  f"({w.shape[0]},)",
                                  f"{what}的缩放因子形状是 {tuple(scale.shape)}：去掉最后一维"
                                  f"（amax(dim=1) 不加 keepdim），得到 ({w.shape[0]},)"))
        if scale.numel() == 1 and w.shape[0] > 1:
            raise CheckFailed(say(f"the scale for {what} is one number for the whole weight; give "
                                  "each row (output channel) its own: w.abs().amax(dim=1) / 127",
                                  f"{what}的缩放因子是整个权重共用的一个数；应当让每一行"
                                  "（每个输出通道）各有一个：w.abs().amax(dim=1) / 127"))
        if tuple(scale.shape) == (w.shape[1],) and w.shape[0] != w.shape[1]:
            raise CheckFailed(say(f"the scale for {what} has one entry per column; a channel is "
                                  "an output feature, a row of the weight: amax(dim=1)",
                                  f"{what}的缩放因子是每列一个；通道指的是输出特征，"
                                  "也就是权重的一行：amax(dim=1)"))
        _tensor(scale, scale_what, (w.shape[0],))
        expect(q.dtype == torch.int8,
               say(f"q for {what} has dtype {q.dtype}; store it as torch.int8",
                   f"{what}的 q 的 dtype 是 {q.dtype}；请存成 torch.int8"))
        answers.append((q, scale.float()))
    _check_channel_scales(cases, [scale for _, scale in answers])
    _check_channel_codes(cases, [q for q, _ in answers])
    for (what, w), (q, scale) in zip(cases, answers):
        err = (dequantize_int8(q, scale) - w).abs().max().item()
        expect(err <= quantize_int8(w)[1].max().item() / 2 + 1e-6,
               say(f"the round trip q * scale[:, None] of {what} is off by up to {err:.3g}",
                   f"{what}经 q * scale[:, None] 还原后误差最大达 {err:.3g}"))
    passed(say("per-channel int8", "逐通道 int8"), len(cases))


def _guarded(scale):
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def _same_on(rows):
    """Whether two scales agree (to float32 rounding) on the rows `rows` picks out."""
    return lambda a, b: bool(torch.allclose(a[rows], b[rows], rtol=1e-6, atol=0))


def _shift(got, want, rows):
    """The amount c when every scale of `rows` is want + c for one small c != 0, else None: a
    guard added to every row (scale + 1e-8) to avoid dividing by 0."""
    diffs = torch.cat([(g.double() - w.double())[r] for g, w, r in zip(got, want, rows)])
    wants = torch.cat([w.double()[r] for w, r in zip(want, rows)])
    if diffs.numel() == 0:
        return None
    c = diffs.median()
    if c == 0 or abs(c) > 0.01 * wants.min():
        return None
    slack = 0.25 * abs(c) + 4 * wants * 2.0 ** -24  # float32 rounds each sum a little
    return float(c) if bool(((diffs - c).abs() <= slack).all()) else None


def _check_channel_scales(cases, scales) -> None:
    """Each row's max|w| / 127 on the rows with a nonzero weight, then 1 on the all-zero rows;
    a mistake is named only when it gives the learner's scales on every case."""
    wants = [quantize_int8(w)[1] for _, w in cases]
    live = [~(w == 0).all(dim=1) for _, w in cases]
    wrong = [i for i, (s, want, r) in enumerate(zip(scales, wants, live))
             if not _same_on(r)(s, want)]
    if wrong:
        i = wrong[0]
        what, w = cases[i]
        row = next(r for r in range(w.shape[0]) if live[i][r]
                   and not torch.allclose(scales[i][r], wants[i][r], rtol=1e-6, atol=0))
        got, want = scales[i][row].item(), wants[i][row].item()
        same_live = lambda a, b: all(_same_on(r)(x, y) for x, y, r in zip(a, b, live))  # noqa
        hint = matching_mistake([scales], [
            (say("a row's scale comes from its largest absolute value, w.abs().amax(dim=1); "
                 "w.amax(dim=1) is the largest value, which misses a larger negative one and "
                 "can even be negative",
                 "每行的缩放因子来自该行绝对值的最大值 w.abs().amax(dim=1)；w.amax(dim=1) 是"
                 "最大值，它会漏掉绝对值更大的负数，甚至可能是负的"),
             [[_guarded(w.amax(dim=1) / 127) for _, w in cases]]),
            (say("every row got the same scale, the whole weight's max|w| / 127: take each "
                 "row's own largest |w| with w.abs().amax(dim=1)",
                 "每一行拿到的都是同一个缩放因子，即整个权重的 max|w| / 127：应当用 "
                 "w.abs().amax(dim=1) 取每一行自己的最大 |w|"),
             [[(w.abs().max() / 127).expand(w.shape[0]) for _, w in cases]]),
            (say("divide each row's max|w| by 127, the largest int8 code used on both sides "
                 "(-127..127), not by 128",
                 "每行的 max|w| 要除以 127（int8 正负两边都用到的最大编码，范围 -127..127），"
                 "不是 128"),
             [[_guarded(w.abs().amax(dim=1) / 128) for _, w in cases]]),
        ], same_live)
        shift = None if hint else _shift(scales, wants, live)
        if shift is not None:
            hint = say(f"every scale is {shift:+.3g} away from max|w| / 127: a small number "
                       "added to every row to avoid dividing by 0 (+ 1e-8) changes them all. "
                       "Leave the other rows at max|w| / 127 and give only an all-zero row the "
                       "scale 1: torch.where(scale == 0, torch.ones_like(scale), scale)",
                       f"每个缩放因子都与 max|w| / 127 相差 {shift:+.3g}：为了避免除以 0 而给"
                       "每一行都加上的小数（+ 1e-8）把它们全改了。其他行保持 max|w| / 127，只给"
                       "全为 0 的行缩放因子 1：torch.where(scale == 0, torch.ones_like(scale), "
                       "scale)")
        raise CheckFailed(say(f"the scale of row {row} of {what} is {got:.9g}; expected that "
                              f"row's max|w| / 127 = {want:.9g}" + (f": {hint}" if hint else ""),
                              f"{what}第 {row} 行的缩放因子是 {got:.9g}，应为该行的 max|w| / 127 "
                              f"= {want:.9g}" + (f"：{hint}" if hint else "")))
    for (what, w), scale, r in zip(cases, scales, live):
        for row in (~r).nonzero().flatten().tolist():
            got = scale[row].item()
            if got == 1:
                continue
            if not (got > 0 and got < float("inf")):
                raise CheckFailed(say(
                    f"the scale of the all-zero row {row} of {what} is {got:.3g}: such a row has "
                    "max|w| = 0; give it the scale 1 (its q is 0 anyway) so that nothing is "
                    "divided by 0",
                    f"{what}中全为 0 的第 {row} 行，缩放因子是 {got:.3g}：这样的行 max|w| = 0；"
                    "给它缩放因子 1（反正它的 q 都是 0），这样就不会除以 0"))
            raise CheckFailed(say(
                f"the scale of the all-zero row {row} of {what} is {got:.3g}; this task gives "
                "such a row the scale 1 (its q is 0 whatever the scale): "
                "torch.where(scale == 0, torch.ones_like(scale), scale) rather than a floor "
                "such as clamp(min=1e-8)",
                f"{what}中全为 0 的第 {row} 行，缩放因子是 {got:.3g}；这道题给这样的行缩放因子 1"
                "（不管缩放因子是多少，它的 q 都是 0）：用 "
                "torch.where(scale == 0, torch.ones_like(scale), scale)，而不是 "
                "clamp(min=1e-8) 这样的下限"))


def _codes_close(a, b) -> bool:
    """int8 codes equal up to a float rounding at a tie: off by at most 1 in under 1% places."""
    off = (a.int() - b.int()).abs()
    return off.max().item() <= 1 and (off > 0).float().mean().item() < 0.01


def _check_channel_codes(cases, codes) -> None:
    """q = round(w / scale[:, None]) clamped to -127..127; a mistake is named only when it gives
    the learner's q on every case."""
    scales = [quantize_int8(w)[1] for _, w in cases]
    wants = [quantize_int8(w)[0] for _, w in cases]
    wrong = [i for i, (q, want) in enumerate(zip(codes, wants)) if not _codes_close(q, want)]
    if not wrong:
        return

    def codes_by(rule):
        return [[rule(w, s).clamp(-127, 127).to(torch.int8)
                 for (_, w), s in zip(cases, scales)]]

    hint = matching_mistake([codes], [
        (say("q is cut towards zero, not rounded (.to(torch.int8) or .int() on a float drops the "
             "fraction): round to the nearest integer with torch.round first, so the error is "
             "at most half a step",
             "q 是向零截断的，不是四舍五入（对浮点数直接 .to(torch.int8) 或 .int() 会丢掉小数"
             "部分）：先用 torch.round 四舍五入到最近的整数，这样误差最多半个步长"),
         codes_by(lambda w, s: torch.trunc(w / s[:, None]))),
        (say("q is rounded down (torch.floor): round to the nearest integer with torch.round",
             "q 是向下取整的（torch.floor）：请用 torch.round 四舍五入到最近的整数"),
         codes_by(lambda w, s: torch.floor(w / s[:, None]))),
        (say("every row was divided by the same number, the largest scale: divide each row by "
             "its own scale, w / scale[:, None]",
             "每一行都除以了同一个数，即最大的缩放因子：每一行要除以它自己的缩放因子，"
             "w / scale[:, None]"),
         codes_by(lambda w, s: torch.round(w / s.max()))),
        (say("w was multiplied by the scale; quantizing divides by it: "
             "round(w / scale[:, None])",
             "w 乘上了缩放因子；量化是除以它：round(w / scale[:, None])"),
         codes_by(lambda w, s: torch.round(w * s[:, None]))),
    ], lambda a, b: all(_codes_close(x, y) for x, y in zip(a, b)))
    i = wrong[0]
    what = cases[i][0]
    off = (codes[i].int() - wants[i].int()).abs()
    r, c = (off > 0).nonzero()[0].tolist()
    got, want = int(codes[i][r, c]), int(wants[i][r, c])
    raise CheckFailed(say(f"q for {what} differs from round(w / scale[:, None]) in "
                          f"{int((off > 0).sum())} places (row {r}, column {c}: {got}, expected "
                          f"{want})" + (f": {hint}" if hint else ""),
                          f"{what}的 q 有 {int((off > 0).sum())} 处与 round(w / scale[:, None]) "
                          f"不同（第 {r} 行第 {c} 列：{got}，应为 {want}）"
                          + (f"：{hint}" if hint else "")))


# --- 3 · int4 in groups, with a scale and a minimum ------------------------------------------

INT4_CASES = [((4, 64), 32), ((3, 96), 32), ((2, 64), 16), ((5, 128), 64), ((1, 8), 8),
              ((6, 48), 16)]
HIDDEN_INT4_CASES = [((2, 32), 32), ((3, 48), 8), ((4, 40), 20), ((1, 16), 4), ((2, 256), 128),
                     ((5, 24), 12)]


@checker
def check_int4_groups(quantize_groups, dequantize_groups, *, hidden=False) -> None:
    """`quantize_groups(w, group_size)` -> (q, scale, minimum), per group of `group_size` numbers of
    a row: minimum = the group's min, scale = (max - min) / 15, q = round((w - minimum) / scale)
    in 0..15, shapes (rows, cols), (rows, cols/group_size), (rows, cols/group_size);
    `dequantize_groups(q, scale, minimum)` -> q * scale + minimum, shape (rows, cols)."""
    cases = HIDDEN_INT4_CASES if hidden else INT4_CASES
    for i, (shape, g) in enumerate(cases):
        w = (_rand(*shape, seed=70 + i, scale=0.3) - 0.04 * i if hidden
             else _rand(*shape, seed=20 + i, scale=0.1) + 0.05 * i)
        what = f"quantize_groups(w of shape {shape}, group_size={g})"
        got = call(quantize_groups, w, g, what=what)
        expect(isinstance(got, tuple) and len(got) == 3,
               say(f"{what} returned {type(got).__name__}; return (q, scale, minimum)",
                   f"{what} 返回了 {type(got).__name__}；请返回 (q, scale, minimum)"))
        q, scale, minimum = got
        rows, cols = shape
        for name, t, want_shape in [("q", q, shape), ("scale", scale, (rows, cols // g)),
                                    ("minimum", minimum, (rows, cols // g))]:
            t_what = say(f"{name} from {what}", f"{what} 给出的 {name}")
            _tensor(t, t_what)
            if name != "q" and tuple(t.shape) == (rows, cols // g, 1):
                raise CheckFailed(say(f"{name} from {what} has shape {tuple(t.shape)}: drop the "
                                      f"last axis (squeeze(-1)) to get {want_shape}",
                                      f"{t_what}形状是 {tuple(t.shape)}：去掉最后一维"
                                      f"（squeeze(-1)），得到 {want_shape}"))
            _tensor(t, t_what, want_shape)
        expect(not q.is_floating_point() or bool((q == q.round()).all()),
               say(f"q from {what} is not whole numbers; round it",
                   f"{what} 给出的 q 不是整数；请把它四舍五入"))
        expect(q.min().item() >= 0 and q.max().item() <= 15,
               say(f"q from {what} runs from {q.min().item()} to {q.max().item()}; 4 bits hold "
                   "0..15 (subtract the minimum before dividing by the scale)",
                   f"{what} 给出的 q 从 {q.min().item()} 到 {q.max().item()}；4 比特只能存 0..15"
                   "（先减去最小值，再除以缩放因子）"))
        _, ref_scale, ref_min = zeropoint_quantize(w, 4, "group", g)
        ref_scale, ref_min = ref_scale.reshape(rows, -1), ref_min.reshape(rows, -1)
        if torch.allclose(scale.float(), ref_scale * 15 / 16, rtol=1e-5):
            raise CheckFailed(say(f"scale from {what} divides by 16; 4 bits give 16 levels, "
                                  "0..15, so there are 15 steps: divide (max - min) by 15",
                                  f"{what} 给出的 scale 除的是 16；4 比特有 0..15 共 16 个取值，"
                                  "之间只有 15 步：应当用 (max - min) 除以 15"))
        expect(torch.allclose(minimum.float(), ref_min, rtol=1e-5, atol=1e-7),
               say(f"minimum from {what} is not each group's smallest weight; group the numbers "
                   f"with w.reshape(rows, cols // group_size, group_size) and take .amin(-1)",
                   f"{what} 给出的 minimum 不是每组里最小的权重；先用 "
                   "w.reshape(rows, cols // group_size, group_size) 分组，再取 .amin(-1)"))
        expect(torch.allclose(scale.float(), ref_scale, rtol=1e-4, atol=1e-8),
               say(f"scale from {what} is not (max - min) / 15 of each group",
                   f"{what} 给出的 scale 不是每组的 (max - min) / 15"))
        _check_group_codes(what, w, g, q)
        back = call(dequantize_groups, q, scale, minimum,
                    what=say(f"dequantize_groups(q, scale, minimum) for {what}",
                             f"对 {what} 的 dequantize_groups(q, scale, minimum)"))
        _tensor(back, say(f"dequantize_groups(...) for {what}",
                          f"对 {what} 的 dequantize_groups(...)"), shape)
        step = ref_scale.repeat_interleave(g, dim=1)
        err = (back.float() - w).abs()
        if not bool((err <= step / 2 + 1e-6).all()):
            codes = q.float().reshape(rows, cols // g, g)
            hint = matching_mistake([back.float()], [
                (say("add each group's minimum back: q * scale + minimum",
                     "要把每组的最小值加回去：q * scale + minimum"),
                 [(codes * ref_scale[..., None]).reshape(rows, cols)]),
            ], lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-6))
            raise CheckFailed(say(
                f"dequantize_groups(q, scale, minimum) for {what} is off by up to "
                f"{err.max().item():.3g}, more than half a step of its group, though q, scale "
                "and minimum are right: " + (hint or "q * scale + minimum, with each group's "
                                             "own scale and minimum"),
                f"对 {what} 的 dequantize_groups(q, scale, minimum) 误差最大达 "
                f"{err.max().item():.3g}，超过了所在组的半个步长，而 q、scale 和 minimum 都是对的："
                + (hint or "应为 q * scale + minimum，每组用它自己的 scale 和 minimum")))
    for cols, g in ((24, 16), (9, 2)) if hidden else ((40, 32), (10, 4)):
        expect_raises(quantize_groups, _rand(2, cols, seed=19 if hidden else 9), g,
                      error=ValueError,
                      what=say(f"quantize_groups(w with rows of {cols}, group_size={g})",
                               f"quantize_groups(每行 {cols} 个数的 w, group_size={g})"),
                      why=say(f"{g} does not divide {cols}", f"{g} 不能整除 {cols}"))
    passed(say("int4 group-wise quantize / dequantize", "int4 分组量化 / 反量化"),
           len(cases) + 2)


def _check_group_codes(what, w, g, q) -> None:
    """q = round((w - minimum) / scale) in each group, up to a float rounding at a tie (an
    exact value within 1e-3 of a half-step); a quantize mistake is named here, before the round
    trip through the learner's dequantize."""
    rows, cols = w.shape
    x = w.reshape(rows, cols // g, g)
    lo = x.amin(dim=-1, keepdim=True)
    scale = (x.amax(dim=-1, keepdim=True) - lo) / 15
    exact = ((x - lo) / scale).reshape(rows, cols)
    want = torch.round(exact).clamp(0, 15)
    got = q.float()
    near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-3
    off = (got - want).abs()
    if bool(((off == 0) | ((off <= 1) & near_tie)).all()):
        return
    hint = matching_mistake([got], [
        (say("q is rounded down (torch.floor, torch.trunc, or .int() / .to(...) on a float, "
             "which drop the fraction): round to the nearest code with torch.round",
             "q 是向下取整的（torch.floor、torch.trunc，或对浮点数用 .int() / .to(...)，都会丢掉"
             "小数部分）：请用 torch.round 四舍五入到最近的编码"),
         [exact.floor().clamp(0, 15)]),
        (say("q was computed from w itself; subtract the group's minimum first: "
             "q = round((w - minimum) / scale)",
             "q 是直接由 w 算出来的；应当先减去该组的最小值：q = round((w - minimum) / scale)"),
         [torch.round(x / scale).clamp(0, 15).reshape(rows, cols)]),
        (say("q was computed with the whole row's minimum and scale; each group of "
             "group_size numbers has its own",
             "q 用的是整行的最小值和缩放因子；每组 group_size 个数各有自己的一套"),
         [torch.round((w - w.amin(dim=1, keepdim=True))
                      / ((w.amax(dim=1, keepdim=True) - w.amin(dim=1, keepdim=True)) / 15)
                      ).clamp(0, 15)]),
    ], lambda a, b: torch.equal(a, b))
    r, c = (off > 0).nonzero()[0].tolist()
    raise CheckFailed(say(f"q from {what} differs from round((w - minimum) / scale) in "
                          f"{int((off > 0).sum())} places (row {r}, column {c}: {got[r, c]:g}, "
                          f"expected {want[r, c]:g})" + (f": {hint}" if hint else ""),
                          f"{what} 给出的 q 有 {int((off > 0).sum())} 处与 "
                          f"round((w - minimum) / scale) 不同（第 {r} 行第 {c} 列：{got[r, c]:g}，"
                          f"应为 {want[r, c]:g}）" + (f"：{hint}" if hint else "")))


# --- 4 · one step of GPTQ ------------------------------------------------------------------------

GPTQ_CASES = [((4, 6), 0), ((4, 6), 2), ((5, 8), 7), ((3, 10), 4), ((6, 5), 1)]
HIDDEN_GPTQ_CASES = [((3, 7), 0), ((5, 5), 4), ((2, 9), 3), ((4, 12), 10), ((7, 4), 1)]


def _gptq_case(shape, seed):
    """(w, u, round_column): a weight, the upper Cholesky factor of its inverse Hessian from
    correlated inputs, and rounding to a 3-bit grid with one scale and minimum per row."""
    rows, cols = shape
    w = _rand(rows, cols, seed=seed)
    mix = _rand(cols, cols, seed=seed + 100, scale=0.5)
    x = _rand(4 * cols, cols, seed=seed + 200) @ (torch.eye(cols) + mix)
    u = inverse_cholesky(hessian(x)).float()
    scale, minimum = fit(w, 3)
    return w, u, lambda column: snap(column[:, None], scale, minimum, 3)[:, 0]


def _gptq_step(w, u, i, round_column, sign=1.0, divide=True, spread=True, write=True):
    w = w.clone()
    q = round_column(w[:, i])
    error = (w[:, i] - q) / (u[i, i] if divide else 1.0)
    if spread:
        w[:, i + 1:] -= sign * error[:, None] * u[i, i + 1:][None, :]
    if write:
        w[:, i] = q
    return w


@checker
def check_gptq_step(gptq_step, *, hidden=False) -> None:
    """`gptq_step(w, u, i, round_column)` -> a new weight: column i rounded
    (`round_column(w[:, i])`), and every later column j moved by -(error) * u[i, j], where
    error = (w[:, i] - rounded) / u[i, i]; the columns before i unchanged."""
    seed = 80 if hidden else 30
    cases = [(shape, i, *_gptq_case(shape, seed=seed + n))
             for n, (shape, i) in enumerate(HIDDEN_GPTQ_CASES if hidden else GPTQ_CASES)]
    answers = []
    for shape, i, w, u, round_column in cases:
        what = say(f"gptq_step(w of shape {shape}, u, i={i}, round_column)",
                   f"gptq_step(形状为 {shape} 的 w, u, i={i}, round_column)")
        got = call(gptq_step, w, u, i, round_column, what=what)
        answers.append(_tensor(got, say(f"{what} returned", f"{what} 的返回值"), shape).float())
    wants = [_gptq_step(w, u, i, r) for _, i, w, u, r in cases]
    close = lambda a, b: torch.allclose(a, b, atol=1e-5, rtol=1e-4)  # noqa: E731
    if all(close(a, b) for a, b in zip(answers, wants)):
        passed(say("one GPTQ step", "GPTQ 的一步"), len(cases))
        return
    hint = matching_mistake(answers, [
        (say("the later columns moved the wrong way: subtract error * u[i, j] (w[:, j] -= ...), "
             "so they cancel the error column i made",
             "后面的列移反了方向：应当减去 error * u[i, j]（w[:, j] -= ...），"
             "这样才能抵消第 i 列造成的误差"),
         [_gptq_step(w, u, i, r, sign=-1.0) for _, i, w, u, r in cases]),
        (say("divide the rounding error by u[i, i] before spreading it: error = (w[:, i] - q) / "
             "u[i, i]",
             "把舍入误差分摊出去之前，先除以 u[i, i]：error = (w[:, i] - q) / u[i, i]"),
         [_gptq_step(w, u, i, r, divide=False) for _, i, w, u, r in cases]),
        (say("the columns after i did not change: spread the error over them with row i of u, "
             "w[:, i + 1:] -= error[:, None] * u[i, i + 1:]",
             "第 i 列之后的列没有变：要用 u 的第 i 行把误差分摊给它们，"
             "w[:, i + 1:] -= error[:, None] * u[i, i + 1:]"),
         [_gptq_step(w, u, i, r, spread=False) for _, i, w, u, r in cases]),
        (say("column i itself is not rounded: put round_column(w[:, i]) in it",
             "第 i 列本身没有舍入：把 round_column(w[:, i]) 放进这一列"),
         [_gptq_step(w, u, i, r, write=False) for _, i, w, u, r in cases]),
    ], close)
    n = next(k for k, (a, b) in enumerate(zip(answers, wants)) if not close(a, b))
    shape, i, *_ = cases[n]
    wrong_columns = [c for c in range(shape[1])
                     if not close(answers[n][:, c], wants[n][:, c])]
    raise CheckFailed(say(
        f"gptq_step(w of shape {shape}, u, i={i}, round_column) differs from one GPTQ step in "
        f"column(s) {wrong_columns}" + (f": {hint}" if hint else
        "; the columns before i stay, column i is rounded, the later ones move by "
        "-error * u[i, j] with error = (w[:, i] - rounded) / u[i, i]"),
        f"gptq_step(形状为 {shape} 的 w, u, i={i}, round_column) 与 GPTQ 的一步在第 "
        f"{wrong_columns} 列上不同" + (f"：{hint}" if hint else
        "；第 i 列之前的列不变，第 i 列舍入到网格上，之后的每一列 j 移动 -error * u[i, j]，"
        "其中 error = (w[:, i] - rounded) / u[i, i]")))


# --- 5 · FP8 with one scale per block (lesson 07c) ---------------------------------------------

def _fp8_block_cases(hidden=False):
    """(w, block): weights of several scales and shapes, some not a multiple of the block, one
    with a block of zeros and one with an outlier."""
    seeds = (71, 72, 73, 74, 75) if hidden else (61, 62, 63, 64, 65)
    shapes = (((64, 48), 32), ((100, 70), 64), ((16, 256), 128), ((40, 40), 16), ((3, 5), 2)) \
        if hidden else (((64, 64), 32), ((96, 80), 32), ((256, 256), 128), ((50, 30), 16),
                        ((4, 6), 4))
    cases = []
    for seed, (shape, block) in zip(seeds, shapes):
        w = _rand(*shape, seed=seed) * torch.rand(shape[0], 1,
                                                  generator=torch.Generator().manual_seed(seed))
        cases.append((w, block))
    cases[0][0][:cases[0][1], :cases[0][1]] = 0.0  # a block of zeros stays zeros
    cases[1][0][5, 7] = 30.0                       # an outlier: its own block's scale only
    return cases


def _fp8_block_variant(w, block, kind):
    if kind == "e5m2":
        return fake_quantize(w, Scheme("e5m2", (block, block)))
    tile = {"per tensor": (None, None), "per row": (1, None)}.get(kind, (block, block))
    if kind in ("no rescale", "int8 range", "no abs"):
        rows, cols = w.shape
        out = torch.empty_like(w)
        for i in range(0, rows, block):
            for j in range(0, cols, block):
                t = w[i:i + block, j:j + block]
                top = t.max() if kind == "no abs" else t.abs().max()
                s = top / (127 if kind == "int8 range" else 448)
                s = s if s != 0 else torch.tensor(1.0)
                q = (t / s).to(torch.float8_e4m3fn).float()
                out[i:i + block, j:j + block] = q if kind == "no rescale" else q * s
        return out
    return fake_quantize(w, Scheme("e4m3", tile))


def _same_fp8(got, want) -> bool:
    """Equal to float32 rounding, but for a rare value that a differently computed scale rounds to
    the neighbouring FP8 number (one step, 1/8 of the value at most)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    got = got.float()
    if not torch.isfinite(got).all():
        return False
    off = ~torch.isclose(got, want, rtol=1e-5, atol=0.0)
    return (off.float().mean().item() < 0.01
            and bool(((got - want).abs() <= 0.13 * want.abs() + 1e-30)[off].all()))


FP8_BLOCK_MISTAKES = [
    ("per tensor", ("one scale for the whole tensor: give each block of block x block weights "
                    "its own scale, max|block| / 448",
                    "整个张量只用了一个缩放因子：每个 block x block 的块要有自己的缩放因子，"
                    "max|块| / 448")),
    ("per row", ("one scale per row: the scale belongs to a block of block x block weights, "
                 "rows and columns",
                 "这是每行一个缩放因子：缩放因子属于一个 block x block 的块，行和列都要切")),
    ("e5m2", ("that is e5m2: round to torch.float8_e4m3fn (largest 448)",
              "这是 e5m2：要舍入到 torch.float8_e4m3fn（最大值 448）")),
    ("int8 range", ("the scale maps max|block| to 448, e4m3's largest, not to 127",
                    "缩放因子要把 max|块| 映射到 e4m3 的最大值 448，而不是 127")),
    ("no rescale", ("multiply the rounded numbers by the scale again: the result is the weight, "
                    "not its scaled FP8 code",
                    "舍入之后要再乘回缩放因子：返回的是权重本身，而不是缩放后的 FP8 编码")),
    ("no abs", ("the scale comes from the largest |value|: a block whose largest value is "
                "negative needs abs()",
                "缩放因子来自最大的 |值|：最大的值是负数的块需要先取 abs()")),
]


@checker
def check_fp8_blocks(fp8_blocks, *, hidden=False) -> None:
    """`fp8_blocks(w, block)`: `w` rounded to FP8 e4m3 with one scale per block of block x block
    weights (the last blocks smaller), scaled back to float32: DeepSeek-V3's weight scaling, as
    minillm.quant.float_formats.fake_quantize with Scheme("e4m3", (block, block))."""
    cases = _fp8_block_cases(hidden)
    answers = []
    for w, block in cases:
        what = f"fp8_blocks(<{w.shape[0]} x {w.shape[1]} weight>, {block})"
        got = call(fp8_blocks, w.clone(), block, what=what)
        answers.append(_tensor(got, what, w.shape))
    end_variant_check("fp8_blocks", answers, cases, _fp8_block_variant, FP8_BLOCK_MISTAKES,
                      _fp8_block_failure, _same_fp8)


def _fp8_block_failure(case, got, want, hint) -> str:
    w, block = case
    differ = (~torch.isclose(got.float(), want, rtol=1e-5, atol=0.0)).float().mean()
    return with_hint(say("fp8_blocks(<{r} x {c} weight>, {block}): {share:.0%} of the numbers "
                         "differ from the expected",
                         "fp8_blocks(<{r} x {c} 权重>, {block})：有 {share:.0%} 的数与期望值"
                         "不同", r=w.shape[0], c=w.shape[1], block=block, share=differ.item()),
                     hint, say("; each block: s = max|block| / 448, then "
                               "(block / s).to(torch.float8_e4m3fn).float() * s",
                               "；每个块：s = max|块| / 448，然后 "
                               "(块 / s).to(torch.float8_e4m3fn).float() * s"))
