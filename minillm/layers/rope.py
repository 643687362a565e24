"""Rotary position embedding (旋转位置编码, RoPE).

Pair i of a head's dimensions, (i, i + head_dim/2), turns by the angle position x theta^(-2i/d).
`rope_cos_sin` computes the angles' cosines and sines for any positions; `RotaryEmbedding` keeps
them for every position of the context window, computed once, and looks them up.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float, dtype=torch.float32):
    """cos and sin, each (batch, seq, head_dim), for `position_ids` (batch, seq)."""
    exponents = torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)  # (head_dim/2,) angle per position, per pair
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (batch, heads, seq, head_dim) by the angles of cos, sin (batch, seq, head_dim):
    x * cos + rotate_half(x) * sin. The second term is added in two halves in place,
    -x[half:] * sin[:half] to the first half and x[:half] * sin[half:] to the second, which is
    rotate_half(x) * sin without building the rotated copy."""
    cos, sin = cos[:, None], sin[:, None]  # broadcast over the heads
    half = x.shape[-1] // 2
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


class RotaryEmbedding(nn.Module):
    """The cos/sin of every position up to `max_positions`, built on first use on the device
    and in the dtype asked for (so a model built on the "meta" device, or moved, needs nothing
    more), then looked up by position: one gather per forward pass instead of trigonometry."""

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        super().__init__()
        self.head_dim, self.theta, self.max_positions = head_dim, theta, max_positions
        self._tables: dict = {}

    def forward(self, position_ids: torch.Tensor, dtype=torch.float32):
        """cos and sin, each (batch, seq, head_dim), for `position_ids` (batch, seq)."""
        key = (position_ids.device, dtype)
        table = self._tables.get(key)
        if table is None:
            every = torch.arange(self.max_positions, device=position_ids.device)[None]
            cos, sin = rope_cos_sin(every, self.head_dim, self.theta, dtype)
            table = self._tables[key] = (cos[0], sin[0])
        cos, sin = table
        return cos[position_ids], sin[position_ids]

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta}, max_positions={self.max_positions}"
