"""FP8: 8-bit floats, the other way to spend 8 bits (Micikevicius et al., 2022).

Two formats share the byte: **e4m3** (4 exponent bits, 3 stored mantissa bits, largest 448) for
weights and activations, and **e5m2** (5 and 2, largest 57,344) for gradients, which need range
more than steps. An int8 grid has equal steps; an fp8 grid has steps proportional to the value,
so small numbers beside a large one keep their relative precision. Hopper and later GPUs
multiply fp8 natively; here torch's float8 dtypes round the numbers and the product runs in
float32 (emulation: the values are exact, the speed is not).

A tensor is first scaled so that its largest |value| lands on the format's largest (one scale
per tensor, as in the common "per-tensor fp8" recipe).
"""

from __future__ import annotations

import torch

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def fp8_roundtrip(t: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """`t` scaled into the fp8 format's range, rounded to it, and scaled back (float32)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    dtype = FORMATS[fmt]
    scale = t.abs().max().float() / torch.finfo(dtype).max
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (t.float() / scale).to(dtype).float() * scale
