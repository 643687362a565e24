# %% [markdown]
# # 09b · Mixture of experts and expert parallelism
#
# DeepSeek-V3, Qwen3-235B-A22B, Mixtral and Llama 4 are **mixture-of-experts (MoE, 混合专家)**
# models: each layer's feed-forward network is replaced by many smaller **experts**, and a
# **router (路由器)** sends each token to only a few of them. The model holds the knowledge of all
# its parameters but computes with a small share of them per token. This lesson builds one from
# SmolLM2 and measures what interviews ask about:
#
# - total against active parameters, and why a large batch reads every expert anyway (section 1);
# - top-k routing, shared experts, and what routing costs a model trained dense (section 2);
# - load imbalance, capacity and dropped tokens, and why EPLB replicates hot experts (section 3);
# - **expert parallelism (专家并行)**: experts on different processes, tokens sent to them and
#   back with two all-to-alls, run for real on two processes (section 4);
# - how DeepSeek-style deployments combine it with data-parallel attention (section 5).
#
# It follows chapter 09's tensor and pipeline parallelism; 10d's Q33 asks the same questions in
# interview form. Every number below is measured in this run; with `CI` set (the course's tests)
# the sizes shrink.

# %%
import os

import torch

import minillm
from minillm.course import show_source
from minillm.distributed.expert_parallel import ExpertParallelMLP, compare_expert_parallel
from minillm.distributed.moe import (MoEMLP, capacity_of, fit_router, mlp_inputs,
                                     replicate_hot_experts, route, shared_first)
from minillm.measure import load_average
from minillm.quant.measure import perplexity
from minillm.tokenizer.samples import corpus
from minillm.tools.bench.quantization import held_out_ids

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
torch.manual_seed(0)
print(load_average())

device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print(f"SmolLM2: {c.n_layers} layers, each MLP {c.hidden_size} -> {c.intermediate_size} -> "
      f"{c.hidden_size}")

# %% [markdown]
# ## 1 · Total and active parameters
#
# An MoE layer keeps E experts, each a small feed-forward network, and a router, a linear map
# that scores every expert for a token. The token runs through its **top-k** experts only, and
# their outputs are added (weighted by the router's scores in a trained MoE). So an MoE has two
# sizes:
#
# - **total parameters (总参数)**: every expert of every layer; they set the memory the weights
#   need;
# - **active parameters (激活参数)**: what one token uses (attention, embeddings, the router and
#   k experts a layer); they set the compute per token.
#
# Mixtral 8x7B from its published configuration (8 experts, top 2, no shared expert):

# %%
MIXTRAL = dict(hidden=4096, layers=32, ffn=14336, experts=8, top_k=2, vocab=32000,
               q_heads=32, kv_heads=8, head_dim=128)  # Mixtral-8x7B's config.json
m = MIXTRAL
attention = m["hidden"] * m["head_dim"] * (2 * m["q_heads"] + 2 * m["kv_heads"])
expert = 3 * m["hidden"] * m["ffn"]  # gate, up and down
always = m["layers"] * (attention + m["hidden"] * m["experts"]) + 2 * m["vocab"] * m["hidden"]
total = always + m["layers"] * m["experts"] * expert
active = always + m["layers"] * m["top_k"] * expert
print(f"Mixtral 8x7B: {total / 1e9:.1f} B parameters, {active / 1e9:.1f} B active per token")
assert abs(total / 46.7e9 - 1) < 0.01 and abs(active / 12.9e9 - 1) < 0.01

# %% [markdown]
# The memory is a 47 B model's, the compute per token a 13 B model's (not 8 x 7 = 56 B: the
# experts share attention and embeddings). DeepSeek-V3 has 671 B parameters and activates 37 B
# (10d, Q33).
#
# Decode is limited by the bytes a step reads (chapter 05). At batch 1 a step reads only the
# chosen experts. A batch of B tokens reads every expert that any of its tokens chose: with
# uniform routing, E(1 − (1 − k/E)^B) of them.

# %%
for batch in (1, 4, 16, 64):
    touched = m["experts"] * (1 - (1 - m["top_k"] / m["experts"]) ** batch)
    read = always + m["layers"] * touched * expert
    print(f"batch {batch:>2}: {touched:4.1f} of 8 experts a layer, a step reads "
          f"{read / 1e9:4.1f} B parameters")
assert m["experts"] * (1 - (1 - m["top_k"] / m["experts"]) ** 16) > 7.9

# %% [markdown]
# From a batch of about 16, every step reads all 47 B parameters: an MoE saves bandwidth at small
# batches and compute at every batch. That is why MoE serving wants large batches and spreads the
# experts over many GPUs, so that each GPU reads only its own experts (section 4).
#
# ## 2 · SmolLM2 cut into experts
#
# A gated MLP computes down(silu(gate x) · up x): a sum over its 1,536 intermediate neurons, each
# adding its own column of `down`. Cut the neurons into 16 groups of 96 and each group is an
# "expert" whose outputs add up to the dense MLP exactly. Three steps make it an MoE:
#
# 1. `shared_first` reorders each MLP's neurons so that group 0 holds those that add the most on
#    average: the **shared expert (共享专家)** candidate, which every token may run, as
#    DeepSeek's shared experts do. The reordering changes no output.
# 2. `fit_router` fits a linear router per layer by least squares, on the MLP inputs of Shakespeare
#    (the fitting text), to predict the log of what each expert adds for a token.
# 3. `MoEMLP` runs each token through the top k of its router's scores. Each expert here adds its
#    output with weight 1, since the experts are pieces of one sum.

# %%
FIT_TOKENS, EVAL_TOKENS = (512, 128) if CI else (2048, 512)
EXPERTS = 16
fit_ids = tokenizer.encode(corpus("english")[:20_000])[:FIT_TOKENS]
eval_ids = held_out_ids(tokenizer, EVAL_TOKENS)  # other text: the CIA World Factbook on Europe
LAYERS = list(range(c.n_layers))
dense_mlps = [layer.mlp for layer in model.layers]
dense_ppl = perplexity(model, eval_ids, window=512)
inputs = mlp_inputs(model, fit_ids, LAYERS)
orders = {i: shared_first(dense_mlps[i], inputs[i], EXPERTS) for i in LAYERS}
assert abs(perplexity(model, eval_ids, window=512) / dense_ppl - 1) < 1e-5  # same function
inputs = mlp_inputs(model, fit_ids, LAYERS)
routers = {i: fit_router(dense_mlps[i], inputs[i], EXPERTS) for i in LAYERS}
print(f"{len(fit_ids)} fitting tokens, {len(eval_ids)} held-out tokens; "
      f"dense perplexity {dense_ppl:.2f}")
show_source(MoEMLP.forward)

# %% [markdown]
# The forward pass computes each expert on its own tokens only: `rows` gathers them, `index_add_`
# adds the results back in place. With all 16 experts on, it must be the dense model:

# %%
def use_moe(layers, k, shared=0, capacity_factor=None):
    """Dense MLPs everywhere, then the MoE on `layers`."""
    for i in LAYERS:
        model.layers[i].mlp = (MoEMLP(dense_mlps[i], routers[i], k, shared, capacity_factor)
                               if i in layers else dense_mlps[i])


use_moe(LAYERS, k=EXPERTS)
every = perplexity(model, eval_ids, window=512)
print(f"every layer an MoE, k = 16 of 16: perplexity {every:.4f} (dense {dense_ppl:.4f})")
assert abs(every / dense_ppl - 1) < 1e-5

# %% [markdown]
# Now fewer experts per token. First in one layer (layer 5), then in eight (layers 4 to 11). The
# last row keeps 4 experts a token but makes one of them the shared expert (1 shared + 3 routed):

# %%
ONE, EIGHT = [5], list(range(4, 12))
SETTINGS = [("layer 5", ONE, k, 0) for k in (8, 4, 2, 1)]
SETTINGS += [("layers 4-11", EIGHT, k, 0) for k in (8, 4)] + [("layers 4-11", EIGHT, 3, 1)]
ppl = {}
for name, layers, k, shared in SETTINGS:
    use_moe(layers, k, shared)
    ppl[name, k, shared] = perplexity(model, eval_ids, window=512)
    who = f"{shared} shared + {k} routed" if shared else f"{k} routed"
    print(f"{name:>11}, {who:>19} of {EXPERTS - shared}: perplexity "
          f"{ppl[name, k, shared]:7.2f} ({ppl[name, k, shared] / dense_ppl:.2f}x dense)")
use_moe([], 1)
assert ppl["layer 5", 1, 0] > ppl["layer 5", 8, 0] > dense_ppl
assert ppl["layers 4-11", 4, 0] > ppl["layers 4-11", 8, 0] > ppl["layer 5", 8, 0]
verdict = "lowers" if ppl["layers 4-11", 3, 1] < ppl["layers 4-11", 4, 0] else "does not lower"
print(f"with 4 experts a token, making one of them shared {verdict} the perplexity")

# %% [markdown]
# One routed layer costs little. Routed layers compound: the error each adds feeds the next, and
# eight layers at 4 of 16 experts lose far more than eight times one. This model was trained
# dense, so every neuron expects all the others to be there; cutting it afterwards (MoEfication,
# Zhang et al., 2022) keeps little of it at low k. A real MoE trains router and experts together:
# each expert learns to be enough alone for the tokens sent to it.
#
# The printed line compares a shared expert with a fourth routed one, at the same compute.
# DeepSeek-V3 keeps a shared expert on purpose (1 shared + 8 of 256 routed): trained always on,
# it learns what every token needs, and the routed experts are free to specialize.
#
# ## 3 · Load, capacity and dropped tokens
#
# Routing is uneven. Layer 5's router on the held-out tokens, 4 experts a token:

# %%
use_moe(ONE, k=4)
held = mlp_inputs(model, eval_ids, [5])[5].to(device)  # what layer 5 receives for those tokens
layer5 = model.layers[5].mlp
load = layer5.route(held).load.cpu()
print(f"tokens per expert: {load.tolist()}")
print(f"busiest {load.max().item()}, mean {load.float().mean():.1f}: the busiest expert has "
      f"{load.max() / load.float().mean():.2f}x the mean")
assert load.sum() == 4 * len(eval_ids) and load.max() > load.float().mean()

# %% [markdown]
# On a GPU per expert, the GPU of the busiest expert sets everyone's pace. Training adds a
# **load-balancing loss** (or, in DeepSeek-V3, a bias on each expert's score, adjusted as it
# trains) to keep the load even; at inference the load still varies with the text.
#
# Engines with fixed-size buffers give each expert a **capacity (容量)**: the capacity factor
# times its fair share, tokens · k / E. Tokens past an expert's capacity are **dropped (丢弃)**
# for that expert: they lose its contribution and keep their residual. `route` fills first
# choices before second ones, earlier tokens first:

# %%
show_source(route)
scores = layer5.scores(held)
drops = {}
for factor in (1.0, 1.25, 1.5, 2.0):
    limit = capacity_of(len(eval_ids), 4, EXPERTS, factor)
    drops[factor] = route(scores, 4, limit).dropped
    print(f"capacity factor {factor:4.2f}: {limit:>4} tokens an expert, "
          f"{drops[factor]:6.2%} of assignments dropped")
assert drops[1.0] > 0 and drops[1.0] >= drops[1.25] >= drops[1.5] >= drops[2.0]

# %% [markdown]
# What dropping does to the model, with layer 5 routed:

# %%
dropped_ppl = {}
for factor in (1.0, 1.5, None):
    use_moe(ONE, k=4, capacity_factor=factor)
    dropped_ppl[factor] = perplexity(model, eval_ids, window=512)
    print(f"capacity factor {factor or 'none':>4}: perplexity {dropped_ppl[factor]:.3f}, "
          f"{model.layers[5].mlp.routing.dropped:6.2%} dropped")
use_moe([], 1)
effect = "raises" if dropped_ppl[1.0] > dropped_ppl[None] else "does not raise"
print(f"dropping {effect} the perplexity here (capacity factor 1 against no limit)")
assert drops[1.0] > 0 and dropped_ppl[1.0] != dropped_ppl[None]  # drops change the output

# %% [markdown]
# A capacity factor of 1 drops the most; 1.25 to 2 is the usual range. Training-time capacity
# keeps shapes static; at inference, engines such as vLLM and SGLang drop nothing: their grouped
# GEMM kernels take however many tokens each expert gets.
#
# **EPLB** (DeepSeek's expert-parallel load balancer) evens the load across GPUs a different
# way: it counts each expert's tokens, gives **hot experts extra replicas** in spare slots, and
# packs the replicas so each GPU gets about the same number of tokens. Layer 5's measured load on
# 4 GPUs, 4 experts each, then with 4 spare slots (5 a GPU):

# %%
show_source(replicate_hot_experts, start="replicas = [1] * n")
plan = replicate_hot_experts(load, gpus=4, spare_slots=4)
mean = sum(plan["before"]) / 4
for when in ("before", "after"):
    print(f"{when:>6}: tokens per GPU {[round(v) for v in plan[when]]}, busiest "
          f"{max(plan[when]) / mean:.2f}x the mean")
print("replicas per expert:", plan["replicas"])
assert max(plan["after"]) < max(plan["before"])

# %% [markdown]
# ## 4 · Expert parallelism on two processes
#
# With expert parallelism each process (one per GPU in production) holds some of every MoE
# layer's experts. Attention runs **data-parallel**: each rank serves its own sequences with a
# full copy of the attention weights (DP attention). At each MoE layer:
#
# 1. each rank routes its own tokens;
# 2. **dispatch (分发)**, an all-to-all: every (token, expert) pair goes to the rank holding the
#    expert. The ranks first exchange how many rows each will send, then the rows;
# 3. each rank runs its experts on the rows it received;
# 4. **combine (合并)**, a second all-to-all: the results go back to the tokens' ranks, which add
#    them up. Shared experts are replicated and run locally.
#
# `compare_expert_parallel` starts two processes joined by `torch.distributed` (gloo). Each loads
# SmolLM2 and gives layers 4 to 11 the neuron orders and routers fitted above; their 15 routed
# experts are split 8 + 7 (the shared one on both), and each rank runs a different sequence. The
# same MoE model in this process gives the reference logits.

# %%
show_source(ExpertParallelMLP.forward,
            start="send_counts", stop="out = torch.zeros_like(flat)")
LENGTH, K, SHARED = (32 if CI else 64), 3, 1
sequences = [eval_ids[:LENGTH], eval_ids[LENGTH:2 * LENGTH]]
use_moe(EIGHT, K, SHARED)
with torch.inference_mode():
    reference = [model(torch.tensor([s], device=device))[0] for s in sequences]
use_moe([], 1)
ep = compare_expert_parallel("smollm2-135m", {i: routers[i] for i in EIGHT}, K, sequences,
                             reference, shared=SHARED, orders=orders)
print(ep)
assert ep.max_abs_diff < 1e-3 and ep.top1_agree

# %% [markdown]
# The logits agree to rounding: each expert's matrix product now sees its rows in a different
# batch, and floating-point sums depend on the order. The bytes follow from the routing:

# %%
rows = 2 * LENGTH * K * len(EIGHT)  # both ranks' tokens, K routed experts, 8 layers
sent = sum(r["dispatched_rows"] for r in ep.ranks)
row_bytes = c.hidden_size * 4  # a float32 hidden state
print(f"{sent} (token, expert) rows dispatched, {rows} by the formula; each moves "
      f"{row_bytes:,} bytes out and {row_bytes:,} back")
for r, info in enumerate(ep.ranks):
    print(f"rank {r}'s experts computed {info['tokens_per_expert']}")
assert sent == rows
assert all(r["combine_bytes"] == r["dispatched_rows"] * row_bytes for r in ep.ranks)

# %% [markdown]
# Every MoE layer moves each token's hidden state k times out and k times back, whatever the
# model's size: DeepSeek-V3 (hidden 7,168, k = 8) dispatches 57 kB a token and layer in FP8 and
# combines 115 kB in BF16. On two CPU processes half of those rows stay on their own rank; on
# 64 GPUs almost all cross the network. Unlike tensor parallelism's all-reduces, all-to-alls
# carry only the tokens each expert needs, which is why expert parallelism scales past one
# machine.
#
# ## 5 · How it is served
#
# - **Wide expert parallelism.** DeepSeek-V3's decode runs on many GPUs with a few experts
#   each, so every GPU reads only its own experts' weights at a large total batch. Attention
#   runs data-parallel beside it (DP attention): replicating attention costs memory for its
#   weights but no communication, and each rank keeps the KV cache of its own requests.
# - **DeepEP** is DeepSeek's library of dispatch and combine kernels: high-throughput kernels
#   for prefill (NVLink inside a node, RDMA between nodes), low-latency kernels for decode that
#   overlap the transfer with computation, FP8 dispatch to halve the bytes.
# - **EPLB** replicates hot experts from measured loads and places them to balance the GPUs
#   (section 3); **two-batch overlap** runs one micro-batch's attention while another's
#   all-to-all is on the wire.
# - **Grouped GEMM**: each expert's tokens are gathered (sorted by expert, as `route` orders
#   them) and one kernel multiplies every expert's matrix with its own rows.
#
# Interview checklist: total against active parameters; why batch-1 decode is cheap and large
# batches read everything; the two all-to-alls and their bytes (hidden × k per token and layer);
# capacity factor and dropped tokens; the load-balancing loss and EPLB's replicas; DP attention
# with EP.

# %%
print(f"dense perplexity {dense_ppl:.2f}; layer 5 at k = 4: {ppl['layer 5', 4, 0]:.2f}; "
      f"layers 4-11 at k = 4: {ppl['layers 4-11', 4, 0]:.2f}")
print(f"layer 5's busiest expert: {load.max() / load.float().mean():.2f}x the mean; capacity "
      f"factor 1 drops {drops[1.0]:.1%}")
print(f"expert parallel on 2 processes: max logit difference {ep.max_abs_diff:.1e}")
print(f"{load_average()} at the end of this run")
