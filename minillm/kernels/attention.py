"""The attention kernels' wrappers: a decode step's attention over a contiguous KV cache (the
fast path's fused step) and over the engine's paged pool, read in place through each row's
slots (c/attention.c)."""

from __future__ import annotations

import torch

from . import checks
from .build import function
from .limits import MAX_HEAD_DIM


def _heads(q: torch.Tensor, kv_heads: int, head_dim: int, where: str) -> None:
    heads, q_dim = q.shape[1], q.shape[2]
    if q_dim != head_dim or heads % kv_heads or head_dim > MAX_HEAD_DIM:
        raise ValueError(f"q {tuple(q.shape)} does not fit the {where}: the same head_dim (at "
                         f"most {MAX_HEAD_DIM}, MAX_HEAD_DIM), heads a multiple of kv_heads "
                         f"({kv_heads})")


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int,
                     threads: int | None = None) -> torch.Tensor:
    """Attention of one new query per row over a contiguous KV cache: softmax(q kᵀ / √d) v over
    each row's first `length` positions, grouped-query heads.

    q (rows, heads, head_dim) float32; keys, values (rows, kv_heads, max_tokens, head_dim)
    float32, contiguous (a `KVCache` layer's); 1 <= length <= max_tokens; head_dim at most
    MAX_HEAD_DIM. Returns (rows, heads, head_dim)."""
    checks.on_cpu("q", q, torch.float32, contiguous=False)
    checks.on_cpu("keys", keys, torch.float32)
    checks.on_cpu("values", values, torch.float32)
    if q.dim() != 3 or keys.dim() != 4 or values.shape != keys.shape:
        raise ValueError(f"q must be (rows, heads, head_dim) and keys, values (rows, kv_heads, "
                         f"max_tokens, head_dim) of one shape, got {tuple(q.shape)}, "
                         f"{tuple(keys.shape)}, {tuple(values.shape)}")
    rows, kv_heads, max_tokens, head_dim = keys.shape
    if q.shape[0] != rows:
        raise ValueError(f"q has {q.shape[0]} rows, the cache {rows}")
    _heads(q, kv_heads, head_dim, "cache")
    if not isinstance(length, int) or not 1 <= length <= max_tokens:
        raise ValueError(f"length must be an int 1..{max_tokens}, got {length!r}")
    q = q.contiguous()
    out = torch.empty_like(q)
    if function("decode_attention")(q.data_ptr(), keys.data_ptr(), values.data_ptr(),
                                    out.data_ptr(), rows, kv_heads, q.shape[1] // kv_heads,
                                    max_tokens, length, head_dim, head_dim ** -0.5,
                                    checks.threads(threads)) != 0:
        raise MemoryError(f"the decode attention kernel could not allocate its scores "
                          f"({rows * q.shape[1]} x {length})")
    return out


def paged_decode_attention(q: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
                           slots: torch.Tensor, lengths: torch.Tensor,
                           threads: int | None = None) -> torch.Tensor:
    """Attention of one new query per row over its keys and values where they lie in a paged
    pool: softmax(q kᵀ / √d) v with grouped-query heads.

    q (rows, heads, head_dim) float32; key_pool, value_pool (slots, kv_heads, head_dim) float32,
    contiguous; slots (rows, longest) int64: row i's first lengths[i] entries are the pool slots
    of its keys, in order; lengths (rows,) int64. Returns (rows, heads, head_dim); head_dim at
    most MAX_HEAD_DIM."""
    checks.on_cpu("q", q, torch.float32, contiguous=False)
    checks.on_cpu("key_pool", key_pool, torch.float32)
    checks.on_cpu("value_pool", value_pool, torch.float32)
    checks.on_cpu("slots", slots, torch.int64, contiguous=False)
    checks.on_cpu("lengths", lengths, torch.int64, contiguous=False)
    if q.dim() != 3 or key_pool.dim() != 3 or value_pool.shape != key_pool.shape:
        raise ValueError(f"q must be (rows, heads, head_dim) and key_pool, value_pool (slots, "
                         f"kv_heads, head_dim) of one shape, got {tuple(q.shape)}, "
                         f"{tuple(key_pool.shape)}, {tuple(value_pool.shape)}")
    rows = q.shape[0]
    pool_slots, kv_heads, head_dim = key_pool.shape
    _heads(q, kv_heads, head_dim, "pool")
    if slots.dim() != 2 or slots.shape[0] != rows or lengths.shape != (rows,):
        raise ValueError(f"slots must be int64 (rows, longest) and lengths int64 (rows,) for "
                         f"{rows} rows, got {tuple(slots.shape)}, {tuple(lengths.shape)}")
    longest = slots.shape[1]
    if rows and (int(lengths.min()) < 1 or int(lengths.max()) > longest
                 or int(slots.min()) < 0 or int(slots.max()) >= pool_slots):
        raise ValueError(f"every length must be 1..{longest} and every slot "
                         f"0..{pool_slots - 1}")
    q, slots, lengths = q.contiguous(), slots.contiguous(), lengths.contiguous()
    count, heads = checks.threads(threads), q.shape[1]
    scores = torch.empty(rows, heads, longest)
    function("paged_scores")(q.data_ptr(), key_pool.data_ptr(), slots.data_ptr(),
                             lengths.data_ptr(), scores.data_ptr(), rows, longest, kv_heads,
                             heads // kv_heads, head_dim, head_dim ** -0.5, count)
    weights = torch.softmax(scores, dim=-1)
    out = torch.empty(rows, heads, head_dim)
    function("paged_values")(weights.data_ptr(), value_pool.data_ptr(), slots.data_ptr(),
                             lengths.data_ptr(), out.data_ptr(), rows, longest, kv_heads,
                             heads // kv_heads, head_dim, count)
    return out
