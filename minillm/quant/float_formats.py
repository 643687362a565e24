"""FP8 and FP4 weights, emulated (lesson 07c): a scale per tensor, channel or block, MXFP4 and
NVFP4, and a model whose weights (and, for W4A8, activations) are rounded to them.

A `Scheme` names the number format, the tile of weights that shares one scale, and how that
scale is stored:

- "e4m3" and "e5m2": FP8 (torch's float8 dtypes do the rounding);
- "e2m1": FP4, whose magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4 and 6;
- "int4": symmetric 4-bit integers, -7 to 7 (GGUF's Q4_0 rule, which has no minimum).

Scales: "fp32" or "fp16" as they are; "e8m0" a power of two (the OCP MX formats: MXFP4 is e2m1
in blocks of 32 under an e8m0 scale); "e4m3" an FP8 number under one fp32 scale for the whole
tensor (NVFP4: e2m1 in blocks of 16). As in `fp8.py`, the values are exact and the products run
in float32: the format's accuracy, not its speed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn as nn

from .fp8 import FORMATS as FP8

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # FP4's magnitudes
LARGEST = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0, "int4": 7.0}
SCALE_BITS = {"fp32": 32, "fp16": 16, "e8m0": 8, "e4m3": 8}


@dataclass(frozen=True)
class Scheme:
    fmt: str                           # "e4m3", "e5m2", "e2m1" or "int4"
    tile: tuple[int | None, int | None]  # (rows, columns) that share a scale; None: all of them
    scale: str = "fp32"                # how each scale is stored: fp32, fp16, e8m0 or e4m3

    def __post_init__(self):
        if self.fmt not in LARGEST:
            raise ValueError(f"fmt must be one of {', '.join(LARGEST)}, got {self.fmt!r}")
        if self.scale not in SCALE_BITS:
            raise ValueError(f"scale must be one of {', '.join(SCALE_BITS)}, got {self.scale!r}")

    def bits(self, shape) -> float:
        """Bits a weight of a (rows, columns) tensor costs, its share of the scales included."""
        rows, cols = shape
        shared = (self.tile[0] or rows) * (self.tile[1] or cols)
        extra = 32 / (rows * cols) if self.scale == "e4m3" else 0.0  # NVFP4's tensor scale
        return (8 if self.fmt in FP8 else 4) + SCALE_BITS[self.scale] / shared + extra


SCHEMES = {
    "fp8 e4m3, per tensor": Scheme("e4m3", (None, None)),
    "fp8 e4m3, per channel": Scheme("e4m3", (1, None)),
    "fp8 e4m3, 128x128 blocks": Scheme("e4m3", (128, 128)),
    "fp8 e5m2, per channel": Scheme("e5m2", (1, None)),
    "int4, blocks of 32": Scheme("int4", (1, 32), "fp16"),
    "fp4, blocks of 32, fp16 scale": Scheme("e2m1", (1, 32), "fp16"),
    "MXFP4": Scheme("e2m1", (1, 32), "e8m0"),
    "int4, blocks of 16": Scheme("int4", (1, 16), "fp16"),
    "NVFP4": Scheme("e2m1", (1, 16), "e4m3"),
}


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """`x`, already scaled into the format's range, rounded to its nearest value (float32)."""
    if fmt in FP8:
        return x.to(FP8[fmt]).float()
    if fmt == "int4":
        return x.round().clamp(-7, 7)
    grid = E2M1.to(x.device)
    magnitude = grid[torch.bucketize(x.abs(), (grid[1:] + grid[:-1]) / 2)]  # 6 past the end
    return x.sign() * magnitude


def fake_quantize(w: torch.Tensor, scheme: Scheme) -> torch.Tensor:
    """`w` (rows, columns) rounded to `scheme` and scaled back, as float32: what a kernel that
    reads the format would multiply with."""
    rows, cols = w.shape
    r, k = scheme.tile[0] or rows, scheme.tile[1] or cols
    x = nn.functional.pad(w.float(), (0, -cols % k, 0, -rows % r))
    x = x.unflatten(1, (-1, k)).unflatten(0, (-1, r))  # (row tiles, r, column tiles, k)
    amax = x.abs().amax((1, 3), keepdim=True).clamp_min(1e-12)
    scale = amax / LARGEST[scheme.fmt]
    if scheme.scale == "e8m0":  # the MX rule: 2^(floor(log2 amax) - emax), emax 2 for e2m1
        scale = 2.0 ** (torch.floor(torch.log2(amax)) - 2)
    elif scheme.scale == "e4m3":  # each block's scale in FP8, under one fp32 scale a tensor
        per_tensor = w.abs().max().float().clamp_min(1e-12) / (448 * LARGEST[scheme.fmt])
        scale = (scale / per_tensor).to(torch.float8_e4m3fn).float() * per_tensor
    elif scheme.scale == "fp16":
        scale = scale.half().float()
    q = round_to(x / scale, scheme.fmt) * scale
    return q.flatten(2, 3).flatten(0, 1)[:rows, :cols].to(w.dtype)


def _linears(model, skip):
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and not any(s in name for s in skip)]


@contextlib.contextmanager
def weights_in(model, scheme, skip=("lm_head",)):
    """Inside the block, every linear layer of `model` (but those whose name contains one of
    `skip`) holds its weight rounded to `scheme` (a Scheme, or a function of the weight that
    returns the rounded weight); the weights are put back after it."""
    rounded = scheme if callable(scheme) else lambda w: fake_quantize(w, scheme)
    saved = {}
    try:
        with torch.no_grad():
            for name, linear in _linears(model, skip):
                saved[name] = linear.weight.detach().clone()
                linear.weight.copy_(rounded(linear.weight))
        yield model
    finally:
        with torch.no_grad():
            for name, linear in _linears(model, skip):
                if name in saved:
                    linear.weight.copy_(saved[name])


def round_rows_int8(x: torch.Tensor) -> torch.Tensor:
    """Each row (token) of `x` rounded to int8 with its own absmax scale, and scaled back."""
    scale = x.abs().amax(-1, keepdim=True).float().clamp_min(1e-12) / 127
    return ((x.float() / scale).round().clamp(-127, 127) * scale).to(x.dtype)


@contextlib.contextmanager
def activations_in_int8(model, skip=("lm_head",)):
    """Inside the block, the input of every linear layer of `model` (but `skip`'s) is rounded
    to int8 per token first: the "A8" of W4A8 and W8A8."""
    hooks = [linear.register_forward_pre_hook(lambda m, args: (round_rows_int8(args[0]),))
             for _, linear in _linears(model, skip)]
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()
