"""The wrapper of SiLU(gate) * up in one call (c/activation.c): a decode step's, and a fast
model's prompt's (its rows split between PyTorch's threads)."""

from __future__ import annotations

import torch

from . import checks
from .build import function


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up, gate and up side by side: gate_up (rows, 2 F) float32, contiguous, on
    the CPU; returns (rows, F)."""
    checks.on_cpu("gate_up", gate_up, torch.float32)
    if gate_up.dim() != 2 or gate_up.shape[1] % 2 or gate_up.shape[1] == 0:
        raise ValueError(f"gate_up must be (rows, 2 F): gate and up side by side, got shape "
                         f"{tuple(gate_up.shape)}")
    return silu_mul_unchecked(gate_up)


def silu_mul_unchecked(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu_mul` without its checks, for the fused decode step, which makes them once per step
    (`FusedDecode.kernels_fit`), and a fast model's prompt (`GatedMLP.silu_mul`, after its own
    checks): gate_up (rows, 2 F) contiguous float32 on the CPU, or the C reads out of bounds."""
    rows, f = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, f, dtype=torch.float32)
    function("silu_mul_f32")(gate_up.data_ptr(), out.data_ptr(), rows, f,
                             torch.get_num_threads())
    return out
