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

    Whenever a mask is in play (a decode step, a chunk after cached tokens, a padded batch), each
    key/value head's group of query heads is folded into the query axis, so the keys and values
    are read as they are, never repeated or copied. Only the plain causal prefill repeats them."""
    n_groups = q.shape[1] // k.shape[1]
    b, h, s, d = q.shape
    if mask is None and s == k.shape[2]:
        k, v = repeat_kv(k, n_groups), repeat_kv(v, n_groups)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if mask is None and s > 1:
        mask = causal_mask(s, k.shape[2], q.device)
    if n_groups == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    n_kv, keys = k.shape[1], k.shape[2]
    if mask is not None:  # each query row's mask, repeated for every head of its group
        if mask.dim() == 2:  # (s, keys): the same rows for every head
            mask = mask.repeat(n_groups, 1)
        elif mask.shape[1] == 1:  # (batch, 1, s, keys)
            mask = mask[:, :, None].expand(-1, 1, n_groups, s, keys).reshape(-1, 1, n_groups * s,
                                                                             keys)
        elif mask.shape[1] == h:  # (batch, heads, s, keys), heads in groups of n_groups
            mask = mask.reshape(-1, n_kv, n_groups * s, keys)
        else:  # a head count that does not fold: let SDPA broadcast (or refuse) it as given
            k, v = repeat_kv(k, n_groups), repeat_kv(v, n_groups)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q = q.reshape(b, n_kv, n_groups * s, d)  # a group's heads become more "queries"
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.reshape(b, h, s, d)
