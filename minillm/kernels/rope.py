"""The wrapper of a decode step's RoPE and cache write in one call (c/rope.c): q and k rotated,
k and v written into a layer's contiguous cache, instead of PyTorch's several small operations
per layer."""

from __future__ import annotations

import torch

from . import checks
from .build import function


def rope_write_cache(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     keys: torch.Tensor, values: torch.Tensor, pos: int,
                     n_heads: int) -> torch.Tensor:
    """One new token per row: q rotated, returned (rows, n_heads, head_dim); k rotated and v
    written into keys and values at position `pos`, in place.

    qkv (rows, (n_heads + 2 kv_heads) head_dim): q's heads, then k's, then v's, as the fused
    projection gives them; cos, sin (head_dim,) the angles of position `pos` (as
    `RotaryEmbedding` gives them); keys, values (rows, kv_heads, max_tokens, head_dim), a
    `KVCache` layer's; 0 <= pos < max_tokens; head_dim even. All float32, contiguous, on the
    CPU."""
    checks.on_cpu("keys", keys, torch.float32)
    checks.on_cpu("values", values, torch.float32)
    if keys.dim() != 4 or values.shape != keys.shape:
        raise ValueError(f"keys and values must be (rows, kv_heads, max_tokens, head_dim) of one "
                         f"shape, got {tuple(keys.shape)}, {tuple(values.shape)}")
    rows, kv_heads, max_tokens, head_dim = keys.shape
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE turns pairs of values), got {head_dim}")
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    checks.rows("qkv", qkv, (n_heads + 2 * kv_heads) * head_dim)
    if qkv.dim() != 2 or qkv.shape[0] != rows:
        raise ValueError(f"qkv must be ({rows}, {(n_heads + 2 * kv_heads) * head_dim}): one row "
                         f"per cache row, got {tuple(qkv.shape)}")
    checks.vector("cos", cos, head_dim)
    checks.vector("sin", sin, head_dim)
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos < max_tokens:
        raise ValueError(f"pos must be an int 0..{max_tokens - 1}, got {pos!r}")
    return rope_write_cache_unchecked(qkv, cos, sin, keys, values, pos, n_heads)


def rope_write_cache_unchecked(qkv, cos, sin, keys, values, pos: int,
                               n_heads: int) -> torch.Tensor:
    """`rope_write_cache` without its checks, for the fused decode step, which makes them once
    per step (`FusedDecode.kernels_fit`): tensors that do not fit its description are read and
    written out of bounds."""
    rows, kv_heads, max_tokens, head_dim = keys.shape
    q = torch.empty(rows, n_heads, head_dim, dtype=torch.float32)
    function("rope_write_cache")(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), q.data_ptr(),
                                 keys.data_ptr(), values.data_ptr(), rows, n_heads, kv_heads,
                                 max_tokens, pos, head_dim)
    return q
