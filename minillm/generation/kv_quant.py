"""Keys and values stored in 8 bits: the formats and their scales, shared by the quantized KV
caches (generation.quantized_kv_cache, engine.quantized_pool).

A stored value is `q = x / scale`, rounded into the format; reading it back is `q * scale`.

    int8        integers -127..127, rounded to nearest: a uniform grid, step `scale`
    fp8_e4m3    8-bit floats (4 exponent bits, 3 stored mantissa bits, largest 448), emulated:
                stored as torch.float8_e4m3fn, turned back into float32 to attend; a grid whose
                step grows with the value (relative error up to 1/16)

The scale comes at one of two grains:

    per token   one scale for each (token, kv_head): the largest |x| of that head's head_dim
                values maps to the format's largest value. Nothing to calibrate, every token
                fits; it costs one float32 per head per token beside the values.
    per head    one fixed scale for each (layer, kv_head, keys or values), from the largest
                |x| a calibration text gave that head (`HeadRanges.calibrate`). Nothing stored per token; a value
                beyond what calibration saw is clipped to the format's largest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TINY = 1e-8  # the smallest scale: an all-zero head still divides safely


@dataclass(frozen=True)
class KVFormat:
    """One 8-bit storage format: its name, torch storage dtype and largest magnitude."""

    name: str
    storage: torch.dtype
    largest: float

    def quantize(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """`x / scale` in this format (clipped to +-largest; int8 rounds to nearest)."""
        y = (x.float() / scale).clamp(-self.largest, self.largest)
        if self.storage is torch.int8:
            y = y.round()
        return y.to(self.storage)

    def dequantize(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype
                   ) -> torch.Tensor:
        return (q.float() * scale).to(dtype)

    def token_scale(self, x: torch.Tensor) -> torch.Tensor:
        """One scale per vector of the last dimension: its largest |x| maps to `largest`."""
        return x.float().abs().amax(-1, keepdim=True).clamp(min=TINY) / self.largest


FORMATS = {
    "int8": KVFormat("int8", torch.int8, 127.0),
    "fp8_e4m3": KVFormat("fp8_e4m3", torch.float8_e4m3fn, 448.0),
}


def kv_format(name) -> KVFormat:
    """The format called `name`, or a ValueError naming the ones there are."""
    if isinstance(name, KVFormat):
        return name
    if name not in FORMATS:
        raise ValueError(f"KV-cache format must be one of {', '.join(map(repr, FORMATS))}, "
                         f"got {name!r}")
    return FORMATS[name]


@dataclass
class HeadRanges:
    """What per-head scales are made from: `keys[layer]` and `values[layer]` are float32
    tensors of (kv_heads,), each head's largest |value| on a calibration text."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @classmethod
    def calibrate(cls, cache) -> "HeadRanges":
        """The ranges of the keys and values a float KVCache holds after a run over a
        calibration text (every row, every stored token)."""
        if cache.length < 1:
            raise ValueError("calibrate from a KVCache that holds tokens: run the model over a "
                             "calibration text with it first")

        def head_max(t):  # (batch, kv_heads, tokens, head_dim) -> (kv_heads,)
            return t[:, :, :cache.length].float().abs().amax(dim=(0, 2, 3)).clamp(min=TINY)

        return cls([head_max(t) for t in cache.keys], [head_max(t) for t in cache.values])

    def scales(self, fmt: KVFormat, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s key and value scales in `fmt`, (kv_heads,) each."""
        return self.keys[layer] / fmt.largest, self.values[layer] / fmt.largest

    def check(self, n_layers: int, n_kv_heads: int) -> None:
        shapes = {tuple(t.shape) for t in self.keys + self.values}
        if len(self.keys) != n_layers or len(self.values) != n_layers \
                or shapes != {(n_kv_heads,)}:
            raise ValueError(f"head ranges cover {len(self.keys)} layers of shapes "
                             f"{sorted(shapes)}; this cache needs {n_layers} layers of "
                             f"({n_kv_heads},)")
