"""The RMSNorm kernel's wrapper (c/norm.c): a decode step's norm, one call instead of
PyTorch's general kernels, whose overhead per call is what a one-row step feels."""

from __future__ import annotations

import torch

from . import checks
from .build import function


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm of each row of x times `weight`, as `F.rms_norm` computes it: x (..., D) and
    weight (D,) float32, contiguous, on the CPU."""
    checks.on_cpu("x", x, torch.float32)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (rows of D values)")
    d = x.shape[-1]
    checks.vector("weight", weight, d)
    out = torch.empty_like(x) if out is None else checks.output(out, tuple(x.shape))
    function("rms_norm_f32")(x.data_ptr(), weight.data_ptr(), out.data_ptr(),
                             x.numel() // max(d, 1), d, float(eps))
    return out
