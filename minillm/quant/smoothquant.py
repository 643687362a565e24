"""SmoothQuant (Xiao et al., 2022): move the activations' outliers into the weights, so that both
can be rounded to int8 (W8A8: int8 weights and int8 activations, an int8 × int8 product).

Rounding each token's activations with one absmax scale fails when a few input features are far
larger than the rest: the scale is set by them, and every other feature gets a handful of codes.
The weights have no such outliers. SmoothQuant divides input feature j by s_j and multiplies
weight column j by the same s_j, which leaves the product unchanged,

    y = x W^T = (x / s) (W · s)^T,      s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha),

and evens out the difficulty between the two (alpha = 0.5 in the paper). In a deployed model the
division is folded into the layer before (an RMSNorm's weight), so nothing extra runs. LLM.int8()
(`llm_int8.py`) keeps the outlier columns in 16-bit floats instead, at the cost of a second
product.

`w8a8` computes the product emulated in float: each token's row of x rounded to int8 with its
own scale, each weight row with its own, as a W8A8 kernel would multiply them.
"""

from __future__ import annotations

import torch

from .int8 import dequantize_int8, quantize_int8
from .llm_int8 import quantize_rows

ALPHA = 0.5


def smooth_scales(x_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = ALPHA):
    """s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha) for each input feature j."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if x_absmax.shape != (weight.shape[1],):
        raise ValueError(f"x_absmax needs one entry per input feature ({weight.shape[1]}), got "
                         f"shape {tuple(x_absmax.shape)}")
    w_absmax = weight.abs().amax(dim=0).float().clamp(min=1e-5)
    return (x_absmax.float().clamp(min=1e-5) ** alpha / w_absmax ** (1 - alpha)).clamp(min=1e-5)


def w8a8(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None = None):
    """x (tokens, in) @ weight (out, in)^T with both rounded to int8 (per token, per output row),
    after dividing x by `scales` and multiplying weight's columns by them when given."""
    x, weight = x.float(), weight.float()
    if scales is not None:
        x, weight = x / scales, weight * scales
    qx, x_scale = quantize_rows(x)
    x_back = qx.float() * x_scale[:, None]
    return x_back @ dequantize_int8(*quantize_int8(weight)).T
