"""Causal self-attention (因果自注意力), written twice: as explicit matrix math for the lesson, and
with PyTorch's fused `scaled_dot_product_attention` for the engine. A test checks they agree.

Shapes: q is (batch, n_heads, queries, head_dim); k and v are (batch, n_kv_heads, keys, head_dim),
with n_heads a multiple of n_kv_heads (grouped-query attention, 分组查询注意力: each key/value head
serves a group of query heads). The queries are the last `queries` of the `keys` positions.
A mask, when given, is boolean, True where a query may look at a key, shaped (batch, 1, queries, keys).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def repeat_kv(x: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(batch, n_kv_heads, keys, head_dim) -> (batch, n_kv_heads * n_groups, keys, head_dim):
    each key/value head repeated for the query heads of its group."""
    if n_groups == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_groups, t, d).reshape(b, h * n_groups, t, d)


def causal_mask(queries: int, keys: int, device=None) -> torch.Tensor:
    """(queries, keys) booleans: query i (at position keys - queries + i) sees keys up to itself."""
    offset = keys - queries
    q = torch.arange(queries, device=device)[:, None]
    k = torch.arange(keys, device=device)[None, :]
    return k <= q + offset


def attention_explicit(q, k, v, mask=None):
    """softmax(q kᵀ / √d + mask) v, spelled out. Without a mask the causal mask is used."""
    n_groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, n_groups), repeat_kv(v, n_groups)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, queries, keys)
    if mask is None:
        mask = causal_mask(q.shape[2], k.shape[2], q.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return weights @ v


def attention(q, k, v, mask=None):
    """The same result as `attention_explicit`, with the fused kernel.

    A one-token query with no mask (the batch-1 decode step) folds the query heads of each group
    into the query axis, so the cached keys and values are read as they are, never copied."""
    n_groups = q.shape[1] // k.shape[1]
    b, h, s, d = q.shape
    if s == 1 and mask is None:
        q = q.reshape(b, k.shape[1], n_groups, d)  # group's heads become its "queries"
        out = F.scaled_dot_product_attention(q, k, v)
        return out.reshape(b, h, 1, d)
    k, v = repeat_kv(k, n_groups), repeat_kv(v, n_groups)
    if mask is None:
        if s != k.shape[2]:
            mask = causal_mask(s, k.shape[2], q.device)
        else:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
