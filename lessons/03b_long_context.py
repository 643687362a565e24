# %% [markdown]
# # 03b · Long context: attention over a long cache, FlashAttention, smaller caches
#
# Lesson 03 built the KV cache and timed decode steps over a few hundred tokens, where a cached
# step costs nearly the same at every length. Chat histories, documents and code run to
# thousands of tokens and more. This lesson follows what grows with the length of the text:
#
# - a decode step's attention reads every cached key and value: at some length it costs more
#   than the weights (section 1);
# - a long prompt's prefill builds n² attention scores, unless it computes them tile by tile as
#   FlashAttention does (section 2);
# - the cache's bytes per token depend on the attention design (section 3), and a sliding window
#   caps how many tokens it keeps, at a cost that depends on which tokens it keeps (section 4);
# - one decode step over a long cache can be split across many cores (Flash-Decoding), and a
#   context too long for one GPU across many GPUs (context parallelism) (section 5);
# - a cache that is not needed now can wait in CPU memory or on disk, and be loaded back instead
#   of computed again (section 6).

# %%
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import kv_cache_formula_bytes
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.measure.memory_peak import peak_bytes
from minillm.model import attention_explicit
from minillm.model.flash_attention import flash_attention
from minillm.model.memory import bytes_per_token
from minillm.utils.devices import best_time, describe

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
      f"width {c.head_dim}, context window {c.max_seq_len} tokens")

# %% [markdown]
# ## 1 · Attention over a long cache
#
# A cached decode step has two parts: the **weights**, the same multiply-adds with every weight
# and the same bytes read at every step, and **attention over the cache**, which reads one more
# cached key and value at every step. To see the second part we need long contexts. Filling a
# cache with thousands of real tokens takes a long prefill, but the cost of a step does not
# depend on what the cached numbers are, so we fill it with random keys and values of the right
# shape and time one decode step on top of n cached tokens:

# %%
def cached_step(model, context):
    """A function that runs one decode step on top of `context` cached tokens (random keys and
    values), the same step at every call."""
    cache = KVCache.for_model(model, batch_size=1, max_tokens=context + 1)
    for t in cache.keys + cache.values:
        t.normal_()
    cache.advance(context)
    token = torch.tensor([[1]], device=device)

    def step():
        with torch.inference_mode():
            model(token, cache=cache)
        cache.crop(context)  # forget the new token: every call is the same step

    return step


contexts = [64, 1024, 2048, 4096] + ([] if CI else [6144, c.max_seq_len - 1])
rounds = [[best_time(cached_step(model, n), model, repeats=5, warmup=1)  # interleaved: a busy
           for n in contexts] for _ in tqdm(range(3), desc="rounds")]    # moment hits every n
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

# %% [markdown]
# Does the step really grow, or did the machine just get busier during the long contexts? The
# shortest and the longest context, timed in turns, five times over:

# %%
longer = compare(cached_step(model, contexts[0]), cached_step(model, contexts[-1]), repeats=5,
                 device=device)
grows = longer.above(1.1)
print(f"a step over {contexts[-1]:,} cached tokens against one over {contexts[0]}: "
      f"{longer.spread_text()}; {load_average()}")
print("verdict:", {True: "the step grows with the cache: attention over it is a real cost",
                   False: "no growth measured", None: TOO_NOISY}[grows])
assert grows is not False  # no repetition saw the longer cache cost 10% more: the claim fails

# %%
weight_bytes = bytes_per_token(model)  # what one decode step reads
kv_per_token = kv_cache_formula_bytes(c, 1, 4)
if slope > 0:
    print(f"attention's part equals the weights' at n ≈ {weights_part / slope:,.0f} cached "
          f"tokens (the fit; summed over n steps it catches up at twice that)")
else:
    print("the fit found no slope to extrapolate: " + TOO_NOISY)
print(f"by bytes alone: {weight_bytes / 1e6:.0f} MB of weights against {kv_per_token / 1024:.0f} "
      f"KiB of keys and values per cached token would cross at n ≈ "
      f"{weight_bytes / kv_per_token:,.0f}")

# %% [markdown]
# So with the cache, generation costs O(n) work through the weights plus O(n²) attention. Each
# step reads all the weights once and every cached key and value once, so bytes predict where
# the two parts cross; the measured crossing also includes how efficiently each part runs here
# (the weights go through a few large matrix products, attention through many small operations
# per layer), which is why the two printed figures differ. Either way, past some thousands of
# tokens the cache, not the weights, sets the pace of a step: long-context serving lives there.

# %% [markdown]
# ## 2 · Long prompts: attention without the score matrix (FlashAttention)
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
# ## 3 · Shrinking the cache: MHA, GQA, MQA, MLA
#
# Lesson 03 measured the cache: 2 × layers × kv_heads × head_dim × bytes per token. How many
# key/value heads there are is a design choice of the model. Per token and layer the cache
# stores:
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
# From the published shapes (`minillm.generation.kv_designs`; each model's published design is
# marked *), in 16-bit values, per token and for one 32k-token conversation. SmolLM2's row is
# checked against a real cache first:

# %%
from minillm.generation import kv_designs
from minillm.generation.kv_designs import PUBLISHED, cache_bytes

CONTEXT, WINDOW = 32_768, 4096
published = {"SmolLM2-135M": "GQA", "Llama-3-8B": "GQA", "DeepSeek-V3": "MLA"}
real = KVCache.for_model(model, batch_size=1, max_tokens=256)
real.advance(256)
assert kv_designs.bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA", 4) * 256 == real.nbytes
del real
print(f"{'model':<13} {'design':<5} {'per token':>10} {'at 32k':>10} "
      f"{'at 32k, window 4k':>18}")
at_32k = {}
for name, shape in PUBLISHED.items():
    for design in ("MHA", "GQA", "MQA", "MLA"):
        per_token = kv_designs.bytes_per_token(shape, design)
        if per_token is None:
            continue
        full, windowed = cache_bytes(shape, design, CONTEXT), cache_bytes(shape, design, CONTEXT,
                                                                          WINDOW)
        at_32k[(name, design)] = full
        star = "*" if published[name] == design else " "
        print(f"{name:<13} {design + star:<5} {per_token / 2**10:>6.1f} KiB {full / 2**30:>6.2f} GiB "
              f"{windowed / 2**30:>14.2f} GiB")

# %%
labels = [f"{m} {d}{'*' if published[m] == d else ''}" for m, d in at_32k]
fig, ax = plt.subplots(figsize=(7, 1 + 0.35 * len(labels)))  # one row per bar: labels never meet
ax.barh(labels, [b / 2**30 for b in at_32k.values()],
        color=[f"C{list(PUBLISHED).index(m)}" for m, _ in at_32k])
ax.invert_yaxis()  # in the order of the table above
ax.set(xscale="log", xlabel="GiB at 32k tokens (16-bit)",
       title="one sequence's KV cache by attention design")
plt.tight_layout()
plt.show()
mha, mqa, mla = (at_32k[("DeepSeek-V3", design)] for design in ("MHA", "MQA", "MLA"))
print(f"DeepSeek-V3 with MLA keeps {mha / mla:.0f}x less than its 128 heads would with MHA, "
      f"and {mla / mqa:.1f}x what a single shared key/value head (MQA) would keep")
assert mqa < mla < mha / 10  # MLA: more than MQA, far less than MHA

# %% [markdown]
# GQA and MQA shrink the cache by sharing: fewer key/value heads, each serving more query heads.
# Quality falls as the sharing grows, and MQA, one key and one value for every head, is the
# cheapest and the most lossy. MLA is not a further step along that line: as printed above, it
# keeps more per token than MQA would, and far less than MHA. What it buys is the quality of
# distinct heads with a cache near MQA's size:
#
# - each token caches one latent vector per layer, and all heads share it;
# - each head rebuilds its own keys and values from the latent with its own learned
#   up-projections, so the heads still attend differently (the DeepSeek-V2 paper reports MLA
#   matching or beating MHA);
# - RoPE stays out of the latent: a rotation by position between the latent and the query
#   would stop the key up-projection from being folded into the query, so MLA caches a small
#   **decoupled RoPE key** beside the latent, one per token for all heads, and rotates only that.
#
# The price is compute: the up-projections (at decode they can be folded into the query and
# output matrices, so a step reads the small latent instead of full keys and values).
#
# ## 4 · A sliding window: a ring buffer of W slots
#
# A sliding window caps the cache at W tokens whatever the length of the text, at the price of
# never looking further back than W directly (information still flows further through the
# layers, a window per layer).
#
# The window is the easiest to build: a **ring buffer** (环形缓冲区) of W slots per layer. Token n
# goes to slot n mod W, overwriting token n − W, which no later query may see any more.
# `minillm.generation.sliding_window.RingKVCache` has the same interface as `KVCache`, so the
# model runs on it unchanged:

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
# logits move. How much does the model lose, and why? It is tempting to blame SmolLM2's
# training, which always had the whole text in view. StreamingLLM (Xiao et al., 2023) found a
# larger cause: a trained model sends a large share of its attention to the first few tokens of
# the text, whatever they say (chapter 02's heatmaps showed some of SmolLM2's heads looking at
# the first token). A softmax has to put its weight somewhere, and the first tokens,
# which every later query can see, became the place to put the weight a head does not need:
# they are **attention sinks** (注意力汇点). A window that evicts them leaves that weight
# nowhere to go, and the hidden states drift from anything the model saw in training. StreamingLLM's fix: keep the
# first 4 tokens for good and the last W − 4 beside them, the same W slots.
#
# The measure is **perplexity** (困惑度, chapter 07 uses it too): exp of the mean negative
# log-likelihood of each next token, lower is better. We take it on held-out English text
# (`data/factbook_europe.txt`, World Factbook country summaries), over the predictions made once
# the plain window has dropped the first token. Each variant runs the whole text at once with
# its mask in every layer, as `window_forward` does. The masks on 10 tokens with 4 slots (a row
# per query, • a key it sees):

# %%
from minillm.generation.sliding_window import sliding_window_mask
from minillm.layers.attention import causal_mask
from minillm.tools.bench.quantization import held_out_ids
from minillm.utils.columns import pad

SINKS = 4


def sink_window_mask(n, window, sinks, device=None):
    """(queries, keys) booleans: each query sees the first `sinks` tokens of the text and the
    last `window - sinks` keys up to itself: `window` keys at most, like the plain window."""
    first = torch.arange(n, device=device)[None, :] < sinks
    return sliding_window_mask(n, n, window - sinks, device) | (causal_mask(n, n, device) & first)


def rows(mask):
    return [" ".join("•" if seen else "·" for seen in row) for row in mask.tolist()]


print(pad("window of 4", 22) + "2 sinks + the last 2")
for plain, sinks in zip(rows(sliding_window_mask(10, 10, 4)), rows(sink_window_mask(10, 4, 2))):
    print(f"{plain:<22}{sinks}")

# %%
@torch.inference_mode()
def masked_forward(model, ids, mask):
    """Logits of the whole sequence with `mask` in every layer (window_forward's steps)."""
    positions = torch.arange(ids.shape[1], device=ids.device)[None]
    x = model.run_layers(model.embed_tokens(ids, positions), positions, mask[None, None])
    return model.logits(x)


n_eval = 128 if CI else 1024
eval_ids = torch.tensor([held_out_ids(tokenizer, n_eval)], device=device)
masks = {"full": causal_mask(n_eval, n_eval, device),
         "window": sliding_window_mask(n_eval, n_eval, W, device),
         "sinks": sink_window_mask(n_eval, W, SINKS, device)}
label_of = {"full": "full attention", "window": f"the last {W} tokens",
            "sinks": f"{SINKS} sinks + the last {W - SINKS}"}
losses = {}  # each next token's negative log-likelihood, predicted at positions 0, 1, ...
for name, mask in tqdm(masks.items(), desc="masks"):
    logits = masked_forward(model, eval_ids, mask)[0, :-1].float()
    losses[name] = F.cross_entropy(logits, eval_ids[0, 1:], reduction="none").cpu()
perplexity = {name: math.exp(loss[W:].mean().item()) for name, loss in losses.items()}
for name, value in perplexity.items():
    print(f"{pad(label_of[name], 24)} perplexity {value:7.2f} over {n_eval - 1 - W} predictions")
lost = perplexity["window"] - perplexity["full"]
won_back = (perplexity["window"] - perplexity["sinks"]) / lost if lost > 0 else float("nan")
if not lost > 0:
    verdict = "the window cost nothing measurable here"
elif won_back > 0.5:
    verdict = (f"keeping the first {SINKS} tokens wins back {won_back:.1%} of what the window "
               "cost: evicting them, not the text out of reach, is most of the loss")
elif won_back > 0:
    verdict = f"the sinks win back only {won_back:.1%}: most of the loss is the text out of reach"
else:
    verdict = "keeping the first tokens wins nothing back here"
print("verdict:", verdict)
assert lost > 0 and won_back > 0.5  # the claim above: evicting the sinks is most of the loss

# %%
smooth = 16 if CI else 64  # a running mean over this many predictions
plt.figure(figsize=(7, 3.5))
for name, loss in losses.items():
    running = np.convolve(loss.numpy(), np.ones(smooth) / smooth, mode="valid")
    plt.plot(np.arange(smooth - 1, len(loss)), running, label=label_of[name])
plt.axvline(W, color="grey", linestyle=":", label="the plain window drops the first token")
plt.xlabel("position in the text")
plt.ylabel(f"loss per token (mean of {smooth})")
plt.title("the same W slots, with and without the first tokens")
plt.legend(fontsize=8)
plt.show()

# %% [markdown]
# Once the first token leaves the plain window, its loss rises above full attention's and stays
# there; with the 4 sinks kept, in the same number of slots, it stays close to full attention,
# and what is left of the gap is the text the window really cannot see. So a full-attention
# model under a plain window fails mostly for want of its sinks: StreamingLLM keeps them and
# reports a steady perplexity over 4 million tokens with a fixed cache. (It also numbers the
# positions inside the cache rather than in the text, so that RoPE never meets a distance it
# was not trained on; our text is shorter than SmolLM2's 8,192-token window, so the text's own
# positions do here.) In a ring buffer the sinks are 4 slots that are never overwritten.
#
# Many recent models mix the two kinds of layer. Gemma 2 alternates them one to one: a layer with
# a 4,096-token window, then a global layer that sees everything. Gemma 3 runs five windowed
# layers (1,024 tokens) for each global one. What each layout would keep of SmolLM2's cache at
# 32k tokens (its 30 layers given the same pattern):

# %%
def mixed_cache(window, local_per_global, tokens=CONTEXT):
    """Bytes of SmolLM2's 16-bit cache after `tokens` tokens, if `local_per_global` windowed
    layers came for each global one."""
    per_layer = kv_designs.bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA") // c.n_layers
    local = c.n_layers * local_per_global // (local_per_global + 1)
    return per_layer * ((c.n_layers - local) * tokens + local * min(window, tokens))


everything = mixed_cache(window=CONTEXT, local_per_global=0)
for name, window, ratio in [("Gemma 2 style, 1:1", 4096, 1), ("Gemma 3 style, 5:1", 1024, 5)]:
    kept = mixed_cache(window, ratio)
    print(f"{name}, window {window:,}: {kept / 2**20:5.0f} MiB, {kept / everything:.0%} of "
          f"the {everything / 2**20:.0f} MiB a full cache holds")

# %% [markdown]
# The global layers still see the whole text; the windowed ones keep only their last W tokens.
# The more windowed layers, the smaller the cache: the trade Gemma 3 made for contexts of up to
# 128k tokens.

# %% [markdown]
# ## 5 · Splitting the work: Flash-Decoding and context parallelism
#
# FlashAttention (section 2) parallelizes over the queries: each tile of queries is one GPU
# thread block. A decode step has one query per head, so at batch 1 SmolLM2 offers 9 query
# heads, and even a 70B model 64: far fewer than an H100's 132 streaming multiprocessors, most of
# which would sit idle while one of them walks a cache of 100k tokens. **Flash-Decoding** also
# splits the *keys*: each part of the cache goes to its own thread block, which runs the online
# softmax over it and keeps its running maximum m, sum l and output o; a last small step merges
# the parts, rescaling each to the largest m. The result is the same attention, whatever the
# number of parts. On the cache of section 4's text:

# %%
from minillm.model.flash_attention import split_kv_attention  # noqa: E402

show_source(split_kv_attention, start="partial = []", stop="return")
text_cache = KVCache.for_model(model, batch_size=1, max_tokens=n_eval)
with torch.inference_mode():
    model(eval_ids, cache=text_cache)
keys, values = text_cache.read(0)  # layer 0's cached keys and values of the whole text
query = torch.randn(1, c.n_heads, 1, c.head_dim, device=device)  # one decode step's queries
whole = F.scaled_dot_product_attention(query, keys.repeat_interleave(c.n_heads // c.n_kv_heads, 1),
                                       values.repeat_interleave(c.n_heads // c.n_kv_heads, 1))
for parts in (1, 4, 16, 64):
    split = split_kv_attention(query, keys, values, parts)
    print(f"{n_eval} cached tokens in {parts:>2} parts: largest difference from one pass "
          f"{(split - whole).abs().max():.1e}; {c.n_heads * parts:>3} pieces of work")
    assert torch.allclose(split, whole, atol=1e-5)

# %% [markdown]
# The differences are float32 rounding: adding in another order. Exercise 03 has you write the
# merge.
#
# **Context parallelism** splits a *prompt* too long for one GPU: each of N GPUs holds n/N of
# the tokens, their queries, keys and values. Queries need every earlier key, so in **ring
# attention** each GPU passes its block of keys and values to the next GPU N − 1 times, while it
# computes attention against the block it holds (the online softmax merges the blocks as they
# come, as above). The transfer hides behind the computation when a block takes longer to
# compute than to send. The arithmetic for Llama 3 70B (80 layers, 8 key/value heads of 128,
# 16-bit cache) prefilling a million tokens on 8 GPUs:

# %%
LLAMA70 = dict(layers=80, kv_heads=8, head_dim=128, q_heads=64, params=70.6e9)
tokens, gpus, flops, link = 1_000_000, 8, 0.5 * 989e12, 450e9  # 50% of an H100's bf16; NVLink
kv_per_token = 2 * LLAMA70["layers"] * LLAMA70["kv_heads"] * LLAMA70["head_dim"] * 2
attention_flops = (2 * 2 * tokens ** 2 / 2 * LLAMA70["q_heads"] * LLAMA70["head_dim"]
                   * LLAMA70["layers"])  # q kᵀ and p v, causal: half the pairs
block = tokens / gpus * kv_per_token / LLAMA70["layers"]  # one layer's block, passed per step
compute = attention_flops / gpus / LLAMA70["layers"] / gpus  # one block's work on one GPU
print(f"cache: {kv_per_token / 1e3:.0f} kB a token, {tokens * kv_per_token / 1e9:.0f} GB for "
      f"the prompt, {tokens * kv_per_token / gpus / 1e9:.0f} GB a GPU")
print(f"attention: {attention_flops / flops / 3600:.1f} GPU-hours; on {gpus} GPUs each ring "
      f"step sends {block / 1e9:.2f} GB ({1e3 * block / link:.1f} ms) against "
      f"{1e3 * compute / flops:.0f} ms of computing")
assert block / link < compute / flops  # the transfer hides behind the computation

# %% [markdown]
# A million-token cache does not fit one 80 GB GPU, and its attention alone takes most of an hour
# of one GPU's time; split eight ways, each step's transfer takes a fraction of its computation. Ring
# attention's catch is causal masking: the GPU holding the first tokens has little to compute,
# so implementations deal the tokens out in a zig-zag order to balance the work.
#
# ## 6 · Offloading the cache: load it back or compute it again
#
# A cache that is not needed this second (a chat whose user is typing, a shared document
# prefix) can leave the GPU for CPU memory, a local disk, or another machine, and come back
# when the conversation does. **LMCache** (beside vLLM) and **Mooncake** (Kimi's serving
# system, whose KV cache pool spans its machines' memory and SSDs) do this. Bringing it back
# pays only if loading is faster than the prefill that would make it again. Here, the text's
# cache written to a file and read back, against computing it again:

# %%
import tempfile  # noqa: E402
import time  # noqa: E402

from minillm.utils.columns import Label  # noqa: E402  (pads by screen columns)


def prefill_cache():
    cache = KVCache.for_model(model, batch_size=1, max_tokens=n_eval + 1)
    with torch.inference_mode():
        model(eval_ids, cache=cache)
    return cache


with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "prefix.pt")
    torch.save({"keys": [k.cpu() for k in text_cache.keys],
                "values": [v.cpu() for v in text_cache.values]}, path)
    size = os.path.getsize(path)
    seconds = {"recompute": [], "load": []}
    for _ in range(3):  # interleaved, the best of three each
        start = time.perf_counter()
        prefill_cache()
        seconds["recompute"].append(time.perf_counter() - start)
        start = time.perf_counter()
        saved = torch.load(path)
        loaded = KVCache.for_model(model, batch_size=1, max_tokens=n_eval + 1)
        for layer in range(c.n_layers):
            loaded.keys[layer][:, :, :n_eval] = saved["keys"][layer].to(device)
            loaded.values[layer][:, :, :n_eval] = saved["values"][layer].to(device)
        loaded.advance(n_eval)
        seconds["load"].append(time.perf_counter() - start)
best = {way: min(times) for way, times in seconds.items()}
shown = {"recompute": Label("compute again"), "load": Label("load from the file")}
for way, t in best.items():
    print(f"{shown[way]:>18}: {1e3 * t:7.1f} ms for {n_eval} tokens ({size / 1e6:.1f} MB of "
          f"cache)")
assert best["load"] < best["recompute"]  # on this CPU, by a wide margin
next_token = torch.tensor([[tokenizer.eos_token_id]], device=device)
with torch.inference_mode():
    fresh, restored = model(next_token, cache=prefill_cache()), model(next_token, cache=loaded)
print(f"the next step on the loaded cache equals the one on a fresh prefill: "
      f"{torch.equal(fresh, restored)}")
assert torch.equal(fresh, restored)

# %% [markdown]
# The file was probably read from the operating system's memory, as a second read is: a cold
# SSD adds its own time. The comparison on a GPU is the ratio of two speeds: a token's cache
# bytes over the link against its prefill compute, about 2 x parameters FLOPs:

# %%
SMOL = dict(layers=c.n_layers, kv_heads=c.n_kv_heads, head_dim=c.head_dim, params=135e6)
links = {"PCIe 5 x16 (CPU memory)": 55e9, "NVMe SSD": 7e9, "100 Gb/s network": 12.5e9}
for name, m in (("SmolLM2-135M", SMOL), ("Llama 3 70B", LLAMA70)):
    kv = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2  # bytes a token, 16-bit
    again = 2 * m["params"] / flops  # seconds a token on the H100 above
    loads = ", ".join(f"{where} {1e6 * kv / speed:.2f}" for where, speed in links.items())
    print(f"{name}: {kv / 1e3:.0f} kB a token; compute again {1e6 * again:.2f} µs, load: {loads}"
          f" µs")
smol_kv, big_kv = (2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2 for m in (SMOL, LLAMA70))
assert smol_kv / 7e9 > 2 * SMOL["params"] / flops  # a small model recomputes faster than NVMe
assert big_kv / 7e9 < 2 * LLAMA70["params"] / flops  # a large one loads faster from anywhere

# %% [markdown]
# A large model with grouped keys and values (or MLA's small latent) stores few bytes per token
# for a lot of computation, so loading wins even from an SSD; a tiny model on a fast GPU
# computes its prefix again sooner than it reads it back from disk. This CPU has the opposite
# balance to a GPU's: its compute is slow, so here loading wins for SmolLM2 too.

# %% [markdown]
# ## Summary
#
# - A cached decode step is the weights plus attention over the cache; the second grows with
#   every cached token, and past some thousands of tokens it sets the pace of a step.
# - A long prompt's attention need not build the n × n scores: the online softmax computes it
#   tile by tile (FlashAttention), with memory that grows like n instead of n².
# - GQA and MQA shrink the cache by sharing key/value heads, paying in quality; MLA caches one
#   latent per token that every head up-projects to its own keys and values, plus a small
#   decoupled RoPE key: a cache near MQA's (though larger) with quality near MHA's.
# - A sliding window (a ring buffer) caps the tokens kept. Keeping the first 4 tokens beside it
#   (attention sinks, StreamingLLM) wins back most of what a plain window costs a
#   full-attention model; mixing windowed and global layers keeps part of both.
# - Flash-Decoding splits a decode step's keys across cores and merges the parts exactly; ring
#   attention splits a long prompt across GPUs and hides the passing of key/value blocks behind
#   the computation.
# - An offloaded cache comes back faster than a prefill makes it when a token's cache bytes
#   cross the link faster than its 2 x parameters FLOPs compute: true for large models.
#
# Exercise 03's last tasks build the online softmax for one query, the merge of partial results
# and a window that keeps its sinks. Chapter 04 comes next.

