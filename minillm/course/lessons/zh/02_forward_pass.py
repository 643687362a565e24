# 中文版 · 02_forward_pass.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=7410a2d3
# # 02 · 前向传播（forward pass）：minillm 自己的 Transformer
#
# 第 00 章里是 transformers 替我们运行模型。现在换成 minillm 用自己的代码来运行它：
# `minillm/model/llama.py` 里大约 150 行 PyTorch 代码，装上从 GGUF 文件读出的真实 SmolLM2 权重。
# 我们跟着一个提示词走遍整个网络：
#
# **词元 id → 词嵌入 → 30 × (RMSNorm → 带 RoPE 的注意力 → RMSNorm → SwiGLU) → RMSNorm →
# 语言模型头 → logits → softmax → 下一个词元的概率分布**
#
# 最后检验：在同一份权重上，minillm 算出的 logits 与 transformers 的一致。

# %% en=7732a673
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from ipywidgets import IntSlider, interact

import minillm
from minillm.course import show_source
from minillm.utils.devices import Timer
from minillm.layers import Attention
from minillm.model import apply_rope, attention, attention_explicit, rms_norm, rope_cos_sin

torch.manual_seed(0)
CI = bool(os.environ.get("CI"))

# %% [markdown] en=4943287a
# ## 1 · 加载权重
#
# 文件里的权重是*量化*过的：每 32 个权重一块，每个权重是一个 4 比特的整数编码（0 到 15），每块
# 另存一个缩放因子和一个最小值。**反量化**（dequantize）就是把这些编码还原成浮点数：
# 权重 ≈ 编码 × 缩放因子 + 最小值。第 07 章会亲手解码一块。
#
# `minillm.load` 用 `gguf` 包读取 GGUF 文件，把每一块都反量化成 32 位浮点数。这要花好几秒，
# 所以第一次加载时会把一份 float32 副本以 safetensors 格式存进缓存，以后每次加载都直接读这份
# 副本。我们要的是可读版的模型（`fast=False`）：它的各层按本章画出的样子分别持有 q_proj、k_proj、
# v_proj……，而默认的快速路径会把它们融合在一起（第 05 章）。不管机器上有什么设备，本章都只用
# CPU：我们要把模型一个张量一个张量地拆开，逐个与 transformers 的对照，这些工作量很小，放到
# GPU 上只会多出一堆拷贝。

# %% en=a625f944
with Timer("cpu") as loading:
    model, tokenizer = minillm.load("smollm2-135m", device="cpu", fast=False)
load_seconds = loading.seconds
config = model.config
print(f"加载用时 {load_seconds:.2f} 秒")
config

# %% [markdown] en=5d94ad7c
# 整个模型就是一个普通的 `torch.nn.Module`。它的前向传播从上往下读就行：

# %% en=573d3ed1
show_source(type(model).forward)

# %% [markdown] en=f03a0e3c
# ## 2 · 词嵌入（embedding）
#
# 第一层是一张表：词表里的每个词元对应一行，每行有 `hidden_size` 个数。`model.embed(ids)` 做的
# 只是查表取行。训练会让用法相近的词元彼此靠近。下面列出与几个词元最接近的行（按余弦相似度）：

# %% en=ec928b84
table = model.embed.weight
print(f"词嵌入表：{tuple(table.shape)} = 词表大小 × 隐藏层宽度")
unit = F.normalize(table, dim=-1)

for word in [" king", " Paris", " Monday", " seven", " running"]:
    (token,) = tokenizer.encode(word)
    nearest = (unit @ unit[token]).topk(6).indices[1:].tolist()
    print(f"{word!r:>11} → {[tokenizer.decode([i]) for i in nearest]}")

# %% [markdown] en=8a1bec62
# ## 3 · 位置：旋转位置编码（rotary position embedding，RoPE）
#
# 注意力用点积把每个查询和每个键作比较，而点积本身并不关心词的顺序。RoPE 按词元的位置，把查询
# （以及键）的每一对维度旋转一个与位置成正比的角度，每一对的转速各不相同（θ = 100,000 决定了
# 最慢的那一对）。代码如下：

# %% en=e562115d
show_source(rope_cos_sin)
show_source(apply_rope)

# %% [markdown] en=da83aed7
# 旋转对点积有什么影响？把*同一个*向量分别放在查询的位置 m 和键的位置 n。这时得分只取决于
# 距离 m − n，而且平均来看，距离越远得分越低：离得近的词元一开始就占了优势。

# %% en=3f229f7b
head_dim, theta = config.head_dim, config.rope_theta
vectors = torch.randn(1000, 1, 1, head_dim)  # 1,000 个随机的单头向量


def rotated(x, positions):
    """把 x（向量数, 1, 1, head_dim）旋转到 `positions` 中的每个位置：（向量数, 1, 位置数, d）。"""
    cos, sin = rope_cos_sin(torch.tensor([positions]), head_dim, theta)
    return apply_rope(x, cos, sin)


distances = list(range(0, 1024, 8))
scores = (rotated(vectors, distances) * rotated(vectors, [0])).sum(-1)[:, 0]  # （向量数, 距离数）
scores = scores.mean(0)

far_along = (rotated(vectors, [105]) * rotated(vectors, [100])).sum(-1)
at_start = (rotated(vectors, [5]) * rotated(vectors, [0])).sum(-1)
assert torch.allclose(far_along, at_start, atol=1e-3)
print("距离相同、位置不同 → 得分相同：已检验")

plt.figure(figsize=(7, 3))
plt.plot(distances, scores / scores[0])
plt.xlabel("距离 m − n（词元）")
plt.ylabel("q·k 与距离为 0 时之比")
plt.title(f"RoPE，head_dim {head_dim}，θ = {theta:,.0f}：1,000 个向量的平均")
plt.show()

# %% [markdown] en=9c7b0a75
# ## 4 · 自注意力（self-attention）：先在三个词元上手算
#
# 注意力让每个词元从它前面的词元那里收集信息。每个词元都有三个向量，由它的隐藏状态分别乘以三个
# 权重矩阵得到：**查询**（query），表示它要找什么；**键**（key），表示它凭什么被找到；**值**
# （value），表示它被关注时交出什么。对每个查询，步骤如下：
#
# 1. **得分**：查询与每个键的点积，再除以 √d（d 是查询向量的宽度，下一小节解释原因）；
# 2. **因果掩码**（causal mask）：一个词元不能看它后面的词元，所以这些位置的得分设为 −∞；
# 3. 对每一行做 **softmax**：得到一组 ≥ 0、和为 1 的权重；
# 4. **输出**：各个值按权重加权求和。
#
# 三个词元，向量宽度 d = 4（所以 √d = 2），数字特意选得每一步都能在纸上验算：

# %% en=ea5d828c
Q = torch.tensor([[2.0, 0, 0, 0],    # 词元 0 的查询
                  [0, 2.0, 0, 0],    # 词元 1 的
                  [2.0, 2.0, 0, 0]])  # 词元 2 的
K = torch.tensor([[2.0, 0, 0, 0],
                  [0, 2.0, 0, 0],
                  [0, 0, 2.0, 0]])
V = torch.tensor([[10.0, 0],
                  [0, 10.0],
                  [5.0, 5.0]])

raw = Q @ K.T
scaled = raw / math.sqrt(Q.shape[1])
three_mask = torch.ones(3, 3, dtype=torch.bool).tril()
masked = scaled.masked_fill(~three_mask, float("-inf"))
weights3 = masked.softmax(-1)
out3 = weights3 @ V
for name, t in [("Q Kᵀ", raw), ("/ √d", scaled), ("加掩码后", masked),
                ("softmax", weights3), ("输出 = 权重 @ V", out3)]:
    print(f"{name}：\n{t.numpy().round(3)}\n")

# %% [markdown] en=5d011b19
# 用 e² ≈ 7.389 逐行验算：
#
# - 词元 0 只能看到自己：权重为 1，输出就是它自己的值 [10, 0]；
# - 词元 1 的得分是 [0, 2]：权重为 1 / (1 + e²) = 0.119 和 e² / (1 + e²) = 0.881，所以输出是
#   0.119·[10, 0] + 0.881·[0, 10] = [1.19, 8.81]；
# - 词元 2 的得分是 [2, 2, 0]：权重为两个 e² / (2e² + 1) = 0.468 和一个 1 / (2e² + 1) = 0.063，
#   输出 0.468·[10, 0] + 0.468·[0, 10] + 0.063·[5, 5] ≈ [5.0, 5.0]。
#
# minillm 把这四步写在 `attention_explicit` 里，只写一次（前面多了批和头两个维度，还支持分组
# 查询的多个头，后面会讲到）。它给出同样的数字：

# %% en=e785e4fa
show_source(attention_explicit)

# %% en=f43a0707
package_out = attention_explicit(Q[None, None], K[None, None], V[None, None])[0, 0]
print(package_out.numpy().round(3))
assert torch.allclose(package_out, out3)
assert torch.allclose(out3[1], torch.tensor([10 / (1 + math.e ** 2),
                                             10 * math.e ** 2 / (1 + math.e ** 2)]))

# %% [markdown] en=ee928dac
# ### 为什么要除以 √d
#
# 两个向量各有 d 个均值为 0、方差为 1 的分量，它们的点积是 d 个乘积之和，所以方差为 d：典型的
# 大小按 √d 增长。如果不除，d = 64（SmolLM2 每个头的宽度）时得分大约要大 8 倍，而对很大的数做
# softmax 几乎就是 one-hot：每个查询只盯着一个键，训练时它的梯度也几乎为零。下面在随机的查询上
# 实测，每个查询配 16 个键：

# %% en=b4ee9651
widths = [4, 16, 64, 256]
gen = torch.Generator().manual_seed(0)
spread, top_weight = {}, {"q·k": [], "q·k / √d": []}
for d in widths:
    q_r = torch.randn(2000, 1, d, generator=gen)
    k_r = torch.randn(2000, 16, d, generator=gen)
    s = (q_r @ k_r.transpose(1, 2))[:, 0]  # （2000 个查询, 16 个键）
    spread[d] = s.std().item()
    top_weight["q·k"].append(s.softmax(-1).amax(-1).mean().item())
    top_weight["q·k / √d"].append((s / math.sqrt(d)).softmax(-1).amax(-1).mean().item())
    print(f"d = {d:>3}：得分标准差 {spread[d]:5.2f}（√d = {math.sqrt(d):5.2f}）；最大权重 "
          f"不缩放时 {top_weight['q·k'][-1]:.2f}，缩放后 {top_weight['q·k / √d'][-1]:.2f}")

plt.figure(figsize=(6, 3))
for name, values in top_weight.items():
    plt.plot(widths, values, "o-", label=name)
plt.xscale("log", base=2)
plt.xlabel("每个头的宽度 d")
plt.ylabel("softmax 最大权重的平均值")
plt.title("16 个键：不除以 √d，softmax 就饱和到一个键上")
plt.legend()
plt.show()
assert all(abs(spread[d] / math.sqrt(d) - 1) < 0.1 for d in widths)
assert top_weight["q·k"][-1] > 0.9 > 3 * top_weight["q·k / √d"][-1]

# %% [markdown] en=cd7d9ae0
# ## 5 · 真实层里的同一个注意力
#
# 现在放大到 SmolLM2。每一层用它自己的 q、k、v 投影，从归一化后的隐藏状态算出查询、键和值：
# 9 个查询头、3 个键/值头，每个头宽 64；在计算得分之前，先用 RoPE（第 3 节）旋转查询和键。
# 这一层的代码如下（`minillm/layers/attention.py` 里的同一个 `Attention` 层服务所有模型家族；
# Qwen3 多了一步对 q 和 k 的归一化，写在 `qk_norm` 里）：

# %% en=5583b32d
show_source(Attention.forward)

# %% [markdown] en=73d5d095
# 我们拿一个真实的提示词，记录下进入每一层的隐藏状态（提示词的意思是“猫坐在垫子上，因为它累了。”）：

# %% en=97bde6fd
prompt = "The cat sat on the mat because it was tired."
ids = torch.tensor([tokenizer.encode(prompt)])
labels = [tokenizer.decode([i]) for i in ids[0].tolist()]
seq = ids.shape[1]

inputs = {}  # 层号 -> 进入这一层的隐藏状态
hooks = [layer.register_forward_pre_hook(
    lambda module, args, i=i: inputs.__setitem__(i, args[0])) for i, layer in
    enumerate(model.layers)]
with torch.inference_mode():
    logits = model(ids)
for hook in hooks:
    hook.remove()
print(f"{seq} 个词元：{labels}")

# %% [markdown] en=74bb3bee
# 这个提示词的因果掩码：第 i 行（一个查询）只能看第 0 … i 列（键）。

# %% en=8a998b11
mask = torch.ones(seq, seq, dtype=torch.bool).tril()
print(mask.int())

# %% [markdown] en=46eed877
# 把那个 `forward` 的前几行用在某一层记录下的输入上，就得到这一层的 q、k 和 v；剩下的交给
# `attention_explicit`，和三个词元时完全一样：

# %% en=ac2d366d
def layer_qkv(layer_index):
    """某一层经过 RoPE 之后的查询 (1, 9, seq, 64)、键和值 (1, 3, seq, 64)。"""
    block = model.layers[layer_index]
    h = block.attn_norm(inputs[layer_index])
    q = block.attn.q_proj(h).view(1, seq, config.n_heads, head_dim).transpose(1, 2)
    k = block.attn.k_proj(h).view(1, seq, config.n_kv_heads, head_dim).transpose(1, 2)
    v = block.attn.v_proj(h).view(1, seq, config.n_kv_heads, head_dim).transpose(1, 2)
    cos, sin = rope_cos_sin(torch.arange(seq)[None], head_dim, theta)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


with torch.inference_mode():
    q, k, v = layer_qkv(3)
    out = attention_explicit(q, k, v)
print("q", tuple(q.shape), " k", tuple(k.shape), " v", tuple(v.shape), " out", tuple(out.shape))

# %% [markdown] en=840fc6c3
# 引擎用 PyTorch 融合好的 `scaled_dot_product_attention` 算同样的东西；两者结果一致：

# %% en=3876866c
with torch.inference_mode():
    fused = attention(q, k, v)
print(f"显式实现与融合算子之间的最大差异：{(fused - out).abs().max().item():.2g}")
assert torch.allclose(fused, out, atol=1e-5)

# %% [markdown] en=5aab4819
# `attention_explicit` 返回的是加权之后的值，而不是权重本身。想看权重，就把单位矩阵当作值传进去：
# 权重 @ I = 权重。

# %% en=d17cf45b
def attention_weights(layer_index):
    """（头数, seq, seq）：某一层里每个查询在各个键上的权重。"""
    q, k, _ = layer_qkv(layer_index)
    identity = torch.eye(seq).expand(1, config.n_kv_heads, seq, seq)
    return attention_explicit(q, k, identity)[0]


with torch.inference_mode():
    layer_weights = attention_weights(3)
print("每一行的和都是 1：",
      bool(torch.allclose(layer_weights.sum(-1), torch.ones(config.n_heads, seq))))
assert torch.allclose(layer_weights.sum(-1), torch.ones(config.n_heads, seq))
assert (layer_weights.triu(1) == 0).all()  # 因果掩码：后面的词元上没有权重

# %% [markdown] en=81e41e51
# 把权重画成热力图：每一行是一个词元（查询，标在左边），它回头看自己前面的各个词元（键，标在
# 底部）。同一层的 9 个头关注的方式各不相同（有的看前一个词元，有的看第一个词元）：

# %% en=4a21b9e8
fig, axes = plt.subplots(3, 3, figsize=(11, 11))
for head, ax in enumerate(axes.flat):
    ax.imshow(layer_weights[head], cmap="Blues")
    ax.set_title(f"第 {head} 个头", fontsize=9)
    ax.set_xticks(range(seq), labels if head >= 6 else [""] * seq, rotation=90, fontsize=7)
    ax.set_yticks(range(seq), labels if head % 3 == 0 else [""] * seq, fontsize=7)
fig.suptitle("第 3 层：9 个头的注意力权重（行：查询，列：键）")
plt.tight_layout()
plt.show()

# %% [markdown] en=7ab7e837
# 拖动滑块，可以看任意一层、任意一个头，以及对应的词元：

# %% en=cd2cd3d7
def show_attention(layer=3, head=0):
    with torch.inference_mode():
        w = attention_weights(layer)[head]
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.imshow(w, cmap="Blues")
    ax.set_xticks(range(seq), labels, rotation=90)
    ax.set_yticks(range(seq), labels)
    ax.set_xlabel("键")
    ax.set_ylabel("查询")
    ax.set_title(f"第 {layer} 层，第 {head} 个头：注意力权重")
    plt.show()


interact(show_attention, layer=IntSlider(3, 0, config.n_layers - 1, description="层"),
         head=IntSlider(0, 0, config.n_heads - 1, description="头"));

# %% [markdown] en=aa2cc38f
# ### 分组查询注意力（grouped-query attention，GQA）
#
# SmolLM2 有 9 个查询头，却只有 3 个键/值头：每个键/值头服务一组 3 个查询头（`attention_explicit`
# 里的 `repeat_kv` 做的就是这件事）。第 03 章的 KV 缓存存的正是这些键和值，所以 GQA 让缓存缩小到
# 原来的 1/3：

# %% en=b7da5582
group = config.n_heads // config.n_kv_heads
per_token = 2 * config.n_layers * config.n_kv_heads * head_dim * 4  # K 和 V，fp32 的字节数
print(f"{config.n_heads} 个查询头，{config.n_kv_heads} 个键/值头：每组 {group} 个")
print(f"每个词元的 KV 缓存：用 GQA 时 {per_token / 1024:.1f} KiB，"
      f"如果每个查询头都有自己的键/值头则是 {per_token * group / 1024:.1f} KiB")

# %% [markdown] en=15df268a
# ## 6 · 均方根归一化（RMSNorm）
#
# 在注意力之前和前馈部分之前，每个词元的向量都要先除以它的均方根，再逐维乘上一个学到的权重。
# 与 LayerNorm 不同，它不减去均值，也没有偏置。

# %% en=59b1a2db
show_source(rms_norm)

# %% en=1cb1a013
x = inputs[10][0]  # 进入第 10 层的隐藏状态
normed = rms_norm(x, torch.ones(config.hidden_size), config.norm_eps)
for name, t in [("归一化前", x), ("归一化后", normed)]:
    rms = t.pow(2).mean(-1).sqrt()
    print(f"前几个词元的 RMS（{name:>6}）：", "  ".join(f"{r:6.3f}" for r in rms[:6]))

# %% [markdown] en=a525abde
# ## 7 · SwiGLU 前馈网络（feed-forward network）
#
# 注意力负责在词元*之间*交换信息，前馈部分则对每个词元单独处理：两个投影把向量升到 1,536 维，
# 其中一个经过 SiLU（x·sigmoid(x)）后作为门控，去乘另一个，最后再投影回 576 维。

# %% en=c7e36b1d
show_source(type(model.layers[0].mlp))

# %% en=ad36b2cc
grid = torch.linspace(-5, 5, 200)
plt.figure(figsize=(6, 3))
for name, fn in [("ReLU", F.relu), ("GELU", F.gelu), ("SiLU（SwiGLU 用的）", F.silu)]:
    plt.plot(grid, fn(grid), label=name)
plt.legend()
plt.title("激活函数")
plt.show()

# %% [markdown] en=f1464082
# ## 8 · 30 层的堆叠
#
# 每个块都把注意力和前馈部分的结果加到**残差流**（residual stream）上，也就是从词嵌入一路通到
# 输出的那个隐藏状态。它的大小随层数增长。（第一个词元的表现与众不同：许多模型会把注意力停放在
# 它身上，即所谓的注意力汇点（attention sink），它的向量也会变得大得多。）

# %% en=8e72dd93
outputs = {}
hooks = [layer.register_forward_hook(lambda m, args, out, i=i: outputs.__setitem__(i, out))
         for i, layer in enumerate(model.layers)]
with torch.inference_mode():
    model(ids)
for hook in hooks:
    hook.remove()

states = [inputs[0]] + [outputs[i] for i in range(config.n_layers)]
norms = torch.stack([s[0].norm(dim=-1) for s in states])  # （层数 + 1, seq）
plt.figure(figsize=(7, 3))
plt.plot(norms[:, 1:].mean(1), label="第 2 … n 个词元（平均）")
plt.plot(norms[:, 0], label="第一个词元")
plt.yscale("log")
plt.xlabel("经过第几层之后（0 = 词嵌入）")
plt.ylabel("‖隐藏状态‖")
plt.legend()
plt.show()

# %% [markdown] en=237b9d75
# ## 9 · 语言模型头（LM head）：logits → softmax → 下一个词元
#
# 先做最后一次 RMSNorm，再与词嵌入表本身做一次矩阵乘法（SmolLM2 让两者共享权重：
# `tie_embeddings=True`），就给词表里的每个词元算出一个分数，即**未归一化的对数概率**（logit）。
# softmax 把这些 logits 变成概率。原始资料里的例子是：在“今天天气”之后，模型可能给出“晴朗”
# 30%、“多云”25%……下面是 SmolLM2 在一个英文提示词（意思是“今天的天气是”）上的结果：

# %% en=3d3208c8
def next_token_chart(text, top=10, label=None, title=None):
    with torch.inference_mode():
        probs = model(torch.tensor([tokenizer.encode(text)]))[0, -1].softmax(-1)
    p, i = probs.topk(top)
    names = [label(t) if label else repr(tokenizer.decode([t])) for t in i.tolist()]
    plt.figure(figsize=(7, 3))
    plt.bar(names, p)
    plt.xticks(rotation=45)
    plt.ylabel("概率")
    plt.title(f"{title or repr(text)} 之后的下一个词元（前 {top} 个，占总概率的 {p.sum():.0%}）")
    plt.show()
    return probs


probs = next_token_chart("The weather today is")
print(f"{len(probs):,} 个概率之和为 {probs.sum().item():.4f}")

# %% [markdown] en=e28639b8
# SmolLM2 的词表以英文为主，所以在“今天天气”之后，排在前面的候选大多不是完整的汉字，而是单个
# UTF-8 **字节**（第 01 章讲过：没有自己词元的字符，就保持为它的各个字节），图中用它们的
# 字节来标注：

# %% en=22ae8352
next_token_chart("今天天气", label=lambda t: str(tokenizer.token_bytes(t))[1:],
                 title="中文提示词“今天天气”");

# %% [markdown] en=7849f7f9
# ## 10 · 参数量与内存
#
# 分组统计各个部分的参数（共享权重的语言模型头与词嵌入共用同一份参数）：

# %% en=20604092
groups = {"词嵌入（= 语言模型头）": 0, "注意力": 0, "前馈网络": 0, "归一化": 0}
for name, p in model.named_parameters():
    key = ("词嵌入（= 语言模型头）" if name.startswith("embed") else
           "注意力" if ".attn." in name else "前馈网络" if ".mlp." in name else "归一化")
    groups[key] += p.numel()
n_params = sum(groups.values())
for key, n in groups.items():
    print(f"{key:>22}：{n / 1e6:7.2f} M（{n / n_params:.0%}）")
print(f"{'total':>22}: {n_params / 1e6:7.2f} M")

# %% [markdown] en=f608c807
# 上面最后一行的 total 就是总数。这个数只凭配置就能算出来：每一层里，注意力有
# d·(n_heads + 2·n_kv_heads)·head_dim + n_heads·head_dim·d 个权重，SwiGLU 有 3·d·f 个（gate、
# up 和 down），另加两个归一化层。

# %% en=e72b273f
d, f = config.hidden_size, config.intermediate_size
attn = d * (config.n_heads + 2 * config.n_kv_heads) * head_dim + config.n_heads * head_dim * d
formula = config.n_layers * (attn + 3 * d * f + 2 * d) + config.vocab_size * d + d
print(f"SmolLM2 按公式算：{formula:,}  实际数出：{n_params:,}")
print(f"每层：注意力 {attn / d ** 2:.2f}·d²，SwiGLU {3 * d * f / d ** 2:.2f}·d²"
      f"（f = {f / d:.2f}·d）")
assert formula == n_params

# %% [markdown] en=98bfa3a6
# 原始资料里的 GPT-3（宽度 d = 12,288，96 层）是较早的设计：注意力的 q、k、v、o 都是 d × d
# （没有 GQA），共 4d²；前馈部分只有*两个*矩阵，中间宽度为 4d（升维、GELU、降维），共 8d²。
# 合起来每层 12d²，总计约 **12 · L · d²**。SwiGLU 前馈网络有三个矩阵，如果中间宽度也取 4d，光它
# 就有 12d²，每层就是 16d²。所以 Llama 家族的模型把 SwiGLU 的宽度缩到约 8/3 · d ≈ 2.67 · d：
# 三个这样宽的矩阵又回到 8d²。SmolLM2 自己的比例已在上面打印出来。哪个公式对得上 GPT-3 公布的
# 1750 亿？这只是用公开数字做的算术，而不是测量（我们手上没有 GPT-3 可数）：

# %% en=a33cf6b5
D, L = 12288, 96
for name, per_layer in [("两矩阵的前馈网络，每层 12·d²", 12 * D ** 2),
                        ("宽度 4d 的 SwiGLU，每层 16·d²", 16 * D ** 2)]:
    total = L * per_layer
    print(f"{name}：{total / 1e9:.0f} × 10⁹ 个参数（与 1750 亿相比 {total / 175e9 - 1:+.0%}）")

# %% [markdown] en=ce715ff5
# 两矩阵的设计与公布的数字相差不到 1%（剩下的大部分是词嵌入表和各个
# 偏置）；宽度为 4d 的 SwiGLU 则要多出三分之一。
#
# 内存 = 参数量 × 每个参数的字节数。我们测量真实张量的字节数：加载进来的 float32 权重、它们的
# float16 副本，以及按 int8 权重（每个权重 1 个字节，每行另加一个 fp16 缩放因子）和 int4 权重
# （每个字节装两个权重，每 32 个一块，每块另加一个 fp16 缩放因子和一个最小值，与 GGUF 的 Q4_1
# 相同）布局的张量。第 07 章会往这样的张量里填入真正量化过的值；这里只数它们的字节。

# %% en=cb75687c
def int8_layout(w):
    return [torch.empty(w.shape, dtype=torch.int8), torch.empty(w.shape[0], dtype=torch.half)]


def int4_layout(w):
    blocks = w.numel() // 32
    return [torch.empty(blocks, 16, dtype=torch.uint8),  # 32 个 4 比特的值装在 16 个字节里
            torch.empty(blocks, 2, dtype=torch.half)]  # 缩放因子和最小值


def nbytes(layout, params):
    """`params` 中每个矩阵都按 `layout` 存储时的字节数；向量（归一化层）保持 fp16。"""
    tensors = [t for p in params for t in (layout(p) if p.dim() == 2 else [p.half()])]
    return sum(t.nbytes for t in tensors)


params = list(model.parameters())
memory = {
    "fp32": sum(p.nbytes for p in params),
    "fp16": sum(p.half().nbytes for p in params),
    "int8": nbytes(int8_layout, params),
    "int4": nbytes(int4_layout, params),
}
rule = 2 * n_params / 1e9  # “n 十亿个参数在 fp16 下需要 2n GB”
for kind, nbytes in memory.items():
    print(f"{kind}：{nbytes / 1e6:7.1f} MB（每个参数 {nbytes / n_params:.2f} 个字节）")
print(f"fp16 的经验法则 2n GB：{rule * 1000:.1f} MB；  "
      f"磁盘上的 GGUF Q4_1 文件：{minillm.model_file('smollm2-135m').stat().st_size / 1e6:.1f} MB")

plt.figure(figsize=(6, 3))
plt.bar(memory.keys(), [b / 1e6 for b in memory.values()])
plt.axhline(rule * 1000, color="gray", linestyle="--", label="2n GB 经验法则（fp16）")
plt.ylabel("MB")
plt.legend()
plt.show()

# %% [markdown] en=6366428b
# 这条经验法则成立，是因为 fp16 每个参数占 2 个字节；照此计算，GPT-3 的 1750 亿个参数光是权重
# 就要约 350 GB，还没算 KV 缓存（第 03 章）和激活值。
#
# ## 11 · 与 transformers 当场对照
#
# 用 transformers（本课程的参考实现）加载同一份权重，必须得到相同的 logits。

# %% en=0141e9c8
with Timer("cpu") as loading:
    reference, ref_tokenizer = minillm.load_reference("smollm2-135m")
ref_seconds = loading.seconds
print(f"加载用时：minillm {load_seconds:.2f} 秒，transformers（读它缓存的副本）{ref_seconds:.2f} 秒")

length = 128 if CI else 512
text = "The weather today is sunny and warm, so the children are playing outside. " * 60
long_ids = torch.tensor([tokenizer.encode(text)[:length]])
with torch.inference_mode():
    ours = model(long_ids)
    theirs = reference(long_ids).logits
diff = (ours - theirs).abs().max().item()
agree = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
print(f"{length} 个词元：logits 的最大绝对差 = {diff:.2g}，top-1 一致率 {agree:.0%}")
assert diff <= 1e-3 and agree == 1.0

# %% [markdown] en=33d46439
# ## 小结
#
# - 前向传播是一条很短的流水线：查词嵌入表，30 个相同的块（RMSNorm → 注意力 → 相加，
#   RMSNorm → SwiGLU → 相加），最后一次归一化，再接语言模型头。
# - 注意力是四个能在纸上算出来的步骤：得分 q·k / √d（除以 √d 让 softmax 不至于饱和）、因果掩码、
#   softmax、对值加权求和；`attention_explicit` 就是这四行，融合算子给出的数字与它相同。
# - RoPE 让注意力得分只取决于词元之间的距离；因果掩码让每个词元看不到未来；分组查询的多个头
#   共享键和值。
# - 内存 ≈ 参数量 × 每个参数的字节数：fp16 下每 n 十亿个参数需要 2n GB。
# - minillm 的模型在同一份权重上给出的 logits 与 transformers 一致（上面的实测）。
#
# 下一步是 `exercises/zh/02_forward_pass.ipynb`：亲手写出 RMSNorm、RoPE、带因果掩码的分组查询
# 注意力和一个完整的块，再让真实的模型用你的块运行。第 03 章会加上 KV 缓存。
