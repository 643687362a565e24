"""Rotary position embedding (旋转位置编码, RoPE).

Pair i of a head's dimensions, (i, i + head_dim/2), turns by the angle position x theta^(-2i/d).
`rope_cos_sin` computes the angles' cosines and sines for any positions; `RotaryEmbedding` keeps
them for every position of the context window, computed once, and looks them up.

Past the trained length the slow pairs reach angles training never showed. `RopeScaling` changes
the frequencies to read a longer context: position interpolation ("pi"), NTK-aware ("ntk") and
YaRN ("yarn", as transformers computes it, whose `rope_scaling` "linear" and "yarn" it reads);
"none" reads further with the trained angles, for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

SCALINGS = ("none", "pi", "ntk", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """Read `factor` times the `trained` context length. Kind "none" keeps the trained
    frequencies (the angles past the trained length are new: what happens without scaling);
    "pi" divides every frequency by the factor; "ntk" enlarges theta by factor^(d/(d-2)) (the
    slowest pair is divided by the factor, the fastest barely moves); "yarn" keeps the pairs
    that turn more than `fast` times within the trained length, divides those that turn less
    than `slow` times, ramps linearly (by pair) between, and multiplies cos and sin by
    0.1 ln(factor) + 1."""

    kind: str
    factor: float
    trained: int
    fast: float = 32.0
    slow: float = 1.0

    def __post_init__(self):
        if self.kind not in SCALINGS:
            raise ValueError(f"RoPE scaling kind must be one of {SCALINGS}, got {self.kind!r}")
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) \
                or not self.factor >= 1:
            raise ValueError(f"RoPE scaling factor must be a number >= 1 (how many times the "
                             f"trained context to read), got {self.factor!r}")
        if isinstance(self.trained, bool) or not isinstance(self.trained, int) or self.trained < 1:
            raise ValueError(f"RoPE scaling's trained length must be a positive int, got "
                             f"{self.trained!r}")
        if not self.fast > self.slow > 0:
            raise ValueError(f"YaRN's bounds need fast > slow > 0 (turns within the trained "
                             f"length), got fast={self.fast!r}, slow={self.slow!r}")


def rope_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None = None,
                     device=None) -> tuple[torch.Tensor, float]:
    """(each pair's angle per position (head_dim/2,), the factor cos and sin are multiplied by)."""
    exponents = torch.arange(0, head_dim, 2, device=device).float() / head_dim
    if scaling is not None and scaling.kind == "ntk":
        theta = theta * scaling.factor ** (head_dim / (head_dim - 2))
    inv_freq = 1.0 / (theta ** exponents)  # (head_dim/2,) angle per position, per pair
    if scaling is None or scaling.kind in ("none", "ntk"):
        return inv_freq, 1.0
    if scaling.kind == "pi":
        return inv_freq / scaling.factor, 1.0

    def pair_turning(turns):  # the (fractional) pair that turns `turns` times within `trained`
        return head_dim * math.log(scaling.trained / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(pair_turning(scaling.fast)), 0)
    high = min(math.ceil(pair_turning(scaling.slow)), head_dim - 1)
    pairs = torch.arange(head_dim // 2, device=device).float()
    kept = 1 - ((pairs - low) / max(high - low, 1e-3)).clamp(0, 1)  # 1: as trained
    inv_freq = inv_freq / scaling.factor * (1 - kept) + inv_freq * kept
    return inv_freq, 0.1 * math.log(scaling.factor) + 1.0


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float, dtype=torch.float32,
                 scaling: RopeScaling | None = None):
    """cos and sin, each (batch, seq, head_dim), for `position_ids` (batch, seq)."""
    inv_freq, magnitude = rope_frequencies(head_dim, theta, scaling, position_ids.device)
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)
    return (angles.cos() * magnitude).to(dtype), (angles.sin() * magnitude).to(dtype)


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

    def __init__(self, head_dim: int, theta: float, max_positions: int,
                 scaling: RopeScaling | None = None):
        super().__init__()
        self.head_dim, self.theta, self.max_positions = head_dim, theta, max_positions
        self.scaling = scaling
        self._tables: dict = {}

    def forward(self, position_ids: torch.Tensor, dtype=torch.float32):
        """cos and sin, each (batch, seq, head_dim), for `position_ids` (batch, seq)."""
        key = (position_ids.device, dtype)
        table = self._tables.get(key)
        if table is None:
            every = torch.arange(self.max_positions, device=position_ids.device)[None]
            cos, sin = rope_cos_sin(every, self.head_dim, self.theta, dtype, self.scaling)
            table = self._tables[key] = (cos[0], sin[0])
        cos, sin = table
        return cos[position_ids], sin[position_ids]

    def extra_repr(self) -> str:
        scaled = "" if self.scaling is None else \
            f", scaling={self.scaling.kind} x{self.scaling.factor:g} of {self.scaling.trained}"
        return (f"head_dim={self.head_dim}, theta={self.theta}, "
                f"max_positions={self.max_positions}{scaled}")
