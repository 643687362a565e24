"""int4 group-wise quantization with a scale and a minimum, GGUF's Q4_1 scheme.

Each row of a weight (out_features, in_features) is cut into groups of `group_size` numbers (32,
as in GGUF). A group keeps a scale d and its minimum m (each as float16, like Q4_1) and 4-bit
numbers q in 0..15:

    d = (max - min) / 15        q = trunc((w - min) / d + 0.5), clipped to 0..15
    w ≈ q * d + m

Two 4-bit numbers share one byte: in a group, byte j holds number j in its low nibble and number
j + group_size/2 in its high nibble, the same layout as a Q4_1 block. So a group of 32 weights
costs 16 bytes of numbers + 2 (d) + 2 (m) = 20 bytes: 5 bits a weight.

The arithmetic follows the `gguf` package's Q4_1 quantizer step by step (float32, the reciprocal
1/d, then truncation after adding 0.5), so with group_size=32 `dequantize_int4(quantize_int4(w))`
equals `gguf.quants.dequantize(gguf.quants.quantize(w, Q4_1), Q4_1)` exactly (a test checks it).
"""

from __future__ import annotations

import torch

from .basics import check_group_size
from .int8 import _check_weight

GROUP_SIZE = 32


def _check_int4_group(row: int, group_size) -> None:
    check_group_size(row, group_size)
    if group_size % 2:
        raise ValueError(f"group_size must be even (two 4-bit numbers share a byte), got "
                         f"{group_size}")


def pack_nibbles(q: torch.Tensor, group_size: int) -> torch.Tensor:
    """(rows, cols) numbers 0..15 -> (rows, cols/2) bytes, Q4_1's layout within each group."""
    rows, cols = q.shape
    g = q.to(torch.uint8).reshape(rows, cols // group_size, 2, group_size // 2)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(rows, cols // 2)


def unpack_nibbles(packed: torch.Tensor, group_size: int) -> torch.Tensor:
    """The inverse of `pack_nibbles`: (rows, cols/2) bytes -> (rows, cols) numbers 0..15 (uint8)."""
    rows, half = packed.shape
    g = packed.reshape(rows, (2 * half) // group_size, 1, group_size // 2)
    return torch.cat([g & 0x0F, g >> 4], dim=2).reshape(rows, 2 * half)


def quantize_int4(w: torch.Tensor, group_size: int = GROUP_SIZE):
    """(packed uint8 (out, in/2), scale float16 (out, in/group), minimum float16 (out, in/group))."""
    _check_weight(w)
    rows, cols = w.shape
    _check_int4_group(cols, group_size)
    g = w.detach().float().reshape(rows, cols // group_size, group_size)
    lo = g.amin(dim=-1, keepdim=True)
    d = (g.amax(dim=-1, keepdim=True) - lo) / 15
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = torch.trunc((g - lo) * inv + 0.5).clamp(0, 15).reshape(rows, cols)
    return (pack_nibbles(q, group_size), d.squeeze(-1).to(torch.float16),
            lo.squeeze(-1).to(torch.float16))


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor,
                    dtype=torch.float32) -> torch.Tensor:
    """The float weight: q * d + m in each group (computed in float32, like gguf)."""
    rows, n_groups = scale.shape
    group_size = 2 * packed.shape[1] // n_groups
    q = unpack_nibbles(packed, group_size).reshape(rows, n_groups, group_size).to(torch.float32)
    w = q * scale.to(torch.float32)[..., None] + minimum.to(torch.float32)[..., None]
    return w.reshape(rows, n_groups * group_size).to(dtype)
