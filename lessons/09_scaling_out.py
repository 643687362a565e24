# %% [markdown]
# # 09 · Scaling out: many processes, a real server, and a load test
#
# SmolLM2-135M fits in any laptop. A 70-billion-parameter model needs about 140 GB in fp16
# (2n GB for n billion parameters, chapter 02): more than one GPU holds. This chapter shows how
# inference is spread over several devices, runs it for real on two processes, and then turns
# to serving: minillm's own OpenAI-compatible server, measured with a load client that works
# against any such server (vLLM, SGLang, llama.cpp's server).
#
# Each way of spreading the work splits something different:
#
# - **model parallelism (模型并行)** is the umbrella name for splitting *one model's weights*
#   across devices. It comes in two kinds:
#   - **tensor parallelism (张量并行)**: every layer's matrices are split, and all devices work
#     on every layer together (sections 1–3);
#   - **pipeline parallelism (流水线并行)**: consecutive layers on different devices, like
#     stations on an assembly line; cutting the batch into micro-batches keeps every station
#     busy at once (section 4).
# - **expert parallelism (专家并行)**: in a mixture-of-experts model, whole experts live on
#   different devices, and each token travels to the devices of its experts (section 8 and
#   lesson 09b);
# - **data parallelism (数据并行)**: whole copies of the model, each serving its own requests.
#
# Large deployments combine them: tensor parallelism inside a machine, pipeline parallelism
# across machines, expert parallelism for the experts, data parallelism for more users.
# The course's source text calls "layers on different devices" model parallelism and
# "overlapping stages" pipeline parallelism. Those are one split seen twice: layers on different
# devices *is* pipeline parallelism, and its stages overlap only once the batch is cut into
# micro-batches; without them one device works at a time (section 4 draws it).
#
# Every number below is measured in this run. When the environment variable `CI` is set (the
# course's tests), the sizes shrink so the notebook runs in a few minutes on two CPU cores.

# %%
import os

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course import show_source
from minillm.utils.devices import Timer
from minillm.distributed import (all_reduce_cost, compare_pipeline_parallel,
                                 compare_tensor_parallel, split_evenly)
from minillm.measure import load_average

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
print(f"{load_average() or f'{os.cpu_count()} CPUs'}: timings move with the machine's load")

# %% [markdown]
# ## 1 · Splitting one linear layer two ways
#
# A linear layer computes `y = x @ W.T`, with `W` of shape (out, in). It can be split across
# ranks (进程编号, the processes of a group) in two ways:
#
# - **column-parallel (列并行)**: each rank holds some *rows* of `W` (some output features) and
#   computes those outputs from the whole input. The outputs are concatenated.
# - **row-parallel (行并行)**: each rank holds some *columns* of `W` (some input features) and the
#   matching slice of `x`. Each computes a partial sum of the whole output; adding them up is an
#   **all-reduce (全归约)**, the one collective operation tensor parallelism needs.

# %%
x = torch.randn(2, 8, dtype=torch.float64)
W = torch.randn(6, 8, dtype=torch.float64)
y = x @ W.T
rows, cols = split_evenly(6, 2), split_evenly(8, 2)
column = torch.cat([x @ W[r.start:r.stop].T for r in rows], dim=-1)
row = sum(x[:, c.start:c.stop] @ W[:, c.start:c.stop].T for c in cols)
print("rows per rank:", rows, " columns per rank:", cols)
print(f"column-parallel max error {(column - y).abs().max():.1e}, "
      f"row-parallel max error {(row - y).abs().max():.1e}")

# %% [markdown]
# The picture: rank 0's share in blue, rank 1's in orange.

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for ax, title, split in ((axes[0], "column-parallel: rows of W", "rows"),
                         (axes[1], "row-parallel: columns of W", "cols")):
    grid = torch.zeros(6, 8)
    for rank, part in enumerate(rows if split == "rows" else cols):
        if split == "rows":
            grid[part.start:part.stop, :] = rank
        else:
            grid[:, part.start:part.stop] = rank
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9)
    ax.set_title(title)
    ax.set_xlabel("input features")
    ax.set_ylabel("output features")
plt.tight_layout()
plt.show()

# %% [markdown]
# Megatron-LM's recipe pairs them so that the activations between the two layers never travel:
#
# - **attention**: query, key and value projections are column-parallel *by head* (each rank
#   computes whole heads; with grouped-query attention a key/value head goes with its query
#   heads); the output projection is row-parallel: one all-reduce.
# - **feed-forward**: gate and up column-parallel, down row-parallel: one more all-reduce.
#
# So a block costs two all-reduces of the hidden state. The embedding, the norms and the LM head
# are copied to every rank. minillm's version (`minillm/distributed/tensor_parallel.py`):

# %%
from minillm.distributed import tensor_parallel

show_source(tensor_parallel.shard_mlp)

# %% [markdown]
# ## 2 · What an all-reduce costs
#
# Per token, each all-reduce moves one hidden vector: `hidden_size` values. For SmolLM2 (30
# layers, width 576) in fp32. (This chapter stays on the CPU: its ranks are processes sharing
# this machine's cores over gloo; with one GPU per rank the launcher would give rank r `cuda:r`
# and nccl.)

# %%
model, tokenizer = minillm.load("smollm2-135m", device="cpu")
config = model.config
calls, per_token = all_reduce_cost(config, tokens=1, bytes_per_value=4)
print(f"{calls} all-reduces per forward pass, {per_token:,} bytes per token per rank "
      f"(2 x {config.n_layers} x {config.hidden_size} x 4)")

# %% [markdown]
# ## 3 · SmolLM2 on two processes
#
# `compare_tensor_parallel` runs the whole model in this process, then starts two processes joined
# by `torch.distributed` (the gloo backend on CPUs, nccl on GPUs), each holding half the heads and
# half the feed-forward, and compares: the logits over the prompt, and greedy tokens generated by
# the two processes together. SmolLM2 has 3 key/value heads, so the split is 2 + 1: uneven, still
# exact. (This cell starts two Python processes that each load the model: it takes a while.)

# %%
prompt_ids = tokenizer.encode("The capital of France is")
NEW = 3 if CI else 6
with Timer("cpu") as stopwatch:
    tp = compare_tensor_parallel("smollm2-135m", prompt_ids, world_size=2, new_tokens=NEW)
tp_seconds = stopwatch.seconds
print(tp)
print("one process: ", repr(tokenizer.decode(tp.reference_tokens)))
print("two processes:", repr(tokenizer.decode(tp.parallel_tokens)))
print(f"({tp_seconds:.0f} s, most of it starting processes and loading the model)")
assert tp.max_abs_diff < 1e-4 and tp.top1_agree and tp.tokens_equal

# %% [markdown]
# The logits agree to about 1e-5, not exactly: the two partial sums are added in a different order
# than one matrix product adds them, and floating-point addition is not associative.
#
# Each rank counted its all-reduces. The prompt's forward pass, then `generate`: its own prefill
# and one decode step per new token after the first.

# %%
rank0, rank1 = tp.ranks
n_prompt = len(prompt_ids)
want_calls, want_bytes = all_reduce_cost(config, tokens=n_prompt)
print(f"prompt pass ({n_prompt} tokens): measured {rank0['prefill_calls']} calls, "
      f"{rank0['prefill_bytes']:,} bytes; formula {want_calls}, {want_bytes:,}")
decode_calls = rank0["total_calls"] - 2 * rank0["prefill_calls"]
decode_bytes = rank0["total_bytes"] - 2 * rank0["prefill_bytes"]
steps = decode_calls // calls
print(f"decode: {steps} steps, {decode_bytes // steps:,} bytes per token measured, "
      f"{per_token:,} by the formula")
assert (rank0["prefill_calls"], rank0["prefill_bytes"]) == (want_calls, want_bytes)
assert decode_bytes == steps * per_token and steps == NEW - 1
print("key/value heads per rank:", rank0["kv_heads"], rank1["kv_heads"],
      "; feed-forward rows:", rank0["ffn_rows"], rank1["ffn_rows"])

# %% [markdown]
# Two all-reduces per layer, for every token, is why tensor parallelism stays *inside* one
# machine: a fast link such as NVLink moves a few hundred kilobytes in microseconds, but each
# all-reduce also waits for the slowest rank and pays a fixed start-up latency, and a network
# between machines makes both worse. Tensor parallelism pays off when a model does not fit on one
# device, or when each device's share of the matrices is large. (This run does not time it: most
# of its seconds went to starting processes and loading the model.)
#
# ## 4 · Pipeline parallelism
#
# The other split: rank 0 runs layers 0–14, sends the hidden state to rank 1, which runs layers
# 15–29 and the LM head. One send per stage boundary per token, but while one stage works, the
# other waits.

# %%
pp = compare_pipeline_parallel("smollm2-135m", prompt_ids, world_size=2)
print(pp)
for r in pp.ranks:
    print(f"stage {pp.ranks.index(r)}: layers {r['layers'][0]}-{r['layers'][-1]}, "
          f"{r['held_parameters'] / 1e6:.1f} M parameters, sent {r['sent_bytes']:,} bytes")
assert pp.max_abs_diff < 1e-4 and pp.top1_agree
assert pp.ranks[0]["sent_bytes"] == n_prompt * config.hidden_size * 4
whole = sum(p.numel() for p in model.parameters())
held = sum(r["held_parameters"] for r in pp.ranks)
table = model.embed.weight.numel()
print(f"the stages hold {held / 1e6:.1f} M parameters together; the model has {whole / 1e6:.1f} M; "
      f"the embedding table has {table / 1e6:.1f} M")
assert abs(held - whole - table) < 0.01 * table  # the table, held by both stages

# %% [markdown]
# Both stages hold the embedding (the LM head shares it), so together they hold more than the
# model. The waiting is the **pipeline bubble (流水线气泡)**. Systems keep every stage busy by
# cutting a batch into **micro-batches (微批次)**: while stage 1 works on micro-batch 1, stage 0
# already works on micro-batch 2. The schedule (GPipe's, forward only):

# %%
def pipeline_schedule(stages, micro_batches):
    """(stage, micro-batch, start slot): micro-batch m reaches stage s at slot s + m."""
    return [(s, m, s + m) for s in range(stages) for m in range(micro_batches)]


fig, axes = plt.subplots(1, 2, figsize=(10, 2.4), sharey=True)
for ax, mb in zip(axes, (1, 4)):
    for s, m, t in pipeline_schedule(4, mb):
        ax.barh(s, 1, left=t, color=plt.cm.tab10(m), edgecolor="white")
    slots = 4 + mb - 1
    busy = 4 * mb / (4 * slots)
    ax.set_title(f"{mb} micro-batch(es): stages busy {busy:.0%} of the time")
    ax.set_xlabel("time slot")
axes[0].set_ylabel("stage")
axes[0].invert_yaxis()
plt.tight_layout()
plt.show()

# %% [markdown]
# With 4 stages and m micro-batches the stages are busy m / (m + 3) of the time.
#
# ## 5 · How vLLM and SGLang serve at scale
#
# The engines people deploy are built from the ideas of chapters 03–08, plus what a fleet needs.
# Text Generation Inference, once the third name here, was archived by its maintainers in March
# 2026; vLLM and SGLang remain the two most deployed open engines:
#
# | idea | minillm chapter | vLLM | SGLang |
# |---|---|---|---|
# | KV cache | 03 | yes | yes |
# | continuous batching (连续批处理) | 06 | yes | yes |
# | paged KV cache | 06 | PagedAttention (vLLM invented it) | pages of one token |
# | prefix caching | 06 | block hashes (automatic prefix caching) | a radix tree (RadixAttention) |
# | chunked prefill | 06 | on by default | on by default |
# | prefill/decode disaggregation | 06 | KV connectors (NIXL, LMCache, Mooncake) | Mooncake or NIXL transfer |
# | quantized weights | 07 | GPTQ, AWQ, fp8, GGUF | GPTQ, AWQ, fp8, GGUF |
# | speculative decoding | 08 | draft models, n-gram, EAGLE, Medusa, MTP | draft models, n-gram, EAGLE-2/3, MTP |
# | tensor parallelism | 09 | `--tensor-parallel-size N` | `--tp-size N` |
# | pipeline parallelism | 09 | `--pipeline-parallel-size N` | `--pp-size N` |
# | expert parallelism | 09 | `--enable-expert-parallel` | `--ep-size N` |
# | fused GPU kernels | 05 | FlashAttention, CUDA graphs | FlashInfer, CUDA graphs |
#
# The speculative row names three ways to draft without a separate draft model (chapter 08
# drafts with one, or with prompt lookup): **Medusa** adds a few extra output heads to the target
# model, each guessing one more token ahead from the same last hidden state; **EAGLE** trains a
# one-layer draft network that reads the target's hidden states, not just its tokens, so its
# guesses are accepted more often; **MTP** (multi-token prediction, DeepSeek-V3's) trains the
# model itself with extra modules that predict the following tokens, which then serve as the
# draft. The target checks each in one pass, as in chapter 08. Greedy verification and
# rejection sampling (chapter 08's rule; EAGLE applies it over a tree of drafts) give exactly
# the target's output; Medusa as published samples with typical acceptance, which keeps every
# drafted token the target finds likely enough: longer accepted runs, but sampled text that no
# longer follows the target's distribution exactly.
#
# Below the serving layer, specialised engines compile the model for one kind of hardware:
# **TensorRT** (NVIDIA's compiler, with TensorRT-LLM for language models) fuses layers and picks
# kernels per GPU; **TorchScript** (and now `torch.compile`/`torch.export`) turns a PyTorch model
# into a graph that runs without Python. vLLM and SGLang also speak the **OpenAI API**, so one
# client talks to either. To measure a vLLM server with this chapter's load client:
#
# ```
# vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --port 8000       # on the GPU machine
# python -m minillm bench serve --url http://127.0.0.1:8000 --requests 200 --concurrency 16 \
#     --prompt-tokens 256 --tokens 128 --json vllm.json
# ```
#
# Past one machine, a fleet runs many **replicas** of the engine (data parallelism) behind a
# router. How the router chooses matters because each replica keeps its own prefix cache:
# **round robin (轮询)** spreads the requests evenly but sends the turns of one conversation to
# different replicas, so every replica ends up caching every conversation, and its cache
# holds less of each. **Prefix-aware routing (前缀感知路由)** (SGLang's router calls it
# cache-aware; llm-d and vLLM's production stack route so too) sends a request to the replica
# whose cache holds the longest part of its prompt, unless that part is short or that replica
# is already far busier than the others.
#
# `minillm/engine/routing.py` replays a workload through replicas that each keep chapter 06's
# radix-tree cache, with no clock: "busier" counts the requests a replica was given. The
# workload: users in multi-turn chats behind one system prompt, their turns interleaved at
# random; each prompt is the conversation so far plus a new question. The questions and answers
# are sentences of the chapter 01 corpus, tokenized: the caches see only token ids.

# %%
import random  # noqa: E402

from minillm.engine.routing import replay_routing  # noqa: E402
from minillm.tokenizer.samples import corpus  # noqa: E402

USERS, TURNS, REPLICAS = (16, 4, 4) if CI else (48, 6, 4)
rng = random.Random(0)
sentences = [tokenizer.encode(" " + line.strip()) for line in corpus("english").split(".")
             if len(line.split()) >= 6]
system = tokenizer.encode("You are a patient teacher. Answer in two or three sentences, and "
                          "say so when you are not sure.")
history = {user: list(system) for user in range(USERS)}
order = [user for user in range(USERS) for _ in range(TURNS)]
rng.shuffle(order)  # the users' turns arrive interleaved, each user's in order
chat_requests = []
for user in order:
    prompt = history[user] + rng.choice(sentences)
    answer = rng.choice(sentences) + rng.choice(sentences)
    chat_requests.append((prompt, answer))
    history[user] = prompt + answer
conversation = sum(len(h) for h in history.values()) / USERS
print(f"{len(chat_requests)} requests from {USERS} users over {REPLICAS} replicas; a "
      f"conversation ends at {conversation:.0f} tokens on average")

print(f"{'cache per replica':>37} {'round robin':>28} {'prefix-aware':>28}")
routing = {}
for share in (0.5, 1, 2):  # room for this many times the conversations a replica should keep
    capacity = int(share * conversation * USERS / REPLICAS)
    routing[share] = {policy: replay_routing(chat_requests, REPLICAS, capacity, policy)
                      for policy in ("round robin", "prefix-aware")}
    cells = [f"{r.hit_rate:.0%} hit, {r.computed_tokens:,} computed"
             for r in routing[share].values()]
    print(f"{capacity:>12,} tokens ({share:>3g}x its share) {cells[0]:>28} {cells[1]:>28}")
given = routing[1]["prefix-aware"].given
print(f"requests per replica, prefix-aware: {given}; round robin: "
      f"{routing[1]['round robin'].given}")
for share, runs in routing.items():
    assert runs["prefix-aware"].computed_tokens < runs["round robin"].computed_tokens, share
assert max(given) - min(given) <= 5  # the router's slack (4) and the request in hand

# %% [markdown]
# At the same memory, the prefix-aware router computes far fewer prompt tokens: each replica
# caches only its own users' conversations, so they fit. Round robin gives each replica
# every conversation to cache, and a conversation's next turn finds, at best, the turn before
# last. The price is balance: a router that follows the cache can pile requests onto one
# replica (a long, popular system prompt would pull every new conversation to the replica that
# cached it first), which is why real routers also require the cached part to be a large share
# of the prompt and fall back to the least busy replica past a load threshold. On a real fleet
# the tokens not computed are prefill time saved: TTFT falls and the replicas serve more.

# %% [markdown]
# One copy of a model can also serve many fine-tuned versions of it at once: LoRA adapters
# (lesson 10d, Q38, has the arithmetic). An adapter adds x Aᵀ Bᵀ beside a linear layer's x Wᵀ,
# with A and B of a small rank; merged into the weights (W + B A) it is free per token, but each
# adapter then needs its own copy of the model, and its requests batch only with each other.
# Served unmerged (S-LoRA, Punica, vLLM's `--enable-lora`), the base multiply runs once for the
# whole batch and each row adds its own adapter's product, gathered by index.
#
# Below, minillm's engine serves two random adapters of rank 8 (untrained: they change the
# answers without teaching anything), on every attention output and MLP down projection
# (`minillm/engine/lora.py`), with requests for both adapters in one continuous batch, against
# the way merged weights must serve them: one batch per adapter, one after the other. The
# engine salts each request's cached blocks with its adapter, so the same prompt under two
# adapters never shares keys and values.

# %%
import warnings  # noqa: E402

from minillm.engine import Engine  # noqa: E402
from minillm.engine.lora import MultiLoRA, random_adapter  # noqa: E402
from minillm.measure import TOO_NOISY, compare  # noqa: E402

adapters = {name: random_adapter(model, ("o_proj", "down_proj"), rank=8, seed=seed, size=0.1)
            for seed, name in enumerate(["support", "legal"])}
with warnings.catch_warnings():  # the fused batch-1 step it switches off is not the engine's
    warnings.simplefilter("ignore", RuntimeWarning)
    lora = MultiLoRA(model, adapters)
PER, NEW = (2, 8) if CI else (4, 16)  # requests per adapter, new tokens each
asks = [tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                      add_generation_prompt=True)
        for text in ["Write a short note to a customer.", "Explain a refund in one sentence.",
                     "Say hello to a new user.", "Describe a contract in plain words."]]
work = [(ask, name) for name in adapters for ask in asks[:PER]]


def serve(batches):
    """Run each batch of (prompt, adapter) requests to the end, one batch after the other."""
    tokens = {}
    for batch in batches:
        engine = Engine(model, tokenizer, max_num_seqs=len(batch), lora=lora)
        ids = {engine.add_request(ask, adapter=name, max_new_tokens=NEW, ignore_eos=True):
               (ask, name) for ask, name in batch}
        tokens.update({ids[rid]: out.token_ids for rid, out in engine.run().items()})
    return tokens


ways = {"one batch": [work],
        "one batch per adapter": [[w for w in work if w[1] == name] for name in adapters]}
served_by = {}
timing = compare(*(lambda way=way: served_by.update({way: serve(ways[way])}) for way in ways),
                 repeats=3)
lora.remove()
one_batch, by_adapter = served_by.values()
same = sum(one_batch[w] == by_adapter[w] for w in work)
print(f"{len(work)} requests, {len(adapters)} adapters: one batch against one batch per adapter, "
      f"time ratio {timing.spread_text()}; {load_average()}")
print(f"the same tokens either way for {same} of {len(work)} requests")
differ = [ask for ask in asks[:PER] if one_batch[(ask, "support")] != one_batch[(ask, "legal")]]
print(f"the two adapters answer {len(differ)} of the {PER} prompts differently, for example:")
for name in adapters:
    print(f"{name:>8}: {tokenizer.decode(one_batch[(differ[0] if differ else asks[0], name)])!r}")
verdict = timing.above(1.0)
print("verdict:", {True: "one mixed batch was faster every time", None: TOO_NOISY,
                   False: "one batch per adapter was faster every time"}[verdict])
# batches of other sizes may sum in another order: a near-tie could flip one greedy token
assert same >= len(work) - 1 and differ

# %% [markdown]
# One batch runs each decode step once for all the requests; one batch per adapter runs the
# steps once per adapter, each with fewer rows. Where a decode step is bound by reading the
# weights, a step of twice the rows costs little more than one, so the mixed batch takes far
# less time than the batches one after the other (the ratio above); with many adapters and few
# requests each, the gap grows with the number of adapters. The adapters' own multiplies are
# small (rank 8 against 576 features), which is why one copy of the base weights can serve
# them all.

# %% [markdown]
# ## 6 · minillm's own server
#
# `python -m minillm serve` puts the chapter 06 engine behind FastAPI and uvicorn, on 127.0.0.1
# (this machine only) unless told otherwise. One background thread steps the engine; each HTTP
# request waits on its own queue, so requests from different clients join the same continuous
# batch:

# %%
from minillm.tools.server import ServerThread, runner

show_source(runner.EngineLoop._run)

# %% [markdown]
# We start it in the background, inside this notebook, on a free port, with the model loaded
# above. (In a terminal,
# `python -m minillm serve --port 8000` does the same in its own process.)

# %%
import httpx

engine = Engine(model, tokenizer, num_blocks=256, max_num_seqs=16)
server = ServerThread(engine, "smollm2-135m").start()
print("serving on", server.url)
print(httpx.get(server.url + "/v1/models").json())

# %% [markdown]
# A chat request, streamed: each server-sent event (服务器发送事件) carries the text one engine
# step made ready.

# %%
import json

body = {"model": "smollm2-135m", "max_tokens": 24, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": "What is the capital of France?"}]}
with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as r:
    for line in r.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"]
            print(delta.get("content", ""), end="", flush=True)
print()

# %% [markdown]
# Bad requests are answered with a 4xx status and a message in OpenAI's shape, never a crash:

# %%
bad = httpx.post(server.url + "/v1/completions", timeout=30,
                 json={"prompt": "Hello", "max_tokens": -5})
print(bad.status_code, bad.json()["error"]["message"])

# %% [markdown]
# ## 7 · Load-testing the server
#
# The load client (`minillm.tools.loadtest`, or `python -m minillm bench serve --url URL`) sends a
# fixed, seeded workload with a given **concurrency (并发数)**, streams every answer, and reports
# TTFT, TPOT and latency (chapter 05's definitions) at p50, p90 and p99, and the throughput. We
# run it at a few concurrencies: more requests share each forward pass.

# %%
from minillm.tools import loadtest

CONCURRENCY = (1, 2, 4) if CI else (1, 4, 8)
OUT_TOKENS = 8 if CI else 16
reports = {}
for c in CONCURRENCY:
    work = loadtest.Workload(requests=max(3, 2 * c), concurrency=c, prompt_tokens=16,
                             output_tokens=OUT_TOKENS, seed=0, max_seconds=120)
    reports[c] = loadtest.run(server.url, work)
    assert reports[c]["ok"] == reports[c]["requests"], reports[c]["error_examples"]
print(loadtest.table(reports[CONCURRENCY[-1]]))

# %%
cs = list(reports)
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
axes[0].plot(cs, [reports[c]["throughput_tok_s"] for c in cs], "o-")
axes[0].set_title("throughput (output tokens/s)")
axes[1].plot(cs, [reports[c]["tpot_ms"]["p50"] for c in cs], "o-", label="p50")
axes[1].plot(cs, [reports[c]["tpot_ms"]["p99"] for c in cs], "o--", label="p99")
axes[1].set_title("TPOT (ms)")
axes[1].legend()
for ax in axes:
    ax.set_xlabel("concurrency")
plt.tight_layout()
plt.show()
for c in cs:
    r = reports[c]
    print(f"concurrency {c}: {r['throughput_tok_s']:.1f} tok/s, TTFT p50 "
          f"{r['ttft_ms']['p50']:.0f} ms, TPOT p50 {r['tpot_ms']['p50']:.0f} ms, p99 latency "
          f"{r['latency_ms']['p99']:.0f} ms")
gain = reports[cs[-1]]["throughput_tok_s"] / reports[cs[0]]["throughput_tok_s"]
slower = reports[cs[-1]]["tpot_ms"]["p50"] / reports[cs[0]]["tpot_ms"]["p50"]
print(f"concurrency {cs[-1]} against 1: throughput x{gain:.2f}, each user's TPOT x{slower:.2f}; "
      f"the engine ran up to {server.loop.max_batch} requests in one step")

# %% [markdown]
# Chapter 05 predicted the trade-off, now across HTTP clients: more users at once should raise
# the throughput while each user's TPOT grows. The ratios above are this run's test of it (the
# runs are short, so on a busy machine they are noisy). The server's own counters show that every
# request completed and every KV block went back to the pool:

# %%
health = httpx.get(server.url + "/health").json()
print({k: health[k] for k in ("completed", "cancelled", "free_blocks", "num_blocks",
                              "prefix_cache_hit_rate")})
server.stop()
print("server stopped")

# %% [markdown]
# ## 8 · Where inference is going, in brief
#
# **Mixture of experts (混合专家, MoE).** The feed-forward becomes many "experts"; a small router
# sends each token to its top k. The model holds all experts' parameters but computes only k of
# them per token (Mixtral: 8 experts, 2 per token). Lesson 09b cuts SmolLM2 into experts and runs
# them on two processes; here is the idea in miniature.

# %%
class TinyMoE(torch.nn.Module):
    def __init__(self, width=16, hidden=32, experts=8, k=2):
        super().__init__()
        self.k = k
        self.router = torch.nn.Linear(width, experts, bias=False)
        self.experts = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.SiLU(),
                                torch.nn.Linear(hidden, width)) for _ in range(experts))

    def forward(self, x):
        weights, chosen = self.router(x).softmax(-1).topk(self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # the tokens routed to e
            if len(token):
                out[token] += weights[token, slot, None] * expert(x[token])
        return out, chosen


moe = TinyMoE()
tokens = torch.randn(10, 16)
out, chosen = moe(tokens)
per_expert = sum(p.numel() for p in moe.experts[0].parameters())
print(f"parameters: {sum(p.numel() for p in moe.parameters()):,}; "
      f"used per token: {moe.k * per_expert + moe.router.weight.numel():,}")
print("experts chosen per token:", chosen.tolist())

# %% [markdown]
# Expert parallelism spreads the experts themselves: with 8 experts on 4 devices, device d holds
# experts 2d and 2d + 1 whole. Nothing inside an expert is split (that would be tensor
# parallelism); instead each token's hidden state is sent to the devices of its k experts and
# the results come back, an exchange called **all-to-all** where tensor parallelism needs an
# all-reduce. The router decides the traffic, so a device whose experts are popular receives
# more:

# %%
DEVICES = 4
device_of = torch.arange(len(moe.experts)) // (len(moe.experts) // DEVICES)
received = torch.bincount(device_of[chosen].flatten(), minlength=DEVICES)
print(f"{len(tokens)} tokens x {moe.k} experts = {received.sum().item()} hidden states sent; "
      f"device 0-{DEVICES - 1} receive {received.tolist()}")

# %% [markdown]
# **Sparse attention (稀疏注意力).** Full causal attention compares each token with every earlier
# one: n(n+1)/2 pairs. A sliding window (Mistral's) keeps only the last w, so cost and KV cache
# grow linearly; other patterns add a few global tokens or strided blocks.

# %%
n, w = 4096, 512
full_pairs = n * (n + 1) // 2
window_pairs = sum(min(i + 1, w) for i in range(n))
print(f"{n} tokens: causal attention {full_pairs:,} pairs, window {w}: {window_pairs:,} "
      f"({window_pairs / full_pairs:.0%})")

# %% [markdown]
# **On-device inference (端侧推理).** On a phone the limits are memory and battery, so the model is
# small and quantized (chapter 07). SmolLM2-135M's weights at each width:

# %%
from minillm.quant.gguf_q4_1 import BLOCK_BYTES, BLOCK_WEIGHTS

params = sum(p.numel() for p in model.parameters())
int4_bits = 8 * BLOCK_BYTES / BLOCK_WEIGHTS  # GGUF Q4_1, chapter 07: 20 bytes per 32 weights
for name, bits in (("fp32", 32), ("fp16", 16), ("int8", 8), ("int4", int4_bits)):
    print(f"{name:>5}: {params * bits / 8 / 2**20:7.0f} MiB")
print(f"({params / 1e6:.0f} M parameters; int4 counted at {int4_bits:g} bits a weight: 4-bit "
      f"codes plus each block of {BLOCK_WEIGHTS} weights' fp16 scale and minimum)")

# %% [markdown]
# **Adaptive computation (自适应计算).** Not every token needs every layer: an "early exit" stops
# when the answer is already clear. A look inside SmolLM2 (the "logit lens"): apply the final norm
# and LM head after each layer, and find, for each position of a text, the first layer from which
# the top token stays the final one.

# %%
text = ("The capital of France is Paris. The capital of Germany is Berlin. "
        "One, two, three, four, five, six, seven, eight.")
ids = torch.tensor([tokenizer.encode(text)])
hidden = {}
hooks = [layer.register_forward_hook(
    lambda mod, args, out, i=i: hidden.__setitem__(i, out[0] if isinstance(out, tuple) else out))
    for i, layer in enumerate(model.layers)]
with torch.inference_mode():
    final = model(ids)[0].argmax(-1)                       # (positions,)
for h in hooks:
    h.remove()
with torch.inference_mode():  # model.logits: the final norm and the LM head
    tops = torch.stack([model.logits(hidden[i])[0].argmax(-1)
                        for i in sorted(hidden)])          # (layers, positions)
n_layers = tops.shape[0]
settled = []
for pos in range(tops.shape[1]):
    same = (tops[:, pos] == final[pos]).tolist()
    settled.append(next(i for i in range(n_layers) if all(same[i:])) + 1)  # layers needed
plt.figure(figsize=(8, 2.5))
plt.bar(range(len(settled)), settled)
plt.xticks(range(len(settled)), [tokenizer.decode([t]) for t in ids[0].tolist()],
           rotation=90, fontsize=7)
plt.ylabel("layers needed")
plt.title("layers after which the top next-token prediction no longer changes")
plt.tight_layout()
plt.show()
print(f"an exit right after those layers would skip "
      f"{1 - sum(settled) / (n_layers * len(settled)):.0%} of the layer computations; "
      f"{sum(s < n_layers for s in settled)} of {len(settled)} positions settle early")

# %% [markdown]
# An early-exit model is trained to make such exits reliable; this one was not, so the lens only
# shows where, for this text, the prediction settles.
#
# **Energy (能耗).** Energy per token = power ÷ tokens per second. The power is not measured here:
# set `WATTS` to your machine's (a laptop CPU under load draws roughly 15–45 W; one data-centre GPU
# 300–700 W, serving far more tokens per second).

# %%
WATTS = 30.0  # an assumption: change it to your machine's power draw
best = max(reports.values(), key=lambda r: r["throughput_tok_s"])
joules = WATTS / best["throughput_tok_s"]
print(f"at {best['throughput_tok_s']:.1f} tok/s and an assumed {WATTS:.0f} W: "
      f"{joules:.2f} J per token, {joules * 1000 / 3600:.2f} Wh per thousand tokens")

# %% [markdown]
# ## Closing note
#
# The figures of this run, from the load client against minillm's own server:

# %%
for c, r in reports.items():
    print(f"concurrency {c:>2}: {r['requests']:>2} requests of {OUT_TOKENS} tokens, "
          f"{r['throughput_tok_s']:6.1f} output tok/s, TTFT p50 {r['ttft_ms']['p50']:6.0f} ms, "
          f"TPOT p50 {r['tpot_ms']['p50']:5.0f} ms, latency p99 {r['latency_ms']['p99']:6.0f} ms")
print(f"tensor parallel on 2 processes: max logit difference {tp.max_abs_diff:.1e}, greedy "
      f"tokens equal: {tp.tokens_equal}; {per_token:,} all-reduce bytes per token per rank")
print(f"{load_average()} at the end of this run")

# %% [markdown]
# The same client measures any OpenAI-compatible server: point `--url` at a vLLM or SGLang
# server on a GPU and compare its p99 latency and throughput with these.
