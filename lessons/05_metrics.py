# %% [markdown]
# # 05 · Measuring inference (性能指标): TTFT, TPOT, throughput and the bandwidth bound
#
# How fast is a model? "Tokens per second" hides two very different waits: the wait for the
# first word, and the pace of the words after it. This chapter defines the four numbers that
# describe a model's speed, measures each on the real model, and then asks *why* they are what
# they are: the answer is the memory bandwidth of the machine.
#
# Every number below is measured in this run, on this machine. When the environment variable
# `CI` is set (the course's tests), the sizes shrink so the notebook runs in a minute or two. The
# optional appendix `05b_fast_engine` opens up the fast engine this lesson measures.

# %%
import os
import statistics

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm import fast as fast_engine
from minillm import kernels
from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.measure.comparison import TOO_NOISY, Comparison, compare, load_average
from minillm.utils.devices import Timer, best_time, describe, pick_device
from minillm.measure.metrics import predict_latency, throughput
from minillm.generation.kv_cache import KVCache
from minillm.model.memory import bytes_per_token
from minillm.quant.measure import bytes_moved_per_token, int8_decode_paths

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
for key, value in describe().items():
    print(f"{key:>12}: {value}")
if load_average():
    print(f"{load_average()} (other programs share the machine: the timings move with them)")

# %% [markdown]
# We load SmolLM2-135M with minillm's own code. `minillm.load` gives the fast path by default;
# here we ask for the readable model too (`fast=False`, the one chapter 02 opened up) and make
# the fast copy ourselves with `minillm.fast.optimize`, to compare them (appendix 05b looks
# inside). `minillm.generate` runs either one; the fast one gives the same tokens. Everything
# in this chapter runs on the device printed above, and every stopwatch waits for it
# (`minillm.utils.devices.Timer`): a GPU queues work and returns at once, so a clock that does not
# wait times the queueing.

# %%
model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)
fast = fast_engine.optimize(model)
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Why is the sky blue?"}], add_generation_prompt=True)
N_NEW = 16 if CI else 48
print(f"prompt: {len(tokenizer.encode(prompt))} tokens; we ask for up to {N_NEW} new tokens")

# %% [markdown]
# ## 1 · The four metrics
#
# For one request, from the moment it starts and the moment each new token is ready:
#
# - **TTFT**, time to first token (首个词元生成时间): start → first token. Tokenizing and the
#   prefill (预填充) pass over the whole prompt happen here.
# - **TPOT**, time per output token (每个输出词元的时间): the mean gap between tokens *after*
#   the first. The first token is left out: it came from prefill, not decode.
# - **End-to-end latency** (端到端延迟): start → last token.
# - **Tokens per second** (每秒词元数): for one request, decode speed = 1 / TPOT; across many
#   requests, **throughput** (吞吐量) = all their tokens / the wall time they took together.
#
# `minillm.generate` records the time of every token; each result carries them as `.metrics`.

# %%
minillm.generate(fast, tokenizer, prompt, max_new_tokens=2)  # warm-up: first calls are slower
with Timer(device) as stopwatch:
    out = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
wall = stopwatch.seconds
m = out.metrics
print(out.text)
print()
print(m)

# %% [markdown]
# `.metrics` is a `RequestMetrics` (`minillm/measure/metrics.py`): the start and each token's
# time, and every metric a property of a few lines computed from them. The three this chapter
# leans on:

# %%
from minillm.measure.metrics import RequestMetrics

for metric in (RequestMetrics.ttft, RequestMetrics.tpot, RequestMetrics.latency):
    show_source(metric.fget)  # a property's function

# %% [markdown]
# **Latency = TTFT + TPOT × (n − 1).** The source text writes "TTFT + TPOT × tokens". With n new
# tokens, the first arrives at the end of the TTFT, so only n − 1 gaps follow. Each token's own
# time, from the request's start, against both formulas (token k at TTFT + TPOT × (k − 1), and
# at TTFT + TPOT × k):

# %%
k = np.arange(1, m.n_tokens + 1)
since_start = 1000 * (np.array(m.token_times) - m.start)
plt.figure(figsize=(6.5, 3.4))
plt.plot(k, since_start, "o", ms=3, color="k", label="measured: when token k arrived")
plt.plot(k, [1000 * predict_latency(m.ttft, m.tpot, i) for i in k], label="TTFT + TPOT × (k − 1)")
plt.plot(k, 1000 * (m.ttft + m.tpot * k), "--", label="TTFT + TPOT × k (the source text)")
plt.xlabel("new token k")
plt.ylabel("ms since the request started")
plt.title(f"the {m.n_tokens} tokens of one request against the two formulas")
plt.legend(fontsize=8)
plt.show()

# %%
ours = predict_latency(m.ttft, m.tpot, m.n_tokens)
source = m.ttft + m.tpot * m.n_tokens
print(f"TTFT {1000 * m.ttft:.1f} ms + TPOT {1000 * m.tpot:.1f} ms x ({m.n_tokens} - 1) "
      f"= {1000 * ours:.1f} ms")
print(f"TTFT {1000 * m.ttft:.1f} ms + TPOT {1000 * m.tpot:.1f} ms x {m.n_tokens}       "
      f"= {1000 * source:.1f} ms")
print(f"measured around the call with a stopwatch of our own: {1000 * wall:.1f} ms")
print(f"the source's formula is one TPOT longer: {1000 * (source - ours):.1f} ms, "
      f"{(source - ours) / ours:.1%} of this answer; for a 2-token answer it would be "
      f"{m.tpot / (m.ttft + m.tpot):.0%}")
after_last = wall - ours
print(f"the stopwatch ran on {1000 * after_last:.1f} ms past the last token (decoding the text, "
      f"building the result)")
print("nearer the stopwatch: " + ("TTFT + TPOT × (n − 1)" if abs(wall - ours) < abs(wall - source)
                                  else "the ×n formula, only because the work after the last "
                                       "token took over half a TPOT in this run"))
assert after_last >= 0  # the token stamps lie inside the call the stopwatch timed

# %% [markdown]
# The n − 1 formula runs through the first token (that is the TTFT) and the last (TPOT is the
# mean gap between them), so for one request it holds by definition. Checking it against the
# stopwatch checks something else: that the token stamps lie inside the call, with some
# bookkeeping after the last token. When that bookkeeping is short against a TPOT, the stopwatch
# also tells the two formulas apart; on a busy machine it may not, but the per-token times above
# always do: the ×n line ends a full TPOT late, which matters most for short answers.
#
# The tokens in between show how even the gaps were: a slow gap (the machine did something
# else) lifts every later point above the line, which still ends on the last one.

# %% [markdown]
# Is this fast? The source text's yardstick: a TPOT of 100 ms is 10 tokens/s, about 450 words a
# minute, faster than people read (an English word is about 1.3 tokens).

# %%
words_per_minute = 60 / m.tpot / 1.3
print(f"TPOT {1000 * m.tpot:.1f} ms = {m.decode_tokens_per_second:.1f} tokens/s "
      f"= about {words_per_minute:.0f} words a minute")

# %% [markdown]
# ### Watching it live
#
# The chart below streams a generation and draws, as tokens arrive, each token's latency: the
# first bar is the TTFT (orange), the others the gap since the previous token, the line the
# running TPOT. Type another prompt and press *Generate* to try your own; it runs on whatever
# device the model is on. With *chat template* ticked, as in chapter 04's playground, your text
# goes to the model as a user's message in its chat format, so an instruction gets an answer;
# untick it to send raw text for the model to continue.
#
# The chart never times its own drawing: the generation runs in a thread of its own and stamps
# each token when it is ready; the chart redraws from those stamps.

# %%
from minillm.course.widgets.latency import LatencyChart

chart = LatencyChart(fast, tokenizer, prompt="Write a haiku about the sea.",
                     max_new_tokens=N_NEW)
display(chart)
live = chart.run()

# %% [markdown]
# ## 2 · More users at once: throughput against each user's wait
#
# A server that runs B requests in one batch does one forward pass per step for all of them.
# Each step reads the weights once whatever B is, and does B times the arithmetic, while it
# makes B tokens. How much the step grows with B depends on the machine (section 5). We send the
# same prompt B times at once.

# %%
BATCHES = [1, 2, 4] if CI else [1, 2, 4, 8, 16]  # 16: the source text's users
N_BATCH = 6 if CI else 16
sweep = []
for b in tqdm(BATCHES, desc="batch sizes"):
    outs = minillm.generate(fast, tokenizer, [prompt] * b, max_new_tokens=N_BATCH)
    t = throughput([o.metrics for o in outs])
    sweep.append((b, t))
    print(f"batch {b:>2}: {t.tokens_per_second:7.1f} tokens/s in all, "
          f"TPOT {1000 * t.mean_tpot:6.1f} ms, TTFT {1000 * t.mean_ttft:6.1f} ms")

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
bs = [b for b, _ in sweep]
ax1.plot(bs, [t.tokens_per_second for _, t in sweep], "o-")
ax1.set(xscale="log", xlabel="batch size (users at once)", ylabel="tokens/s, all users",
        title="throughput against batch size")
ax2.plot(bs, [1000 * t.mean_tpot for _, t in sweep], "o-", color="tab:red")
ax2.set(xscale="log", xlabel="batch size (users at once)", ylabel="ms",
        title="each user's TPOT against batch size")
for ax in (ax1, ax2):
    ax.set_xticks(bs, [str(b) for b in bs])
plt.tight_layout()
plt.show()
first, last = sweep[0][1], sweep[-1][1]
print(f"batch {bs[-1]} against 1: {last.tokens_per_second / first.tokens_per_second:.1f}x the "
      f"throughput, {last.mean_tpot / first.mean_tpot:.1f}x the TPOT")

# %% [markdown]
# The source text describes this trade-off with 16 users: serving more people at once raises
# the throughput, and each of them sees a longer TPOT. The ratios above say how it went in this
# run (each batch ran once, so a busy moment of the machine can move one point). Chapter 06
# builds the scheduler that serves requests arriving at different times.
#
# ## 3 · 512 more input tokens, or 8 more output tokens?
#
# The source text says adding 512 input tokens usually costs less latency than generating 8 more
# output tokens. Input tokens are processed in one parallel prefill pass; output tokens one pass
# each. We test it with two requests that start from the same short prompt and its first token:
# one adds 512 tokens to the prompt, the other asks for 8 more output tokens. Whichever takes
# longer is the dearer addition. The two run in turns, several times, so a busy moment of the
# machine hits both.

# %%
EXTRA = 128 if CI else 512
filler = tokenizer.encode(" The sky is blue because air scatters blue light more than red.")
short_ids = tokenizer.encode(prompt)
long_ids = (filler * (EXTRA // len(filler) + 1))[:EXTRA] + short_ids


def more_input():  # EXTRA more prompt tokens, one new token
    minillm.generate(fast, tokenizer, long_ids, max_new_tokens=1)


def more_output():  # the short prompt, its first new token and 8 more
    minillm.generate(fast, tokenizer, short_ids, max_new_tokens=9, ignore_eos=True)


both = compare(more_input, more_output, repeats=3 if CI else 5, device=device)
print(f"{EXTRA} more input tokens:  {1000 * statistics.median(both.a):6.0f} ms (median)")
print(f"8 more output tokens:    {1000 * statistics.median(both.b):6.0f} ms")
print(f"the 8 output tokens' time over the {EXTRA} input tokens': {both.spread_text()}; "
      f"{load_average()}")
holds = both.above(1.0)
print(f"on this machine ({device}): " + {
    True: "the claim holds: 8 more output tokens take longer",
    False: f"the claim does NOT hold: {EXTRA} more input tokens take longer",
    None: TOO_NOISY}[holds])

# %% [markdown]
# Why does the answer depend on the machine? Prefill does about 2 × parameters floating-point
# operations per token, all tokens in one pass: it is **compute-bound** (计算受限). Decode does
# the same 2 × parameters operations for a single token but must read every weight from memory
# to do it: it is **bandwidth-bound** (带宽受限). So the claim holds where the machine does many
# operations per byte it reads (its *machine balance*), as a GPU does (an H100 does about 300
# bf16 operations per byte of memory traffic, on its tensor cores); a CPU does only a few. We
# measure both rates here, the arithmetic in the dtype the machine serves in: bf16 on a CUDA GPU
# (its tensor cores), float32 on a CPU (the dtype its fast kernels use).

# %%
def matmul_flops(n=2048 if device.type == "cuda" else 1024, repeats=3):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / best_time(lambda: a @ b, device, repeats, warmup=1), dtype


flops, balance_dtype = matmul_flops()
bandwidth = read_bandwidth(device)
n_params = sum(p.numel() for p in model.parameters())
n_bytes = bytes_per_token(fast)
balance = flops / bandwidth
needed = (2 * n_params * EXTRA) / (8 * n_bytes)  # prefill FLOPs per byte decode reads
print(f"matrix multiply in {balance_dtype}: {flops / 1e9:.0f} GFLOP/s; "
      f"read bandwidth: {bandwidth / 1e9:.1f} GB/s")
print(f"machine balance: {balance:.1f} FLOP per byte")
print(f"the claim needs more than {needed:.0f} FLOP per byte "
      f"({EXTRA} tokens x 2 x {n_params / 1e6:.0f} M parameters against 8 reads of "
      f"{n_bytes / 1e6:.0f} MB)")

# %% [markdown]
# Long inputs are not free, though: each input token also takes KV-cache memory (chapter 03), and
# that, not time, is what limits long prompts on a GPU.
#
# ## 4 · The memory-bandwidth bound (内存带宽瓶颈)
#
# Every decode step reads every weight once to make one token. A machine that reads B bytes/s
# cannot decode faster than B / (bytes of weights) tokens per second at batch 1, however fast its
# arithmetic. Decode does 2 operations (a multiply and an add) per 4-byte float32 weight it reads:
# 0.5 FLOP per byte, far below the machine balance above. The arithmetic units wait for memory.

# %%
bound = decode_bound(n_bytes, bandwidth)
print(f"weights read per token: {n_bytes / 1e6:.0f} MB (float32)")
print(f"bound: {bandwidth / 1e9:.1f} GB/s / {n_bytes / 1e6:.0f} MB = {bound:.1f} tokens/s")
print(f"achieved: {m.decode_tokens_per_second:.1f} tokens/s "
      f"({100 * m.decode_tokens_per_second / bound:.0f} % of the bound)")

# %% [markdown]
# The gap to the bound is Python and kernel overhead per step, and matrix-vector kernels that do
# not read memory at full speed.
#
# Batching (section 2) shares that read among B rows: the bytes stay, the arithmetic grows B
# times. Is a batched step then nearly free? Only while the B rows' arithmetic takes less time
# than the read. The batch sweep gives a first look; then one decode step of the widest batch
# and one of a single row are timed in turns, five times, for the verdict (chapter 06 measures
# the same step time against rows on its paged engine):

# %%
one_step = sweep[0][1].mean_tpot
for b, t in sweep[1:]:
    print(f"batch {b:>2}: a step took {t.mean_tpot / one_step:4.1f}x batch 1's in the sweep")


def decode_step(rows, context=len(short_ids)):
    """A function that runs one decode step of `rows` sequences over `context` cached tokens,
    the same step at every call."""
    cache = KVCache.for_model(fast, rows, context + 1)
    with torch.inference_mode():
        fast(torch.randint(100, 20_000, (rows, context), device=device), cache=cache)
    token = torch.ones(rows, 1, dtype=torch.long, device=device)

    def step():
        with torch.inference_mode():
            fast(token, cache=cache)
        cache.crop(context)

    return step


widest = sweep[-1][0]
steps = compare(decode_step(1), decode_step(widest), repeats=5, device=device)
grows = steps.above(1.5)
print(f"a step of {widest} rows over a step of 1 row: {steps.spread_text()}; {load_average()}")
print(f"up to {widest} rows: " + {
    False: "nearly free, the read sets the time",
    True: "the step grows with the rows: the arithmetic sets the time (compute-bound)",
    None: TOO_NOISY}[grows])

# %% [markdown]
# On one CPU core the step soon grows with the rows: a few rows already fill its arithmetic. On
# a data-centre GPU the same step stays nearly flat for dozens of rows. The roofline says where
# the change happens.

# %% [markdown]
# ## 5 · The roofline (屋顶线模型): one chart for every step
#
# Sections 2 to 4 measured three things that one picture explains: the bandwidth bound of a
# batch-1 step, the step time against the batch, and prefill being cheap per token. So do
# chapter 06's step time against its rows and chapter 08's pass that verifies k drafted tokens.
#
# Every piece of work does F floating-point operations on B bytes it must read: its
# **arithmetic intensity** (算术强度) is I = F / B FLOP per byte. The machine does at most P FLOP/s
# (the matrix-multiply rate of section 3) and reads at most W bytes/s (the bandwidth), so the work
# runs at most at min(P, I × W) FLOP/s: a slanted roof (bandwidth-bound) that meets a flat one
# (compute-bound) at the **ridge**, I = P / W, the machine balance of section 3.
#
# A forward pass of r rows (r sequences of one token in a decode step, or one sequence's r tokens
# in a verify pass or a prompt) reads the weights once and uses each r times, so r moves it right
# along the roof. `minillm.measure.roofline` counts F and B for such a pass:

# %%
from minillm.measure.roofline import Roof, fastest_matmul, step_cost  # noqa: E402

show_source(step_cost)

# %% [markdown]
# The points, measured on the fast engine in float32: the decode steps of section 2's batch
# sweep (its TPOT is one step of B rows), a verify pass of k tokens after 64 cached ones (the
# shape of chapter 08's speculative verify), and a prefill.

# %%
# the flat roof in the model's own dtype (a bf16 roof would flatter float32 points), from the
# fastest kernel the engine has here: PyTorch's matmul or minillm's own, which the prefill uses
peak = fastest_matmul(device, n=1024, repeats=5, dtype=fast.dtype)
cfg = model.config
context = len(tokenizer.encode(prompt)) + N_BATCH // 2  # the mean context over the sweep
points = {}  # name -> (rows, context, seconds)
for b, t in sweep:
    points[f"decode, batch {b}"] = (b, context, t.mean_tpot)


def pass_seconds(rows, cached):
    """One forward pass of `rows` tokens of one sequence after `cached` cached tokens."""
    cache = KVCache.for_model(fast, 1, cached + rows)
    ids = torch.randint(100, 20_000, (1, cached + rows), device=device)
    with torch.inference_mode():
        if cached:
            fast(ids[:, :cached], cache=cache)

        def one_pass():
            fast(ids[:, cached:], cache=cache)
            cache.crop(cached)

        return best_time(one_pass, fast, repeats=3, warmup=1)


for k in (4, 16):
    points[f"verify, k={k}"] = (k, 64, pass_seconds(k, 64))
prefill_n = 128 if CI else 512
points[f"prefill, {prefill_n}"] = (prefill_n, prefill_n // 2, pass_seconds(prefill_n, 0))

# probed again after the points: another program can only slow a probe down, so the faster of
# the two is the nearer to this CPU's peak (a roof probed in a slow moment would be passed)
peak = max(peak, fastest_matmul(device, n=1024, repeats=5, dtype=fast.dtype),
           key=lambda p: p.flops)
roof = Roof(peak.flops, bandwidth)
measured_points = {}
for name, (rows, ctx, seconds) in points.items():
    f, nbytes = step_cost(cfg, rows, ctx, fast.dtype.itemsize, fast.dtype.itemsize)
    measured_points[name] = (f / nbytes, f / seconds)
    intensity, achieved = measured_points[name]
    print(f"{name:<16} I = {intensity:6.2f} FLOP/byte: {achieved / 1e9:6.1f} GFLOP/s, "
          f"{achieved / roof.attainable(intensity):4.0%} of its roof")
print(f"roof: {roof.peak_flops / 1e9:.0f} GFLOP/s ({peak.kernel}), "
      f"{roof.bandwidth / 1e9:.1f} GB/s, ridge at {roof.ridge:.1f} FLOP/byte")

# %%
grid = torch.logspace(-1.5, 3, 200)
fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(grid, [roof.attainable(float(i)) / 1e9 for i in grid], "k-", label="the roof")
ax.axvline(roof.ridge, color="grey", ls=":", lw=1)
for name, (intensity, achieved) in measured_points.items():
    style = "o" if name.startswith("decode") else "s" if name.startswith("verify") else "^"
    ax.plot(intensity, achieved / 1e9, style, label=name)
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte read)",
       ylabel="GFLOP/s",
       title=f"roofline of this machine ({device}), SmolLM2 in {str(fast.dtype)[6:]}")
ax.legend(fontsize=7, loc="lower right")
plt.tight_layout()
plt.show()

# %%
decode_1 = measured_points["decode, batch 1"]
decode_last = measured_points[f"decode, batch {sweep[-1][0]}"]
rows_at_ridge = roof.ridge / decode_1[0]
print(f"a decode step at batch 1 sits at {decode_1[0]:.2f} FLOP/byte, {roof.ridge / decode_1[0]:.0f}x "
      f"left of the ridge: its bound is the bandwidth bound of section 4")
print(f"each row adds the same intensity, so a step reaches the ridge at about "
      f"{rows_at_ridge:.0f} rows here; past it, every extra row costs its full arithmetic")
print(f"batch {sweep[-1][0]} ran {decode_last[1] / decode_1[1]:.1f}x the FLOP/s of batch 1")
assert decode_1[0] < roof.ridge  # batch-1 decode is bandwidth-bound on this machine
assert decode_last[1] > 1.1 * decode_1[1]  # rows share the read: more FLOP/s per step
# a roof is a limit; on a shared machine a point may pass a roof measured a moment before by a
# little, never by much
assert all(achieved < 1.25 * roof.attainable(i) for i, achieved in measured_points.values())

# %% [markdown]
# Reading the chart ties the chapters together:
#
# - **05's bound** is the slanted roof at batch 1: I × W FLOP/s, that is W / bytes tokens/s.
# - **06's step time against rows**: a step of r rows has r times the intensity. Left of the
#   ridge a step costs about the same for 1 row as for r (the read sets its time); right of it,
#   the arithmetic does, and the step grows with its rows. One CPU core has a low ridge, a few
#   rows; a data-centre GPU's is in the hundreds (an H100's published figures: about 990
#   bf16 TFLOP/s over 3.35 TB/s, some 300 FLOP per byte), so there batching is nearly free
#   per step for a long way.
# - **08's verify pass** of k tokens is a step of k rows of one sequence: the same place on the
#   roof as batch k. While k is left of the ridge, checking k drafts costs about one decode
#   step; that is the room speculative decoding works in, and why it pays less on a machine
#   with a low ridge or under a large batch.
# - **prefill** of hundreds of tokens sits far right, compute-bound: section 3's cheap input
#   tokens.

# %% [markdown]
# ## 6 · float32 against bfloat16 and int8
#
# bfloat16 (bf16) stores each weight in 2 bytes instead of 4: half the bytes to read per token,
# so the bound doubles; int8 stores 1 byte (and a scale per row), so it quadruples. Whether the
# speed follows depends on the kernels: GPUs compute in bf16 natively; many CPUs do not, and
# PyTorch's generic bf16 loop there is slow. On a CPU `minillm.fast` therefore keeps the
# activations in float32 and multiplies with small C kernels of its own (`minillm/kernels/`,
# compiled on first use) that read the narrow weights once and multiply them in registers: bf16
# widened to float32, int8 as integers against x rounded to int16 (defined below). Only the
# bytes read change. (A CPU with AMX's bf16 tiles, such as Intel's Sapphire Rapids, multiplies
# bf16 in hardware: there the rows of a prompt, and its attention, are rounded to bf16 for the
# products, as transformers' bf16 does; a decode step's one row stays float32.) On a GPU
# neither int8 kernel runs: each call builds a float copy of the weight (1 byte read, then the
# copy written and read back), so the bound below counts the bytes each format really moves.
# Chapter 07 tells the int8 story in full.

# %%
fast16 = fast_engine.optimize(model, "bf16")
fast8 = fast_engine.optimize(model, "int8")
rows = {}
for name, engine in [("float32", fast), ("bfloat16", fast16), ("int8", fast8)]:
    minillm.generate(engine, tokenizer, prompt, max_new_tokens=2)  # warm up (kernels compile)
    result = minillm.generate(engine, tokenizer, prompt, max_new_tokens=N_NEW)
    rows[name] = result
    moved = bytes_moved_per_token(engine)  # int8 on a GPU: + the float copy it builds
    bound_format = decode_bound(moved, bandwidth)
    print(f"{name:>9}: {result.metrics}  moves {moved / 1e6:.0f} MB a token, "
          f"bound {bound_format:.0f} tok/s")
print("int8's decode path here:", ", ".join(int8_decode_paths(fast8)),
      "(dequantize: a float copy of each weight is written and read back at every call)")
if device.type == "cpu":
    print("CPU capability:", torch.backends.cpu.get_cpu_capability(),
          "| minillm's bf16 kernel in use:", fast16.lm_head.kernel)
print("same text as float32:", {k: r.text == rows["float32"].text for k, r in rows.items()})

# %% [markdown]
# bf16 keeps 7 stored bits of each weight's mantissa (float32 keeps 23) and int8 255 steps per
# row, so after a few dozen tokens their greedy text may part from float32's. Chapter 07
# measures such quality costs.
#
# **Rounding x to int16.** The int8 kernel multiplies integers, so it first rounds each row of
# activations x to 16-bit integers (int16), with a scale of the row's own:
# s_x = max|x| / q_max and x_q = round(x / s_x), whole numbers from −q_max to q_max. A weight
# row is stored as int8 numbers w_q with its scale s_w. Each output is then the integer sum
# Σ w_q × x_q (in 32-bit integers) times s_x × s_w. q_max is int16's largest, 32,767, or less
# for a long row, so that a sum of K products (each at most 128 × q_max) cannot leave int32:
# q_max = min(32,767, (2³¹ − 1) / (128 K)). Rounding moves each value of x by at most half a
# step, s_x / 2: under 2e-5 of the row's largest value, far finer than the int8 weights' 255
# steps. Written out for one row of SmolLM2's real activations (the input of layer 0's gate and
# up matrices), and checked against the kernel:

# %%
gate_up = fast8.layers[0].mlp.gate_up_proj  # an int8 layer of the fast model
seen = []
hook = gate_up.register_forward_pre_hook(lambda layer, args: seen.append(args[0].detach()))
with torch.inference_mode():
    fast8(torch.tensor([short_ids], device=device))
hook.remove()
x = seen[0].reshape(-1, gate_up.in_features)[-1:].float().cpu()  # the last token's row
w_q, s_w = gate_up.qweight.cpu(), gate_up.scale.cpu().float()

q_max = min(32767, (2**31 - 1) // (128 * x.shape[1]))  # for these K values of x
s_x = x.abs().max() / q_max  # in float32, as the kernel computes it
x_q = torch.round(x * (1 / s_x))  # whole numbers from -q_max to q_max
print(f"q_max for K = {x.shape[1]}: {q_max}")
integer_sum = (w_q.long() @ x_q[0].long()).float()  # exact, as the kernel's int32 sums
y_int16 = integer_sum * (s_x * s_w)
y_float_x = x[0].double() @ (w_q.double() * s_w.double()[:, None]).T  # int8 weights, float x
y_fp32 = fast.layers[0].mlp.gate_up_proj(x.to(device))[0].cpu().double()  # float32 weights


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


x_error, w_error = relative(y_int16, y_float_x), relative(y_float_x, y_fp32)
print(f"x rounded to int16, against x in float (int8 weights both): {x_error:.1e} of the "
      f"largest output")
print(f"int8 weights, against float32 weights (x in float both):   {w_error:.1e}")
if kernels.available():
    kernel_error = relative(kernels.gemm_int8(x, w_q, s_w)[0], y_int16)
    print(f"minillm's kernel, against the integer sum written out:     {kernel_error:.1e}")
    assert kernel_error < 1e-6  # the kernel computes what the definition says
else:
    print("minillm's int8 kernel is not built on this machine; the lines above are what it "
          "computes where it is")
assert x_error < w_error / 10  # rounding x costs far less than rounding the weights

# %% [markdown]
# ## 7 · CPU against GPU, and the TPU
#
# On a GPU a 135M model's batch-1 decode is not bound by bandwidth: an H100 reads SmolLM2's
# 540 MB of float32 weights in about 0.2 ms, while a decode step launches several hundred small
# kernels (30 layers, a dozen operations each) at a few microseconds each. The launches, not the
# bytes, set the pace; that is why CUDA graphs and `torch.compile` matter so much on GPUs. The
# appendix 05b measures it when it runs on a CUDA GPU.

# %% [markdown]
# ⚠ The source text's rule of thumb: a 7B model decodes at about 10 tokens/s on a CPU and 100+
# on one A6000 GPU, about 10:1. Section 4's bound tests it. A 7B model (Llama-2-7B: 6.74
# billion parameters, its published count) in fp16 reads 2 bytes for each of them per token; an
# A6000 reads at most 768 GB/s (NVIDIA's published figure, not measured here). When can each
# figure hold?

# %%
PARAMS_7B, A6000 = 6.74e9, 768e9  # published: Llama-2-7B's parameters, the A6000's bytes/s
formats = {"fp16": 16, "int8": 8 + 16 / 4096,  # a 16-bit scale per row of 4,096 weights
           "Q4_1 (4-bit, as our GGUF file)": 4 + 32 / 32}  # 2 x 16 bits per 32 weights
bounds = {}
for name, bits in formats.items():
    weights_7b = PARAMS_7B * bits / 8
    bounds[name] = A6000 / weights_7b
    print(f"7B in {name:<31}: {weights_7b / 1e9:5.1f} GB per token -> A6000 at most "
          f"{bounds[name]:5.0f} tok/s; this machine ({bandwidth / 1e9:.1f} GB/s) at most "
          f"{bandwidth / weights_7b:5.1f} tok/s")
for name, bits in [("fp16", 16), ("Q4_1", 5)]:
    print(f"10 tok/s on a CPU in {name} needs {10 * PARAMS_7B * bits / 8 / 1e9:.0f} GB/s of "
          f"memory bandwidth")
for name, bound_7b in bounds.items():
    print(f"100 tok/s for one user in {name}: "
          f"{'within' if bound_7b >= 100 else 'beyond'} the A6000's bound of {bound_7b:.0f}")
users_needed = 100 / bounds["fp16"]
print(f"100 tok/s in fp16 as throughput: at least {users_needed:.1f} -> "
      f"{int(-(-users_needed // 1))} users per step sharing each read")

# %% [markdown]
# So "100+ on an A6000" cannot hold for one user in fp16: the bound printed above is well under
# 100. It holds with int8 or 4-bit weights (llama.cpp's usual format), or as throughput with two or more
# users batched, each of them still under the fp16 bound. "10 tok/s on a CPU" needs the
# bandwidth printed above: in fp16 that of a many-channel server CPU, with 4-bit weights that of
# a desktop with fast memory; compare this machine's own bound. The 10:1 ratio is a bandwidth
# ratio, and holds only when both sides read the same format. (For a model as small as ours,
# the launches set a GPU's pace instead, as the start of this section says.)
#
# GPUs are not the only accelerators. Google's **TPU**, tensor processing unit (张量处理单元), is
# built around large matrix-multiply units fed from high-bandwidth memory, and is programmed
# through the XLA compiler (from JAX, or from PyTorch with the `torch_xla` package; this course
# does not run on one). The roofline of section 5 holds there too. From the makers' published
# figures:

# %%
published = {  # dense 16-bit FLOP/s and memory bytes/s, from the makers' data sheets
    "NVIDIA H100 SXM (GPU)": (989e12, 3.35e12),
    "Google TPU v5e": (197e12, 819e9),
}
print(f"{'this machine, measured':<22}: ridge {roof.ridge:4.0f} FLOP/byte; SmolLM2 in float32 at "
      f"most {bandwidth / n_bytes:6,.0f} tok/s at batch 1")
for name, (peak, read) in published.items():
    print(f"{name:<22}: ridge {peak / read:4.0f} FLOP/byte; SmolLM2 in 16 bits at most "
          f"{read / (n_bytes / 2):6,.0f} tok/s at batch 1")

# %% [markdown]
# A TPU's ridge, like a data-centre GPU's, lies hundreds of FLOP per byte to the right: batch-1
# decode there is as bandwidth-bound as here, and only large batches use the arithmetic. What
# differs is the software: XLA compiles the whole step into one program ahead of time, instead
# of hundreds of separately launched kernels (what CUDA graphs do for a GPU).
#
# ## 8 · Latency against model size
#
# The source text says latency grows more slowly than model size: MPT-30B is about 2.5× slower
# than MPT-7B (4.3× the parameters). We test it with SmolLM2's own family: the same Llama
# architecture at the published shapes of SmolLM2-360M and -1.7B, with random weights (speed does
# not depend on the values). To spare memory we build each shape with one and with five layers:
# the full model's step is the one-layer step plus (layers − 1) × a quarter of their difference.
# Each shape is timed in turns with the 135M shape, five times. One round on this machine can
# land 30% off the others, and the answer sits near the parameters' ratio, so the verdict reads
# the median round against wide bands: much more slowly than the parameters (below 0.7 of their
# ratio, as the source's MPT figures are, at 0.58), about as fast (0.7 to 1.3), or faster.

# %%
from minillm.model import LlamaModel, ModelConfig

SHAPES = {  # SmolLM2's published configs: hidden, layers, heads, kv heads, feed-forward
    "135M": (576, 30, 9, 3, 1536),
    "360M": (960, 32, 15, 5, 2560),
    "1.7B": (2048, 24, 32, 32, 8192),
}
if CI:
    SHAPES.pop("1.7B")


def shape_config(hidden, layers, heads, kv, ffn):
    return ModelConfig(arch="llama", vocab_size=49152, hidden_size=hidden, n_layers=layers,
                       n_heads=heads, n_kv_heads=kv, head_dim=64, intermediate_size=ffn,
                       rope_theta=100000.0, max_seq_len=2048, tie_embeddings=True)


def shape_steps(hidden, heads, kv, ffn):
    """Decode-step functions of the shape built with one layer and with five (random weights)."""
    steps = []
    for layers in (1, 5):
        torch.manual_seed(0)
        config = shape_config(hidden, layers, heads, kv, ffn)
        engine = fast_engine.optimize(LlamaModel(config).to(device).eval().requires_grad_(False))
        cache = KVCache.for_model(engine, 1, 8)
        ids = torch.tensor([[1, 2, 3, 4]], device=device)
        with torch.inference_mode():
            engine(ids, cache=cache)

        def step(engine=engine, cache=cache, ids=ids):
            with torch.inference_mode():
                engine(ids[:, :1], cache=cache)
            cache.crop(4)

        steps.append(step)
    return steps


def model_step_seconds(steps, layers):
    """The whole model's decode step: the one-layer step plus (layers - 1) x a quarter of the
    difference between the five-layer and the one-layer step."""
    one, five = (best_time(step, device, 7, warmup=1) for step in steps)
    return one + (layers - 1) * max(five - one, 0.0) / 4


def parameters(hidden, layers, heads, kv, ffn):
    d, f = hidden, ffn  # tied embeddings; q and o are d x d, k and v d x (kv heads x 64)
    return 49152 * d + layers * (2 * d * d + 2 * d * kv * 64 + 3 * d * f + 2 * d) + d


hidden, base_layers, heads, kv, ffn = SHAPES["135M"]
base_steps = shape_steps(hidden, heads, kv, ffn)
sizes = {}  # name -> (parameters over 135M's, Comparison: 135M's step against this shape's)
for name, (hidden, layers, heads, kv, ffn) in tqdm(list(SHAPES.items())[1:], desc="model shapes"):
    steps = shape_steps(hidden, heads, kv, ffn)
    rounds = [(model_step_seconds(base_steps, base_layers), model_step_seconds(steps, layers))
              for _ in range(5)]  # in turns: a busy moment of the machine hits both
    sizes[name] = (parameters(*SHAPES[name]) / parameters(*SHAPES["135M"]),
                   Comparison(*zip(*rounds)))
    print(f"{name}: {parameters(*SHAPES[name]) / 1e6:5.0f} M parameters, decode step "
          f"{1000 * statistics.median(sizes[name][1].b):6.1f} ms against 135M's "
          f"{1000 * statistics.median(sizes[name][1].a):5.1f} ms")
    del steps

# %%
for name, (p_ratio, steps) in sizes.items():
    share = statistics.median(b / a for a, b in zip(steps.a, steps.b)) / p_ratio
    band = "much slower" if share < 0.7 else "faster" if share > 1.3 else "even"
    print(f"{name}: {p_ratio:4.1f}x the parameters, {steps.spread_text()} the latency per token, "
          f"a median {share:.2f} of the parameters' ratio: "
          + {"much slower": "latency grew much more slowly than the parameters",
             "faster": "latency grew faster than the parameters",
             "even": "latency grew about as fast as the parameters (within 30%)"}[band])

# %% [markdown]
# How to read this: at batch 1 a step's time is a fixed part (Python, kernel launches, the small
# vector operations) plus the time to read the weights. When the fixed part is large next to the
# reading, latency grows more slowly than the parameter count; once the reading dominates, it
# grows about as fast as the bytes read. The source's MPT and LLaMA-2 figures come from GPUs,
# where larger models also spread their work over more parallel units; the printout above says
# how far the claim carries to batch-1 decoding on this machine.
#
# ## 9 · Offline against interactive
#
# The two uses want different things, and the batch sweep above already measured both:

# %%
best_throughput = max(sweep, key=lambda s: s[1].tokens_per_second)
print(f"interactive (a chat, one user): batch 1 -> TTFT {1000 * sweep[0][1].mean_ttft:.0f} ms, "
      f"TPOT {1000 * sweep[0][1].mean_tpot:.0f} ms")
print(f"offline (a pile of documents): batch {best_throughput[0]} -> "
      f"{best_throughput[1].tokens_per_second:.1f} tokens/s in all, "
      f"{best_throughput[1].tokens_per_second / sweep[0][1].tokens_per_second:.1f}x batch 1")

# %% [markdown]
# - **Interactive** use (chat, code completion) is judged by TTFT (how soon the answer starts)
#   and TPOT (whether it streams faster than one reads). Small batches, short prompts.
# - **Offline** use (summarising a thousand files overnight) only cares about throughput: TTFT
#   barely matters, so batch as large as memory allows.
#
# ## Summary
#
# - TTFT, TPOT, latency = TTFT + TPOT × (n − 1), throughput: every `minillm.generate` result
#   carries them as `.metrics`; `minillm.stream` and the live chart stream them. The source's
#   "TTFT + TPOT × tokens" counts the first token twice: one TPOT too long.
# - Batch-1 decode is bound by memory bandwidth and per-step overhead: each token reads every
#   weight. Batching shares that read among users; bf16 halves it and int8 (with x rounded to
#   int16) quarters it where kernels read the narrow weights directly.
# - The roofline puts every step on one chart: intensity (FLOP per byte) against FLOP/s under
#   the machine's two roofs. Rows (a batch, a verify pass, a prompt) move a step right; past the
#   ridge it is compute-bound and grows with its rows, as one CPU core does after a few. A GPU's
#   or a TPU's ridge lies hundreds of FLOP per byte further right.
# - Prefill is compute-bound; whether 512 input tokens beat 8 output tokens depends on the
#   machine's balance of arithmetic to bandwidth, which we measured.
# - A verdict measured on a busy machine compares both sides in turns, several times, and says
#   "too noisy to call" when the repetitions disagree.
# - The exercise notebook `exercises/05_metrics.ipynb` computes these metrics from raw
#   timestamps and places a step on the roofline. The optional appendix `05b_fast_engine`
#   opens the fast engine. Chapter 06 builds continuous batching on top of them.
