"""The Llama family (SmolLM2, Llama 2/3 without rope scaling, Qwen2): a decoder-only transformer.

    token ids -> embedding -> n_layers x [RMSNorm -> attention (RoPE, grouped-query heads) -> add,
                                          RMSNorm -> SwiGLU feed-forward -> add]
              -> RMSNorm -> LM head -> logits

Qwen2 is the same network with biases on the q, k and v projections.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import attention
from .config import ModelConfig
from .inputs import keep_last, prepare


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (均方根归一化): x / sqrt(mean(x²) + eps) * weight, computed in float32."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float, dtype=torch.float32):
    """Rotary position embedding (旋转位置编码, RoPE) tables for `position_ids` (batch, seq).

    Pair i of a head's dimensions, (i, i + head_dim/2), turns by the angle position x theta^(-2i/d).
    Returns cos and sin, each (batch, seq, head_dim)."""
    exponents = torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)  # (head_dim/2,) angle per position, per pair
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (batch, heads, seq, head_dim) by the angles of cos, sin (batch, seq, head_dim)."""
    cos, sin = cos[:, None], sin[:, None]  # broadcast over the heads
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = (config.n_heads, config.n_kv_heads,
                                                        config.head_dim)
        qkv_bias = config.attention_bias or config.arch == "qwen2"
        out_bias = config.attention_bias and config.arch == "llama"
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=out_bias)

    def forward(self, x, cos, sin, mask=None, cache=None):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:  # store this step's keys and values, attend over all so far
            k, v = cache.append(self.layer_idx, k, v)
        out = attention(q, k, v, mask)  # (b, n_heads, s, head_dim)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim))


class SwiGLU(nn.Module):
    """The feed-forward layer (前馈网络): down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d, f, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(d, f, bias=bias)
        self.up_proj = nn.Linear(d, f, bias=bias)
        self.down_proj = nn.Linear(f, d, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """One transformer layer: attention then feed-forward, each on a normalised copy of the
    residual stream, each adding its result back (pre-norm residual)."""

    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.attn = LlamaAttention(config, layer_idx)
        self.mlp_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, mask=None, cache=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache)
        return x + self.mlp(self.mlp_norm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.arch not in ("llama", "qwen2"):
            raise ValueError(f"LlamaModel runs llama and qwen2, not {config.arch!r}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaBlock(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.lm_head = (None if config.tie_embeddings
                        else nn.Linear(config.hidden_size, config.vocab_size, bias=False))

    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None,
                logits_to_keep: int = 0):
        """Logits (batch, seq, vocab) in float32 for token ids (batch, seq).

        With `cache` (a minillm KVCache) each layer appends its new keys and values and attends
        over all of them; the cache advances by seq at the end. `position_ids` default to
        cache.length + arange(seq); for a left-padded batch pass them (e.g. counted from each
        row's first real token) together with `attention_mask` (batch, cached + seq), 1 = real.
        `logits_to_keep=n` returns only the last n positions' logits (0: all), as transformers'."""
        position_ids, mask = prepare(self.config, input_ids, cache, position_ids, attention_mask)
        x = self.embed(input_ids)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta,
                                x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        x = self.norm(keep_last(x, logits_to_keep))
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, head).float()

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device
