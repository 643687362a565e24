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
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from ipywidgets import IntSlider, interact

import minillm
from minillm.model import apply_rope, attention, rms_norm, rope_cos_sin

torch.manual_seed(0)
CI = bool(os.environ.get("CI"))

# %% [markdown]
# ## 1 · Loading the weights
#
# `minillm.load` reads the GGUF file with the `gguf` package and dequantizes (反量化) every 4-bit
# block back to a 32-bit float. That takes several seconds, so the first load keeps a float32 copy
# in the cache as safetensors; every later load reads that copy.

# %%
start = time.perf_counter()
model, tokenizer = minillm.load("smollm2-135m", device="cpu")
load_seconds = time.perf_counter() - start
config = model.config
print(f"loaded in {load_seconds:.2f} s")
config

# %% [markdown]
# The whole model is a plain `torch.nn.Module`. Its forward pass reads top to bottom:

# %%
minillm.show_source(type(model).forward)

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
minillm.show_source(rope_cos_sin)
minillm.show_source(apply_rope)

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
# ## 4 · Self-attention (自注意力) as matrices
#
# We take a real prompt and the input of one layer, and compute attention by hand:
# queries Q, keys K and values V are three projections of the normalised hidden state; the
# scores are Q Kᵀ / √d; the **causal mask** (因果掩码) hides every later token; softmax turns each
# row into weights that sum to 1; the output is the weighted sum of the values.

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


# %%
def attention_by_hand(layer_index):
    """Q, K, V, the attention weights (heads, seq, seq) and the output of one layer."""
    block = model.layers[layer_index]
    h = block.attn_norm(inputs[layer_index])
    q = block.attn.q_proj(h).view(1, seq, config.n_heads, head_dim).transpose(1, 2)
    k = block.attn.k_proj(h).view(1, seq, config.n_kv_heads, head_dim).transpose(1, 2)
    v = block.attn.v_proj(h).view(1, seq, config.n_kv_heads, head_dim).transpose(1, 2)
    cos, sin = rope_cos_sin(torch.arange(seq)[None], head_dim, theta)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    group = config.n_heads // config.n_kv_heads
    k_all, v_all = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(head_dim)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return q, k, v, weights[0], weights @ v_all


with torch.inference_mode():
    q, k, v, weights, out = attention_by_hand(3)
print("q", tuple(q.shape), " k", tuple(k.shape), " v", tuple(v.shape))
print("weights", tuple(weights.shape), "→ every row sums to 1:",
      bool(torch.allclose(weights.sum(-1), torch.ones(config.n_heads, seq))))

# %% [markdown]
# The engine does the same with PyTorch's fused `scaled_dot_product_attention`; both agree:

# %%
with torch.inference_mode():
    fused = attention(q, k, v)
print(f"largest difference, by hand vs fused kernel: {(fused - out).abs().max().item():.2g}")
assert torch.allclose(fused, out, atol=1e-5)


# %% [markdown]
# The weights as heatmaps: each row is one token looking back at the tokens before it. The nine
# heads of one layer attend in different ways (some to the previous token, some to the first):

# %%
with torch.inference_mode():
    layer_weights = attention_by_hand(3)[3]
fig, axes = plt.subplots(3, 3, figsize=(8, 8))
for head, ax in enumerate(axes.flat):
    ax.imshow(layer_weights[head], cmap="Blues")
    ax.set_title(f"head {head}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle("layer 3: the 9 heads' attention weights (rows: queries, columns: keys)")
plt.show()

# %% [markdown]
# Move the sliders to see any layer and head with its tokens:

# %%
def show_attention(layer=3, head=0):
    with torch.inference_mode():
        w = attention_by_hand(layer)[3][head]
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.imshow(w, cmap="Blues")
    ax.set_xticks(range(seq), labels, rotation=90)
    ax.set_yticks(range(seq), labels)
    ax.set_title(f"layer {layer}, head {head}: attention weights")
    plt.show()


interact(show_attention, layer=IntSlider(3, 0, config.n_layers - 1),
         head=IntSlider(0, 0, config.n_heads - 1));

# %% [markdown]
# ### Grouped-query attention (分组查询注意力, GQA)
#
# SmolLM2 has 9 query heads but only 3 key/value heads: each key/value head serves a group of 3
# query heads (that is what `repeat_interleave` did above). The keys and values are what the KV
# cache of chapter 03 stores, so GQA shrinks the cache 3×:

# %%
group = config.n_heads // config.n_kv_heads
per_token = 2 * config.n_layers * config.n_kv_heads * head_dim * 4  # K and V, fp32 bytes
print(f"{config.n_heads} query heads, {config.n_kv_heads} key/value heads: groups of {group}")
print(f"KV cache per token: {per_token / 1024:.1f} KiB with GQA, "
      f"{per_token * group / 1024:.1f} KiB if every query head had its own")

# %% [markdown]
# ## 5 · RMSNorm (均方根归一化)
#
# Before attention and before the feed-forward part, each token's vector is divided by its root
# mean square, then scaled by a learned weight per dimension. Unlike LayerNorm it does not
# subtract the mean, and has no bias.

# %%
minillm.show_source(rms_norm)

# %%
x = inputs[10][0]  # hidden states entering layer 10
normed = rms_norm(x, torch.ones(config.hidden_size), config.norm_eps)
for name, t in [("before", x), ("after", normed)]:
    rms = t.pow(2).mean(-1).sqrt()
    print(f"RMS of the first tokens {name:>6}:", "  ".join(f"{r:6.3f}" for r in rms[:6]))

# %% [markdown]
# ## 6 · The SwiGLU feed-forward (前馈网络)
#
# After attention mixes information *between* tokens, the feed-forward part works on each token
# alone: two projections up to 1,536 dimensions, one passed through SiLU (x·sigmoid(x)) and used as
# a gate on the other, then a projection back down to 576.

# %%
minillm.show_source(type(model.layers[0].mlp))

# %%
grid = torch.linspace(-5, 5, 200)
plt.figure(figsize=(6, 3))
for name, fn in [("ReLU", F.relu), ("GELU", F.gelu), ("SiLU (used by SwiGLU)", F.silu)]:
    plt.plot(grid, fn(grid), label=name)
plt.legend()
plt.title("activation functions")
plt.show()

# %% [markdown]
# ## 7 · The stack of 30 layers
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
# ## 8 · The LM head (语言模型头): logits → softmax → the next token
#
# A final RMSNorm, then one matrix multiplication with the embedding table itself (SmolLM2 ties
# the two: `tie_embeddings=True`) gives one score, a **logit** (对数几率), per vocabulary token.
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
# characters but single UTF-8 **bytes** (chapter 01's byte fallback), labelled here by their bytes:

# %%
next_token_chart("今天天气", label=lambda t: str(tokenizer.token_bytes(t))[1:],
                 title="the Chinese prompt (today's weather)");

# %% [markdown]
# ## 9 · Parameters and memory
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
# head_dim + n_heads·head_dim·d weights and SwiGLU 3·d·f. The same arithmetic with the source's
# figures for GPT-3 (width 12,288, 96 layers, 4 × width feed-forward, no GQA) gives about
# 12 · layers · width² parameters:

# %%
d, f = config.hidden_size, config.intermediate_size
attn = d * (config.n_heads + 2 * config.n_kv_heads) * head_dim + config.n_heads * head_dim * d
formula = config.n_layers * (attn + 3 * d * f + 2 * d) + config.vocab_size * d + d
print(f"SmolLM2 from the formula: {formula:,}  measured: {n_params:,}")
assert formula == n_params
gpt3 = 96 * 12 * 12288 ** 2
print(f"GPT-3, 12·96·12288² = {gpt3 / 1e9:.0f} billion (the source: 175 billion)")

# %% [markdown]
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
# ## 10 · The live check against transformers
#
# The same weights loaded by transformers (the reference of this course) must give the same logits.

# %%
start = time.perf_counter()
reference, ref_tokenizer = minillm.load_reference("smollm2-135m")
ref_seconds = time.perf_counter() - start
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
# - RoPE makes attention scores depend on the distance between tokens; the causal mask keeps each
#   token from seeing the future; grouped-query heads share keys and values.
# - Memory ≈ parameters × bytes per parameter: 2n GB per n billion parameters in fp16.
# - minillm's model matches transformers' logits on the same weights (measured above).
#
# Next, `exercises/02_forward_pass.ipynb`: write RMSNorm, RoPE, causal grouped-query attention and a
# whole block yourself, and run the real model with your block. Chapter 03 adds the KV cache.
