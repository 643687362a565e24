"""The GPT-2 family: the older decoder-only design, kept for comparison with Llama.

    token ids -> token embedding + learned position embedding
              -> n_layers x [LayerNorm -> attention -> add, LayerNorm -> GELU MLP -> add]
              -> LayerNorm -> LM head (tied to the token embedding unless the config says not)

What differs from Llama: positions are a learned table added once at the input (no RoPE),
LayerNorm (with a mean and a bias) instead of RMSNorm, a two-matrix GELU MLP instead of SwiGLU,
and one fused projection for q, k and v, with biases everywhere.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import attention
from .config import ModelConfig
from .inputs import keep_last, prepare


class GPT2Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        width = config.n_heads * config.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * width)
        self.o_proj = nn.Linear(width, config.hidden_size)

    def forward(self, x, mask=None, cache=None):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv_proj(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = cache.append(self.layer_idx, k, v)
        out = attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim))


class GPT2MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.attn = GPT2Attention(config, layer_idx)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.mlp = GPT2MLP(config)

    def forward(self, x, mask=None, cache=None):
        x = x + self.attn(self.attn_norm(x), mask, cache)
        return x + self.mlp(self.mlp_norm(x))


class GPT2Model(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.arch != "gpt2":
            raise ValueError(f"GPT2Model runs gpt2, not {config.arch!r}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.pos_embed = nn.Embedding(config.max_seq_len, config.hidden_size)
        self.layers = nn.ModuleList(GPT2Block(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
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
        x = self.embed(input_ids) + self.pos_embed(position_ids)
        for layer in self.layers:
            x = layer(x, mask, cache)
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
