# 中文版 · 02_forward_pass_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=b3e7bbb1
# # 练习 02 · 前向传播
#
# 亲手搭出 Llama 层的四个部件：均方根归一化（RMSNorm）、旋转位置编码（rotary position
# embedding，RoPE）、带分组查询的因果注意力，以及一个完整的 Transformer 块。每个检查都在随机
# 张量上把你的函数和 minillm 自己的模块作对比；最后一个检查让真实的 SmolLM2 在全部 30 层里都用
# 你的块来运行。
#
# 在各自的单元格里写好函数并运行，再运行它下面的检查单元格。
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/02_forward_pass.ipynb`。

# %% en=a8832d04
import math

import torch
import torch.nn.functional as F

import minillm
from minillm.course.checks import ch02_forward_pass as checks

torch.manual_seed(0)

# %% [markdown] en=10d02efd
# ## 1 · 均方根归一化（RMSNorm）
#
# `rms_norm(x, weight, eps)` 把最后一个轴上的每个向量除以它的均方根，再乘上 `weight`：
#
# $$\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2 + \varepsilon}} \odot w$$

# %% [task] en=377da8a9
def rms_norm(x, weight, eps):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight

# %% [check] en=8afd3892
checks.check_rms_norm(rms_norm)

# %% [markdown] en=b9fb0eb4
# ## 2 · 旋转位置编码（RoPE）
#
# `rope(x, position_ids, theta)` 的输入 `x` 形状为（batch, heads, seq, head_dim），`position_ids`
# 形状为（batch, seq）。把每个头的向量分成两半：x1 = x[..., :d/2]，x2 = x[..., d/2:]。第 i 对是
# (x1[i], x2[i])，把它旋转角度 position × θ^(−2i/d)，i = 0 … d/2 − 1：
#
# $$(x_1, x_2) \mapsto (x_1 \cos\phi - x_2 \sin\phi,\; x_2 \cos\phi + x_1 \sin\phi)$$

# %% [task] en=3484cc07
def rope(x, position_ids, theta):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def rope(x, position_ids, theta):
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)  # (d/2,)
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, d/2)
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]  # 在头这个维度上广播
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

# %% [check] en=81d0b9de
checks.check_rope(rope)

# %% [markdown] en=5ba9b544
# ## 3 · 带分组查询的因果注意力（分组查询注意力）
#
# `causal_attention(q, k, v)`：q 的形状为（batch, heads, seq, d）；k 和 v 的形状为
# （batch, kv_heads, seq, d），`heads` 是 `kv_heads` 的整数倍。第 j 个查询头使用第
# j // (heads // kv_heads) 个键/值头。返回 softmax(q kᵀ / √d + mask) v，其中因果掩码
# 在查询自身位置之后的每个键上放 −∞。

# %% [task] en=51e3f574
def causal_attention(q, k, v):
    # 在这里写你的代码
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

# %% [check] en=ed7cdc6b
checks.check_causal_attention(causal_attention)

# %% [markdown] en=02eaba3b
# ## 4 · 一个 Transformer 块
#
# `transformer_block(x, block, config, position_ids)`：`x` 是残差流（batch, seq, hidden）；
# `block` 是一个 `minillm.model.LlamaBlock`，要用的就是它的权重（`block.attn_norm.weight`、
# `block.attn.q_proj.weight`……`block.mlp.down_proj.weight`；一个 `nn.Linear` 计算的是
# `x @ weight.T`）；`config` 提供 `n_heads`、`n_kv_heads`、`head_dim`、`rope_theta`、
# `norm_eps`。用上你写好的三个函数：
#
# 1. h = rms_norm(x)；q, k, v = h 的三个投影，再拆成多个头；对 q 和 k 做 RoPE
# 2. x = x + o_proj(causal_attention(q, k, v)，各个头重新拼回去)
# 3. h = rms_norm(x)；x = x + down(silu(gate(h)) * up(h))

# %% [task] en=a5b43e5f
def transformer_block(x, block, config, position_ids):
    # 在这里写你的代码
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

# %% [check] en=676d588c
checks.check_transformer_block(transformer_block)

# %% [markdown] en=2c4d2285
# ## 5 · 用你的块运行真实的模型
#
# 还是同一个函数，这次带着 SmolLM2 的权重，用在全部 30 层里：logits 必须与 minillm 的一致。
# `fast=False` 加载的是可读版的模型，它的各层分别持有你的块要读的 q_proj、k_proj……（默认的
# 快速路径会把它们融合在一起）。

# %% en=8b9dda90
model, tokenizer = minillm.load("smollm2-135m", device="cpu", fast=False)
ids = tokenizer.encode("The weather today is")  # 意思是“今天的天气是”

# %% [check] en=f949da73
checks.check_whole_model(transformer_block, model, ids)
