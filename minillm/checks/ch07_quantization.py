"""Checkers for exercises/07_quantization.ipynb: absmax int8 quantization and its inverse, and
group-wise int4 with a scale and a minimum (GGUF Q4_1's idea), compared with minillm.quant's
formulas on random tensors."""

from __future__ import annotations

import torch

from ..quant.basics import zeropoint_quantize
from ._base import CheckFailed, call, expect, passed


def _rand(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _int8_cases():
    outlier = _rand(64, seed=2)
    outlier[10] = 25.0
    return [("a random tensor of 100 numbers", _rand(100, seed=0)),
            ("a random (8, 16) weight", _rand(8, 16, seed=1, scale=0.05)),
            ("a tensor with one outlier", outlier),
            ("an all-negative tensor", -_rand(20, seed=3).abs() - 1.0)]


def check_absmax_int8(quantize_absmax, dequantize_absmax) -> None:
    """`quantize_absmax(x)` -> (q, scale): int8 q = round(x / scale) with scale = max|x| / 127;
    `dequantize_absmax(q, scale)` -> q * scale, the float tensor q stands for."""
    cases = _int8_cases()
    for what, x in cases:
        got = call(quantize_absmax, x.clone())
        expect(isinstance(got, tuple) and len(got) == 2,
               f"quantize_absmax({what}) returned {type(got).__name__}; return a pair (q, scale)")
        q, scale = got
        expect(isinstance(q, torch.Tensor), f"q must be a torch.Tensor, got {type(q).__name__}")
        expect(q.dtype == torch.int8, f"q for {what} has dtype {q.dtype}; store it as torch.int8 "
                                      "(.to(torch.int8)) so it takes one byte a number")
        expect(tuple(q.shape) == tuple(x.shape),
               f"q for {what} has shape {tuple(q.shape)}; it must keep x's shape {tuple(x.shape)}")
        scale = float(scale)
        want_scale = x.abs().max().item() / 127
        if abs(scale - x.abs().max().item() / 128) < 1e-9 * max(1, want_scale) or \
                abs(scale - x.abs().max().item() / 255) < 1e-9:
            raise CheckFailed(f"scale for {what} is {scale:.6g}: divide max|x| by 127, the "
                              "largest int8 value used on both sides (-127..127)")
        if abs(scale - (x.max() - x.min()).item() / 255) < 1e-9:
            raise CheckFailed(f"scale for {what} uses max - min: that is zero-point "
                              "quantization; absmax uses max|x| / 127")
        expect(abs(scale - want_scale) <= 1e-6 * want_scale,
               f"scale for {what} is {scale:.6g}; expected max|x| / 127 = {want_scale:.6g}")
        want_q = torch.round(x / want_scale).clamp(-127, 127).to(torch.int8)
        if torch.equal(q, torch.trunc(x / want_scale).to(torch.int8)) and not torch.equal(q, want_q):
            raise CheckFailed(f"q for {what} is truncated towards zero; round to the nearest "
                              "integer (torch.round) so the error is at most half a step")
        wrong = (q.int() - want_q.int()).abs()
        expect(wrong.max().item() <= 1 and (wrong > 0).float().mean().item() < 0.01,
               f"q for {what} differs from round(x / scale) in {int((wrong > 0).sum())} places")
        back = call(dequantize_absmax, q.clone(), scale)
        expect(isinstance(back, torch.Tensor) and back.is_floating_point(),
               f"dequantize_absmax must return a float tensor, got "
               f"{getattr(back, 'dtype', type(back).__name__)}")
        expect(tuple(back.shape) == tuple(x.shape), f"dequantize_absmax returned shape "
                                                    f"{tuple(back.shape)}, expected {tuple(x.shape)}")
        err = (back.float() - x).abs().max().item()
        expect(err <= want_scale / 2 + 1e-6,
               f"the round trip of {what} is off by up to {err:.3g}, more than half a step "
               f"({want_scale / 2:.3g}); dequantize with q * scale")
    passed("absmax int8 quantize / dequantize", len(cases))


INT4_CASES = [((4, 64), 32), ((3, 96), 32), ((2, 64), 16), ((5, 128), 64)]


def check_int4_groups(quantize_groups, dequantize_groups) -> None:
    """`quantize_groups(w, group_size)` -> (q, scale, minimum), per group of `group_size` numbers of
    a row: minimum = the group's min, scale = (max - min) / 15, q = round((w - minimum) / scale)
    in 0..15, shapes (rows, cols), (rows, cols/group_size), (rows, cols/group_size);
    `dequantize_groups(q, scale, minimum)` -> q * scale + minimum, shape (rows, cols)."""
    for i, (shape, g) in enumerate(INT4_CASES):
        w = _rand(*shape, seed=20 + i, scale=0.1) + 0.05 * i
        what = f"quantize_groups(w of shape {shape}, group_size={g})"
        got = call(quantize_groups, w.clone(), g)
        expect(isinstance(got, tuple) and len(got) == 3,
               f"{what} returned {type(got).__name__}; return (q, scale, minimum)")
        q, scale, minimum = got
        rows, cols = shape
        for name, t, want_shape in [("q", q, shape), ("scale", scale, (rows, cols // g)),
                                    ("minimum", minimum, (rows, cols // g))]:
            expect(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor")
            if name != "q" and tuple(t.shape) == (rows, cols // g, 1):
                raise CheckFailed(f"{name} from {what} has shape {tuple(t.shape)}: drop the last "
                                  f"axis (squeeze(-1)) to get {want_shape}")
            expect(tuple(t.shape) == tuple(want_shape),
                   f"{name} from {what} has shape {tuple(t.shape)}; expected {want_shape}")
        expect(not q.is_floating_point() or bool((q == q.round()).all()),
               f"q from {what} is not whole numbers; round it")
        expect(q.min().item() >= 0 and q.max().item() <= 15,
               f"q from {what} runs from {q.min().item()} to {q.max().item()}; 4 bits hold 0..15 "
               "(subtract the minimum before dividing by the scale)")
        ref_q, ref_scale, ref_min = zeropoint_quantize(w, 4, "group", g)
        ref_scale, ref_min = ref_scale.reshape(rows, -1), ref_min.reshape(rows, -1)
        if torch.allclose(scale.float(), ref_scale * 15 / 16, rtol=1e-5):
            raise CheckFailed(f"scale from {what} divides by 16; 4 bits give 16 levels, 0..15, "
                              "so there are 15 steps: divide (max - min) by 15")
        expect(torch.allclose(minimum.float(), ref_min, rtol=1e-5, atol=1e-7),
               f"minimum from {what} is not each group's smallest weight; group the numbers "
               f"with w.reshape(rows, cols // group_size, group_size) and take .amin(-1)")
        expect(torch.allclose(scale.float(), ref_scale, rtol=1e-4, atol=1e-8),
               f"scale from {what} is not (max - min) / 15 of each group")
        back = call(dequantize_groups, q.clone(), scale.clone(), minimum.clone())
        expect(isinstance(back, torch.Tensor) and tuple(back.shape) == tuple(shape),
               f"dequantize_groups returned {getattr(back, 'shape', type(back).__name__)}; "
               f"expected a tensor of shape {shape}")
        step = ref_scale.repeat_interleave(g, dim=1)
        err = (back.float() - w).abs()
        expect(bool((err <= step / 2 + 1e-6).all()),
               f"the round trip of {what} is off by up to {err.max().item():.3g}, more than half "
               "a step of its group: q * scale + minimum, with each group's own scale and minimum")
    try:
        quantize_groups(_rand(2, 40, seed=9), 32)
    except NotImplementedError:
        raise CheckFailed("`quantize_groups` is not written yet") from None
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(f"quantize_groups(w with rows of 40, group_size=32) raised "
                          f"{type(error).__name__}; raise ValueError saying the group size must "
                          "divide the row length") from None
    else:
        raise CheckFailed("quantize_groups(w with rows of 40, group_size=32) returned a value: "
                          "32 does not divide 40, so raise ValueError saying so")
    passed("int4 group-wise quantize / dequantize", len(INT4_CASES) + 1)
