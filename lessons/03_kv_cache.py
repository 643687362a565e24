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
#
# The chapter has two lessons. This one builds the loop and the cache. The next,
# `03b_long_context`, follows what grows with the length of the text: attention over a long
# cache, FlashAttention for long prompts, and the attention designs that shrink the cache.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.devices import describe
from minillm.generation.loop import Sequence, generate, stream, token_steps
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import (decode_step_times, kv_cache_formula_bytes,
                                            prefill_time, recompute_step_time)

CI = bool(os.environ.get("CI"))  # smaller sizes when the notebook runs in the test suite
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %%
device = minillm.pick_device("auto")  # the lesson runs on the device printed above
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
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
            seen += len(ids)
            ids.append(int(logits[0, -1].argmax()))  # the last position predicts the next token
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
# quadratic in n, **O(n²)** (section 3 counts attention's share, which grows faster still).
# Everything the earlier positions computed was thrown away and computed again.

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
            seen += len(step_input)                                      # NEW: step_input
            ids.append(int(logits[0, -1].argmax()))
            step_input = [ids[-1]]                                       # NEW: decode
    return ids, seen

cached_ids, cached_seen = generate_with_cache(model, prompt_ids, 16)
from minillm.generation.agreement import agree  # noqa: E402 (exact on a CPU: see below)
assert agree(model, prompt_ids, cached_ids[len(prompt_ids):], plain_ids[len(prompt_ids):])
print(f"same {len(cached_ids) - len(prompt_ids)} tokens; positions processed: {cached_seen} "
      f"with the cache against {plain_seen} without")

# %% [markdown]
# Same tokens, and far less work. Count the work of n new tokens in two parts:
#
# - **Through the weights** (every matrix multiply of every layer). Without the cache, step i
#   runs all its i positions again: O(n) positions per step, O(n²) in all. With the cache, the
#   prompt goes through once and then one position per step: O(1) per step, O(n) in all.
# - **Attention.** With the cache, the new token's query reads the cached keys and values of
#   all i earlier tokens: O(n) per step, O(n²) in all. Without the cache, each step runs causal
#   attention over all i positions again, every query against the keys before it: about i²/2
#   query-key pairs, O(n²) per step and O(n³) in all.
#
# So the cache takes a factor of n off both parts. The two loops above counted their positions;
# the same rules count attention's query-key pairs (per layer and head):

# %%
def work(p, n, cached):
    """(positions through the weights, attention's query-key pairs) for n new tokens after a
    prompt of p tokens, with or without the KV cache."""
    if cached:  # the prefill, then one position per step that attends to all before it
        return p + n - 1, p * (p + 1) // 2 + sum(p + i + 1 for i in range(n - 1))
    lengths = [p + i for i in range(n)]  # each step runs the whole sequence again
    return sum(lengths), sum(length * (length + 1) // 2 for length in lengths)


p = len(prompt_ids)
assert work(p, 16, cached=True)[0] == cached_seen  # the rule counts what the loops ran
assert work(p, 16, cached=False)[0] == plain_seen
print(f"{'new tokens':>10} {'positions: cache':>17} {'no cache':>12} {'pairs: cache':>14} "
      f"{'no cache':>16}")
for n in [256, 512, 1024, 2048]:
    (pos_c, pairs_c), (pos_n, pairs_n) = work(p, n, True), work(p, n, False)
    print(f"{n:>10} {pos_c:>17,} {pos_n:>12,} {pairs_c:>14,} {pairs_n:>16,}")
print(f"twice the tokens: positions x{work(p, 2048, True)[0] / work(p, 1024, True)[0]:.1f} "
      f"with the cache, x{work(p, 2048, False)[0] / work(p, 1024, False)[0]:.1f} without; "
      f"pairs x{work(p, 2048, True)[1] / work(p, 1024, True)[1]:.1f} with, "
      f"x{work(p, 2048, False)[1] / work(p, 1024, False)[1]:.1f} without")

# %% [markdown]
# Twice the tokens: about 2x and 4x with the cache (O(n), O(n²)), about 4x and 8x without it
# (O(n²), O(n³)). Section 4 times the steps. minillm's loop, `token_steps`, runs the cached loop
# for a whole batch, plus the stopping rules of section 6. It yields after every token, so that
# `generate` and `stream` share it:

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
ax[1].plot(range(steps), np.cumsum(nocache_times), label="without cache")
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
# total time, the area under the left curves: without the cache it bends upwards, with it, it
# looks straight. The gap widens with every token (the benchmark `scripts/bench_kv_cache.py`
# goes to 512).
#
# At these lengths a cached step is nearly all weights: attention over a few hundred cached
# tokens is small next to the 135 million weights every step multiplies with. But it grows with
# every cached token, and at some thousands of tokens it sets the pace: lesson 03b measures
# where.

# %% [markdown]
# ## 5 · What the cache costs: memory
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
# request ends. There are three remedies:
#
# - **fewer key/value heads**: grouped-query attention already makes Llama-3-8B keep 4× less
#   than Llama-2-7B; lesson 03b compares the designs that go further, and the sliding window
#   that caps how many tokens are kept;
# - **fewer bytes per value**: keys and values stored in 8 bits instead of 16 or 32: the
#   appendix lesson 07b (KV-cache quantization) measures what int8 and fp8 keys and values save
#   and cost on SmolLM2;
# - **paging**: memory handed out in small blocks as a request grows, instead of reserved for
#   tokens it may never generate (chapter 06; minillm's cache here preallocates `max_tokens`
#   positions up front).

# %% [markdown]
# ## 6 · When to stop
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
# ## 7 · A batch of different lengths
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
#   tokens: O(n) positions through the weights per step, O(n²) in total, and causal attention
#   over all of them, O(n²) per step, O(n³) in total.
# - The KV cache keeps every layer's keys and values, so a step runs one position through the
#   weights (O(n) in total) and its attention reads the n cached keys once (O(n) per step,
#   O(n²) in total).
# - The price of the cache is memory: 2 × layers × kv_heads × head_dim × tokens × bytes, per
#   sequence. For large models and many users it rivals or exceeds the weights.
# - Generation stops at EOS, at max_new_tokens, or at a stop string; `finish_reason` says which.
#
# Next, lesson 03b follows the cache to long contexts: where attention over it sets the pace,
# FlashAttention for long prompts, and the designs that shrink the cache. Then chapter 04
# replaces the argmax with the decoding strategies.
