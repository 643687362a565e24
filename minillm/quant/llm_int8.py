"""LLM.int8() (Dettmers et al., 2022), the int8 of transformers' `load_in_8bit=True` (the
bitsandbytes library), written out in PyTorch to show its arithmetic and time its steps.

minillm's own int8 (`Int8Linear`) is weight-only: int8 weights, float activations. LLM.int8()
quantizes the activations too, so that the product itself is int8 x int8 summed in int32. It
must then deal with **outlier features** (离群特征): a few hidden dimensions whose activations are
far larger than the rest (they appear in models of several billion parameters). One row scale
would let them spoil every other number of the row, so it splits the product:

1. find the input columns where some |x| exceeds `threshold` (6.0 in the paper and in
   bitsandbytes);
2. multiply those columns of x, and the matching columns of the weight, in 16-bit floats;
3. quantize every other column: each row of x to int8 with its own absmax scale (vector-wise),
   each output row of the weight with its own;
4. multiply the int8 parts, summing in int32, and scale the result back by the two scales;
5. add the two parts.

Each call therefore runs several kernels where an fp16 layer runs one; at batch 1 those extra
steps cost more than the bytes they save, which is why `load_in_8bit` decodes more slowly than
fp16 while using half the memory.
"""

from __future__ import annotations

import torch

from .int8 import QMAX, quantize_int8

THRESHOLD = 6.0


def outlier_columns(x: torch.Tensor, threshold: float = THRESHOLD) -> torch.Tensor:
    """Indices of the input features (last axis) where some |x| exceeds `threshold`."""
    if not threshold > 0:
        raise ValueError(f"threshold must be positive, got {threshold!r}")
    return (x.reshape(-1, x.shape[-1]).abs() > threshold).any(0).nonzero().flatten()


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 x, one float32 scale per row) with x ≈ q * scale[:, None]: vector-wise absmax."""
    scale = x.abs().amax(dim=-1).float() / QMAX
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.round(x / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8), scale


def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int8 (M, K) @ int8 (K, N) summed exactly in int32."""
    if hasattr(torch, "_int_mm") and a.device.type in ("cpu", "cuda"):
        try:
            return torch._int_mm(a.contiguous(), b.contiguous())
        except RuntimeError:  # a shape or device this kernel does not take
            pass
    # float64 is exact below 2^53; on the CPU, since Apple's GPUs have no float64
    exact = a.cpu().double() @ b.cpu().double()
    return exact.round().to(device=a.device, dtype=torch.int32)


class LLMInt8Linear:
    """A linear layer y = x Wᵀ run as LLM.int8(): int8 weights (one scale per output row) kept,
    the outlier columns multiplied in float from the original weight's values."""

    def __init__(self, weight: torch.Tensor, threshold: float = THRESHOLD):
        if weight.dim() != 2:
            raise ValueError(f"weight must be a matrix (out, in), got shape {tuple(weight.shape)}")
        if not threshold > 0:
            raise ValueError(f"threshold must be positive, got {threshold!r}")
        self.qweight, self.scale = quantize_int8(weight)
        self.threshold = threshold

    def __call__(self, x: torch.Tensor, decompose: bool = True) -> torch.Tensor:
        """y for x (rows, in). `decompose=False` quantizes every column, outliers included:
        what LLM.int8() avoids."""
        x = x.float()
        outliers = (outlier_columns(x, self.threshold) if decompose
                    else torch.empty(0, dtype=torch.long, device=x.device))
        regular = x.clone()
        regular[:, outliers] = 0
        qx, x_scale = quantize_rows(regular)
        y = int8_matmul(qx, self.qweight.t()).float() * x_scale[:, None] * self.scale[None, :]
        if len(outliers):
            w_outliers = self.qweight[:, outliers].half() * self.scale[:, None].half()
            y = y + (x[:, outliers].half() @ w_outliers.t()).float()
        return y
