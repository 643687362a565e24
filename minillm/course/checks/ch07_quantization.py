"""Checkers for exercises/07_quantization.ipynb: absmax int8 for a whole tensor and its inverse,
int8 with one scale per output channel (what minillm's Int8Linear stores,
`minillm.quant.int8.quantize_int8`), and group-wise int4 with a scale and a minimum (GGUF Q4_1's
idea, `minillm.quant.basics.zeropoint_quantize`), and one step of GPTQ (`minillm.quant.gptq`),
each compared with minillm on random tensors."""

from __future__ import annotations

import torch

from ...quant.basics import zeropoint_quantize
from ...quant.gptq import hessian, inverse_cholesky
from ...quant.grid import fit, snap
from ...quant.int8 import dequantize_int8, quantize_int8
from ._base import (CheckFailed, call, checker, expect, expect_raises, matching_mistake,
                    number_or_none, passed, short)


def _rand(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _tensor(value, what, shape=None):
    if not isinstance(value, torch.Tensor):
        raise CheckFailed(f"{what} is {type(value).__name__} {short(value)}; return a "
                          "torch.Tensor")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailed(f"{what} has shape {tuple(value.shape)}; expected {tuple(shape)}")
    return value


# --- 1 · absmax int8 for a whole tensor ----------------------------------------------------------

def _int8_cases():
    outlier = _rand(64, seed=2)
    outlier[10] = 25.0
    return [("a random tensor of 100 numbers", _rand(100, seed=0)),
            ("a random (8, 16) weight", _rand(8, 16, seed=1, scale=0.05)),
            ("a tensor with one outlier", outlier),
            ("an all-negative tensor", -_rand(20, seed=3).abs() - 1.0),
            ("a (3, 4, 5) tensor", _rand(3, 4, 5, seed=4, scale=7.0)),
            ("a tensor whose largest value is positive", _rand(50, seed=5).abs() + 0.1)]


def _one_scale(scale, what) -> float:
    value = number_or_none(scale)
    if value is not None:
        return value
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        return float(scale.reshape(()).item())
    if isinstance(scale, torch.Tensor):
        raise CheckFailed(f"{what} has shape {tuple(scale.shape)}: this task uses one scale for "
                          "the whole tensor, max|x| / 127 (a scale per row is the per-channel "
                          "int8 of the next task)")
    raise CheckFailed(f"{what} is {type(scale).__name__} {short(scale)}; return a number (a "
                      "Python float or a 0-d tensor)")


@checker
def check_absmax_int8(quantize_absmax, dequantize_absmax) -> None:
    """`quantize_absmax(x)` -> (q, scale): int8 q = round(x / scale) with scale = max|x| / 127;
    `dequantize_absmax(q, scale)` -> q * scale, the float tensor q stands for."""
    cases = _int8_cases()
    scales, qs = [], []
    for what, x in cases:
        got = call(quantize_absmax, x, what=f"quantize_absmax({what})")
        expect(isinstance(got, tuple) and len(got) == 2,
               f"quantize_absmax({what}) returned {type(got).__name__}; return a pair (q, scale)")
        q = _tensor(got[0], f"q for {what}", x.shape)
        expect(q.dtype == torch.int8, f"q for {what} has dtype {q.dtype}; store it as torch.int8 "
                                      "(.to(torch.int8)) so it takes one byte a number")
        scales.append(_one_scale(got[1], f"the scale for {what}"))
        qs.append(q)
    wants = [x.abs().max().item() / 127 for _, x in cases]
    wrong = [i for i, (g, w) in enumerate(zip(scales, wants)) if abs(g - w) > 1e-6 * w]
    if wrong:
        i = wrong[0]
        close = lambda a, b: abs(a - b) <= 1e-6 * max(abs(b), 1e-12)  # noqa: E731
        hint = matching_mistake(scales, [
            ("divide max|x| by 127, the largest int8 value used on both sides (-127..127), not "
             "128", [x.abs().max().item() / 128 for _, x in cases]),
            ("max - min over 255 is zero-point quantization; absmax uses max|x| / 127",
             [(x.max() - x.min()).item() / 255 for _, x in cases]),
            ("take the largest absolute value, max|x| (x.abs().max()), not the largest value",
             [x.max().item() / 127 for _, x in cases]),
            ("divide max|x| by 127, not by 255", [x.abs().max().item() / 255 for _, x in cases]),
        ], close)
        raise CheckFailed(f"the scale for {cases[i][0]} is {scales[i]:.6g}; expected max|x| / 127 "
                          f"= {wants[i]:.6g}" + (f": {hint}" if hint else ""))
    for (what, x), q, scale in zip(cases, qs, wants):
        want_q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
        if torch.equal(q, want_q):
            continue
        if torch.equal(q, torch.trunc(x / scale).to(torch.int8)):
            raise CheckFailed(f"q for {what} is truncated towards zero; round to the nearest "
                              "integer (torch.round) so the error is at most half a step")
        off = (q.int() - want_q.int()).abs()
        expect(off.max().item() <= 1 and (off > 0).float().mean().item() < 0.01,
               f"q for {what} differs from round(x / scale) in {int((off > 0).sum())} places")
    for (what, x), q, scale in zip(cases, qs, wants):
        back = call(dequantize_absmax, q, scale, what=f"dequantize_absmax(q, {scale:.4g})")
        back = _tensor(back, f"dequantize_absmax(q of {what}, scale)", x.shape)
        expect(back.is_floating_point(), f"dequantize_absmax must return a float tensor, got "
                                         f"{back.dtype}: convert q first (q.float() * scale)")
        err = (back.float() - x).abs().max().item()
        expect(err <= scale / 2 + 1e-6,
               f"the round trip of {what} is off by up to {err:.3g}, more than half a step "
               f"({scale / 2:.3g}); dequantize with q * scale")
    passed("absmax int8 quantize / dequantize", len(cases))


# --- 2 · int8 with one scale per output channel ----------------------------------------------

def _channel_cases():
    rows = _rand(6, 16, seed=11, scale=0.05)
    rows[2] *= 40  # one row much larger than the others
    zero = _rand(4, 8, seed=12)
    zero[1] = 0.0  # an all-zero row
    return [("a (8, 16) weight", _rand(8, 16, seed=10, scale=0.1)),
            ("a weight with one large row", rows),
            ("a weight with an all-zero row", zero),
            ("a (3, 64) weight", _rand(3, 64, seed=13)),
            ("a (1, 5) weight", _rand(1, 5, seed=14, scale=3.0))]


@checker
def check_quantize_int8(quantize_per_channel) -> None:
    """`quantize_per_channel(w)` -> (q int8 (out, in), scale (out,)): the row's max|w| / 127 for
    each row (1 for an all-zero row), q = round(w / scale[:, None]), as quantize_int8."""
    cases = _channel_cases()
    answers = []
    for what, w in cases:
        got = call(quantize_per_channel, w, what=f"quantize_per_channel({what})")
        expect(isinstance(got, tuple) and len(got) == 2, f"quantize_per_channel({what}) returned "
                                                         f"{type(got).__name__}; return (q, scale)")
        q = _tensor(got[0], f"q for {what}", w.shape)
        scale = _tensor(got[1], f"the scale for {what}")
        if tuple(scale.shape) == (w.shape[0], 1):
            raise CheckFailed(f"the scale for {what} has shape {tuple(scale.shape)}: drop the "
                              f"last axis (amax(dim=1) without keepdim) to get ({w.shape[0]},)")
        if scale.numel() == 1 and w.shape[0] > 1:
            raise CheckFailed(f"the scale for {what} is one number for the whole weight; give "
                              "each row (output channel) its own: w.abs().amax(dim=1) / 127")
        if tuple(scale.shape) == (w.shape[1],) and w.shape[0] != w.shape[1]:
            raise CheckFailed(f"the scale for {what} has one entry per column; a channel is an "
                              "output feature, a row of the weight: amax(dim=1)")
        _tensor(scale, f"the scale for {what}", (w.shape[0],))
        expect(q.dtype == torch.int8, f"q for {what} has dtype {q.dtype}; store it as torch.int8")
        expect(bool(torch.isfinite(scale).all()) and bool((scale > 0).all()),
               f"the scale for {what} is {short(scale.tolist())}: an all-zero row has max|w| = 0; "
               "give it the scale 1 (its q is 0 anyway) so that nothing is divided by 0")
        answers.append((q, scale.float()))
    for (what, w), (q, scale) in zip(cases, answers):
        want_q, want_scale = quantize_int8(w)
        expect(torch.allclose(scale, want_scale, rtol=1e-6, atol=0),
               f"the scale for {what} is {short([round(x, 6) for x in scale.tolist()])}, expected "
               f"each row's max|w| / 127: {short([round(x, 6) for x in want_scale.tolist()])}")
        off = (q.int() - want_q.int()).abs()
        expect(off.max().item() <= 1 and (off > 0).float().mean().item() < 0.01,
               f"q for {what} differs from round(w / scale[:, None]) in {int((off > 0).sum())} "
               "places; divide each row by its own scale")
        err = (dequantize_int8(q, scale) - w).abs().max().item()
        expect(err <= want_scale.max().item() / 2 + 1e-6,
               f"the round trip q * scale[:, None] of {what} is off by up to {err:.3g}")
    passed("per-channel int8", len(cases))


# --- 3 · int4 in groups, with a scale and a minimum ------------------------------------------

INT4_CASES = [((4, 64), 32), ((3, 96), 32), ((2, 64), 16), ((5, 128), 64), ((1, 8), 8),
              ((6, 48), 16)]


@checker
def check_int4_groups(quantize_groups, dequantize_groups) -> None:
    """`quantize_groups(w, group_size)` -> (q, scale, minimum), per group of `group_size` numbers of
    a row: minimum = the group's min, scale = (max - min) / 15, q = round((w - minimum) / scale)
    in 0..15, shapes (rows, cols), (rows, cols/group_size), (rows, cols/group_size);
    `dequantize_groups(q, scale, minimum)` -> q * scale + minimum, shape (rows, cols)."""
    for i, (shape, g) in enumerate(INT4_CASES):
        w = _rand(*shape, seed=20 + i, scale=0.1) + 0.05 * i
        what = f"quantize_groups(w of shape {shape}, group_size={g})"
        got = call(quantize_groups, w, g, what=what)
        expect(isinstance(got, tuple) and len(got) == 3,
               f"{what} returned {type(got).__name__}; return (q, scale, minimum)")
        q, scale, minimum = got
        rows, cols = shape
        for name, t, want_shape in [("q", q, shape), ("scale", scale, (rows, cols // g)),
                                    ("minimum", minimum, (rows, cols // g))]:
            _tensor(t, f"{name} from {what}")
            if name != "q" and tuple(t.shape) == (rows, cols // g, 1):
                raise CheckFailed(f"{name} from {what} has shape {tuple(t.shape)}: drop the last "
                                  f"axis (squeeze(-1)) to get {want_shape}")
            _tensor(t, f"{name} from {what}", want_shape)
        expect(not q.is_floating_point() or bool((q == q.round()).all()),
               f"q from {what} is not whole numbers; round it")
        expect(q.min().item() >= 0 and q.max().item() <= 15,
               f"q from {what} runs from {q.min().item()} to {q.max().item()}; 4 bits hold 0..15 "
               "(subtract the minimum before dividing by the scale)")
        _, ref_scale, ref_min = zeropoint_quantize(w, 4, "group", g)
        ref_scale, ref_min = ref_scale.reshape(rows, -1), ref_min.reshape(rows, -1)
        if torch.allclose(scale.float(), ref_scale * 15 / 16, rtol=1e-5):
            raise CheckFailed(f"scale from {what} divides by 16; 4 bits give 16 levels, 0..15, "
                              "so there are 15 steps: divide (max - min) by 15")
        expect(torch.allclose(minimum.float(), ref_min, rtol=1e-5, atol=1e-7),
               f"minimum from {what} is not each group's smallest weight; group the numbers "
               f"with w.reshape(rows, cols // group_size, group_size) and take .amin(-1)")
        expect(torch.allclose(scale.float(), ref_scale, rtol=1e-4, atol=1e-8),
               f"scale from {what} is not (max - min) / 15 of each group")
        back = call(dequantize_groups, q, scale, minimum,
                    what=f"dequantize_groups(q, scale, minimum) for {what}")
        _tensor(back, f"dequantize_groups(...) for {what}", shape)
        step = ref_scale.repeat_interleave(g, dim=1)
        err = (back.float() - w).abs()
        expect(bool((err <= step / 2 + 1e-6).all()),
               f"the round trip of {what} is off by up to {err.max().item():.3g}, more than half "
               "a step of its group: q * scale + minimum, with each group's own scale and minimum")
    for cols, g in ((40, 32), (10, 4)):
        expect_raises(quantize_groups, _rand(2, cols, seed=9), g, error=ValueError,
                      what=f"quantize_groups(w with rows of {cols}, group_size={g})",
                      why=f"{g} does not divide {cols}")
    passed("int4 group-wise quantize / dequantize", len(INT4_CASES) + 2)


# --- 4 · one step of GPTQ ------------------------------------------------------------------------

GPTQ_CASES = [((4, 6), 0), ((4, 6), 2), ((5, 8), 7), ((3, 10), 4), ((6, 5), 1)]


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
def check_gptq_step(gptq_step) -> None:
    """`gptq_step(w, u, i, round_column)` -> a new weight: column i rounded
    (`round_column(w[:, i])`), and every later column j moved by -(error) * u[i, j], where
    error = (w[:, i] - rounded) / u[i, i]; the columns before i unchanged."""
    cases = [(shape, i, *_gptq_case(shape, seed=30 + n)) for n, (shape, i) in enumerate(GPTQ_CASES)]
    answers = []
    for shape, i, w, u, round_column in cases:
        what = f"gptq_step(w of shape {shape}, u, i={i}, round_column)"
        got = call(gptq_step, w, u, i, round_column, what=what)
        answers.append(_tensor(got, f"{what} returned", shape).float())
    wants = [_gptq_step(w, u, i, r) for _, i, w, u, r in cases]
    close = lambda a, b: torch.allclose(a, b, atol=1e-5, rtol=1e-4)  # noqa: E731
    if all(close(a, b) for a, b in zip(answers, wants)):
        passed("one GPTQ step", len(cases))
        return
    hint = matching_mistake(answers, [
        ("the later columns moved the wrong way: subtract error * u[i, j] (w[:, j] -= ...), so "
         "they cancel the error column i made", [_gptq_step(w, u, i, r, sign=-1.0)
                                                for _, i, w, u, r in cases]),
        ("divide the rounding error by u[i, i] before spreading it: error = (w[:, i] - q) / "
         "u[i, i]", [_gptq_step(w, u, i, r, divide=False) for _, i, w, u, r in cases]),
        ("the columns after i did not change: spread the error over them with row i of u, "
         "w[:, i + 1:] -= error[:, None] * u[i, i + 1:]",
         [_gptq_step(w, u, i, r, spread=False) for _, i, w, u, r in cases]),
        ("column i itself is not rounded: put round_column(w[:, i]) in it",
         [_gptq_step(w, u, i, r, write=False) for _, i, w, u, r in cases]),
    ], close)
    n = next(k for k, (a, b) in enumerate(zip(answers, wants)) if not close(a, b))
    shape, i, *_ = cases[n]
    wrong_columns = [c for c in range(shape[1])
                     if not close(answers[n][:, c], wants[n][:, c])]
    raise CheckFailed(f"gptq_step(w of shape {shape}, u, i={i}, round_column) differs from one "
                      f"GPTQ step in column(s) {wrong_columns}" + (f": {hint}" if hint else
                      "; the columns before i stay, column i is rounded, the later ones move by "
                      "-error * u[i, j] with error = (w[:, i] - rounded) / u[i, i]"))
