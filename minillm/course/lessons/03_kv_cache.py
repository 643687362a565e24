# %% [markdown]
# # 03 · Prefill, decode and the KV cache
#
# Chapter 02 built the forward pass: token ids in, one row of logits per position out. A model
# that predicts one next token becomes a model that *writes* through a loop: pick a token, append
# it, run again. This chapter builds that loop, **generation** (生成), in minillm.
#
# Generation has two phases:
#
# - **prefill** (预填充): one forward pass over the whole prompt, every position at once;
# - **decode** (解码): one new token per forward pass, each depending on the one before: the
#   loop is **autoregressive** (自回归).
#
# Done naively, every decode step recomputes the whole sequence. The **KV cache** (KV 缓存) keeps
# what earlier steps computed, the attention keys and values, so a step only processes its new
# token. We measure what that saves, what it costs in memory, and how generation knows when to
# stop.

# %%
import math
import os
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.devices import describe
from minillm.generation.loop import Sequence, generate, stream, token_steps
from minillm.generation.kv_cache import KVCache
from minillm.measure.memory_peak import peak_bytes
from minillm.model.memory import bytes_per_token
from minillm.model import attention_explicit
from minillm.model.flash_attention import flash_attention
from minillm.generation.step_timing import (decode_step_times, kv_cache_formula_bytes, prefill_time,
                                 recompute_step_time)

CI = bool(os.environ.get("CI"))  # smaller sizes when the notebook runs in the test suite
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %%
device = minillm.pick_device("auto")  # the lesson runs on the device printed above
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
c = model.config
print(f"{c.n_layers} layers, {c.n_heads} query heads, {c.n_kv_heads} key/value heads of "
      f"width {c.head_dim}, context window {c.max_seq_len} tokens, EOS ids {c.eos_token_ids}")

# %% [markdown]
# ## 1 · The autoregressive loop, written out
#
# The simplest possible generator: run the model on the sequence, take the most likely next
# token (greedy decoding; chapter 04 covers the alternatives), append it, repeat. Each step feeds
# the model the **whole** sequence so far.

# %%
def generate_no_cache(model, ids, new_tokens):
    ids = list(ids)
    seen = 0  # token positions the model processed, over all steps
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids]))   # (1, len(ids), vocab)
            ids.append(int(logits[0, -1].argmax()))  # the last position predicts the next token
            seen += len(ids) - 1
    return ids, seen

prompt = "The history of the printing press begins in"
prompt_ids = tokenizer.encode(prompt)
plain_ids, plain_seen = generate_no_cache(model, prompt_ids, 16)
print(repr(tokenizer.decode(plain_ids[len(prompt_ids):])))
print(f"prompt {len(prompt_ids)} tokens, 16 new tokens: the model processed {plain_seen} "
      f"token positions")

# %% [markdown]
# Step n processes the prompt plus n tokens, though only the last position's logits are used.
# For a prompt of p tokens and n new tokens that is p + (p+1) + ... + (p+n-1) positions:
# quadratic in n, **O(n²)**. Everything the earlier positions computed was thrown away and
# computed again.

# %% [markdown]
# ## 2 · Prefill: the prompt in one parallel pass
#
# The prompt is known in full before generation starts, so all its positions can go through the
# model together: one matrix multiply per weight for the whole prompt instead of one per token.
# This is the prefill. How does its time grow with the prompt's length?

# %%
lengths = [1, 8, 32, 64, 128] + ([] if CI else [256, 512])
prefill_seconds = [prefill_time(model, n, repeats=2) for n in tqdm(lengths, desc="prefill")]
for n, s in zip(lengths, prefill_seconds):
    print(f"{n:>4} tokens: {1e3 * s:7.1f} ms  ({1e3 * s / n:6.2f} ms per token)")

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(lengths, [1e3 * s for s in prefill_seconds], "o-")
ax[0].set(xlabel="prompt tokens", ylabel="prefill time (ms)", title="prefill time")
ax[1].plot(lengths, [1e3 * s / n for s, n in zip(prefill_seconds, lengths)], "o-")
ax[1].set(xlabel="prompt tokens", ylabel="ms per token", yscale="log",
          title="prefill time per prompt token")
plt.tight_layout()
plt.show()

# %%
one, most = prefill_seconds[0], prefill_seconds[-1]
print(f"one token takes {1e3 * one:.1f} ms; {lengths[-1]} tokens take {1e3 * most:.1f} ms, "
      f"{most / one:.1f}x as long for {lengths[-1]}x the tokens")

# %% [markdown]
# Processing many tokens at once costs far less per token than processing them one by one: the
# weights are read from memory once for the whole prompt, and the arithmetic is done in large,
# efficient matrix multiplies. Decode cannot do that, because token n+1 depends on token n. So
# generation is a fast, parallel prefill followed by a slow, sequential decode (chapter 05
# measures both as TTFT and TPOT).

# %% [markdown]
# ## 3 · The KV cache
#
# In a decoder, position i's output depends only on positions ≤ i (the causal mask). So when
# token n+1 arrives, nothing computed for positions 1..n changes. What position n+1 needs from
# them is their attention **keys** and **values**, layer by layer. Keep those, and a decode step
# needs to run only the new token through the model:
#
# - prefill writes the keys and values of every prompt token into the cache;
# - each decode step appends one token's keys and values, and its attention reads all of them.
#
# `minillm.KVCache` preallocates one key tensor and one value tensor per layer, shaped
# (batch, kv_heads, max_tokens, head_dim). Each attention layer calls `append`:

# %%
show_source(KVCache.append)

# %% [markdown]
# The loop from section 1, now with a cache. Only the lines marked `# NEW` changed:

# %%
def generate_with_cache(model, ids, new_tokens):
    ids = list(ids)
    seen = 0
    cache = KVCache.for_model(model, batch_size=1,                       # NEW
                              max_tokens=len(ids) + new_tokens)          # NEW
    step_input = ids                                                     # NEW: prefill
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(torch.tensor([step_input]), cache=cache)     # NEW: cache=
            ids.append(int(logits[0, -1].argmax()))
            seen += len(step_input)
            step_input = [ids[-1]]                                       # NEW: decode
    return ids, seen

cached_ids, cached_seen = generate_with_cache(model, prompt_ids, 16)
assert cached_ids == plain_ids
print(f"same {len(cached_ids) - len(prompt_ids)} tokens; positions processed: {cached_seen} "
      f"with the cache against {plain_seen} without")

# %% [markdown]
# Same tokens, and far less work. Through the **weights** (every matrix multiply of every layer),
# the prompt goes once and then one position per step: O(1) positions per token, O(n) in all,
# where the loop without a cache ran O(n) positions per token and O(n²) in all. **Attention** is
# the part the cache does not shrink: the new token's query still reads the keys and values of
# all i earlier tokens, so attention stays O(n) per token and O(n²) in total, with or without
# the cache (without it, each step even recomputes those keys). Section 4 measures both parts.
# minillm's loop, `token_steps`, does exactly this for a whole batch, plus the stopping rules of
# section 7. It yields after every token, so that `generate` and `stream` share it:

# %%
show_source(token_steps)

# %% [markdown]
# `minillm.generate` wraps it; `use_cache=False` runs the recomputing loop of section 1 instead.
# Both give the same tokens (the test suite checks this on ten prompts × 64 tokens). The two
# add the same products in different orders, so on a GPU they may part at a near tie; the check
# says how it compares here (`minillm.generation.agreement`):

# %%
from minillm.generation.agreement import agree, rule

print("comparing", rule(model))
for use_cache in (True, False):
    out = generate(model, tokenizer, prompt, max_new_tokens=16, use_cache=use_cache)
    print(f"use_cache={use_cache!s:<5} {out.finish_reason:<6} {out.text!r}")
    assert agree(model, prompt_ids, out.token_ids,
                 cached_ids[len(prompt_ids):][:len(out.token_ids)])

# %% [markdown]
# ## 4 · Per-step latency with and without the cache
#
# Now time every decode step. With the cache, step n processes one token (and attention reads n
# cached positions, a small cost for this model). Without it, step n runs the full forward pass
# over all p + n tokens. We time the cached loop at every step, and the no-cache step at a
# sample of lengths (one forward pass over exactly that many tokens, as the no-cache loop would
# run it), so we need not wait for the whole quadratic loop.

# %%
steps = 64 if CI else 256
stride = 16
story_ids = tokenizer.encode("The history of the printing press begins in")
decode_step_times(model, tokenizer, story_ids, 4)  # warm-up
cached_times, _ = decode_step_times(model, tokenizer, story_ids, steps)
sampled = list(range(0, steps, stride)) + [steps - 1]
p = len(story_ids)
nocache_sampled = [recompute_step_time(model, p + n)
                   for n in tqdm(sampled, desc="no-cache steps")]
nocache_times = np.interp(range(steps), sampled, nocache_sampled)

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(range(1, steps), 1e3 * np.array(cached_times[1:]), label="with KV cache")
ax[0].plot(sampled[1:], 1e3 * np.array(nocache_sampled[1:]), "o-", label="without cache")
ax[0].set(xlabel="decode step", ylabel="ms per step", title="time of each decode step")
ax[0].legend()
ax[1].plot(range(steps), np.cumsum(cached_times), label="with KV cache")
ax[1].plot(range(steps), np.cumsum(nocache_times), label="without cache: O(n²)")
ax[1].set(xlabel="new tokens", ylabel="seconds", title="total time to generate n tokens")
ax[1].legend()
plt.tight_layout()
plt.show()

# %%
total_cached, total_nocache = sum(cached_times), float(np.sum(nocache_times))
late = slice(steps - stride, steps)
print(f"{steps} new tokens: {total_cached:.2f} s with the cache, {total_nocache:.2f} s without: "
      f"{total_nocache / total_cached:.1f}x faster")
print(f"a step near token {steps}: {1e3 * np.median(cached_times[late]):.1f} ms with the "
      f"cache, {1e3 * np.median(nocache_times[late]):.1f} ms without")
early = slice(1, 1 + stride)
print(f"cached steps: median {1e3 * np.median(cached_times[early]):.1f} ms over steps 1-{stride}, "
      f"{1e3 * np.median(cached_times[late]):.1f} ms over the last {stride}")

# %% [markdown]
# The left chart: without the cache each step grows with the sequence, because it reprocesses it
# all; with the cache the step time stays nearly flat at these lengths. The right chart is the
# total time: the area under the left curves. Without the cache it bends upwards, O(n²); with it,
# it looks straight. The gap widens with every token (the benchmark `scripts/bench_kv_cache.py`
# goes to 512).
#
# "Nearly flat" is not flat. A cached step has two parts: the **weights**, the same multiply-adds
# with every weight and the same bytes read at every step, and **attention over the cache**,
# which reads one more cached key and value at every step. To see the second part we need long contexts. Filling
# a cache with thousands of real tokens takes a long prefill, but the cost of a step does not
# depend on what the cached numbers are, so we fill it with random keys and values of the right
# shape and time one decode step on top of n cached tokens:

# %%
from minillm.utils.devices import best_time


def cached_step_seconds(model, context, repeats=5):
    """One decode step on top of `context` cached tokens (random keys and values)."""
    cache = KVCache.for_model(model, batch_size=1, max_tokens=context + 1)
    for t in cache.keys + cache.values:
        t.normal_()
    cache.advance(context)
    token = torch.tensor([[1]])

    def step():
        model(token, cache=cache)
        cache.crop(context)  # forget the new token: every repeat is the same step

    with torch.inference_mode():
        return best_time(step, model, repeats=repeats, warmup=1)


contexts = [64, 1024, 2048, 4096] + ([] if CI else [6144, c.max_seq_len - 1])
rounds = [[cached_step_seconds(model, n) for n in contexts]  # interleaved: a busy moment of
          for _ in tqdm(range(3), desc="rounds")]              # the machine hits every length
context_seconds = [min(times) for times in zip(*rounds)]
slope, weights_part = np.polyfit(contexts, context_seconds, 1)  # step ≈ weights + slope × n
for n, t in zip(contexts, context_seconds):
    print(f"{n:>5} cached tokens: {1e3 * t:6.1f} ms per step "
          f"(fit: {1e3 * weights_part:.1f} ms weights + {1e3 * slope * n:5.1f} ms attention)")

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
grid_n = np.arange(1, contexts[-1] + 1)  # the measured range
ax[0].plot(contexts, 1e3 * np.array(context_seconds), "o", label="measured step")
ax[0].stackplot(grid_n, 1e3 * weights_part * np.ones_like(grid_n, dtype=float),
                1e3 * slope * grid_n, labels=["weights: the same every step",
                                              "attention over the cache: grows with n"],
                alpha=0.4)
ax[0].set(xlabel="cached tokens n", ylabel="ms per decode step", title="one cached step")
ax[0].legend(fontsize=8, loc="upper left")
ax[1].plot(grid_n, weights_part * grid_n, label="weights: O(n) in total")
ax[1].plot(grid_n, slope * grid_n ** 2 / 2, label="attention: O(n²) in total")
ax[1].set(xlabel="tokens generated", ylabel="seconds", title="the two parts, summed over n steps")
ax[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %%
longest, shortest = context_seconds[-1], context_seconds[0]
print(f"a step over {contexts[-1]} cached tokens takes {longest / shortest:.2f}x a step over "
      f"{contexts[0]}")
weight_bytes = bytes_per_token(model)  # what one decode step reads
kv_per_token = kv_cache_formula_bytes(c, 1, 4)
print(f"attention's part equals the weights' at n ≈ {weights_part / slope:,.0f} cached tokens "
      f"(the fit; summed over n steps it catches up at twice that)")
print(f"by bytes alone: {weight_bytes / 1e6:.0f} MB of weights against {kv_per_token / 1024:.0f} "
      f"KiB of keys and values per cached token would cross at n ≈ "
      f"{weight_bytes / kv_per_token:,.0f}")
assert slope > 0 and longest > 1.1 * shortest  # the attention part grows with the context

# %% [markdown]
# So with the cache, generation costs O(n) work through the weights plus O(n²) attention. Each
# step reads all the weights once and every cached key and value once, so bytes predict where
# the two parts cross; the measured crossing also includes how efficiently each part runs here
# (the weights go through a few large matrix products, attention through many small operations
# per layer), which is why the two printed figures differ. Either way, past some thousands of
# tokens the cache, not the weights, sets the pace of a step: long-context serving lives there.

# %% [markdown]
# ## 5 · Long prompts: attention without the score matrix (FlashAttention)
#
# Prefill has its own attention problem. Chapter 02's attention builds every score of a head at
# once: queries × keys numbers, n² for a prompt of n tokens, in every head of every layer. For
# SmolLM2's 9 heads in float32 that is 9 × n² × 4 bytes per layer: gigabytes at its 8,192-token
# window (measured below). The scores are only a step on the way: what the layer returns is
# n × 64 numbers per head.
#
# **FlashAttention** (Dao et al., 2022) never builds them. It needs one idea, the **online softmax**
# (在线 softmax): softmax(x)_i = e^(x_i − m) / Σ_j e^(x_j − m) for any m, so it can be computed
# while reading x in pieces. Keep the largest value seen so far, m, and the sum so far,
# l = Σ e^(x_j − m); when a new piece raises the maximum to m', multiply l by e^(m − m') and add
# the new piece's terms. On a vector of 12 numbers in pieces of 4:

# %%
x = torch.tensor([1.0, 3.0, 0.5, 2.0, 6.0, 1.0, 0.0, 2.5, 4.0, 7.5, 1.0, 3.0])
m, total = float("-inf"), 0.0
for start in range(0, len(x), 4):
    piece = x[start:start + 4]
    m_new = max(m, piece.max().item())
    total = total * math.exp(m - m_new) + torch.exp(piece - m_new).sum().item()
    m = m_new
    print(f"after {piece.tolist()}: running max {m}, running sum {total:.4f}")
online = torch.exp(x - m) / total
print(f"largest difference from softmax: {(online - x.softmax(0)).abs().max().item():.1e}")
assert torch.allclose(online, x.softmax(0), atol=1e-6)

# %% [markdown]
# Attention adds one thing: next to m and l, keep the running weighted sum of values o, rescaled
# by the same e^(m − m') whenever the maximum moves. After the last piece of keys, o / l is the
# attention output. Tile the queries too, and only a block of queries × a block of keys exists at
# any moment. Tiles wholly above the diagonal (keys no query of the tile may see) are skipped,
# which halves the work of a causal prompt. minillm's version, in PyTorch:

# %%
show_source(flash_attention)

# %% [markdown]
# It must give the same numbers as the plain attention. At SmolLM2's shapes (9 query heads, 3
# key/value heads of width 64), and with the memory each one allocates at its peak, measured by
# watching every tensor PyTorch creates while it runs (`minillm.measure.memory_peak.peak_bytes`):

# %%
flash_lengths = [256, 512, 1024] + ([] if CI else [2048])  # the last two are compared
gen = torch.Generator().manual_seed(0)
peaks = {"plain": [], "flash": []}
for n in tqdm(flash_lengths, desc="prompt lengths"):
    q = torch.randn(1, c.n_heads, n, c.head_dim, generator=gen)
    k = torch.randn(1, c.n_kv_heads, n, c.head_dim, generator=gen)
    v = torch.randn(1, c.n_kv_heads, n, c.head_dim, generator=gen)
    plain_out, plain_peak = peak_bytes(attention_explicit, q, k, v)
    tiled_out, tiled_peak = peak_bytes(flash_attention, q, k, v, block_size=128)
    error = (plain_out - tiled_out).abs().max().item()
    assert error < 1e-5
    peaks["plain"].append(plain_peak)
    peaks["flash"].append(tiled_peak)
    print(f"{n:>5} tokens: plain {plain_peak / 1e6:7.1f} MB, tiled {tiled_peak / 1e6:5.1f} MB "
          f"at the peak; largest difference {error:.1e}")

# %%
plt.figure(figsize=(6, 3.5))
for name, values in peaks.items():
    plt.plot(flash_lengths, [b / 1e6 for b in values], "o-", label=name)
plt.xlabel("prompt tokens n")
plt.ylabel("MB allocated at the peak")
plt.title("one layer's attention, SmolLM2's heads")
plt.legend()
plt.show()
n_max = flash_lengths[-1]
scores_bytes = c.n_heads * n_max ** 2 * 4
per_n2 = peaks["plain"][-1] / n_max ** 2
print(f"at {n_max} tokens the plain attention holds {peaks['plain'][-1] / scores_bytes:.1f}x the "
      f"score matrix ({scores_bytes / 1e6:.0f} MB) at its peak; the tiles "
      f"{peaks['flash'][-1] / 1e6:.1f} MB")
print(f"at the same {per_n2:.0f} bytes per n², a 32k-token prompt would need "
      f"{per_n2 * 32768 ** 2 / 1e9:.0f} GB per layer for the plain attention")
assert peaks["plain"][-1] >= scores_bytes > 4 * peaks["flash"][-1]
print(f"{flash_lengths[-2]} -> {flash_lengths[-1]} tokens: plain x"
      f"{peaks['plain'][-1] / peaks['plain'][-2]:.2f}, tiled x"
      f"{peaks['flash'][-1] / peaks['flash'][-2]:.2f}")
assert peaks["plain"][-1] / peaks["plain"][-2] > 3.5  # twice the tokens: about 4x (n²)
assert peaks["flash"][-1] / peaks["flash"][-2] < 2.5  # about 2x at most (n)

# %% [markdown]
# The tiled version's memory grows like n (its queries and its output), the plain one's like n².
# That is why every serving engine uses a FlashAttention-style kernel for prefill: long prompts
# fit, and on a GPU the tiles stay in the fast on-chip memory, so the n² scores never travel to
# and from the GPU's main memory either, which is where its speed comes from. minillm's engine
# calls PyTorch's fused `scaled_dot_product_attention`, which uses such a kernel where the
# hardware has one; this Python version loops over tiles, so it shows the arithmetic and the
# memory, not the speed.

# %% [markdown]
# ## 6 · What the cache costs: memory
#
# Each token leaves a key and a value vector in every layer, for every key/value head. So the
# cache of one sequence holds
#
# **bytes = 2 × layers × kv_heads × head_dim × tokens × bytes per value**
#
# (2 for keys and values). We fill a cache with a prompt and compare its measured size with the
# formula:

# %%
tokens = 1024 if CI else 2048
cache = KVCache.for_model(model, batch_size=1, max_tokens=tokens)
with torch.inference_mode():
    model(torch.randint(c.vocab_size, (1, tokens)), cache=cache)
formula = kv_cache_formula_bytes(c, tokens, bytes_per_value=4)
allocated = sum(t.untyped_storage().nbytes() for t in cache.keys + cache.values)
print(f"{tokens} tokens in fp32: measured {cache.nbytes:,} bytes, allocated {allocated:,}, "
      f"formula {formula:,}")
assert cache.nbytes == formula == allocated
print(f"per token: {cache.nbytes // tokens:,} bytes = {cache.nbytes / tokens / 1024:.1f} KiB")
del cache

# %% [markdown]
# Small for SmolLM2: it has only 3 key/value heads (grouped-query attention, chapter 02) and 30
# layers. Larger models are another matter. From their published shapes, in fp16 (2 bytes):

# %%
models = {  # layers, kv heads, head_dim, parameters (billions), context window
    "SmolLM2-135M": (c.n_layers, c.n_kv_heads, c.head_dim, 0.135, c.max_seq_len),
    "Llama-2-7B": (32, 32, 128, 6.7, 4096),
    "Llama-2-13B": (40, 40, 128, 13.0, 4096),
    "Llama-3-8B (GQA)": (32, 8, 128, 8.0, 8192),
    "Llama-2-70B (GQA)": (80, 8, 128, 69.0, 4096),
    "GPT-3 175B": (96, 96, 128, 175.0, 2048),
}
shape = type("Shape", (), {})
print(f"{'model':<18} {'per token':>10} {'at 4,096 tokens':>16} {'weights fp16':>13}")
for name, (layers, heads, dim, billions, window) in models.items():
    shape.n_layers, shape.n_kv_heads, shape.head_dim = layers, heads, dim
    per_token = kv_cache_formula_bytes(shape, 1, 2)
    print(f"{name:<18} {per_token / 2**10:>8.0f} KiB {per_token * 4096 / 2**30:>13.2f} GiB "
          f"{2 * billions:>10.1f} GB")

# %% [markdown]
# A 7B Llama-2 keeps half a megabyte per token: a single 4,096-token conversation needs 2 GiB of
# cache on top of 13 GB of weights. And a server holds one cache per request:

# %%
shape.n_layers, shape.n_kv_heads, shape.head_dim = 32, 32, 128
batches = [1, 2, 4, 8, 16, 32]
cache_gib = [kv_cache_formula_bytes(shape, 4096, 2, batch=b) / 2**30 for b in batches]
plt.figure(figsize=(6, 3.5))
plt.bar([str(b) for b in batches], cache_gib, label="KV cache (4,096 tokens each)")
plt.axhline(2 * 6.7 * 1e9 / 2**30, color="k", ls="--", label="the weights (fp16)")
plt.xlabel("requests served at once")
plt.ylabel("GiB")
plt.title("Llama-2-7B in fp16: KV cache against weights")
plt.legend()
plt.show()
crossing = next(b for b, g in zip(batches, cache_gib) if g > 2 * 6.7e9 / 2**30)
print(f"from {crossing} requests at once, the cache outweighs the model itself")

# %% [markdown]
# This is why inference memory stays high even for a model that "fits": the weights are fixed,
# but the cache grows with every token of every request, and it must stay in memory until the
# request ends. The remedies are the subject of later chapters and of the model designs above:
# grouped-query attention (Llama-3-8B keeps 4× less than Llama-2-7B), a lower precision for the
# cache (chapter 07), and paging the cache so memory is not reserved for tokens never generated
# (chapter 06; minillm's cache here preallocates `max_tokens` positions up front).

# %% [markdown]
# ### Shrinking the cache beyond GQA
#
# The cache's size is a design choice of the model. Per token and layer it stores:
#
# - **MHA**, multi-head attention (多头注意力): a key and a value for every query head;
# - **GQA**, grouped-query attention (分组查询注意力, chapter 02): one per group of query heads;
# - **MQA**, multi-query attention (多查询注意力): one key and one value shared by all heads;
# - **MLA**, multi-head latent attention (多头潜在注意力, DeepSeek-V2 and V3): one compressed
#   latent vector, from which each head's keys and values are rebuilt by learned
#   up-projections, plus a small shared key part that carries RoPE;
# - a **sliding window** (滑动窗口注意力) changes not the bytes per token but how many tokens are
#   kept: each token attends only to the last W, so older ones can be dropped (Mistral 7B used
#   W = 4,096).
#
# From the published shapes (`minillm.generation.kv_designs`; each model's published design is marked *),
# in 16-bit values, per token and for one 32k-token conversation:

# %%
from minillm.generation.kv_designs import PUBLISHED, bytes_per_token, cache_bytes

CONTEXT, WINDOW = 32_768, 4096
published = {"SmolLM2-135M": "GQA", "Llama-3-8B": "GQA", "DeepSeek-V3": "MLA"}
assert bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA", 4) * tokens == allocated  # measured
print(f"{'model':<13} {'design':<5} {'per token':>10} {'at 32k':>10} "
      f"{'at 32k, window 4k':>18}")
at_32k = {}
for name, shape in PUBLISHED.items():
    for design in ("MHA", "GQA", "MQA", "MLA"):
        per_token = bytes_per_token(shape, design)
        if per_token is None:
            continue
        full, windowed = cache_bytes(shape, design, CONTEXT), cache_bytes(shape, design, CONTEXT,
                                                                          WINDOW)
        at_32k[(name, design)] = full
        star = "*" if published[name] == design else " "
        print(f"{name:<13} {design + star:<5} {per_token / 2**10:>6.1f} KiB {full / 2**30:>6.2f} GiB "
              f"{windowed / 2**30:>14.2f} GiB")

# %%
fig, ax = plt.subplots(figsize=(8, 3.5))
names = [f"{m}\n{d}{'*' if published[m] == d else ''}" for m, d in at_32k]
ax.bar(names, [b / 2**30 for b in at_32k.values()],
       color=[f"C{list(PUBLISHED).index(m)}" for m, _ in at_32k])
ax.set(yscale="log", ylabel="GiB at 32k tokens (16-bit)",
       title="one sequence's KV cache by attention design")
plt.xticks(fontsize=8)
plt.tight_layout()
plt.show()
mha, mla = at_32k[("DeepSeek-V3", "MHA")], at_32k[("DeepSeek-V3", "MLA")]
print(f"DeepSeek-V3 with MLA keeps {mha / mla:.0f}x less than its 128 heads would with MHA")

# %% [markdown]
# MQA and MLA shrink the cache most; MQA pays in quality (one key for every head), and MLA pays
# in compute (the up-projections; at decode they can be folded into the query and output
# matrices). A sliding window caps the cache at W tokens whatever the length of the text, at the
# price of never looking further back than W directly (information still flows further through
# the layers, a window per layer).
#
# The window is the easiest to build: a **ring buffer** (环形缓冲区) of W slots per layer. Token n
# goes to slot n mod W, overwriting token n − W, which no later query may see any more.
# `minillm.generation.sliding_window.RingKVCache` has the same interface as `KVCache`, so the model runs on
# it unchanged:

# %%
from minillm.generation.sliding_window import RingKVCache, window_forward

show_source(RingKVCache.append)

# %% [markdown]
# The check: decode token by token with a ring of W slots, and compare every step's logits with
# the model run over the whole sequence at once, with full attention limited by a window mask
# (`window_forward`: query i sees keys i − W + 1 … i).

# %%
W = 24 if CI else 64
text_ids = tokenizer.encode("The history of the printing press begins in the fifteenth century, "
                            "when Johannes Gutenberg built a press with movable metal type. " * 8)
ids = torch.tensor([text_ids[:W + (16 if CI else 48)]])
ring = RingKVCache.for_model(model, batch_size=1, window=W)
held = []
with torch.inference_mode():
    steps_logits = [model(ids[:, :W // 2], cache=ring)]  # a prompt that fits the ring
    held.append(ring.nbytes)
    for t in range(W // 2, ids.shape[1]):
        steps_logits.append(model(ids[:, t:t + 1], cache=ring))
        held.append(ring.nbytes)
    ring_logits = torch.cat(steps_logits, dim=1)
    reference = window_forward(model, ids, W)
    full = model(ids)
window_error = (ring_logits - reference).abs().max().item()
inside = (ring_logits[:, :W] - full[:, :W]).abs().max().item()
beyond = (ring_logits[:, W:] - full[:, W:]).abs().max().item()
full_cache = kv_cache_formula_bytes(c, ids.shape[1], 4)
print(f"{ids.shape[1]} tokens, window {W}: ring vs window mask, largest logit difference "
      f"{window_error:.1e}")
print(f"ring vs full attention: {inside:.1e} over the first {W} tokens, {beyond:.2f} after them")
print(f"memory: the ring holds {held[-1]:,} bytes ({W} tokens) at the end; a full cache "
      f"{full_cache:,} bytes")
assert window_error < 1e-3
assert inside < 1e-3 < beyond  # the same until the window fills, different after
assert held[-1] == max(held) == ring.capacity_bytes < full_cache

# %% [markdown]
# Until the window fills, the ring is plain attention; after, the model sees less and its
# logits move. SmolLM2 was trained with full attention, so a window changes what it says;
# models trained with a window (Mistral 7B) lose far less. Gemma 2 and 3 mix both: most layers
# use a window, every few layers one sees everything.

# %% [markdown]
# ## 7 · When to stop
#
# The loop ends at whichever comes first:
#
# - an **end-of-sequence** (EOS) token: the model's own signal that it is done. SmolLM2's chat
#   turns end with `<|im_end|>`;
# - **max_new_tokens**: the user's budget;
# - a **stop string**: a user condition on the text, checked in the text (one string can be
#   split across tokens in many ways). The returned text ends just before it.
#
# `finish_reason` says which:

# %%
question = tokenizer.apply_chat_template([{"role": "user", "content": "Name three fruits."}])
for options in [dict(max_new_tokens=64), dict(max_new_tokens=5),
                dict(max_new_tokens=64, stop=["\n2."])]:
    out = generate(model, tokenizer, question, **options)
    print(f"{str(options):<38} -> {out.finish_reason:<6} {len(out.token_ids):>2} tokens "
          f"{out.text!r}")

# %% [markdown]
# The EOS token is kept in `token_ids` (it is what the model produced) but not shown in `text`.
# Each sequence's rules live in one small class:

# %%
show_source(Sequence.add)

# %% [markdown]
# The same loop streams: `stream` yields text as soon as it is safe to show (never half a UTF-8
# character, never the start of what may become a stop string).

# %%
pieces = list(stream(model, tokenizer, question, max_new_tokens=24))
print(pieces)

# %% [markdown]
# ## 8 · A batch of different lengths
#
# Several prompts can share each forward pass. Their lengths differ, so shorter prompts are
# padded on the left; the **attention mask** (注意力掩码) hides the padding, and position ids count
# only real tokens. Each row then gives exactly the tokens it gives alone:

# %%
prompts = ["The capital of France is", "1, 2, 3,", "Once upon a time, in a small village by"]
batch = generate(model, tokenizer, prompts, max_new_tokens=12)
for text, row in zip(prompts, batch):
    alone = generate(model, tokenizer, text, max_new_tokens=12)
    assert agree(model, row.prompt_token_ids, row.token_ids, alone.token_ids)
    print(f"{len(row.prompt_token_ids):>2} prompt tokens -> {row.text!r}")

# %% [markdown]
# ## Summary
#
# - Prefill runs the whole prompt in one parallel pass; per token it is far cheaper than decode.
# - Decode is autoregressive: one token per pass. Without a cache, step n reprocesses all n
#   tokens: O(n²) positions through the weights in total. The KV cache keeps every layer's keys
#   and values, so a step runs one position through the weights: O(n) in total. Attention over
#   the cache still reads all n earlier keys: O(n) per token, O(n²) in total, measured above as a
#   step time that grows with the context.
# - Prefill's attention need not build the n × n scores: the online softmax computes it tile by
#   tile (FlashAttention), with memory that grows like n instead of n².
# - The price of the cache is memory: 2 × layers × kv_heads × head_dim × tokens × bytes, per
#   sequence. For large models and many users it rivals or exceeds the weights. GQA, MQA and MLA
#   shrink the bytes per token; a sliding window (a ring buffer) caps the tokens kept.
# - Generation stops at EOS, at max_new_tokens, or at a stop string; `finish_reason` says which.
#
# Next, chapter 04 replaces the argmax with the decoding strategies: beam search, temperature,
# top-k, top-p.
