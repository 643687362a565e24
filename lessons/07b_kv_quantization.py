# %% [markdown]
# # 07b · Appendix: the KV cache in 8 bits
#
# Lesson 03 §5 found that the KV cache grows with every token of every request, and named three
# remedies: fewer key/value heads (lesson 03b), paging (chapter 06), and fewer bytes per value.
# This appendix builds the third. Lesson 07 stored the *weights* in fewer bits; here the keys and
# values go into 8 bits instead. That is **KV-cache quantization (KV 缓存量化)**.
#
# We store SmolLM2's keys and values as int8 and as fp8 (8-bit floats), with two ways of choosing
# the scale. Then we measure on the real model what it saves (bytes per token), what it costs
# (logit error, perplexity, the greedy text), and how many more tokens fit in the same memory.

# %%
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.tokenizer.samples import corpus
from minillm.engine import Engine, PagedKVPool, QuantizedKVPool
from minillm.generation.agreement import first_difference
from minillm.generation.kv_cache import KVCache
from minillm.generation.kv_quant import FORMATS, HeadRanges, KVFormat
from minillm.generation.quantized_kv_cache import QuantizedKVCache
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.tools.bench.quantization import held_out_ids
from minillm.utils.columns import Label

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
model, tokenizer = minillm.load("smollm2-135m")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
c = model.config
print(f"{c.n_layers} layers, {c.n_kv_heads} key/value heads of {c.head_dim} values each")
EVAL_TOKENS = 128 if CI else 256  # held-out text the caches are scored on
CALIBRATION_TOKENS = 32 if CI else 128  # another text, for per-head scales

# %% [markdown]
# ## 1 · What one token costs
#
# Every token leaves a key vector and a value vector in every layer, for every key/value head:
# in float32, 2 × 30 × 3 × 64 × 4 bytes. We make four caches of 1,000 token slots and divide
# what each one allocated by 1,000:
#
# - **float32**: the `KVCache` every lesson so far used;
# - **bf16**: the same cache in 16 bits, what a GPU server stores by default;
# - **8 bits, per-token scales**: one scale (a float32) for each token's vector in each head;
# - **8 bits, per-head scales**: one fixed scale per head and layer, nothing stored per token.
#
# The per-head scales need a calibration run over sample text; this cell makes it, and section 3
# explains it.

# %%
SLOTS = 1000
calibration_ids = torch.tensor([tokenizer.encode(corpus("english"))[:CALIBRATION_TOKENS]])
with torch.inference_mode():
    floats = KVCache.for_model(model, 1, CALIBRATION_TOKENS)
    model(calibration_ids, cache=floats)  # one run: its keys and values give the ranges
ranges = HeadRanges.calibrate(floats)

caches = {
    "float32": KVCache.for_model(model, 1, SLOTS),
    "bf16": KVCache(c.n_layers, 1, c.n_kv_heads, c.head_dim, SLOTS, dtype=torch.bfloat16),
    "8 bits, per token": QuantizedKVCache.for_model(model, 1, SLOTS, "int8"),
    "8 bits, per head": QuantizedKVCache.for_model(model, 1, SLOTS, "int8", ranges),
}
per_token = {name: cache.capacity_bytes / SLOTS for name, cache in caches.items()}
for name, size in per_token.items():
    print(f"{Label(name):>18}: {size:7,.0f} bytes a token, "
          f"float32's / this = {per_token['float32'] / size:.2f}")

# %% [markdown]
# Against float32, 8 bits save about 4x; against the bf16 a GPU server keeps, about 2x. Per-token
# scales cost a little: one float32 beside every 64 one-byte values (4 of every 68 bytes).

# %% [markdown]
# ## 2 · Two 8-bit formats
#
# Both formats store `x / scale` in one byte, and read it back as `q × scale`:
#
# - **int8** is a uniform grid: 255 levels from −127 to 127, the same step everywhere. This is
#   lesson 07's absmax rounding: the largest |x| maps to 127.
# - **fp8-e4m3** is a tiny float: a sign, 4 exponent bits and 3 stored mantissa bits, largest
#   value 448. Its step grows with the value, so its *relative* error stays about the same (at
#   most 1/16) for large and small values alike. GPUs since NVIDIA's Hopper multiply fp8
#   directly; here it is emulated: stored as `torch.float8_e4m3fn`, turned back into float32 to
#   attend.
#
# The whole difference is one line in `KVFormat.quantize`:

# %%
show_source(KVFormat)

# %% [markdown]
# Each format on the same values, scaled so that the largest is the format's largest: int8's
# error is the same size everywhere, fp8's grows with the value.

# %%
x = torch.linspace(-1, 1, 2001)
small = x.abs() < 0.1
errors = {}
fig, ax = plt.subplots(figsize=(7, 3))
for name, fmt in FORMATS.items():
    scale = fmt.token_scale(x)  # the largest |x| (1.0) maps to 127, or to 448
    errors[name] = (fmt.dequantize(fmt.quantize(x, scale), scale, torch.float32) - x).abs()
    ax.plot(x, errors[name], label=name, lw=0.8)
    print(f"{name:>9}: largest error {errors[name].max():.4f}, mean {errors[name].mean():.5f}, "
          f"mean for |x| < 0.1: {errors[name][small].mean():.5f}")
ax.set(xlabel="value (1.0 = the largest in the vector)", ylabel="|rounding error|",
       title="Rounding error of one vector's values, stored in 8 bits")
ax.legend()
plt.show()
int8_error, fp8_error = errors["int8"], errors["fp8_e4m3"]
assert fp8_error.max() > int8_error.max(), "fp8 should lose more on the large values"
assert fp8_error[small].mean() < int8_error[small].mean(), "and less on the small ones"

# %% [markdown]
# ## 3 · Where the scale comes from
#
# A scale must be chosen before a value is stored. The two usual answers:
#
# - **per token**: when a token's keys arrive, each head's vector gets its own scale, its
#   largest |value| over 127 (or 448). Nothing to prepare, and no value ever falls outside the
#   grid; the price is the stored scales (section 1).
# - **per head**: one scale per head and layer, fixed before serving. It comes from
#   **calibration (校准)**: run the model over sample text and keep each head's largest |value|.
#   Nothing is stored per token, but a later value beyond what calibration saw is clipped.
#
# Our per-head ranges came from the first lines of Shakespeare (the course's English corpus),
# in section 1:

# %%
show_source(HeadRanges.calibrate)

# %% [markdown]
# The cache itself keeps the KV-cache contract of lesson 03: `append` takes float32 keys and
# values, stores them in 8 bits, and returns everything stored so far, dequantized, so that
# attention sees exactly what the cache holds.

# %%
show_source(QuantizedKVCache.append)

# %% [markdown]
# A per-token scale is set by the vector's largest value. If one channel (one of the 64 positions
# in the head's vector) is always much larger than the rest, it sets every token's scale, and the
# other channels get a coarse grid. The same thing happened to lesson 07's activations (outlier
# features). Do SmolLM2's keys and values have such channels? For each layer we take the
# calibration text's keys, find each channel's largest |value|, and divide the largest channel by
# the median one:

# %%
def channel_ratio(tensors):
    """Per layer: the largest channel's max |value| over the median channel's, worst head."""
    ratios = []
    for t in tensors:  # (1, kv_heads, tokens, head_dim)
        per_channel = t[0].abs().amax(dim=1)  # (kv_heads, head_dim)
        ratios.append((per_channel.amax(-1) / per_channel.median(-1).values).max().item())
    return ratios


key_ratio, value_ratio = channel_ratio(floats.keys), channel_ratio(floats.values)
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(key_ratio, "o-", label="keys")
ax.plot(value_ratio, "s-", label="values")
ax.set(xlabel="layer", ylabel="largest / median channel", yscale="log",
       title=f"SmolLM2's channel ranges on {CALIBRATION_TOKENS} calibration tokens")
ax.legend()
plt.show()
median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
print(f"median over layers: keys {median(key_ratio):.1f}x, values {median(value_ratio):.1f}x")

# %% [markdown]
# The keys have the wider channels (printed above): one channel of a key vector can be several
# times larger than the typical one, so a per-token scale leaves the key's other channels fewer
# levels than the values get. The assert below holds that claim to this run. Section 8 names the
# method built on this observation.

# %%
assert median(key_ratio) > median(value_ratio), (key_ratio, value_ratio)

# %% [markdown]
# ## 4 · What it costs the model's predictions
#
# Now the real measurement. We run the same held-out English text (`data/factbook_europe.txt`,
# as in lesson 07) through five caches in one pass each, so that every position's attention
# reads the stored keys and values, and compare each cache's logits with float32's:
#
# - **perplexity (困惑度)**, as in lesson 07: lower is better;
# - **logit error**: the largest and the mean |Δ| over every position and vocabulary entry;
# - **top-1 agreement**: the share of positions whose most likely next token is float32's.
#
# The per-head scales come from Shakespeare, not from this text: calibration never sees the text
# it is judged on.

# %%
eval_ids = torch.tensor([held_out_ids(tokenizer, EVAL_TOKENS)])
VARIANTS = {"float32": None,
            "int8, per token": ("int8", None), "int8, per head": ("int8", ranges),
            "fp8, per token": ("fp8_e4m3", None), "fp8, per head": ("fp8_e4m3", ranges)}


def cache_for(variant, tokens):
    if VARIANTS[variant] is None:
        return KVCache.for_model(model, 1, tokens)
    fmt, head_ranges = VARIANTS[variant]
    return QuantizedKVCache.for_model(model, 1, tokens, fmt, head_ranges)


logits = {}
with torch.inference_mode():
    for name in tqdm(VARIANTS, desc="caches"):
        logits[name] = model(eval_ids, cache=cache_for(name, EVAL_TOKENS))[0]

rows = {}
for name, got in logits.items():
    nll = F.cross_entropy(got[:-1], eval_ids[0, 1:].to(got.device)).item()
    diff = (got - logits["float32"]).abs()
    agree = (got.argmax(-1) == logits["float32"].argmax(-1)).float().mean().item()
    rows[name] = dict(perplexity=math.exp(nll), largest=diff.max().item(),
                      mean=diff.mean().item(), top1=agree)
base = rows["float32"]["perplexity"]
print(f"{EVAL_TOKENS} held-out tokens")
print(f"{Label('cache'):>16} {Label('perplexity'):>15} {Label('max |Δ|'):>8} "
      f"{Label('mean |Δ|'):>9} {Label('top-1'):>7}")
for name, r in rows.items():
    print(f"{Label(name):>16} {r['perplexity']:7.3f} ({r['perplexity'] / base - 1:+.1%}) "
          f"{r['largest']:8.3f} {r['mean']:9.4f} {r['top1']:7.1%}")

# %%
quantized = [name for name in rows if name != "float32"]
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
left.bar(quantized, [rows[n]["mean"] for n in quantized], color="tab:orange")
left.set(ylabel="mean |logit error|", title="Logit error against a float32 cache")
right.bar(quantized, [100 * (rows[n]["perplexity"] / base - 1) for n in quantized])
right.axhline(0, color="k", lw=0.8)
right.set(ylabel="perplexity change (%)", title=f"Perplexity on {EVAL_TOKENS} held-out tokens")
for ax in (left, right):
    ax.tick_params(axis="x", labelrotation=25)
plt.tight_layout()
plt.show()

# %% [markdown]
# What the run shows, checked by the asserts below:
#
# - the rounding is real: every 8-bit cache moves the logits;
# - int8 with per-token scales moves them least of the four;
# - for each format, per-token scales beat a fixed per-head scale: a fixed scale must cover
#   the largest value calibration saw, so typical tokens get a coarser grid;
# - every 8-bit cache stays within 5% of float32's perplexity.
#
# On a few hundred tokens a perplexity change this small can go either way (rounding can even
# lower it): the logit error is the steadier measure of what the rounding did.

# %%
mean_error = {name: rows[name]["mean"] for name in quantized}
assert all(rows[name]["largest"] > 0 for name in quantized), "some 8-bit cache changed nothing"
assert min(mean_error, key=mean_error.get) == "int8, per token", mean_error
for fmt in ("int8", "fp8"):
    assert mean_error[f"{fmt}, per token"] < mean_error[f"{fmt}, per head"], mean_error
assert all(abs(rows[n]["perplexity"] / base - 1) < 0.05 for n in quantized), rows

# %% [markdown]
# ## 5 · The greedy text, through the engine
#
# The engine of chapter 06 keeps its pool in 8 bits when asked:
# `Engine(model, tokenizer, kv_cache_format="int8")` (per-token scales). Its pool writes and
# reads through two methods that the 8-bit pool replaces:

# %%
show_source(QuantizedKVPool.read)

# %% [markdown]
# The same chat prompt, greedy, through a float32 pool and the two 8-bit ones. A small change in
# the logits changes a token only where two candidates were nearly tied; after the first change
# the texts go their own ways.

# %%
N_NEW = 12 if CI else 48
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Explain what a KV cache is."}], add_generation_prompt=True)
texts = {}
for fmt in tqdm([None, "int8", "fp8_e4m3"], desc="engines"):
    engine = Engine(model, tokenizer, num_blocks=16, block_size=16, kv_cache_format=fmt)
    texts[fmt or "float32"] = engine.generate([prompt], max_new_tokens=N_NEW)[0]
for name, out in texts.items():
    split = first_difference(out.token_ids, texts["float32"].token_ids)
    same = "the same tokens" if split is None else f"first differs at token {split}"
    print(f"{name:>9} ({same}): {out.text!r}")

# %% [markdown]
# ## 6 · The longer context it buys
#
# Memory, not arithmetic, decides how many tokens a server can keep. Give each pool the same
# budget, 256 MiB, and let it take as many 16-token blocks as fit. Each pool's bytes are counted
# from its own tensors:

# %%
BUDGET = 256 * 2**20
POOLS = {"float32": lambda n: PagedKVPool.for_model(model, n, 16),
         "int8, per token": lambda n: QuantizedKVPool.for_model(model, n, 16, "int8"),
         "fp8, per head": lambda n: QuantizedKVPool.for_model(model, n, 16, "fp8_e4m3", ranges)}
fits = {}
for name, make in POOLS.items():
    blocks = BUDGET // make(1).bytes_per_block
    pool = make(blocks)  # really allocated: its tensors' bytes are what we count
    assert pool.nbytes <= BUDGET
    fits[name] = blocks * pool.block_size
    print(f"{Label(name):>16}: {blocks:5,} blocks, {fits[name]:6,} tokens in "
          f"{pool.nbytes / 2**20:.1f} MiB ({fits[name] / fits['float32']:.2f}x float32's)")
    del pool
context = 2048
for name, tokens in fits.items():
    print(f"{Label(name):>16}: {tokens // context} conversations of {context:,} tokens "
          "at once")

# %%
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(list(fits), [t / 1000 for t in fits.values()])
ax.set(ylabel="thousand tokens", title="Tokens held by a 256 MiB KV pool, as built")
plt.show()

# %% [markdown]
# The same saving on a larger model is the one servers care about. Llama-3-8B keeps 32 layers
# × 8 key/value heads × 128 values; on an 80 GB GPU, about 16 GB go to its bf16 weights.
# The printed arithmetic below (the formula of lesson 03, not a measurement) shows what the rest
# holds in bf16 and with 8-bit keys and values:

# %%
free = 80e9 - 16e9
llama_bf16 = 2 * 32 * 8 * 128 * 2
llama_8bit = 2 * 32 * 8 * (128 + 4)  # one byte a value, a float32 scale per head and token
for name, size in [("bf16", llama_bf16), ("8 bits", llama_8bit)]:
    print(f"{Label(name):>7}: {size:,} bytes a token, {free / size / 1e3:,.0f} thousand tokens, "
          f"{free / size / 8192:.0f} requests of 8,192 tokens")

# %% [markdown]
# ## 7 · What it costs in time here, and on a GPU
#
# The fused decode step (appendix 05b) and minillm's C attention kernels read float32 caches. An
# 8-bit cache cannot hand them its tensors, so it dequantizes what it holds in `append` at every
# step and takes the general attention path. minillm says so once, when the first such cache is
# built (the line printed on stderr above). So on this CPU we expect no speed-up from the smaller
# cache. We time decode steps after the same context through a float32 cache and an int8 one,
# interleaved, several times (lesson 05's way of comparing on a busy machine):

# %%
CONTEXT, STEPS = (32, 4) if CI else (192, 8)  # the context: part of the held-out text
context_ids = eval_ids[:, :CONTEXT]
next_id = eval_ids[:, CONTEXT:CONTEXT + 1]
timed = {"float32": KVCache.for_model(model, 1, CONTEXT + STEPS),
         "int8": QuantizedKVCache.for_model(model, 1, CONTEXT + STEPS, "int8")}
with torch.inference_mode():
    for cache in timed.values():
        model(context_ids, cache=cache)  # the same context in both


def decode_steps(cache):
    """STEPS decode steps after the context (the cache cropped back to it first)."""
    def run():
        cache.crop(CONTEXT)
        with torch.inference_mode():
            for _ in range(STEPS):
                model(next_id, cache=cache)
    return run


timing = compare(decode_steps(timed["float32"]), decode_steps(timed["int8"]),
                 repeats=3 if CI else 5)
print(f"{STEPS} decode steps after {CONTEXT} tokens; {load_average()}")
print(f"int8 cache / float32 cache: {timing.spread_text()}")
verdict = timing.above(1.0)
print(TOO_NOISY if verdict is None else
      "the int8 cache's steps took longer here" if verdict else
      "the int8 cache's steps took no longer here")

# %% [markdown]
# A GPU server gains time as well as room: its attention kernels read the 8-bit keys and values
# directly, so a decode step, which reads the whole cache, reads half the bytes of bf16.
#
# ## 8 · What real engines do
#
# - **vLLM and SGLang**: `kv_cache_dtype="fp8"` stores keys and values in fp8, with one scale
#   per layer's keys and one for its values, calibrated offline (or left at 1.0); their attention
#   kernels read fp8 directly.
# - **transformers' `QuantizedCache`**: 4 or 2 bits in groups, with the most recent tokens kept
#   in full precision until there are enough to quantize together.
# - **KIVI** (2024) goes to 2 bits by giving keys a scale per *channel* and values a scale per
#   token: the outlier channels of section 3 are why keys need the other grain.
#
# ## Summary
#
# - Keys and values in 8 bits take about 4x fewer bytes than float32, 2x fewer than bf16; a
#   per-token scale adds 4 bytes to every 64.
# - int8 is a uniform grid; fp8-e4m3 keeps about the same relative error at every size.
# - Per-token scales need no calibration and moved SmolLM2's logits least; a per-head scale
#   stores nothing per token but clips what calibration did not see.
# - The perplexity cost was small on this text (the table in section 4); the room gained is
#   the whole point: the same memory holds about 4x the tokens of float32.
