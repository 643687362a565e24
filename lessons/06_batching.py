# %% [markdown]
# # 06 · Batching and paged attention: serving many users at once
#
# So far one prompt at a time. A server answers many users at once, and each decode step reads
# every weight of the model whether it computes one token or sixteen (chapter 05: one row's
# decode is bound by memory bandwidth). Running many requests in one batch shares that cost.
# This chapter builds, small enough to read, the ideas that vLLM and SGLang are built on (the two
# open engines most deployments run; Text Generation Inference, the third, was archived by its
# maintainers in March 2026):
#
# - **continuous batching (连续批处理)**: decide who runs before *every* forward pass, so a
#   finished request's seat is taken at once, instead of **static batching (静态批处理)**, where a
#   batch runs until its longest member ends;
# - **a paged KV cache (分页 KV 缓存)**, PagedAttention's idea: the cache is cut into fixed-size
#   blocks (块), each sequence keeps a **block table (块表)**, and memory is taken as it is used.
#   Full blocks are shared between requests with the same prefix: **prefix caching (前缀缓存)**;
# - what large deployments add: chunked prefill, SGLang's radix-tree prefix cache, copy-on-write
#   for parallel samples, and prefill/decode disaggregation, each measured here.
#
# A third name you will meet, **dynamic batching (动态批处理)** (NVIDIA Triton, TorchServe), is
# static batching with a gathering window of a few milliseconds: once formed, the batch is fixed
# until its longest member ends. Continuous batching (iteration-level scheduling) changes it at
# every step.
#
# The engine lives in `minillm/engine/`. Every number below is measured in this run. When the
# environment variable `CI` is set (the course's tests), the sizes shrink.

# %%
import os
import time

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course import show_source
from minillm.engine import BlockManager, ContinuousScheduler, Engine, PagedBatch
from minillm.measure import TOO_NOISY, Comparison, compare, load_average
from minillm.tools.bench.batching import (make_workload, memory_use, run_engine,
                                          run_online)
from minillm.utils.columns import Label  # pads by screen columns: a Chinese character takes two
from minillm.utils.devices import Timer

CI = bool(os.environ.get("CI"))
REPEATS = 1 if CI else 2  # interleaved repetitions behind each verdict (each side timed twice)
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"device: {device}, {torch.get_num_threads()} CPU threads; {load_average()} "
      "(other programs share the machine: the timings move with them)")

# %% [markdown]
# ## 1 · A workload
#
# A fixed set of requests (seed 0), prompts cut from the course's English text. EOS is ignored,
# so each runs to its own `max_new_tokens`: the lengths differ, as between real users.

# %%
N = 8 if CI else 12
work = make_workload(tokenizer, N, prompt_lengths=(8, 48 if CI else 96),
                     output_lengths=(4, 24 if CI else 32), seed=0)
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
#   `generate()` batch does. Then the next batch, from whoever waits: dynamic batching with no
#   gathering window.
# - `continuous`: before every pass, running requests go first, then waiting ones are admitted
#   while there are seats, blocks and token budget (词元预算) left.
#
# The two runs are interleaved, `REPEATS` times each, so that whatever else the machine does
# lands on both (`minillm.measure.compare`); a verdict is printed only when every repetition
# agrees.

# %%
SEATS = 4
BATCHING = {"static": "static batching", "continuous": "continuous batching"}  # as printed


def new_engine(kind, **options):
    settings = dict(num_blocks=128, block_size=16, max_num_seqs=SEATS,
                    max_num_batched_tokens=256, record=True)
    return Engine(model, tokenizer, scheduler=kind, **{**settings, **options})


runs = {}


def serve(kind):
    engine = new_engine(kind)
    runs[kind] = {**run_engine(engine, work), "engine": engine}


# both schedulers, interleaved: static, continuous, then continuous, static, ...
timing = compare(lambda: serve("static"), lambda: serve("continuous"), repeats=REPEATS,
                 warmup=0, device=device)
for kind in ["static", "continuous"]:
    run = runs[kind]  # the last repetition
    print(f"{Label(BATCHING[kind]):>19}: {run['new_tokens']} tokens in {run['wall_s']:.1f} s "
          f"= {run['tokens_per_s']:.1f} tokens/s, {len(run['engine'].steps)} forward steps")
speedup = 1 / timing.ratio
print(f"time, continuous / static batching: {timing.spread_text()}")
print({True: "continuous batching was slower in every repetition",
       False: f"continuous batching: {speedup:.2f}x the throughput (吞吐量) of static batching",
       None: TOO_NOISY}[timing.above(1.0)])

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
# The timeline of the last repetition shows why. Each row is a request; each bar is a forward
# pass it took part in (prefill, decode, or ghost: a finished row still computed).

# %%
from minillm.course.widgets.batching import COLOURS, plot_timeline, timeline_legend

fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
kinds = set()
for ax, kind in zip(axes, ["static", "continuous"]):
    kinds |= plot_timeline(ax, runs[kind]["engine"].steps,
                           f"{BATCHING[kind]}: {runs[kind]['wall_s']:.1f} s")
axes[1].set_xlabel("seconds")
timeline_legend(axes[0], kinds)
plt.tight_layout()
plt.show()

# %% [markdown]
# How much of the static run's work was wasted on ghost rows, and how full were the batches?

# %%
static = runs["static"]["engine"]
row_kinds = [k for s in static.steps for _, _, k in s.items if k in COLOURS]
ghost = row_kinds.count("ghost") / len(row_kinds)
print(f"static batching: {ghost:.0%} of the row-steps computed tokens nobody asked for")
for kind, run in runs.items():
    e = run["engine"]
    rows = sum(len(s.items) for s in e.steps) / len(e.steps)
    print(f"{Label(BATCHING[kind]):>19}: {rows:.2f} rows per forward pass on average "
          f"(of {SEATS} seats)")

# %% [markdown]
# Ghost rows are not the only waste: a static batch also pads every prompt to its longest one.
# `StepRecord.computed_rows` counts the token positions each forward pass computed, padding and
# ghosts included, so the two runs' work can be compared directly:

# %%
work_ratio = (sum(s.computed_rows for s in static.steps)
              / sum(s.computed_rows for s in runs["continuous"]["engine"].steps))
print(f"static batching computed {work_ratio:.2f}x the token positions of continuous batching; "
      f"it took {1 / timing.ratio:.2f}x the time")

# %% [markdown]
# Whether saved work becomes saved time depends on one question: does a forward pass cost more
# when it carries more rows? Time one decode step (one new token per row, 64 tokens of context
# each) at a few batch widths:

# %%
from minillm.engine import PagedKVPool, paged_forward
from minillm.utils.devices import best_time


def decode_step(rows, context=64):
    blocks = -(-(context + 1) // 16)
    pool = PagedKVPool.for_model(model, rows * blocks, 16)
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(rows)]

    def run():
        with torch.inference_mode():
            paged_forward(model, pool, tables, [context] * rows, [[1]] * rows)
    return run


widths = [1, 2, 4, 8, 16]
steps = {w: decode_step(w) for w in widths}
step_s = [best_time(steps[w], model, repeats=3, warmup=1) for w in widths]
wide = compare(steps[1], steps[widths[-1]], repeats=5, device=device)
print(f"time of a step, {widths[-1]} rows / 1 row: {wide.spread_text()}")
print({True: "the step grows with the rows: the arithmetic sets the time (compute-bound)",
       False: "nearly free: the read of the weights sets the time (memory-bound)",
       None: TOO_NOISY}[wide.above(1.5)])

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot([str(w) for w in widths], [1000 * t for t in step_s], "o-")  # evenly spaced widths
ax.set(xlabel="rows in the decode step", ylabel="ms per step",
       title=f"one decode step on {device}: the fastest of 3 per width")
plt.tight_layout()
plt.show()

# %% [markdown]
# Chapter 05's batch sweep, read the same way. While the step time stays nearly flat
# (memory-bound, the usual case on a GPU), time follows the number of steps: every idle seat is
# throughput lost, and the extra seats a paged cache makes room for (section 3) are free
# throughput. Where it grows with the rows (compute-bound: a CPU past a few rows), time follows
# the work: continuous batching gains about `work_ratio`, and extra seats add little.

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
from minillm.course.widgets.batching import block_map_explorer, record_block_maps

engine = new_engine("continuous", num_blocks=64)
for w in work:
    engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens, ignore_eos=True)
snapshots = record_block_maps(engine)  # each running request's table after each step
print(f"{len(snapshots)} steps recorded")

# %% [markdown]
# Move the slider through the steps. Left, a contiguous cache: each running request's reserved
# slots (grey) and the ones it has filled. Right, the paged pool: one cell per block, coloured by
# the request that holds it (the key names them), pale while the block is part-filled.

# %%
block_map_explorer(engine, snapshots)

# %% [markdown]
# Over the whole continuous run (each step weighted by the tokens it held):

# %%
longest = max(len(w.prompt) + w.max_new_tokens for w in work)
memory = memory_use(runs["continuous"]["engine"].steps, max_len=longest)
LAYOUTS = {"paged": "paged, 16-token blocks", "contiguous_per_request": "contiguous, prompt + max_new",
           "contiguous_max_length": "contiguous, max length"}  # as printed
for name, share in memory.items():
    print(f"{Label(LAYOUTS[name]):>28}: {share:.1%} of the reserved KV memory holds tokens")

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
# That gather copies every row's keys and values, in every layer, at every step, on top of the
# read attention needs. So a decode step on the CPU skips it: `PagedBatch.attend` hands the query
# to a small C kernel, `minillm.kernels.paged_decode_attention`, that walks each row's block
# table and reads the keys and values where they lie, as vLLM's PagedAttention kernel does on a
# GPU. Both ways, on this engine's live pool:

# %%
from minillm import kernels
from minillm.layers.attention import attention

rows = engine.scheduler.running[:8]
lengths = torch.tensor([r.num_computed for r in rows])
slots = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
for i, r in enumerate(rows):
    slots[i, :r.num_computed] = engine.pool.slots(r.block_table, 0, r.num_computed)
q = torch.randn(len(rows), model.config.n_heads, model.config.head_dim, device=device)


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
# ## 6 · A radix tree instead of a chain of block hashes
#
# SGLang keeps its prefix cache as a **radix tree (基数树)** over token ids (its RadixAttention):
# each edge holds a run of tokens, a path from the root spells a cached sequence, and a new prompt
# reuses the longest path that matches it, to the token rather than to the block. When the cache
# is full, the least recently used leaf goes first (**LRU eviction (LRU 淘汰)**): a leaf ends a
# sequence that no other cached sequence continues, so evicting it breaks no one's prefix.
# `minillm/engine/radix_cache.py` builds one; a match walks the tree, cutting an edge
# where the prompt leaves it:

# %%
from minillm.engine.radix_cache import (RadixCache, block_cache_hit_rate,
                                        radix_cache_hit_rate)

show_source(RadixCache.walk)

# %% [markdown]
# Multi-turn chat is where prefix caches earn their keep: each turn's prompt is the whole
# conversation so far. Several users chat with the cooking assistant above, each for a few
# turns; the engine answers every turn, and we keep each request's prompt and answer:

# %%
USERS, TURNS, ANSWER = (3, 2, 12) if CI else (4, 3, 24)
FOLLOW_UPS = [["How do I boil an egg?", "And a soft one?", "Can I peel it warm?"],
              ["What goes well with rice?", "Something vegetarian?", "How long does it keep?"],
              ["How long to bake bread?", "At what temperature?", "Can I use whole wheat?"],
              ["Can I freeze soup?", "For how long?", "How do I thaw it?"]]
conversations = [[{"role": "system", "content": SYSTEM}] for _ in range(USERS)]
served = []  # (prompt ids, answer ids), in the order the turns were served
chat_engine = new_engine("continuous", max_num_seqs=USERS)
for turn in range(TURNS):
    prompts = []
    for user, chat in enumerate(conversations):
        chat.append({"role": "user", "content": FOLLOW_UPS[user][turn]})
        prompts.append(tokenizer.encode(tokenizer.apply_chat_template(chat)))
    for chat, prompt, out in zip(conversations, prompts,
                                 chat_engine.generate(prompts, max_new_tokens=ANSWER)):
        chat.append({"role": "assistant", "content": out.text})
        served.append((prompt, out.token_ids))
print(f"{len(served)} requests of {min(len(p) for p, _ in served)}-"
      f"{max(len(p) for p, _ in served)} prompt tokens; the engine's own hit rate "
      f"{chat_engine.stats()['prefix_cache_hit_rate']:.0%}")

# %% [markdown]
# Now replay those requests, one after another, through both caches at the same memory: a
# radix tree holding at most C tokens, and the engine's block manager with C / 16 blocks. The
# hit rate is the share of prompt tokens found cached.

# %%
longest = max(len(p) + len(a) for p, a in served)
everything = sum(len(p) + len(a) for p, a in served)
capacities = sorted({16 * -(-int(longest * f) // 16) for f in (1, 1.5, 2, 3, 4, 6)}
                    | {16 * -(-everything // 16)})
hits = {"radix tree (SGLang)": [], "block hashes (vLLM)": []}
for c in capacities:
    hits["radix tree (SGLang)"].append(radix_cache_hit_rate(served, c).hit_rate)
    hits["block hashes (vLLM)"].append(block_cache_hit_rate(served, c // 16).hit_rate)
for i, c in enumerate(capacities):
    print(f"{c:>5} slots: radix {hits['radix tree (SGLang)'][i]:.1%}, "
          f"blocks {hits['block hashes (vLLM)'][i]:.1%}")
ahead = sum(r >= b for r, b in zip(*hits.values()))
print(f"the radix tree hit at least as many tokens at {ahead} of {len(capacities)} capacities")

fig, ax = plt.subplots(figsize=(6, 3))
for name, rates in hits.items():
    ax.plot(capacities, [100 * r for r in rates], "o-", label=name)
ax.set(xlabel="cache capacity (token slots)", ylabel="prompt tokens hit (%)",
       title=f"prefix-cache hit rate, {len(served)} chat turns replayed")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# With room for everything, the difference is the granularity: each turn, the block chain
# loses the part-filled block at the end of the cached conversation (up to 15 tokens), and
# where the users' prompts part inside a block, it loses that block too. With little room,
# eviction decides, and both schemes evict the least recently used first (the block manager
# hands out the least recently freed block). vLLM keeps blocks because its attention kernels
# read blocks; SGLang pages single tokens, so its tree can match to the token.
#
# ## 7 · Parallel samples share their prompt: copy-on-write
#
# A request for n samples (`n` in the OpenAI API; `minillm serve` passes it to the engine)
# prefills its prompt once, then forks: each sample's block table starts as the prompt's, each
# block with a reference count of n. Full blocks are never written again, so sharing them is
# free. Before a sample writes into the part-filled last block, it gets a copy of its own and
# the shared block loses one reference: **copy-on-write (写时复制)**, as an operating system
# shares memory pages after `fork()`:

# %%
show_source(BlockManager.copy_on_write)

# %%
SAMPLES = 3
fork = new_engine("continuous", num_blocks=32)
fork.add_request(ids[0], n=SAMPLES, do_sample=True, temperature=0.8, seed=0,
                 max_new_tokens=ANSWER)
fork_snapshots = record_block_maps(fork)  # keyed (request, sample)
forked = next(i for i, snap in enumerate(fork_snapshots) if len(snap) == SAMPLES)
tables = [t for t, _, _ in fork_snapshots[forked + 1].values()]  # one step after the fork
held = len({b for t in tables for b in t})
shared = sum(all(b in t for t in tables) for b in tables[0])
assert shared >= len(ids[0]) // 16 and held < sum(map(len, tables))
print(f"step {forked + 1}: the {SAMPLES} samples' tables list {sum(map(len, tables))} blocks, "
      f"{held} of them distinct: {shared} shared by all (the prompt's full blocks), "
      "the rest each sample's own")

# %% [markdown]
# The block map of that run: hatched cells are shared (the count says by how many samples).
# Move the slider: the samples write their own blocks while the prompt's stay shared.

# %%
block_map_explorer(fork, fork_snapshots, step=forked)

# %% [markdown]
# ## 8 · Preemption: when the blocks run out
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
# ## 9 · Chunked prefill, measured
#
# Why cut prompts into chunks at all? A step runs its prefill and its decodes together, and
# every running request waits for the whole step before its next token. Here four requests are
# decoding when a long prompt arrives. With a token budget larger than the prompt, its whole
# prefill lands in one step; with a small budget (`CHUNK` tokens) it is spread over many.
# `long_prompt_arrival` (`minillm/engine/interference.py`) starts the running requests, adds the
# long prompt once each is decoding, and steps until its first token, on a `ClockedEngine` whose
# clock moves only by the measured time of the steps; it collects the gaps between each running
# request's tokens into an `Arrival`:

# %%
from minillm.engine.interference import Arrival, long_prompt_arrival

show_source(Arrival)

# %%
LONG, CHUNK = (256, 32) if CI else (512, 64)
long_prompt = make_workload(tokenizer, 1, prompt_lengths=(LONG, LONG), output_lengths=(1, 1),
                            seed=5)[0].prompt
decoding = [w.prompt for w in work[:SEATS]]
arrivals = {"whole": [], "chunked": []}
for _ in range(REPEATS):  # interleaved
    for mode, budget in (("whole", LONG + SEATS), ("chunked", CHUNK)):
        engine = new_engine("continuous", max_num_batched_tokens=budget, max_num_seqs=SEATS + 1,
                            enable_prefix_caching=False, record=False)
        arrivals[mode].append(long_prompt_arrival(engine, decoding, long_prompt))
for mode, results in arrivals.items():
    r = results[-1]
    print(f"{Label(mode):>8} (budget {r.budget}): {r.steps} steps; running requests' longest gap "
          f"{1000 * r.stall:.0f} ms, mean {1000 * r.mean_gap:.0f} ms; the long prompt's TTFT "
          f"{1000 * r.ttft:.0f} ms")
stall = Comparison(tuple(r.stall for r in arrivals["whole"]),
                   tuple(r.stall for r in arrivals["chunked"]))
wait = Comparison(tuple(r.ttft for r in arrivals["whole"]),
                  tuple(r.ttft for r in arrivals["chunked"]))
print(f"chunked / whole, longest gap: {stall.spread_text()}; long prompt's TTFT: "
      f"{wait.spread_text()}")
print({True: "chunking did not shorten the stall", None: TOO_NOISY,
       False: "chunking shortened the running requests' longest wait in every repetition"}
      [stall.above(1.0)])

# %% [markdown]
# The gaps of one running request, over the time from the arrival to the long prompt's first
# token (the last repetition):

# %%
fig, ax = plt.subplots(figsize=(7, 2.6))
for mode, style in (("whole", "s-"), ("chunked", "o-")):
    gaps = arrivals[mode][-1].gaps[:arrivals[mode][-1].steps]  # the first request's
    ends = [sum(gaps[:i + 1]) for i in range(len(gaps))]
    ax.plot(ends, [1000 * g for g in gaps], style, label=f"{mode} prompt")
ax.set(xlabel="seconds after the long prompt arrived", ylabel="gap before each token (ms)",
       title=f"a running request's tokens while {LONG} prompt tokens are prefilled")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Chunking trades one long stall for many short steps: the running requests keep their pace,
# and the long prompt waits longer for its first token (the TTFT ratio above): each of its
# chunks shares a step with the decodes, reads its own earlier keys again, and pays the fixed
# cost every step has. vLLM and SGLang chunk long prompts by default; the budget sets the trade.
#
# ## 10 · Online: requests that arrive while others run
#
# A server does not get all requests at once. A common model of many independent users is a
# **Poisson process (泊松过程)**: requests arrive independently, at an average rate of λ a second,
# so the gap to the next arrival follows an exponential distribution with mean 1/λ (short gaps
# are common, long ones rare). `poisson_arrivals` draws such gaps:

# %%
from minillm.tools.bench.batching import poisson_arrivals

times = poisson_arrivals(2000, rate=4.0, seed=0)
gaps = [b - a for a, b in zip([0.0] + times, times)]
print(f"rate 4 a second: mean gap {sum(gaps) / len(gaps):.3f} s (1/λ = 0.250), "
      f"{sum(g < 0.1 for g in gaps) / len(gaps):.0%} of the gaps under 0.1 s")

# %% [markdown]
# Requests arrive so, at three rates, fractions of the capacity measured offline above. Each
# request's time to first token (TTFT) counts from its arrival, so waiting in the queue shows
# up in it.

# %%
capacity = N / runs["continuous"]["wall_s"]
n_online = 4 if CI else 8
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
# ## 11 · Prefill/decode disaggregation, simulated
#
# Chunking shortens the stall; it does not remove it: every chunk still shares a step with the
# decodes. The largest deployments (DistServe, Mooncake; vLLM's and SGLang's PD modes) run the two
# phases on different machines: **prefill/decode disaggregation (预填充/解码分离)**. A prefill
# machine computes each prompt's keys and values and hands its KV blocks to a decode machine,
# whose steps carry decode rows only. Each phase can then get the hardware and the batch size it
# wants (prefill is compute-bound, decode bandwidth-bound), at the price of sending every
# prompt's KV cache across a link.
#
# We simulate it with two engines in this process (`minillm/engine/disaggregation.py`), each on
# its own `ClockedEngine` clock, so the two behave as two machines side by side. The prefill
# engine's scheduler keeps a finished prompt's blocks until they are copied into the decode
# engine's pool, where a scheduler admits the request with its prompt computed but for the last
# token, whose logits the decode engine computes to choose the first token itself:

# %%
from minillm.engine.disaggregation import (DecodeScheduler, PrefillScheduler,
                                           serve_colocated, serve_disaggregated)

show_source(DecodeScheduler.receive)

# %% [markdown]
# The fair comparison uses the same two machines both ways: two ordinary engines that each serve
# every other request, against one prefill engine and one decode engine. The same requests
# arrive at the same Poisson times in both:

# %%
PD_N = 6 if CI else 8
pd_work = make_workload(tokenizer, PD_N, prompt_lengths=(32, 96 if CI else 160),
                        output_lengths=(8, 12 if CI else 24), seed=3)
pd_arrivals = [(t, w.prompt, {"max_new_tokens": w.max_new_tokens, "ignore_eos": True})
               for t, w in zip(poisson_arrivals(PD_N, rate=capacity, seed=2), pd_work)]
pd = {"2 colocated": [], "prefill + decode": []}
for _ in range(REPEATS):  # interleaved
    two = [new_engine("continuous", enable_prefix_caching=False) for _ in range(2)]
    together = serve_colocated(two, pd_arrivals)
    pd["2 colocated"].append(together.summary())
    split = serve_disaggregated(new_engine(PrefillScheduler, enable_prefix_caching=False),
                                new_engine(DecodeScheduler, max_num_seqs=2 * SEATS),
                                pd_arrivals)
    pd["prefill + decode"].append(split.summary())
# counted in the engines' steps, not timed: the same on any machine, however busy
for name, served in (("2 colocated", together), ("prefill + decode", split)):
    counts = served.interference
    print(f"{Label(name):>17}: {counts['stalled decode tokens']:>3} decode tokens waited for a "
          f"prompt ({counts['prompt tokens beside decodes']} prompt tokens computed in their "
          "steps)")
for name, rows in pd.items():
    print(f"{Label(name):>17}: "
          + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in rows[-1].items()))
print(f"hand-over: {split.handoff_bytes / 2**20:.1f} MiB of KV blocks copied in "
      f"{1000 * split.handoff_seconds:.1f} ms for {PD_N} prompts")
for key in ("TPOT p90", "longest gap", "TTFT p50"):
    c = Comparison(tuple(r[key] for r in pd["2 colocated"]),
                   tuple(r[key] for r in pd["prefill + decode"]))
    verdict = {True: "higher", False: "lower", None: TOO_NOISY}[c.above(1.0)]
    print(f"{Label(key):>12}, disaggregated / colocated: {c.spread_text()}: {verdict}")

# %% [markdown]
# Read the counts first: the decode machine's steps never carry a prompt, so no decode token of
# it waits for one: the interference disaggregation removes, counted, so no load on this machine
# can change it; the clocks show what it is worth here. The decode machine holds twice the rows
# of each colocated engine, and on a CPU a wider step costs more (section 2), so the typical gap
# need not shrink. A new prompt pays for the hand-over: one machine prefills every prompt, the
# blocks are copied, and the first token waits for a decode step. On GPUs a decode step of 32
# rows costs little more than one of 16, and the copy travels over NVLink or RDMA while other
# work runs; deployments size the two pools apart to meet a TTFT and a TPOT target at once.
#
# ## 12 · What we measured

# %%
print(f"continuous / static throughput:      {speedup:.2f}x")
print(f"static / continuous computed rows:   {work_ratio:.2f}x")
print(f"static batching, ghost row-steps:    {ghost:.0%}")
print(f"KV memory used / reserved, paged:    {memory['paged']:.0%}")
print(f"prefix cache: prompt tokens computed {prefix[False][2]} -> {prefix[True][2]}")
print(f"multi-turn chat, everything cached:  radix {hits['radix tree (SGLang)'][-1]:.0%}, "
      f"blocks {hits['block hashes (vLLM)'][-1]:.0%} of prompt tokens hit")
print(f"chunked prefill, longest gap:        {stall.ratio:.2f}x the unchunked stall")
print(f"this run: {load_average()}")

# %% [markdown]
# The full benchmark (64 requests, prompts of 16–512 tokens, outputs of 16–256, against
# transformers' batched `generate()` too) is `python scripts/bench_batching.py`; `--small` runs a
# quick version.
#
# Next, chapter 07 makes each weight smaller (quantization), so each of these steps reads less
# memory.
