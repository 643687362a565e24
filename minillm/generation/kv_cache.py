"""The KV cache (KV 缓存): keys and values of every past token, kept so decode reads them instead of
recomputing them.

The contract between a model and any cache (`KVCacheProtocol`, required; `KVCacheBase`, the
optional capabilities with their defaults; `capability`) lives beneath the layers that call it,
in minillm/layers/kv_contract.py; it is imported here, where chapter 03 builds the caches.

Three caches keep the contract (tests/test_kv_cache_contract.py runs them through the same
cases): `KVCache` here (one sequence or a padded batch, one preallocated tensor pair per layer),
`generation.sliding_window.RingKVCache` (the last `window` tokens in a ring) and the engine's
`PagedBatch` (minillm.engine.paged_cache: each row's keys read through its block table from a
shared pool).

`KVCache` holds one tensor pair per layer, shaped (batch, kv_heads, max_tokens, head_dim). A
forward pass appends its new keys and values layer by layer at position `length`, then the model
calls `advance(new_tokens)` once, after the last layer. Memory is
2 (keys and values) x layers x kv_heads x head_dim x tokens x bytes per value, per sequence.
"""

from __future__ import annotations

import torch

from ..layers.kv_contract import KVCacheBase, KVCacheProtocol, capability
from ..utils.validate import check_int

__all__ = ["KVCache", "KVCacheBase", "KVCacheProtocol", "LayerSlots", "capability"]


class LayerSlots(KVCacheBase):
    """Keys and values in `slots` positions per layer, (batch, kv_heads, slots, head_dim) each,
    stored in `dtype`, and `length`, the tokens seen: what KVCache, sliding_window.RingKVCache
    and quantized_kv_cache.QuantizedKVCache share."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int,
                 slots: int, dtype: torch.dtype = torch.float32, device="cpu"):
        self._check_sizes(n_layers=n_layers, batch_size=batch_size, n_kv_heads=n_kv_heads,
                          head_dim=head_dim)
        shape = (batch_size, n_kv_heads, slots, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.length = 0

    def _check_sizes(self, **sizes) -> None:
        for field, value in sizes.items():
            check_int(f"{type(self).__name__} {field}", value, 1, allowed="a positive int")

    @classmethod
    def for_model(cls, model, batch_size: int, slots: int, *options):
        """A cache shaped for `model` (anything with a minillm `config`), on its device, in the
        dtype of its activations; `options` are the cache's own arguments after the slots."""
        from ..utils.devices import model_device, model_dtype

        c = model.config
        return cls(c.n_layers, batch_size, c.n_kv_heads, c.head_dim, slots, *options,
                   dtype=model_dtype(model), device=model_device(model))

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    @property
    def batch_size(self) -> int:
        return self.keys[0].shape[0]

    def advance(self, new_tokens: int) -> None:
        """Count `new_tokens` as stored; the model calls this once per forward pass."""
        self.length += new_tokens

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep batch rows in the order `rows` gives (beam search follows its surviving beams)."""
        self.keys = [t.index_select(0, rows) for t in self.keys]
        self.values = [t.index_select(0, rows) for t in self.values]

    def _bytes_per_token(self) -> int:
        return sum(t[:, :, :1].nelement() * t.element_size() for t in self.keys + self.values)

    @property
    def capacity_bytes(self) -> int:
        """Bytes allocated for all the slots."""
        return sum(t.nelement() * t.element_size() for t in self.keys + self.values)


class KVCache(LayerSlots):
    """Contiguous keys and values for `batch_size` rows of up to `max_tokens` tokens."""

    contiguous = True  # token p at index p: the fused decode step writes and reads in place

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int,
                 max_tokens: int, dtype: torch.dtype = torch.float32, device="cpu"):
        check_int("KVCache max_tokens", max_tokens, 1, allowed="a positive int")
        super().__init__(n_layers, batch_size, n_kv_heads, head_dim, max_tokens, dtype, device)
        self.max_tokens = max_tokens

    @classmethod
    def for_model(cls, model, batch_size: int, max_tokens: int) -> "KVCache":
        """A cache shaped for `model` (anything with a minillm `config`), on its device, in the
        dtype of its activations."""
        return super().for_model(model, batch_size, max_tokens)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store `k`, `v` of shape (batch, kv_heads, new_tokens, head_dim) after the `length`
        tokens already held, and return all keys and values of this layer so far."""
        new = k.shape[2]
        end = self.length + new
        if end > self.max_tokens:
            raise ValueError(f"KV cache is full: it holds {self.length} of {self.max_tokens} "
                             f"tokens and cannot take {new} more")
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def read(self, layer: int):
        """All keys and values of `layer` stored so far."""
        return self.keys[layer][:, :, :self.length], self.values[layer][:, :, :self.length]

    def crop(self, length: int) -> None:
        """Forget every token after the first `length` (speculative decoding rolls back so)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} tokens to {length}")
        self.length = length

    def reset(self) -> None:
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values of the tokens stored so far."""
        return self._bytes_per_token() * self.length
