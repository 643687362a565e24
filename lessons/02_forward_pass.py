# %% [markdown]
# # 02 · The forward pass (前向传播): minillm's own transformer
#
# In chapter 00 transformers ran the model for us. Now minillm runs it with its own code: about
# 150 lines of PyTorch in `minillm/model/llama.py`, filled with the real SmolLM2 weights read
# from the GGUF file. We follow one prompt through the network:
#
# **token ids → embeddings → 30 × (RMSNorm → attention with RoPE → RMSNorm → SwiGLU) → RMSNorm →
# LM head → logits → softmax → next-token distribution**
#
# and at the end we check that minillm's logits match transformers' on the same weights.

# %%
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

# %% [markdown]
# ## 1 · Loading the weights
#
# The file stores the weights *quantized*: in blocks of 32 weights, each weight is a 4-bit
# integer code (0 to 15), and each block keeps one scale and one minimum. To **dequantize**
# (反量化) is to turn the codes back into floats: weight ≈ code × scale + minimum. Chapter 07
# decodes one block by hand.
#
# `minillm.load` reads the GGUF file with the `gguf` package and dequantizes every block to
# 32-bit floats. That takes several seconds, so the first load keeps a float32 copy
# in the cache as safetensors; every later load reads that copy. We ask for the readable model
# (`fast=False`): its layers hold q_proj, k_proj, v_proj, ... as this chapter draws them, where
# the default fast path fuses them (chapter 05). This chapter stays on the CPU, whatever the
# machine has: it opens the model up tensor by tensor and checks each against transformers',
# work that is small and that a GPU would only add copies to.

# %%
with Timer("cpu") as loading:
    model, tokenizer = minillm.load("smollm2-135m", device="cpu", fast=False)
load_seconds = loading.seconds
config = model.config
print(f"loaded in {load_seconds:.2f} s")
config

# %% [markdown]
# The whole model is a plain `torch.nn.Module`. Its forward pass reads top to bottom:

# %%
show_source(type(model).forward)

# %% [markdown]
# ## 2 · Embeddings (词嵌入)
#
# The first layer is a table: one row of `hidden_size` numbers per token of the vocabulary.
# `model.embed(ids)` just looks the rows up. Training placed tokens with similar use near each
# other. Here are the nearest rows (by cosine similarity, 余弦相似度) to a few tokens:

# %%
table = model.embed.weight
print(f"embedding table: {tuple(table.shape)} = vocabulary × hidden size")
unit = F.normalize(table, dim=-1)

for word in [" king", " Paris", " Monday", " seven", " running"]:
    (token,) = tokenizer.encode(word)
    nearest = (unit @ unit[token]).topk(6).indices[1:].tolist()
    print(f"{word!r:>11} → {[tokenizer.decode([i]) for i in nearest]}")

# %% [markdown]
# ## 3 · Position: rotary embedding (旋转位置编码, RoPE)
#
# Attention compares every query with every key by a dot product, which by itself ignores word
# order. RoPE turns each pair of a query's (and key's) dimensions by an angle proportional to the
# token's position, a different speed for each pair (θ = 100,000 sets the slowest). The code:

# %%
show_source(rope_cos_sin)
show_source(apply_rope)

# %% [markdown]
# What does the rotation do to a dot product? Put the *same* vector at query position m and key
# position n. The score then depends only on the distance m − n, and on average it falls as the
# distance grows: nearby tokens start with an advantage.

# %%
head_dim, theta = config.head_dim, config.rope_theta
vectors = torch.randn(1000, 1, 1, head_dim)  # 1,000 random head vectors


def rotated(x, positions):
    """x (vectors, 1, 1, head_dim) rotated to each of `positions`: (vectors, 1, positions, d)."""
    cos, sin = rope_cos_sin(torch.tensor([positions]), head_dim, theta)
    return apply_rope(x, cos, sin)


distances = list(range(0, 1024, 8))
scores = (rotated(vectors, distances) * rotated(vectors, [0])).sum(-1)[:, 0]  # (vectors, dist)
scores = scores.mean(0)

far_along = (rotated(vectors, [105]) * rotated(vectors, [100])).sum(-1)
at_start = (rotated(vectors, [5]) * rotated(vectors, [0])).sum(-1)
assert torch.allclose(far_along, at_start, atol=1e-3)
print("same distance, different positions → same score: checked")

plt.figure(figsize=(7, 3))
plt.plot(distances, scores / scores[0])
plt.xlabel("distance m − n (tokens)")
plt.ylabel("q·k relative to distance 0")
plt.title(f"RoPE, head_dim {head_dim}, θ = {theta:,.0f}: mean over 1,000 vectors")
plt.show()

# %% [markdown]
# ## 4 · Self-attention (自注意力), first by hand on three tokens
#
# Attention lets each token gather information from the tokens before it. Every token has three
# vectors, made from its hidden state by three weight matrices: a **query** (查询, what it looks
# for), a **key** (键, what it offers to be found by) and a **value** (值, what it hands over).
# For each query the steps are:
#
# 1. **scores**: the dot product of the query with every key, divided by √d (d: the width of a
#    query; the next part says why);
# 2. the **causal mask** (因果掩码): a token may not look at later tokens, so their scores become
#    −∞;
# 3. **softmax** over each row: weights ≥ 0 that sum to 1;
# 4. the **output**: the weighted sum of the values.
#
# Three tokens with vectors of width d = 4 (so √d = 2), numbers chosen so every step can be
# checked on paper:

# %%
Q = torch.tensor([[2.0, 0, 0, 0],    # token 0's query
                  [0, 2.0, 0, 0],    # token 1's
                  [2.0, 2.0, 0, 0]])  # token 2's
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
for name, t in [("Q Kᵀ", raw), ("/ √d", scaled), ("masked", masked),
                ("softmax", weights3), ("output = weights @ V", out3)]:
    print(f"{name}:\n{t.numpy().round(3)}\n")

# %% [markdown]
# Check the rows by hand, with e² ≈ 7.389:
#
# - token 0 sees only itself: weight 1, output = its own value [10, 0];
# - token 1 has scores [0, 2]: weights 1 / (1 + e²) = 0.119 and e² / (1 + e²) = 0.881, so its
#   output is 0.119·[10, 0] + 0.881·[0, 10] = [1.19, 8.81];
# - token 2 has scores [2, 2, 0]: e² / (2e² + 1) = 0.468 twice and 1 / (2e² + 1) = 0.063, output
#   0.468·[10, 0] + 0.468·[0, 10] + 0.063·[5, 5] ≈ [5.0, 5.0].
#
# minillm writes the same four steps once, in `attention_explicit` (with batch and head axes in
# front, and grouped-query heads, which come below). It gives the same numbers:

# %%
show_source(attention_explicit)

# %%
package_out = attention_explicit(Q[None, None], K[None, None], V[None, None])[0, 0]
print(package_out.numpy().round(3))
assert torch.allclose(package_out, out3)
assert torch.allclose(out3[1], torch.tensor([10 / (1 + math.e ** 2),
                                             10 * math.e ** 2 / (1 + math.e ** 2)]))

# %% [markdown]
# ### Why divide by √d
#
# A dot product of two vectors whose d entries have mean 0 and variance 1 sums d such products,
# so it has variance d: its typical size grows like √d. Without the division, scores for d = 64
# (SmolLM2's head width) are about 8 times larger, and softmax of large numbers is nearly one-hot:
# each query then looks at a single key, and its gradient is almost zero during training.
# Measured on random queries and 16 keys each:

# %%
widths = [4, 16, 64, 256]
gen = torch.Generator().manual_seed(0)
spread, top_weight = {}, {"q·k": [], "q·k / √d": []}
for d in widths:
    q_r = torch.randn(2000, 1, d, generator=gen)
    k_r = torch.randn(2000, 16, d, generator=gen)
    s = (q_r @ k_r.transpose(1, 2))[:, 0]  # (2000 queries, 16 keys)
    spread[d] = s.std().item()
    top_weight["q·k"].append(s.softmax(-1).amax(-1).mean().item())
    top_weight["q·k / √d"].append((s / math.sqrt(d)).softmax(-1).amax(-1).mean().item())
    print(f"d = {d:>3}: score std {spread[d]:5.2f} (√d = {math.sqrt(d):5.2f}); largest weight "
          f"{top_weight['q·k'][-1]:.2f} unscaled, {top_weight['q·k / √d'][-1]:.2f} scaled")

plt.figure(figsize=(6, 3))
for name, values in top_weight.items():
    plt.plot(widths, values, "o-", label=name)
plt.xscale("log", base=2)
plt.xlabel("head width d")
plt.ylabel("mean largest softmax weight")
plt.title("16 keys: without √d, softmax saturates to one key")
plt.legend()
plt.show()
assert all(abs(spread[d] / math.sqrt(d) - 1) < 0.1 for d in widths)
assert top_weight["q·k"][-1] > 0.9 > 3 * top_weight["q·k / √d"][-1]

# %% [markdown]
# ## 5 · The same attention in the real layers
#
# Now scale up to SmolLM2. Each layer makes its queries, keys and values from the normalised
# hidden state with its own q, k and v projections, 9 query heads and 3 key/value heads of
# width 64, and turns queries and keys by RoPE (section 3) before the scores. The layer's code
# (one `Attention` layer, `minillm/layers/attention.py`, serves every model family; Qwen3 adds a
# normalization of q and k in `qk_norm`):

# %%
show_source(Attention.forward)

# %% [markdown]
# We take a real prompt and record the hidden state that enters every layer:

# %%
prompt = "The cat sat on the mat because it was tired."
ids = torch.tensor([tokenizer.encode(prompt)])
labels = [tokenizer.decode([i]) for i in ids[0].tolist()]
seq = ids.shape[1]

inputs = {}  # layer index -> the hidden state entering that layer
hooks = [layer.register_forward_pre_hook(
    lambda module, args, i=i: inputs.__setitem__(i, args[0])) for i, layer in
    enumerate(model.layers)]
with torch.inference_mode():
    logits = model(ids)
for hook in hooks:
    hook.remove()
print(f"{seq} tokens: {labels}")

# %% [markdown]
# The causal mask for this prompt: row i (a query) may look at columns 0 … i (keys).

# %%
mask = torch.ones(seq, seq, dtype=torch.bool).tril()
print(mask.int())


# %% [markdown]
# The first lines of that `forward`, on the recorded input of one layer, give its q, k and v;
# `attention_explicit` does the rest, exactly as on the three tokens:

# %%
def layer_qkv(layer_index):
    """Queries (1, 9, seq, 64), keys and values (1, 3, seq, 64) of one layer, after RoPE."""
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

# %% [markdown]
# The engine computes the same with PyTorch's fused `scaled_dot_product_attention`; both agree:

# %%
with torch.inference_mode():
    fused = attention(q, k, v)
print(f"largest difference, explicit vs fused kernel: {(fused - out).abs().max().item():.2g}")
assert torch.allclose(fused, out, atol=1e-5)


# %% [markdown]
# `attention_explicit` returns the weighted values, not the weights. To see the weights, give it
# the identity matrix as the values: weights @ I = weights.

# %%
def attention_weights(layer_index):
    """(heads, seq, seq): each query's weights over the keys in one layer."""
    q, k, _ = layer_qkv(layer_index)
    identity = torch.eye(seq).expand(1, config.n_kv_heads, seq, seq)
    return attention_explicit(q, k, identity)[0]


with torch.inference_mode():
    layer_weights = attention_weights(3)
print("every row sums to 1:",
      bool(torch.allclose(layer_weights.sum(-1), torch.ones(config.n_heads, seq))))
assert torch.allclose(layer_weights.sum(-1), torch.ones(config.n_heads, seq))
assert (layer_weights.triu(1) == 0).all()  # the causal mask: no weight on a later token

# %% [markdown]
# The weights as heatmaps: each row is one token (the query, on the left) looking back at the
# tokens before it (the keys, along the bottom). The nine heads of one layer attend in different
# ways (some to the previous token, some to the first):

# %%
fig, axes = plt.subplots(3, 3, figsize=(11, 11))
for head, ax in enumerate(axes.flat):
    ax.imshow(layer_weights[head], cmap="Blues")
    ax.set_title(f"head {head}", fontsize=9)
    ax.set_xticks(range(seq), labels if head >= 6 else [""] * seq, rotation=90, fontsize=7)
    ax.set_yticks(range(seq), labels if head % 3 == 0 else [""] * seq, fontsize=7)
fig.suptitle("layer 3: the 9 heads' attention weights (rows: queries, columns: keys)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Move the sliders to see any layer and head with its tokens:

# %%
def show_attention(layer=3, head=0):
    with torch.inference_mode():
        w = attention_weights(layer)[head]
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.imshow(w, cmap="Blues")
    ax.set_xticks(range(seq), labels, rotation=90)
    ax.set_yticks(range(seq), labels)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(f"layer {layer}, head {head}: attention weights")
    plt.show()


interact(show_attention, layer=IntSlider(3, 0, config.n_layers - 1, description="layer"),
         head=IntSlider(0, 0, config.n_heads - 1, description="head"));

# %% [markdown]
# ### Grouped-query attention (分组查询注意力, GQA)
#
# SmolLM2 has 9 query heads but only 3 key/value heads: each key/value head serves a group of 3
# query heads (that is what `repeat_kv` does inside `attention_explicit`). The keys and values
# are what the KV cache of chapter 03 stores, so GQA shrinks the cache 3×:

# %%
group = config.n_heads // config.n_kv_heads
per_token = 2 * config.n_layers * config.n_kv_heads * head_dim * 4  # K and V, fp32 bytes
print(f"{config.n_heads} query heads, {config.n_kv_heads} key/value heads: groups of {group}")
print(f"KV cache per token: {per_token / 1024:.1f} KiB with GQA, "
      f"{per_token * group / 1024:.1f} KiB if every query head had its own")

# %% [markdown]
# ## 6 · RMSNorm (均方根归一化)
#
# Before attention and before the feed-forward part, each token's vector is divided by its root
# mean square, then scaled by a learned weight per dimension. Unlike LayerNorm it does not
# subtract the mean, and has no bias.

# %%
show_source(rms_norm)

# %%
x = inputs[10][0]  # hidden states entering layer 10
normed = rms_norm(x, torch.ones(config.hidden_size), config.norm_eps)
for name, t in [("before", x), ("after", normed)]:
    rms = t.pow(2).mean(-1).sqrt()
    print(f"RMS of the first tokens {name:>6}:", "  ".join(f"{r:6.3f}" for r in rms[:6]))

# %% [markdown]
# ## 7 · The SwiGLU feed-forward (前馈网络)
#
# After attention mixes information *between* tokens, the feed-forward part works on each token
# alone: two projections up to 1,536 dimensions, one passed through SiLU (x·sigmoid(x)) and used as
# a gate on the other, then a projection back down to 576.

# %%
show_source(type(model.layers[0].mlp))

# %%
grid = torch.linspace(-5, 5, 200)
plt.figure(figsize=(6, 3))
for name, fn in [("ReLU", F.relu), ("GELU", F.gelu), ("SiLU (used by SwiGLU)", F.silu)]:
    plt.plot(grid, fn(grid), label=name)
plt.legend()
plt.title("activation functions")
plt.show()

# %% [markdown]
# ## 8 · The stack of 30 layers
#
# Each block adds its attention and feed-forward results to the **residual stream** (残差流), the
# hidden state that runs from the embedding to the output. Its size grows through the layers.
# (The first token behaves differently: many models park attention on it, an "attention sink",
# and its vector grows far larger.)

# %%
outputs = {}
hooks = [layer.register_forward_hook(lambda m, args, out, i=i: outputs.__setitem__(i, out))
         for i, layer in enumerate(model.layers)]
with torch.inference_mode():
    model(ids)
for hook in hooks:
    hook.remove()

states = [inputs[0]] + [outputs[i] for i in range(config.n_layers)]
norms = torch.stack([s[0].norm(dim=-1) for s in states])  # (layers + 1, seq)
plt.figure(figsize=(7, 3))
plt.plot(norms[:, 1:].mean(1), label="tokens 2 … n (mean)")
plt.plot(norms[:, 0], label="first token")
plt.yscale("log")
plt.xlabel("after layer (0 = embedding)")
plt.ylabel("‖hidden state‖")
plt.legend()
plt.show()

# %% [markdown]
# ## 9 · The LM head (语言模型头): logits → softmax → the next token
#
# A final RMSNorm, then one matrix multiplication with the embedding table itself (SmolLM2 ties
# the two: `tie_embeddings=True`) gives one score, a **logit** (未归一化的对数概率), per vocabulary token.
# Softmax turns the logits into probabilities. The source text's example: after 今天天气 ("today's
# weather") the model might give 晴朗 (sunny) 30%, 多云 (cloudy) 25%, ... Here is SmolLM2 on an
# English prompt:

# %%
def next_token_chart(text, top=10, label=None, title=None):
    with torch.inference_mode():
        probs = model(torch.tensor([tokenizer.encode(text)]))[0, -1].softmax(-1)
    p, i = probs.topk(top)
    names = [label(t) if label else repr(tokenizer.decode([t])) for t in i.tolist()]
    plt.figure(figsize=(7, 3))
    plt.bar(names, p)
    plt.xticks(rotation=45)
    plt.ylabel("probability")
    plt.title(f"next token after {title or repr(text)} (top {top}: {p.sum():.0%} of the mass)")
    plt.show()
    return probs


probs = next_token_chart("The weather today is")
print(f"the {len(probs):,} probabilities sum to {probs.sum().item():.4f}")

# %% [markdown]
# SmolLM2's vocabulary is mostly English, so after 今天天气 most top candidates are not whole
# characters but single UTF-8 **bytes** (chapter 01: a character without a token of its own
# stays as its bytes), labelled here by their bytes:

# %%
next_token_chart("今天天气", label=lambda t: str(tokenizer.token_bytes(t))[1:],
                 title="the Chinese prompt (today's weather)");

# %% [markdown]
# ## 10 · Parameters and memory
#
# Counting the parameters of each component (the tied LM head shares the embedding's):

# %%
groups = {"embedding (= LM head)": 0, "attention": 0, "feed-forward": 0, "norms": 0}
for name, p in model.named_parameters():
    key = ("embedding (= LM head)" if name.startswith("embed") else
           "attention" if ".attn." in name else "feed-forward" if ".mlp." in name else "norms")
    groups[key] += p.numel()
n_params = sum(groups.values())
for key, n in groups.items():
    print(f"{key:>22}: {n / 1e6:7.2f} M  ({n / n_params:.0%})")
print(f"{'total':>22}: {n_params / 1e6:7.2f} M")

# %% [markdown]
# The count follows from the config alone: per layer, attention has d·(n_heads + 2·n_kv_heads)·
# head_dim + n_heads·head_dim·d weights and SwiGLU 3·d·f (gate, up and down), plus two norms.

# %%
d, f = config.hidden_size, config.intermediate_size
attn = d * (config.n_heads + 2 * config.n_kv_heads) * head_dim + config.n_heads * head_dim * d
formula = config.n_layers * (attn + 3 * d * f + 2 * d) + config.vocab_size * d + d
print(f"SmolLM2 from the formula: {formula:,}  measured: {n_params:,}")
print(f"per layer: attention {attn / d ** 2:.2f}·d², SwiGLU {3 * d * f / d ** 2:.2f}·d² "
      f"(f = {f / d:.2f}·d)")
assert formula == n_params

# %% [markdown]
# The source text's GPT-3 (width d = 12,288, 96 layers) is the older design: attention with
# q, k, v and o all d × d (no GQA), 4d², and a feed-forward of *two* matrices through a width
# of 4d (up, GELU, down), 8d²: 12d² a layer, about **12 · L · d²** in all. A SwiGLU feed-forward
# has three matrices, so at width 4d it alone would be 12d², 16d² a layer. That is why
# Llama-family models shrink the SwiGLU's width to about 8/3 · d ≈ 2.67 · d: three matrices of
# that width are again 8d². SmolLM2's own ratio is printed above. Which formula fits GPT-3's
# published 175 billion? This is arithmetic on published figures, not a measurement (we have no
# GPT-3 to count):

# %%
D, L = 12288, 96
for name, per_layer in [("two-matrix feed-forward, 12·d² a layer", 12 * D ** 2),
                        ("SwiGLU at 4d, 16·d² a layer", 16 * D ** 2)]:
    total = L * per_layer
    print(f"{name}: {total / 1e9:.0f} billion ({total / 175e9 - 1:+.0%} against 175 billion)")

# %% [markdown]
# The two-matrix design lands within 1% of the published figure (the embedding table and the
# biases make up most of the rest); a SwiGLU of width 4d would have needed a third more.
#
# Memory is parameters × bytes per parameter. We measure the bytes of real tensors: the loaded
# float32 weights, a float16 copy of them, and tensors laid out as int8 weights (one byte per
# weight plus an fp16 scale per row) and as int4 weights (two weights per byte plus an fp16 scale
# and minimum per block of 32, like GGUF's Q4_1). Chapter 07 fills such tensors with real
# quantized values; here we only count their bytes.

# %%
def int8_layout(w):
    return [torch.empty(w.shape, dtype=torch.int8), torch.empty(w.shape[0], dtype=torch.half)]


def int4_layout(w):
    blocks = w.numel() // 32
    return [torch.empty(blocks, 16, dtype=torch.uint8),  # 32 four-bit values in 16 bytes
            torch.empty(blocks, 2, dtype=torch.half)]  # scale and minimum


def nbytes(layout, params):
    """Bytes of `params` with every matrix stored in `layout`; vectors (norms) stay fp16."""
    tensors = [t for p in params for t in (layout(p) if p.dim() == 2 else [p.half()])]
    return sum(t.nbytes for t in tensors)


params = list(model.parameters())
memory = {
    "fp32": sum(p.nbytes for p in params),
    "fp16": sum(p.half().nbytes for p in params),
    "int8": nbytes(int8_layout, params),
    "int4": nbytes(int4_layout, params),
}
rule = 2 * n_params / 1e9  # "n billion parameters need 2n GB in fp16"
for kind, nbytes in memory.items():
    print(f"{kind}: {nbytes / 1e6:7.1f} MB  ({nbytes / n_params:.2f} bytes per parameter)")
print(f"rule of thumb 2n GB for fp16: {rule * 1000:.1f} MB;  "
      f"GGUF Q4_1 file on disk: {minillm.model_file('smollm2-135m').stat().st_size / 1e6:.1f} MB")

plt.figure(figsize=(6, 3))
plt.bar(memory.keys(), [b / 1e6 for b in memory.values()])
plt.axhline(rule * 1000, color="gray", linestyle="--", label="2n GB rule (fp16)")
plt.ylabel("MB")
plt.legend()
plt.show()

# %% [markdown]
# The rule works because fp16 stores 2 bytes per parameter; GPT-3's 175 billion then need about
# 350 GB for the weights alone, before the KV cache (chapter 03) and activations.
#
# ## 11 · The live check against transformers
#
# The same weights loaded by transformers (the reference of this course) must give the same logits.

# %%
with Timer("cpu") as loading:
    reference, ref_tokenizer = minillm.load_reference("smollm2-135m")
ref_seconds = loading.seconds
print(f"load: minillm {load_seconds:.2f} s, transformers (its cached copy) {ref_seconds:.2f} s")

length = 128 if CI else 512
text = "The weather today is sunny and warm, so the children are playing outside. " * 60
long_ids = torch.tensor([tokenizer.encode(text)[:length]])
with torch.inference_mode():
    ours = model(long_ids)
    theirs = reference(long_ids).logits
diff = (ours - theirs).abs().max().item()
agree = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
print(f"{length} tokens: max |logit difference| = {diff:.2g}, top-1 agreement {agree:.0%}")
assert diff <= 1e-3 and agree == 1.0

# %% [markdown]
# ## Summary
#
# - The forward pass is a short pipeline: embedding lookup, 30 identical blocks of
#   RMSNorm → attention → add, RMSNorm → SwiGLU → add, a final norm and the LM head.
# - Attention is four steps you can do on paper: scores q·k / √d (the √d keeps softmax from
#   saturating), the causal mask, softmax, the weighted sum of values; `attention_explicit` is
#   those four lines, and the fused kernel gives the same numbers.
# - RoPE makes attention scores depend on the distance between tokens; the causal mask keeps each
#   token from seeing the future; grouped-query heads share keys and values.
# - Memory ≈ parameters × bytes per parameter: 2n GB per n billion parameters in fp16.
# - minillm's model matches transformers' logits on the same weights (measured above).
#
# Next, `exercises/02_forward_pass.ipynb`: write RMSNorm, RoPE, causal grouped-query attention and a
# whole block yourself, and run the real model with your block. Chapter 03 adds the KV cache.
