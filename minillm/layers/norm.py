"""RMSNorm (均方根归一化): x / sqrt(mean(x²) + eps) * weight, the Llama family's normalization."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of the last axis of x, computed in float32, then scaled by `weight`."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class RMSNorm(nn.Module):
    """`rms_norm` with a learned weight. Where x and the weight share a dtype it runs PyTorch's
    fused kernel (one operation instead of eight; on a GPU each is a kernel launch), which
    keeps the float32 intermediate to the end instead of rounding it to x's dtype before the
    weight (a test checks both against the formula above)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        if x.dtype == self.weight.dtype and x.dtype.is_floating_point:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)
