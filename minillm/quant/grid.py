"""A b-bit grid with a scale and a minimum per group of columns, and round-to-nearest onto it.

GPTQ and AWQ (`gptq.py`, `awq.py`) choose *which* grid point each weight takes, or how the weight
is scaled before it is rounded; the grid itself is the same for all three methods, so that their
errors compare directly:

    scale = (max - min) / (2^bits - 1)     over one row's numbers in one group of columns
    w ≈ round((w - min) / scale) * scale + min,   the code clipped to 0 .. 2^bits - 1

This is `basics.zeropoint_quantize` (GGUF Q4_1's scale and minimum) at any number of bits, with
groups of consecutive columns: `group_size=None` is one group per row (per-channel); a
`group_size` that does not divide the row leaves a shorter last group (576 = 4 × 128 + 64).
"""

from __future__ import annotations

import torch


def _check_bits(bits) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or not 2 <= bits <= 16:
        raise ValueError(f"bits must be an integer from 2 to 16, got {bits!r}")


def group_ranges(cols: int, group_size: int | None) -> list[tuple[int, int]]:
    """The (start, end) column ranges of the groups of a row of `cols` numbers."""
    if group_size is None:
        return [(0, cols)]
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer or None (one group per row), "
                         f"got {group_size!r}")
    return [(start, min(start + group_size, cols)) for start in range(0, cols, group_size)]


def fit(w: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, minimum), each (rows, 1): the grid of each row of `w` (rows, numbers)."""
    _check_bits(bits)
    lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    scale = (hi - lo) / (2 ** bits - 1)
    return torch.where(scale == 0, torch.ones_like(scale), scale), lo


def codes(w: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, bits: int) -> torch.Tensor:
    """The grid point nearest each number of `w`, as its code 0 .. 2^bits - 1 (float)."""
    return torch.round((w - minimum) / scale).clamp(0, 2 ** bits - 1)


def snap(w: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, bits: int) -> torch.Tensor:
    """Each number of `w` moved to the nearest point of its row's grid."""
    return codes(w, scale, minimum, bits) * scale + minimum


def rtn(w: torch.Tensor, bits: int, group_size: int | None = None) -> torch.Tensor:
    """Round-to-nearest (RTN): every weight of `w` (rows, cols) on the grid of its group."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"expected a 2-D float weight (rows, cols), got "
                         f"{getattr(w, 'shape', type(w).__name__)}")
    out = torch.empty_like(w)
    for start, end in group_ranges(w.shape[1], group_size):
        out[:, start:end] = snap(w[:, start:end], *fit(w[:, start:end], bits), bits)
    return out


def output_error(w: torch.Tensor, w_hat: torch.Tensor, h: torch.Tensor) -> float:
    """Mean over the calibration tokens of ||x W^T - x W_hat^T||², from H = mean of x^T x:
    the sum over rows r of d_r H d_r^T, with d = W - W_hat."""
    d = (w - w_hat).float()
    return float(((d @ h.float()) * d).sum(dtype=torch.float64))
