# %% [markdown]
# # Exercises 02 · The forward pass
#
# Build the four pieces of a Llama layer yourself: RMSNorm, rotary position embedding (RoPE),
# causal attention with grouped-query heads, and one whole transformer block. Each checker compares
# your function with minillm's own module on random tensors; the last one runs the real SmolLM2
# with your block in all 30 layers.
#
# Write each function in its cell, run the cell, then run the check cell below it.
# Check your work from a terminal too: `pytest --nbval-lax exercises/02_forward_pass.ipynb`.

# %%
import math

import torch
import torch.nn.functional as F

import minillm
from minillm.course.checks import ch02_forward_pass as checks

torch.manual_seed(0)

# %% [markdown]
# ## 1 · RMSNorm (均方根归一化)
#
# `rms_norm(x, weight, eps)` divides each vector along the last axis by its root mean square,
# then scales it by `weight`:
#
# $$\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2 + \varepsilon}} \odot w$$

# %% [task]
def rms_norm(x, weight, eps):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight

# %% [check]
checks.check_rms_norm(rms_norm)

# %% [markdown]
# ## 2 · Rotary position embedding (旋转位置编码, RoPE)
#
# `rope(x, position_ids, theta)` takes `x` of shape (batch, heads, seq, head_dim) and
# `position_ids` of shape (batch, seq). Split each head vector into two halves, x1 = x[..., :d/2]
# and x2 = x[..., d/2:]. Pair i is (x1[i], x2[i]); turn it by the angle
# position × θ^(−2i/d), i = 0 … d/2 − 1:
#
# $$(x_1, x_2) \mapsto (x_1 \cos\phi - x_2 \sin\phi,\; x_2 \cos\phi + x_1 \sin\phi)$$

# %% [task]
def rope(x, position_ids, theta):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def rope(x, position_ids, theta):
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)  # (d/2,)
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, d/2)
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]  # broadcast over heads
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

# %% [check]
checks.check_rope(rope)

# %% [markdown]
# ## 3 · Causal attention with grouped-query heads (分组查询注意力)
#
# `causal_attention(q, k, v)`: q has shape (batch, heads, seq, d); k and v have
# (batch, kv_heads, seq, d), with `heads` a multiple of `kv_heads`. Query head j uses key/value
# head j // (heads // kv_heads). Return softmax(q kᵀ / √d + mask) v, where the causal mask
# (因果掩码) puts −∞ on every key after the query's own position.

# %% [task]
def causal_attention(q, k, v):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def causal_attention(q, k, v):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    seq = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v

# %% [check]
checks.check_causal_attention(causal_attention)

# %% [markdown]
# ## 4 · One transformer block
#
# `transformer_block(x, block, config, position_ids)`: `x` is the residual stream
# (batch, seq, hidden); `block` is a `minillm.model.LlamaBlock` whose weights you use
# (`block.attn_norm.weight`, `block.attn.q_proj.weight`, ..., `block.mlp.down_proj.weight`; an
# `nn.Linear` computes `x @ weight.T`); `config` gives `n_heads`, `n_kv_heads`, `head_dim`,
# `rope_theta`, `norm_eps`. Use your three functions:
#
# 1. h = rms_norm(x); q, k, v = projections of h, split into heads; RoPE on q and k
# 2. x = x + o_proj(causal_attention(q, k, v), heads joined back)
# 3. h = rms_norm(x); x = x + down(silu(gate(h)) * up(h))

# %% [task]
def transformer_block(x, block, config, position_ids):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def transformer_block(x, block, config, position_ids):
    b, s, _ = x.shape
    attn, mlp = block.attn, block.mlp

    def heads(t, n):  # (b, s, n * head_dim) -> (b, n, s, head_dim)
        return t.view(b, s, n, config.head_dim).transpose(1, 2)

    h = rms_norm(x, block.attn_norm.weight, config.norm_eps)
    q = heads(h @ attn.q_proj.weight.T, config.n_heads)
    k = heads(h @ attn.k_proj.weight.T, config.n_kv_heads)
    v = heads(h @ attn.v_proj.weight.T, config.n_kv_heads)
    q = rope(q, position_ids, config.rope_theta)
    k = rope(k, position_ids, config.rope_theta)
    out = causal_attention(q, k, v).transpose(1, 2).reshape(b, s, -1)
    x = x + out @ attn.o_proj.weight.T
    h = rms_norm(x, block.mlp_norm.weight, config.norm_eps)
    gate = F.silu(h @ mlp.gate_proj.weight.T)
    return x + (gate * (h @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T

# %% [check]
checks.check_transformer_block(transformer_block)

# %% [markdown]
# ## 5 · Your block runs the real model
#
# The same function, with SmolLM2's weights, in all 30 layers: the logits must match minillm's.
# `fast=False` loads the readable model, whose layers have the q_proj, k_proj, ... your block
# reads (the default fast path fuses them).

# %%
model, tokenizer = minillm.load("smollm2-135m", device="cpu", fast=False)
ids = tokenizer.encode("The weather today is")

# %% [check]
checks.check_whole_model(transformer_block, model, ids)
