# %% [markdown]
# # 06 · Batching and paged attention: serving many users at once
#
# So far one prompt at a time. A server answers many users at once, and each decode step reads
# every weight of the model whether it computes one token or sixteen (chapter 05: one row's
# decode is bound by memory bandwidth). Running many requests in one batch shares that cost.
# This chapter builds the two ideas that vLLM and Text Generation Inference are known for, small
# enough to read:
#
# - **continuous batching (连续批处理)**: decide who runs before *every* forward pass, so a
#   finished request's seat is taken at once, instead of **static batching (静态批处理)**, where a
#   batch runs until its longest member ends;
# - **a paged KV cache (分页 KV 缓存)**, PagedAttention's idea: the cache is cut into fixed-size
#   blocks (块), each sequence keeps a **block table (块表)**, and memory is taken as it is used.
#   Full blocks are shared between requests with the same prefix: **prefix caching (前缀缓存)**.
#
# The engine lives in `minillm/engine/`: `block_manager.py`, `paged_cache.py`, `scheduler.py`,
# `request.py`, `engine.py`. Every number below is measured in this run. When the environment
# variable `CI` is set (the course's tests), the sizes shrink so the notebook runs in a minute or
# two.

# %%
import os
import time

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course import show_source
from minillm.utils.devices import Timer
from minillm.engine import BlockManager, ContinuousScheduler, Engine, PagedBatch
from minillm.tools.bench.batching import (make_workload, memory_use, run_engine,
                                  run_online)

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"device: {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## 1 · A workload
#
# A fixed set of requests (seed 0): prompts cut from the course's English text, each with its own
# output length. EOS is ignored so each request runs exactly to its own `max_new_tokens`: the
# lengths differ, as they do between real users.

# %%
N = 8 if CI else 16
work = make_workload(tokenizer, N, prompt_lengths=(8, 48 if CI else 128),
                     output_lengths=(4, 24 if CI else 64), seed=0)
print("prompt tokens:", [len(w.prompt) for w in work])
print("new tokens:   ", [w.max_new_tokens for w in work])

# %% [markdown]
# ## 2 · Static against continuous batching
#
# Both runs use the same engine, the same paged cache and at most `SEATS` requests per forward
# pass. Only the scheduler (调度器) differs:
#
# - `static`: take `SEATS` requests, prefill them together, decode until the *longest* has
#   finished; a request that finished early keeps its row (a "ghost", grey below), as a padded
#   `generate()` batch does. Then the next batch.
# - `continuous`: before every pass, running requests go first, then waiting ones are admitted
#   while there are seats, blocks and token budget (词元预算) left.

# %%
SEATS = 4


def new_engine(kind, **options):
    settings = dict(num_blocks=128, block_size=16, max_num_seqs=SEATS,
                    max_num_batched_tokens=256, record=True)
    return Engine(model, tokenizer, scheduler=kind, **{**settings, **options})


runs = {}
for kind in ["static", "continuous"]:
    engine = new_engine(kind)
    runs[kind] = run_engine(engine, work)
    runs[kind]["engine"] = engine
    print(f"{kind:>10}: {runs[kind]['new_tokens']} tokens in {runs[kind]['wall_s']:.1f} s "
          f"= {runs[kind]['tokens_per_s']:.1f} tokens/s, {len(engine.steps)} forward steps")

speedup = runs["continuous"]["tokens_per_s"] / runs["static"]["tokens_per_s"]
print(f"continuous batching: {speedup:.2f}x the throughput (吞吐量) of static batching")

# %% [markdown]
# Both give every request the same tokens (greedy decoding, each as if alone). The batches
# differ in shape, so the check is exact on a CPU and up to the first near tie of the top two
# logits on a GPU, where kernels sum in shape-dependent orders (`minillm.generation.agreement`):

# %%
from minillm.generation.agreement import agree, rule

same = all(agree(model, w.prompt, a.token_ids, b.token_ids) for w, a, b in
           zip(work, runs["static"]["outputs"], runs["continuous"]["outputs"]))
assert same
print("same outputs, compared", rule(model), ":", same)

# %% [markdown]
# The timeline shows why. Each row is a request; each bar is a forward pass it took part in
# (prefill, decode, or ghost: a finished row still computed).

# %%
from minillm.course.widgets.batching import COLOURS, plot_timeline, timeline_legend

fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
kinds = set()
for ax, kind in zip(axes, ["static", "continuous"]):
    kinds |= plot_timeline(ax, runs[kind]["engine"].steps,
                           f"{kind} batching: {runs[kind]['wall_s']:.1f} s")
axes[1].set_xlabel("seconds")
timeline_legend(axes[0], kinds)
plt.tight_layout()
plt.show()

# %% [markdown]
# How much of the static run's work was wasted on ghost rows, and how full were the batches?

# %%
def row_steps(engine, kinds):
    return sum(1 for s in engine.steps for _, _, k in s.items if k in kinds)


static = runs["static"]["engine"]
ghost = row_steps(static, {"ghost"}) / row_steps(static, set(COLOURS))
print(f"static: {ghost:.0%} of the row-steps computed tokens nobody asked for")
for kind, run in runs.items():
    e = run["engine"]
    rows = sum(len(s.items) for s in e.steps) / len(e.steps)
    print(f"{kind:>10}: {rows:.2f} rows per forward pass on average (of {SEATS} seats)")

# %% [markdown]
# Ghost rows are not the only waste: a static batch also pads every prompt to its longest one.
# `StepRecord.computed_rows` counts the token positions each forward pass computed, padding and
# ghosts included, so the two runs' work can be compared directly:

# %%
def computed(engine):
    return sum(s.computed_rows for s in engine.steps)


work_ratio = computed(static) / computed(runs["continuous"]["engine"])
print(f"static batching computed {work_ratio:.2f}x the token positions of continuous batching; "
      f"it took {speedup:.2f}x the time")

# %% [markdown]
# Whether saved work becomes saved time depends on one question: does a forward pass cost more
# when it carries more rows? Time one decode step (one new token per row, 64 tokens of context
# each) at a few batch widths:

# %%
from minillm.utils.devices import best_time
from minillm.engine import PagedKVPool, paged_forward


def decode_step_seconds(rows, context=64, repeats=3):
    blocks = -(-(context + 1) // 16)
    pool = PagedKVPool.for_model(model, rows * blocks, 16)
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(rows)]
    with torch.inference_mode():  # the fastest of `repeats` steps after a warm-up
        return best_time(lambda: paged_forward(model, pool, tables, [context] * rows,
                                               [[1]] * rows), model, repeats=repeats, warmup=1)


widths = [1, 2, 4, 8, 16]
step_s = [decode_step_seconds(w) for w in widths]
for w, t in zip(widths, step_s):
    print(f"{w:>3} rows: {1000 * t:6.1f} ms per step, {w / t:6.1f} tokens/s, "
          f"{t / step_s[0]:4.1f}x one row's step")
growth = step_s[-1] / step_s[0]
print(f"up to {widths[-1]} rows: " + ("nearly free, the read sets the time" if growth < 1.5 else
      "the step grows with the rows: the arithmetic sets the time (compute-bound)"))

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(widths, [1000 * t for t in step_s], "o-")
ax.set_xlabel("rows in the decode step")
ax.set_ylabel("ms per step")
ax.set_xscale("log", base=2)
ax.set_title(f"one decode step, {device}")
plt.tight_layout()
plt.show()

# %% [markdown]
# The same measurement as chapter 05's batch sweep, with the same reading (its roofline says
# where the change comes). While the step time stays nearly flat (memory-bound: the weights are
# read once whatever the rows), time follows the number of steps: every idle seat is throughput
# lost, and the extra seats a paged cache makes room for (section 3) are throughput for free;
# the usual case on a GPU.
# Where the step time grows with the rows (compute-bound: one CPU core past a few rows), time
# follows the work: continuous batching gains about `work_ratio`, and extra seats add little.
# The full benchmark (`scripts/bench_batching.py`, the README has its figures) measures both on
# 64 requests.

# %% [markdown]
# ## 3 · KV memory: contiguous against paged
#
# A contiguous KV cache (chapter 03) reserves, for each sequence, room for its longest possible
# length before it starts: here prompt + `max_new_tokens`, and in many servers the model's whole
# context. Most of that room stays empty for most of the request's life: **memory fragmentation
# (内存碎片)**. The paged cache takes one block of 16 slots at a time, so at most 15 slots per
# sequence are empty.
#
# Replay the continuous run step by step and keep a picture of the pool after each step:

# %%
engine = new_engine("continuous", num_blocks=64)
for w in work:
    engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens, ignore_eos=True)
snapshots = []
while engine.has_unfinished():
    engine.step()
    snapshots.append({r.id: (list(r.block_table), r.num_computed, r.max_tokens)
                      for r in engine.scheduler.running})
print(f"{len(snapshots)} steps recorded")

# %% [markdown]
# Move the slider through the steps. Left, a contiguous cache: each running request's reserved
# slots (grey) and the ones it has filled. Right, the paged pool: one cell per block, coloured by
# the request that holds it (the key names them), pale while the block is part-filled.

# %%
from minillm.course.widgets.batching import block_map_explorer

block_map_explorer(engine, snapshots)

# %% [markdown]
# Over the whole continuous run (each step weighted by the tokens it held):

# %%
longest = max(len(w.prompt) + w.max_new_tokens for w in work)
memory = memory_use(runs["continuous"]["engine"].steps, max_len=longest)
for name, share in memory.items():
    print(f"{name:>24}: {share:.1%} of the reserved KV memory holds tokens")
mean_len = sum(len(w.prompt) + w.max_new_tokens for w in work) / len(work)
print(f"requests here end at {mean_len:.0f} tokens on average; a paged sequence wastes at most "
      f"15 slots of its last block, so longer requests waste a smaller share")

# %% [markdown]
# ## 4 · The block table, walked through
#
# Take one request after it finished its prompt. Token `t` lives in block `table[t // 16]`, slot
# `t % 16`; the pool stores all layers' keys as rows `block * 16 + slot`.

# %%
engine = new_engine("continuous", num_blocks=32)
for w in work[:3]:
    engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens, ignore_eos=True)
for _ in range(3):
    engine.step()
request = engine.scheduler.running[0]
table, length = request.block_table, request.num_computed
print(f"request {request.id}: {length} tokens in the cache, block table {table}")
for t in [0, 15, 16, length - 1]:
    block, slot = table[t // 16], t % 16
    print(f"  token {t:>3} -> block {block:>2}, slot {slot:>2} -> pool row {block * 16 + slot}")

# %% [markdown]
# Reading the keys back through the table gives exactly what a plain contiguous cache
# (`minillm.KVCache`, chapter 03) holds after running the same tokens alone:

# %%
cache = minillm.KVCache.for_model(model, batch_size=1, max_tokens=length)
with torch.inference_mode():
    model(torch.tensor([request.tokens[:length]], device=device), cache=cache)
paged_keys, _ = engine.pool.gather(5, table, length)  # layer 5
contiguous_keys = cache.keys[5][0, :, :length]
torch.testing.assert_close(paged_keys, contiguous_keys, rtol=1e-4, atol=1e-4)
print("layer 5 keys, paged vs contiguous: max difference "
      f"{(paged_keys - contiguous_keys).abs().max().item():.1e}")

# %% [markdown]
# In the forward pass, each layer hands its new keys and values to the cache and attends over what
# comes back. The paged cache writes them into their slots, then gathers every row's keys through
# its block table; the attention mask hides the padding between rows of different lengths, so the
# model code is the same as in chapter 02:

# %%
show_source(PagedBatch.append)

# %% [markdown]
# That gather copies every row's keys and values, in every layer, at every step: a decode step
# reads each cached token's keys and values once to attend, then the copy reads and writes them
# again. So a decode step on the CPU (one new token per row) skips it: `PagedBatch.attend` hands
# the query to a small C kernel, `minillm.kernels.paged_decode_attention`, that walks each row's
# block table and reads the keys and values where they lie. That is what vLLM's PagedAttention
# kernel does on a GPU. The same numbers, read in place and through a gather, on this engine's
# live pool:

# %%
from minillm import kernels
from minillm.utils.devices import best_time
from minillm.layers.attention import attention

rows = engine.scheduler.running[:8]
lengths = torch.tensor([r.num_computed for r in rows])
slots = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
for i, r in enumerate(rows):
    slots[i, :r.num_computed] = engine.pool.slots(r.block_table, 0, r.num_computed)
c = model.config
q = torch.randn(len(rows), c.n_heads, c.head_dim, device=device)


def through_a_gather():
    return torch.cat([attention(q[i][None, :, None], *(t[None] for t in engine.pool.gather(
        5, r.block_table, r.num_computed)))[0, :, 0][None] for i, r in enumerate(rows)])


if device.type == "cpu" and kernels.available():
    def in_place():
        return kernels.paged_decode_attention(q, engine.pool.keys[5], engine.pool.values[5],
                                              slots, lengths)

    torch.testing.assert_close(in_place(), through_a_gather(), atol=1e-5, rtol=1e-5)
    print(f"{len(rows)} rows of {lengths.min().item()}-{lengths.max().item()} tokens, layer 5: "
          f"in place {best_time(in_place, device=device) * 1e3:.2f} ms, through a gather "
          f"{best_time(through_a_gather, device=device) * 1e3:.2f} ms (same numbers)")
else:
    print(f"on {device.type}, the engine gathers: minillm's kernel is for CPUs; on a GPU the "
          "in-place read is vLLM's CUDA kernel")

# %% [markdown]
# ## 5 · Prefix caching on a shared system prompt
#
# Chat requests often start with the same system prompt. A full block is named by a hash of its
# tokens *and* the name of the block before it, so equal names mean equal prefixes. A new request
# looks its blocks up; each hit is shared (reference count, 引用计数, + 1) and not recomputed.

# %%
show_source(BlockManager.match_prefix)

# %%
SYSTEM = ("You are a friendly assistant for a cooking website. Answer briefly and politely. "
          "Suggest simple recipes that use common ingredients found in most kitchens, give the "
          "cooking time and the oven temperature when there is one, warn about allergens such "
          "as nuts, milk and eggs, and never recommend raw meat or raw fish.")
QUESTIONS = ["How do I boil an egg?", "What goes well with rice?", "How long to bake bread?",
             "Can I freeze soup?", "What is a quick breakfast?", "How do I cook pasta?"]
chats = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": q}])
         for q in (QUESTIONS[:4] if CI else QUESTIONS)]
ids = [tokenizer.encode(c) for c in chats]
shared = next(i for i, (a, b) in enumerate(zip(*ids[:2])) if a != b)
print(f"{len(chats)} chats of {min(map(len, ids))}-{max(map(len, ids))} tokens; the first "
      f"{shared} tokens are the same in all: {shared // 16} full blocks of 16 can be shared")

prefix = {}
for caching in [False, True]:
    engine = new_engine("continuous", enable_prefix_caching=caching, max_num_seqs=2)
    with Timer(device) as stopwatch:
        outs = engine.generate(chats, max_new_tokens=8)
        computed = sum(n for s in engine.steps for _, n, k in s.items if k == "prefill")
    prefix[caching] = (outs, stopwatch.seconds, computed, engine.stats())
    print(f"prefix caching {'on ' if caching else 'off'}: {computed} prompt tokens computed, "
          f"{prefix[caching][1]:.1f} s, hit rate {engine.stats()['prefix_cache_hit_rate']:.0%}")

assert all(agree(model, i, a.token_ids, b.token_ids)
           for i, a, b in zip(ids, prefix[True][0], prefix[False][0]))
print("same answers with and without the cache; the first:", repr(prefix[True][0][0].text))

# %% [markdown]
# The first two requests run together before any block is full, so they both compute the system
# prompt; every later one finds its full blocks in the cache. The last, part-filled block of the
# prefix is never shared: only full blocks have a name.
#
# ## 6 · Preemption: when the blocks run out
#
# With a pool too small for every running request, the scheduler preempts (抢占) the most recently
# admitted one: it gives all its blocks back and waits at the front of the queue. When it comes
# back, its prompt and the tokens it already generated are recomputed (its full blocks may still be
# in the prefix cache), so nothing is lost:

# %%
# four requests with short prompts and long answers: all start at once, then all grow
order = sorted(range(N), key=lambda i: len(work[i].prompt) - work[i].max_new_tokens)[:4]
few = [work[i] for i in order]
need = max(-(-(len(w.prompt) + w.max_new_tokens) // 16) for w in few)  # the longest alone
at_start = sum(-(-(len(w.prompt) + 1) // 16) for w in few)  # all four after their prompts
tight = new_engine("continuous", num_blocks=max(need, at_start))
outs = tight.generate([w.prompt for w in few],
                      [{"max_new_tokens": w.max_new_tokens} for w in few],
                      ignore_eos=True)
assert tight.scheduler.num_preemptions > 0
assert all(agree(model, w.prompt, o.token_ids, runs["continuous"]["outputs"][i].token_ids)
           for w, o, i in zip(few, outs, order))
assert tight.blocks.num_free == tight.blocks.num_blocks  # every block came back
print(f"{tight.blocks.num_blocks} blocks for 4 requests: {tight.scheduler.num_preemptions} "
      f"preemptions, the same tokens, {tight.blocks.num_free}/{tight.blocks.num_blocks} "
      "blocks free at the end")

# %% [markdown]
# The scheduler in full: decodes first, then pieces of prompts under the token budget (a
# **chunked prefill** (分块预填充)), preemption when a block is missing, then admission:

# %%
show_source(ContinuousScheduler.schedule)

# %% [markdown]
# ## 7 · Online: requests that arrive while others run
#
# A server does not get all requests at once. Here they arrive as a Poisson process (exponential
# gaps) at three rates, fractions of the capacity measured offline above. Each request's time to
# first token (TTFT) counts from its arrival, so waiting in the queue shows up in it.

# %%
capacity = N / runs["continuous"]["wall_s"]
n_online = 4 if CI else 12
online = []
for fraction in [0.3, 0.6, 0.9]:
    row = run_online(new_engine("continuous"), work[:n_online], fraction * capacity, seed=1)
    online.append((fraction, row))
    print(f"{fraction:.0%} of capacity ({row['rate']:.2f} req/s): "
          f"TTFT p50 {row['ttft_p50']:.2f} s, p99 {row['ttft_p99']:.2f} s; "
          f"TPOT p50 {1000 * row['tpot_p50']:.0f} ms, p99 {1000 * row['tpot_p99']:.0f} ms")

# %%
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
x = [f"{f:.0%}" for f, _ in online]
for q, style in [(50, "o-"), (99, "s--")]:
    a.plot(x, [r[f"ttft_p{q}"] for _, r in online], style, label=f"p{q}")
    b.plot(x, [1000 * r[f"tpot_p{q}"] for _, r in online], style, label=f"p{q}")
a.set(title="time to first token", xlabel="load (share of capacity)", ylabel="seconds")
b.set(title="time per output token", xlabel="load (share of capacity)", ylabel="ms")
a.legend()
b.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# What to look for: with more load, more requests share each pass, so each user's TPOT grows
# (chapter 05's trade-off); and once the seats are full, a new request waits in the queue, which
# shows in TTFT, its tail (p99) first. With only a handful of requests per rate the p99 is the
# slowest one or two: rerun with more requests (outside CI) for steadier tails.
#
# ## 8 · What we measured

# %%
print(f"continuous / static throughput:      {speedup:.2f}x")
print(f"static / continuous computed rows:   {work_ratio:.2f}x")
print(f"static batching, ghost row-steps:    {ghost:.0%}")
print(f"KV memory used / reserved, paged:    {memory['paged']:.0%}")
print(f"  contiguous (prompt + max_new):     {memory['contiguous_per_request']:.0%}")
print(f"prefix cache: prompt tokens computed {prefix[False][2]} -> {prefix[True][2]}")
print(f"preemptions, {tight.blocks.num_blocks} blocks:"
      f"{tight.scheduler.num_preemptions:>13}, same outputs")

# %% [markdown]
# The full benchmark (64 requests, prompts of 16–512 tokens, outputs of 16–256, against
# transformers' batched `generate()` too) is `python scripts/bench_batching.py`; `--small` runs a
# quick version. On a GPU the gap between static and continuous batching grows: a decode step
# costs nearly the same for one row as for sixteen, so every idle seat is throughput lost.
#
# Next, chapter 07 makes each weight smaller (quantization), so each of these steps reads less
# memory.
