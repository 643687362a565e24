"""int8 weight-only quantization (仅权重量化), symmetric, one scale per output channel.

A weight W (out_features, in_features) is stored as int8 numbers q and one float scale per row:

    scale[r] = max_c |W[r, c]| / 127        q[r, c] = round(W[r, c] / scale[r])  in [-127, 127]
    W[r, c] ≈ q[r, c] * scale[r]

One byte a weight instead of four (fp32) or two (fp16), plus 4 bytes a row for the scale. A row
gets its own scale because rows differ in size: one outlier row would otherwise spoil the
resolution of all the others (see the lesson's per-tensor against per-channel error).
"""

from __future__ import annotations

import torch

QMAX = 127


def _check_weight(w) -> None:
    if not isinstance(w, torch.Tensor) or not w.is_floating_point():
        raise TypeError(f"expected a floating-point weight tensor, got {type(w).__name__}")
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight (out_features, in_features), got shape "
                         f"{tuple(w.shape)}")


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 (out, in), scale float32 (out,)) with w ≈ q * scale[:, None]."""
    _check_weight(w)
    w = w.detach().float()
    scale = w.abs().amax(dim=1) / QMAX
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)  # an all-zero row stays 0
    q = torch.round(w / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """The float weight the int8 numbers stand for: q * scale, row by row."""
    return (q.to(torch.float32) * scale.to(torch.float32)[:, None]).to(dtype)
