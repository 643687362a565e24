"""GPTQ (Frantar et al., 2022): round the columns of a weight one at a time, and after each, move
the columns not yet rounded so that the layer's *output* on calibration inputs changes least.

Round-to-nearest (RTN) treats every weight alone. But a layer computes y = x W^T, and its inputs
x are correlated: an error in one column can be cancelled in part by nudging the others. With
H = mean of x^T x over calibration tokens (the Hessian of the squared output error), rounding
column i with error e_i is best compensated by

    W[:, j] -= (e_i / Hinv[i, i]) * Hinv[i, j]      for the columns j > i not yet rounded,

where Hinv is the inverse of H restricted to the columns not yet rounded. GPTQ gets every one
of those inverses at once from the upper Cholesky factor of H^-1 (its row i is the needed row,
scaled), and applies the updates a block of columns at a time (`block`), so a layer costs a few
matrix products. Every weight still lands on the same grid as RTN (`grid.py`); GPTQ only
chooses *which* grid point.

`damp` adds that share of H's mean diagonal to its diagonal, so the inverse exists even when a
feature never fires in the calibration text (the paper's 1%).
"""

from __future__ import annotations

import torch

from .grid import fit, group_ranges, snap

BLOCK = 128


def hessian(x: torch.Tensor) -> torch.Tensor:
    """H = x^T x / tokens for inputs x (..., features), in float64."""
    x = x.reshape(-1, x.shape[-1]).double()
    return x.T @ x / x.shape[0]


def inverse_cholesky(h: torch.Tensor, damp: float = 0.01) -> torch.Tensor:
    """The upper Cholesky factor of (H + damp · mean(diag H) · I)^-1."""
    if not 0 <= damp < 1:
        raise ValueError(f"damp must be in [0, 1), got {damp!r}")
    h = h.double() + damp * h.diagonal().mean() * torch.eye(h.shape[0], dtype=torch.float64)
    return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)


def gptq(w: torch.Tensor, h: torch.Tensor, bits: int, group_size: int | None = None,
         damp: float = 0.01) -> torch.Tensor:
    """The weight `w` (rows, cols) rounded by GPTQ onto the grid of `grid.rtn(w, bits,
    group_size)`'s kind, given H (cols, cols) from `hessian`. Each group's grid is fitted when
    GPTQ reaches the group's first column, to the weights as GPTQ has moved them by then."""
    rows, cols = w.shape
    if h.shape != (cols, cols):
        raise ValueError(f"H must be ({cols}, {cols}) for a weight with {cols} columns, got "
                         f"{tuple(h.shape)}")
    w = w.detach().float().clone()
    h = h.double().clone()
    dead = h.diagonal() == 0  # features the calibration never saw: any value of theirs is fine
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    u = inverse_cholesky(h, damp).float()
    out = torch.empty_like(w)
    # A block is a group, so a group's grid is fitted to weights that are fully up to date.
    blocks = group_ranges(cols, group_size if group_size is not None else BLOCK)
    grid = fit(w, bits) if group_size is None else None
    for start, end in blocks:
        block, errors = w[:, start:end].clone(), torch.zeros(rows, end - start, dtype=w.dtype)
        scale, minimum = grid if grid is not None else fit(block, bits)
        for i in range(end - start):
            column = block[:, i]
            rounded = snap(column[:, None], scale, minimum, bits)[:, 0]
            out[:, start + i] = rounded
            errors[:, i] = (column - rounded) / u[start + i, start + i]
            block[:, i:] -= errors[:, i:i + 1] * u[start + i, start + i:end][None, :]
        w[:, end:] -= errors @ u[start:end, end:]
    return out
