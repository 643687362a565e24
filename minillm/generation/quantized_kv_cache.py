"""A KV cache that stores keys and values in 8 bits (int8, or fp8-e4m3 emulated), with per-token
or per-head scales (generation.kv_quant).

Its slots are a KVCache's (generation.kv_cache.LayerSlots) in 8 bits, as the engine's
QuantizedKVPool is a PagedKVPool in 8 bits. It keeps the KV-cache contract: `append` takes the new
keys and values in the activation dtype, stores them quantized, and returns every key and value so
far turned back into that dtype, the new ones included, so attention sees exactly what the cache
holds. It is not `contiguous` (its tensors are not the activation dtype), so the fast path's fused
decode step and the C attention kernels, which read float32 caches, are not used: every step takes
the general attention path (said once, on the first such cache). It can `crop` and `reorder`.
"""

from __future__ import annotations

import torch

from ..utils.notices import say_once
from ..utils.wording import text
from .kv_cache import LayerSlots
from .kv_quant import HeadRanges, kv_format

GENERAL_PATH = ("a quantized KV cache ({fmt}) is read by dequantizing it in append: the fused "
                "decode step and minillm's C attention kernels read float32 caches, so its steps "
                "take the general attention path (slower than a float32 KVCache)")
GENERAL_PATH_ZH = ("量化的 KV 缓存（{fmt}）在 append 里反量化后再读：融合的解码步和 minillm 的 C "
                   "注意力算子只读 float32 缓存，所以它的每一步都走通用的注意力路径（比 float32 的 "
                   "KVCache 慢）")


class QuantizedKVCache(LayerSlots):
    """Keys and values of `batch_size` rows of up to `max_tokens` tokens, in `fmt` ("int8" or
    "fp8_e4m3"). Scales per token, or per head when `ranges` (a kv_quant.HeadRanges) is given.
    `dtype` is the activation dtype `append` takes and returns."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int,
                 max_tokens: int, fmt="int8", ranges: HeadRanges | None = None,
                 dtype: torch.dtype = torch.float32, device="cpu"):
        # every size is checked before the format, which gives the slots' storage dtype
        self._check_sizes(n_layers=n_layers, batch_size=batch_size, n_kv_heads=n_kv_heads,
                          head_dim=head_dim, max_tokens=max_tokens)
        self.format = kv_format(fmt)
        super().__init__(n_layers, batch_size, n_kv_heads, head_dim, max_tokens,
                         self.format.storage, device)
        self.dtype, self.max_tokens = dtype, max_tokens
        if ranges is None:  # one scale per (row, head, token)
            scale_shape = (batch_size, n_kv_heads, max_tokens, 1)
            self.key_scales = [torch.ones(scale_shape, device=device) for _ in range(n_layers)]
            self.value_scales = [torch.ones(scale_shape, device=device) for _ in range(n_layers)]
        else:  # one fixed scale per (layer, head), broadcast over rows and tokens
            ranges.check(n_layers, n_kv_heads)
            pairs = [ranges.scales(self.format, layer) for layer in range(n_layers)]
            self.key_scales = [k.to(device).view(1, -1, 1, 1) for k, _ in pairs]
            self.value_scales = [v.to(device).view(1, -1, 1, 1) for _, v in pairs]
        self.per_token = ranges is None
        say_once(text(GENERAL_PATH, GENERAL_PATH_ZH, fmt=self.format.name))

    @classmethod
    def for_model(cls, model, batch_size: int, max_tokens: int, fmt="int8",
                  ranges: HeadRanges | None = None) -> "QuantizedKVCache":
        """A cache shaped for `model`, on its device, taking its activation dtype."""
        return super().for_model(model, batch_size, max_tokens, fmt, ranges)

    def _store(self, tensors, scales, layer: int, x: torch.Tensor, end: int) -> None:
        if self.per_token:
            scales[layer][:, :, self.length:end] = self.format.token_scale(x)
        scale = scales[layer] if not self.per_token else scales[layer][:, :, self.length:end]
        tensors[layer][:, :, self.length:end] = self.format.quantize(x, scale)

    def _read(self, tensors, scales, layer: int, end: int) -> torch.Tensor:
        scale = scales[layer][:, :, :end] if self.per_token else scales[layer]
        return self.format.dequantize(tensors[layer][:, :, :end], scale, self.dtype)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store `k`, `v` (batch, kv_heads, new_tokens, head_dim) quantized after the `length`
        tokens held; return all of this layer's keys and values so far, dequantized."""
        end = self.length + k.shape[2]
        if end > self.max_tokens:
            raise ValueError(f"KV cache is full: it holds {self.length} of {self.max_tokens} "
                             f"tokens and cannot take {k.shape[2]} more")
        self._store(self.keys, self.key_scales, layer, k, end)
        self._store(self.values, self.value_scales, layer, v, end)
        return (self._read(self.keys, self.key_scales, layer, end),
                self._read(self.values, self.value_scales, layer, end))

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} tokens to {length}")
        self.length = length

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep batch rows in the order `rows` gives: values and per-token scales alike."""
        super().reorder(rows)
        if self.per_token:
            self.key_scales = [t.index_select(0, rows) for t in self.key_scales]
            self.value_scales = [t.index_select(0, rows) for t in self.value_scales]

    def bytes_per_token(self) -> int:
        """Bytes one token of one row takes in every layer: its values, and its scales when
        they are per token (per-head scales are a fixed few bytes per layer, not counted)."""
        tensors = self.keys + self.values
        if self.per_token:
            tensors = tensors + self.key_scales + self.value_scales
        return sum(t[0, :, :1].nelement() * t.element_size() for t in tensors)

    @property
    def capacity_bytes(self) -> int:
        """Bytes allocated for all `max_tokens` slots of every row (as KVCache.capacity_bytes)."""
        return self.bytes_per_token() * self.max_tokens * self.batch_size

    @property
    def nbytes(self) -> int:
        """Bytes held by the tokens stored so far, every row."""
        return self.bytes_per_token() * self.length * self.batch_size
