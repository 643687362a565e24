"""The two basic ways to squeeze floats into small integers, on any tensor.

    absmax (对称量化, symmetric):   scale = max|x| / qmax          q = round(x / scale)
                                    x ≈ q * scale                   (zero maps to 0 exactly)
    zero-point (非对称量化, asymmetric, "scale and minimum"):
                                    scale = (max - min) / (2^bits - 1)
                                    q = round((x - min) / scale)    x ≈ q * scale + min

Where the scale comes from is the granularity (粒度): one scale for the whole tensor
(per-tensor), one per output row (per-channel), or one per group of `group_size` numbers in a row
(group-wise). The smaller the group, the closer the scale fits the numbers it covers, and the
smaller the error; but every group pays for its own scale.

These functions return the dequantized tensor's pieces in plain form, for teaching and for the
exercise; `int8.py` and `int4.py` hold the storage formats the quantized layers use.
"""

from __future__ import annotations

import torch

from .grid import _check_bits, codes, fit

GRANULARITIES = ("tensor", "channel", "group")


def _groups(x: torch.Tensor, granularity: str, group_size: int | None) -> torch.Tensor:
    """x viewed as (n_groups, numbers per group): the rows share one scale each."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"expected a floating-point torch.Tensor, got {type(x).__name__}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if granularity == "tensor":
        return x.reshape(1, -1)
    if x.dim() != 2:
        raise ValueError(f"per-channel and group-wise scales need a 2-D weight (rows, cols), "
                         f"got shape {tuple(x.shape)}")
    if granularity == "channel":
        return x
    check_group_size(x.shape[1], group_size)
    return x.reshape(-1, group_size)


def check_group_size(row: int, group_size) -> None:
    """A clear error unless `group_size` is a positive integer that divides the row length."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if row % group_size:
        raise ValueError(f"group_size {group_size} does not divide the row length {row}; "
                         f"choose a divisor of {row} (such as 32 for GGUF-style groups)")


def absmax_quantize(x: torch.Tensor, bits: int = 8, granularity: str = "tensor",
                    group_size: int | None = None):
    """Symmetric quantization: (q, scale) with x ≈ q * scale, q in [-(2^(bits-1) - 1), 2^(bits-1) - 1].

    `scale` has one entry per group (shape (n_groups, 1)); `q` is viewed the same way, as
    (n_groups, numbers per group), in int32 so any `bits` fits."""
    _check_bits(bits)
    g = _groups(x.float(), granularity, group_size)
    qmax = 2 ** (bits - 1) - 1
    scale = g.abs().amax(dim=1, keepdim=True) / qmax
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)  # an all-zero group stays 0
    q = torch.round(g / scale).clamp(-qmax, qmax).to(torch.int32)
    return q, scale


def absmax_dequantize(q: torch.Tensor, scale: torch.Tensor, shape) -> torch.Tensor:
    return (q.float() * scale).reshape(shape)


def zeropoint_quantize(x: torch.Tensor, bits: int = 4, granularity: str = "group",
                       group_size: int | None = 32):
    """Asymmetric quantization with a scale and a minimum (GGUF Q4_1's idea):
    (q, scale, minimum) with x ≈ q * scale + minimum, q in [0, 2^bits - 1]."""
    g = _groups(x.float(), granularity, group_size)
    scale, lo = fit(g, bits)
    return codes(g, scale, lo, bits).to(torch.int32), scale, lo


def zeropoint_dequantize(q: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor,
                         shape) -> torch.Tensor:
    return (q.float() * scale + minimum).reshape(shape)


def roundtrip(x: torch.Tensor, method: str = "absmax", bits: int = 8,
              granularity: str = "tensor", group_size: int | None = None) -> torch.Tensor:
    """x quantized and dequantized again: what the model computes with instead of x."""
    if method == "absmax":
        q, scale = absmax_quantize(x, bits, granularity, group_size)
        return absmax_dequantize(q, scale, x.shape).to(x.dtype)
    if method == "zeropoint":
        q, scale, lo = zeropoint_quantize(x, bits, granularity, group_size)
        return zeropoint_dequantize(q, scale, lo, x.shape).to(x.dtype)
    raise ValueError(f"method must be 'absmax' or 'zeropoint', got {method!r}")
