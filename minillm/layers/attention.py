"""Causal self-attention (因果自注意力): the math, and the attention layer every model shares.

The math is written twice: as explicit matrix math for the lesson (`attention_explicit`), and
with PyTorch's fused `scaled_dot_product_attention` for the engine (`attention`). A test checks
they agree. `Attention` is the layer: projections, rotary positions, the KV cache, the math.

Shapes: q is (batch, n_heads, queries, head_dim); k and v are (batch, n_kv_heads, keys, head_dim),
with n_heads a multiple of n_kv_heads (grouped-query attention, 分组查询注意力: each key/value head
serves a group of query heads). The queries are the last `queries` of the `keys` positions.
A mask, when given, is boolean, True where a query may look at a key, shaped (batch, 1, queries, keys).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv_contract import KVCacheProtocol, capability
from .linear import fuse_linears
from .rope import apply_rope


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


def attention(q, k, v, mask=None, prompt_dtype=None):
    """The same result as `attention_explicit`, with the fused kernel.

    `prompt_dtype` (a fast model's, `Attention.prompt_dtype`): the plain causal prefill of 2
    tokens or more on a CPU (a whole prompt's first pass, as `generate` runs it) takes q, k and
    v rounded to it (bf16, as transformers' bf16 computes attention), and gives its result back
    in q's dtype. Every other call ignores it: a pass with a mask or after cached tokens (the
    engine's, a chunk of a long prompt) and a decode step attend in q's dtype.

    Whenever a mask is in play (a decode step, a chunk after cached tokens, a padded batch), each
    key/value head's group of query heads is folded into the query axis, so the keys and values
    are read as they are, never repeated or copied. The plain causal prefill repeats them on a
    GPU; on a CPU it runs a block of queries at a time (`causal_attention`)."""
    n_groups = q.shape[1] // k.shape[1]
    b, h, s, d = q.shape
    if mask is None and s == k.shape[2]:
        if prompt_dtype not in (None, q.dtype) and q.device.type == "cpu" and s > 1:
            low = attention(q.to(prompt_dtype), k.to(prompt_dtype), v.to(prompt_dtype))
            # back in q's dtype with the heads innermost, as the output projection reads them:
            # the caller's transpose(1, 2).reshape is then a view, not another copy
            out = torch.empty(b, s, h, d, dtype=q.dtype, device=q.device)
            return out.copy_(low.transpose(1, 2)).transpose(1, 2)
        if q.device.type == "cpu":  # bf16's blocks larger: faster there (docs/benchmarks.md)
            return causal_attention(q, k, v, 128 if q.dtype is torch.bfloat16 else 64)
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


@functools.lru_cache(maxsize=16)
def _causal_blocks(length: int, chunk: int, dtype, device) -> tuple:
    """(start, end, additive mask of the block's queries over keys 0..end) for each block after
    the first; built once per prompt length and reused by every layer."""
    positions = torch.arange(length, device=device)
    blocks = []
    for start in range(chunk, length, chunk):
        end = min(start + chunk, length)
        mask = torch.zeros(end - start, end, dtype=dtype, device=device)
        mask.masked_fill_(positions[None, :end] > positions[start:end, None], float("-inf"))
        blocks.append((start, end, mask))
    return tuple(blocks)


# PyTorch's SDPA reads fewer key/value heads than query heads itself (enable_gqa, from 2.5);
# its CPU flash kernel takes them from 2.9 (before, such a call falls back to the math kernel)
SDPA_TAKES_GROUPS = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 9)


def causal_attention(q, k, v, chunk: int = 64):
    """Causal self-attention of a whole prompt, q (b, heads, s, head_dim) and k, v (b, kv_heads,
    s, head_dim), kv_heads dividing heads, a block of `chunk` queries at a time. Each block
    reads only the keys up to its last position: PyTorch's CPU kernel splits the keys into
    blocks of 512, so for prompts up to that length it computes the whole masked upper
    triangle; skipping it halves the work. Each group of query heads reads its key/value head
    as it is (before PyTorch 2.9, from a repeated copy)."""
    s, n_groups = q.shape[2], q.shape[1] // k.shape[1]
    if n_groups > 1 and not SDPA_TAKES_GROUPS:
        k, v = repeat_kv(k, n_groups), repeat_kv(v, n_groups)
    groups = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
    if s <= chunk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **groups)
    out = torch.empty_like(q)
    out[:, :, :chunk] = F.scaled_dot_product_attention(q[:, :, :chunk], k[:, :, :chunk],
                                                       v[:, :, :chunk], is_causal=True, **groups)
    for start, end, mask in _causal_blocks(s, chunk, q.dtype, q.device):
        out[:, :, start:end] = F.scaled_dot_product_attention(
            q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=mask, **groups)
    return out


class Attention(nn.Module):
    """Grouped-query self-attention (分组查询注意力), the layer every model family shares.

        q, k, v = projections of x            (one fused matrix once `fuse()` has run)
        q, k    = rotary positions applied    (when the model gives cos and sin)
        k, v    = cache.append(layer, k, v)   (this step's keys and values, plus all earlier)
        out     = o_proj(attention(q, k, v))

    The KV cache is anything that keeps `minillm.generation.kv_cache.KVCacheProtocol`; one that
    `attends` itself (a capability of the contract) takes the attention over. A family changes one
    step by overriding a method: Qwen3 normalizes q and k per head in `qk_norm`. Tensor
    parallelism (`minillm.distributed`) gives each rank some of the heads, by changing
    `n_heads`, `n_kv_heads` and the projections' rows; nothing here knows about it."""

    def __init__(self, config, layer_idx: int, *, fused: bool = False):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = (config.n_heads, config.n_kv_heads,
                                                        config.head_dim)
        d, q_width, kv_width = config.hidden_size, self.q_width, self.kv_width
        bias = config.attention_bias
        if fused:  # one matrix for q, k and v, as GPT-2 stores them
            self.qkv_proj = nn.Linear(d, q_width + 2 * kv_width, bias=bias)
        else:
            self.q_proj = nn.Linear(d, q_width, bias=bias)
            self.k_proj = nn.Linear(d, kv_width, bias=bias)
            self.v_proj = nn.Linear(d, kv_width, bias=bias)
        self.o_proj = nn.Linear(q_width, d, bias=config.attention_out_bias)

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_fused(self) -> bool:
        return "qkv_proj" in self._modules

    @property
    def prompt_dtype(self):
        """The dtype a whole prompt's attention computes in where it is not q's: the one its
        q/k/v projection's products take (`products_dtype`: a fast bf16 layer on a CPU with bf16
        tiles rounds x to bf16, as transformers' bf16 does, and so does its attention); None
        for q's own."""
        projection = self._modules.get("qkv_proj") or self._modules.get("q_proj")
        return getattr(projection, "products_dtype", None)

    def fuse(self, make_linear=None) -> None:
        """Replace q_proj, k_proj and v_proj by one `qkv_proj` holding the three matrices stacked
        (one multiplication instead of three; the same numbers). `make_linear(weight, bias)`
        builds the new layer (default: an nn.Linear)."""
        if self.is_fused:
            return
        self.qkv_proj = fuse_linears((self.q_proj, self.k_proj, self.v_proj), make_linear)
        del self.q_proj, self.k_proj, self.v_proj

    def project(self, x):
        """q (b, n_heads, s, head_dim) and k, v (b, n_kv_heads, s, head_dim) for x (b, s, d)."""
        b, s, _ = x.shape
        if "qkv_proj" in self._modules:
            qkv, qw = self._modules["qkv_proj"](x), self.q_width
            q, k, v = qkv[..., :qw], qkv[..., qw:qw + self.kv_width], qkv[..., qw + self.kv_width:]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (q.view(b, s, self.n_heads, self.head_dim).transpose(1, 2),
                k.view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2),
                v.view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2))

    def qk_norm(self, q, k):
        """A family's normalization of queries and keys before the rotation (none here)."""
        return q, k

    def forward(self, x, cos=None, sin=None, mask=None, cache: KVCacheProtocol | None = None):
        b, s, _ = x.shape
        q, k, v = self.project(x)
        q, k = self.qk_norm(q, k)
        if cos is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None and capability(cache, "attends"):  # e.g. a paged decode kernel
            out = cache.attend(self.layer_idx, q, k, v)
        else:
            if cache is not None:  # store this step's keys and values, attend over all so far
                k, v = cache.append(self.layer_idx, k, v)
            out = attention(q, k, v, mask, self.prompt_dtype)  # (b, n_heads, s, head_dim)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.q_width))
