"""AWQ (Lin et al., 2023): protect the weights that meet large activations by scaling them up
before rounding.

A weight column j is multiplied by input feature x_j. If x_j is typically large, that column's
rounding error is multiplied by it too. AWQ scales column j up by s_j before rounding and the
input down by the same s_j (in a real model the division is folded into the layer before, the
RMSNorm's weight or the previous linear layer, so it costs nothing at run time):

    y = x W^T = (x / s) (W · s)^T   ≈   (x / s) Q(W · s)^T

A larger s_j gives column j finer steps relative to its size, at the cost of a coarser grid for
the rest of its group. AWQ sets s_j = mean|x_j|^alpha and searches alpha in [0, 1] for the
smallest output error on the calibration inputs (alpha = 0 is plain RTN). There is no second
pass over the columns as in GPTQ: one rounding per alpha tried. (The paper also searches a
clipping range for each group; this version leaves it out.)
"""

from __future__ import annotations

import torch

from .grid import output_error, rtn

N_GRID = 10


def awq_scales(mean_abs: torch.Tensor, alpha: float) -> torch.Tensor:
    """s_j = mean|x_j|^alpha, normalised so that max(s) · min(s) = 1 (as AWQ does)."""
    s = mean_abs.double().clamp(min=1e-4) ** alpha
    return s / (s.max() * s.min()).sqrt()


def awq(w: torch.Tensor, h: torch.Tensor, mean_abs: torch.Tensor, bits: int,
        group_size: int | None = None, n_grid: int = N_GRID) -> tuple[torch.Tensor, float]:
    """(the weight AWQ computes with, Q(W · s) / s, and the alpha chosen) for `w` (rows, cols),
    H (cols, cols) and the mean |x| of each input feature, both from calibration inputs."""
    if not isinstance(n_grid, int) or n_grid < 1:
        raise ValueError(f"n_grid must be a positive integer, got {n_grid!r}")
    if mean_abs.shape != (w.shape[1],):
        raise ValueError(f"mean_abs must have one entry per input feature ({w.shape[1]}), got "
                         f"shape {tuple(mean_abs.shape)}")
    w = w.detach().float()
    best = None
    for k in range(n_grid + 1):
        alpha = k / n_grid
        s = awq_scales(mean_abs, alpha).float()
        w_hat = rtn(w * s, bits, group_size) / s
        error = output_error(w, w_hat, h)
        if best is None or error < best[0]:
            best = (error, w_hat, alpha)
    return best[1].float(), best[2]
