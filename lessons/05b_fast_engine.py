# %% [markdown]
# # 05b · Appendix: inside the fast engine (optional)
#
# Lesson 05 measured the fast path that `minillm.load` returns and found batch-1 decode bound by
# memory bandwidth. This optional appendix opens that engine: what `minillm.fast.optimize`
# changes in the model chapter 02 built, what sets the pace of its step on a GPU, and what a
# compiler (`torch.compile`) adds on top. No later lesson depends on it.

# %%
import os

import torch

import minillm
from minillm import fast as fast_engine
from minillm.course import show_source
from minillm.generation.agreement import agree
from minillm.generation.kv_cache import KVCache
from minillm.measure.bandwidth import read_bandwidth
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.model.memory import bytes_per_token
from minillm.utils.devices import Timer, describe, pick_device

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
for key, value in describe().items():
    print(f"{key:>12}: {value}")

model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)  # the readable one
fast = fast_engine.optimize(model)
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Why is the sky blue?"}], add_generation_prompt=True)
N_NEW = 16 if CI else 48

# %% [markdown]
# ## 1 · What `optimize` changes
#
# `minillm.fast.optimize` does not write a second model. It copies the same network, the same
# `LlamaBlock`s and `Attention` layers the lessons opened up, and changes what the linear layers
# hold: q, k and v fused into one matrix (one multiply instead of three, `Attention.fuse`), gate
# and up fused, and every matrix a `FastLinear` stored in the layout that multiplies fastest here
# (it times both), the LM head included. Here is one layer of each:

# %%
print(model.layers[0])
print(fast.layers[0])

# %% [markdown]
# The attention layer's projection step is the one place that knows about the fusion:

# %%
show_source(type(fast.layers[0].attn).project)

# %% [markdown]
# and `FastLinear.forward` is the multiply itself, with its layout, the bias added inside the
# multiplication (`addmm`), and the narrow-weight paths:

# %%
show_source(fast_engine.FastLinear.forward)

# %% [markdown]
# The same forward contract, so `generate` runs both, with the same greedy tokens:

# %%
plain = minillm.generate(model, tokenizer, prompt, max_new_tokens=N_NEW)
out = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
print(f"readable minillm: {plain.metrics}")
print(f"fast minillm:     {out.metrics}")
same = sum(a == b for a, b in zip(plain.token_ids, out.token_ids))
print(f"layout chosen: {fast.layout}; the same token at {same} of {len(out.token_ids)} positions")
# float32 sums in another order (fused matrices): ~1e-4 apart, so exact on a CPU
assert agree(model, out.prompt_token_ids, plain.token_ids[:16], out.token_ids[:16])

# %% [markdown]
# `python -m minillm bench latency` compares the fast engine with transformers' `generate()` on
# the same weights, in the same process, interleaved: TTFT, TPOT, decode and prefill tokens per
# second, the ratios, and lesson 05's bandwidth bound, for float32, bf16 and int8, and llama.cpp
# where it is installed. Run it in a terminal (it takes a few minutes).

# %% [markdown]
# ## 2 · On a GPU: launches, not bytes
#
# Lesson 05 §7 argued that on a GPU a small model's decode step is set by its kernel launches,
# not by the bytes it reads. When this appendix runs on a CUDA GPU, the cell below measures it:
# the CPU's and the GPU's decode speed, the step's time against the time its bytes take at the
# measured bandwidth, and the kernels one step launches.

# %%
if device.type == "cuda":
    from torch.profiler import ProfilerActivity, profile, supported_activities

    bandwidth = read_bandwidth(device)
    n_bytes = bytes_per_token(fast)
    cpu_model = minillm.load("smollm2-135m", device="cpu")[0]
    rows = {}
    for name, engine in [("cpu", cpu_model), ("cuda", fast)]:
        minillm.generate(engine, tokenizer, prompt, max_new_tokens=2)  # warm up
        r = minillm.generate(engine, tokenizer, prompt, max_new_tokens=N_NEW)
        rows[name] = r
        print(f"{name:>5}: {r.metrics}")
    gpu_tpot = rows["cuda"].metrics.tpot
    speeds = {name: r.metrics.decode_tokens_per_second for name, r in rows.items()}
    print(f"GPU / CPU decode speed: {speeds['cuda'] / speeds['cpu']:.1f}x")
    print(f"bytes alone would take {1000 * n_bytes / bandwidth:.2f} ms a token at the measured "
          f"{bandwidth / 1e9:.0f} GB/s; the step takes {1000 * gpu_tpot:.2f} ms "
          f"({gpu_tpot * bandwidth / n_bytes:.0f}x the bandwidth bound)")
    if ProfilerActivity.CUDA in supported_activities():  # a PyTorch built with CUDA's profiler
        cache = KVCache.for_model(fast, 1, 64)
        step_ids = torch.tensor([[1, 2, 3, 4]], device=device)
        with torch.inference_mode():
            fast(step_ids, cache=cache)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fast(step_ids[:, :1], cache=cache)
                torch.cuda.synchronize()
        launches = sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")
        print(f"one decode step launched {launches} GPU kernels: about "
              f"{1e6 * gpu_tpot / max(launches, 1):.1f} us each, all told")
    else:
        print("this PyTorch's profiler cannot see CUDA kernels, so the launches go uncounted")
else:
    print(f"No CUDA GPU here ({device}); this cell measures when the appendix runs on one "
          "(scripts/gpu_check.sh runs the whole course on a CUDA machine).")

# %% [markdown]
# A **CUDA graph** (CUDA 图) removes most of those launches: the GPU records one decode step's
# kernels once and replays them all with a single launch. A replay runs exactly the recorded
# kernels on the same memory, so the step may not depend on anything Python decides per token:
# the new token and its position sit in GPU tensors, and the new key and value are written at
# that position tensor. minillm's step keeps attention simple: it reads every slot of its
# cache's bucket with the later ones masked out
# (`show_source(minillm.fast.graph.StaticDecodeStep.__call__)`), so at token 10 of a 256-slot
# bucket it still reads all 256 slots. That is minillm's shortcut, not a rule of graphs.
# Serving engines keep each sequence's length (and its block table) in device tensors too, so
# the attention kernel inside the graph reads only the filled part of each cache; they capture
# one graph per padded batch size (1, 2, 4, 8, ... requests: a batch of 5 replays the graph of
# 8); and vLLM V1 began with piecewise graphs: the layers' matrix multiplies, norms and
# activations are captured, while attention, whose lengths change every step, runs between
# the pieces, outside any graph (it has since added whole-step graphs for decode batches
# where the attention kernel allows them).
#
# minillm's fast path replays its graph for every batch-1 decode step on CUDA;
# `fast.fused_decode.cuda_graph = False` switches it off. The graphs belong to the model, one
# per bucket of cache sizes (256 slots, 512, ...): the warm-up run below captures, and every
# later generation of that size replays, its cache's keys and values moved into the graph's
# buffers.

# %%
if device.type == "cuda":
    with_graph = {}
    for on in (True, False):
        fast.fused_decode.cuda_graph = on
        minillm.generate(fast, tokenizer, prompt, max_new_tokens=2)  # warm up
        with_graph[on] = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
        print(f"CUDA graph {'on ' if on else 'off'}: {with_graph[on].metrics}")
    fast.fused_decode.cuda_graph = True
    tpot_on, tpot_off = (with_graph[on].metrics.tpot for on in (True, False))
    print(f"TPOT {1000 * tpot_off:.2f} ms -> {1000 * tpot_on:.2f} ms with the graph: "
          f"{tpot_off / tpot_on:.1f}x faster a token")
    print("same tokens:", agree(fast, with_graph[True].prompt_token_ids,
                                with_graph[True].token_ids, with_graph[False].token_ids),
          f"(compared {minillm.generation.agreement.rule(fast)})")
else:
    print(f"No CUDA GPU here ({device}): the graph is a CUDA feature, so this cell measures "
          "only on one.")

# %% [markdown]
# ## 3 · Compiling the decode step
#
# The source text names TorchScript among specialised inference engines; its successor is
# `torch.compile`, which traces a function and generates fused kernels (C++ on a CPU, Triton on a
# GPU). We compile one layer's feed-forward block of the readable model (RMSNorm, the gate and up
# multiplies, SiLU, the down multiply, the residual add: PyTorch operations a compiler can trace)
# and time it against eager mode, in turns. The fast model's block would not do: it calls
# minillm's own C kernels, which the compiler cannot look into. On a CPU both run on one thread:
# a call this short is split among threads that wait for one another, and a thread on a core
# another program keeps busy stretches some calls and not others. Compiling takes a while the
# first time, so this cell runs only outside CI.

# %%
block = model.layers[0]  # the readable model's first LlamaBlock: plain PyTorch layers
hidden_size = model.config.hidden_size


def mlp_block(x):
    return x + block.mlp(block.mlp_norm(x))


def calls(fn, x, n=200):
    """A function that calls `fn(x)` n times: one timing covers many short calls."""
    def run():
        with torch.inference_mode():
            for _ in range(n):
                fn(x)
    return run


x = torch.randn(1, hidden_size, device=device)
if CI:
    print("skipped under CI: compiling takes tens of seconds on a small CPU")
else:
    threads = torch.get_num_threads()
    if device.type == "cpu":  # the compiled code keeps the thread count it was compiled with
        torch.set_num_threads(1)
    try:
        with Timer(device) as compiling:
            compiled = torch.compile(mlp_block)
            with torch.inference_mode():
                torch.testing.assert_close(compiled(x), mlp_block(x), atol=1e-4, rtol=1e-4)
        print(f"compiling took {compiling.seconds:.0f} s")
        timed = compare(calls(mlp_block, x, 500), calls(compiled, x, 500), repeats=7,
                        device=device)
    finally:
        torch.set_num_threads(threads)
    eager_t, compiled_t = (sorted(s)[len(s) // 2] / 500 for s in (timed.a, timed.b))
    print(f"eager {1e6 * eager_t:.0f} us, compiled {1e6 * compiled_t:.0f} us per call; compiled "
          f"over eager: {timed.spread_text()}; {load_average()}")
    # every repetition within 15% of eager's time is the finding, whichever side each fell on
    faster = "even" if timed.near(1.0) else timed.above(1.0)
    print("verdict:", {False: "the compiled block is faster here", True: "the compiled block is "
                       "slower here", "even": "the compiled block is about as fast as the eager "
                       "one here (within 15%)", None: TOO_NOISY}[faster])

# %% [markdown]
# A compiler fuses the small element-wise operations (the norm, SiLU, the multiply, the add) into
# fewer kernels; it cannot make the three big matrix-vector products read memory faster. At
# batch 1 on a CPU those products take most of the time, so the gain, where the verdict finds
# one, is small. On a GPU, where each tiny kernel costs a launch, compiling (and CUDA graphs,
# `mode="reduce-overhead"`) matters far more.
#
# ## 4 · The host's share of a step: async scheduling, and graph batch sizes
#
# A serving engine's step is more than the model's forward pass. Before it, the scheduler picks
# the requests and the host builds the batch's inputs (token ids, positions, block tables);
# after it, the host samples each row's token and finishes the requests that ended. On a GPU
# the forward pass runs on the device while the host waits, so a step costs host + device time.
# **Async scheduling** (异步调度) prepares step n+1 on the host while the GPU runs step n: the
# step then costs the larger of the two, not their sum (vLLM V1's `--async-scheduling`,
# SGLang's overlap scheduler). The cell serves a batch of requests of different lengths on
# minillm's engine and times each part of every step.

# %%
from collections import defaultdict  # noqa: E402

from minillm.decoding import GenerationConfig  # noqa: E402
from minillm.engine import Engine  # noqa: E402

spent = defaultdict(float)


def timed(name, fn):
    """`fn`, adding its seconds (the device synchronized at both ends) to spent[name]."""
    def run(*args, **kwargs):
        with Timer(device) as t:
            result = fn(*args, **kwargs)
        spent[name] += t.seconds
        return result
    return run


def timed_step(step):
    """The engine's step, noting (host seconds, forward seconds) of each step it records."""
    def run():
        forward, recorded = spent["forward"], len(engine.steps)
        with Timer(device) as t:
            outputs = step()
        if len(engine.steps) > recorded:
            per_step.append((t.seconds - (spent["forward"] - forward), spent["forward"] - forward))
        return outputs
    return run


SEQS = 8 if CI else 16
questions = ["Why is the sky blue?", "What is a prime number?", "How do plants grow?",
             "What is the capital of France?", "Why do we sleep?", "How does a bike stay up?",
             "What is rain made of?", "Why is the sea salty?"]
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": questions[i % 8]}],
                                         add_generation_prompt=True) for i in range(SEQS)]
# different lengths, so requests end at different steps and the batch shrinks as they do
configs = [GenerationConfig(max_new_tokens=N_NEW // 4 + (i * N_NEW) // SEQS) for i in range(SEQS)]
engine = Engine(fast, tokenizer, max_num_seqs=SEQS, record=True)
per_step = []
engine.scheduler.schedule = timed("schedule", engine.scheduler.schedule)
engine.step = timed_step(engine.step)
fast.forward = timed("forward", fast.forward)  # the model's own pass, inside each step
try:
    served = engine.generate(prompts, configs)
finally:
    del fast.forward, engine.step  # the model and the engine as they were
decode = [times for times, step in zip(per_step, engine.steps)
          if all(kind == "decode" for _, _, kind in step.items)]
host, forward = (sum(column) / len(decode) for column in zip(*decode))
print(f"{SEQS} requests, {sum(len(o.token_ids) for o in served)} tokens in "
      f"{len(engine.steps)} steps, {len(decode)} of them decode only; a decode step: the "
      f"forward pass {1000 * forward:.1f} ms, the host {1000 * host:.2f} ms (scheduling "
      f"{1000 * spent['schedule'] / len(engine.steps):.2f} ms of it, on average)")
print(f"the host's share of a decode step: {host / (host + forward):.1%}; overlapped with the "
      f"forward pass, a step would take max(host, forward) = {1000 * max(host, forward):.1f} ms "
      f"instead of {1000 * (host + forward):.1f} ms")
assert len(per_step) == len(engine.steps) and 0 < host < host + forward

# %% [markdown]
# On this CPU the forward pass runs on the same cores as the host's work, so nothing overlaps
# here: the share is what async scheduling would hide if the forward pass ran on a GPU. There it
# matters more than the share suggests: a GPU runs a small model's forward pass far faster
# than a CPU, while the host's Python takes as long as here, so the host's share grows. Async
# scheduling has a price: step n+1 is planned before step n's tokens are known, so a request that
# ends at step n still holds its slot in step n+1 (one wasted row), and anything that needs the
# new token to plan (a grammar, a stop string checked on the host) must wait or be handled on
# the device.
#
# A CUDA graph has the same rule as async scheduling: everything is decided before the step
# runs, including its shape. A graph is captured for one batch size, so engines capture a list
# of sizes and pad each step up to the next one: vLLM's default list starts 1, 2, 4, 8 and then
# goes up in steps of 8; a batch of 13 replays the graph of 16 with 3 empty rows. Fewer sizes
# mean fewer graphs to capture (each takes capture time and some memory); more sizes mean less
# padding. The step records of the run above say how many requests each step ran:

# %%
from minillm.engine.capture_sizes import graph_batch_size, padded_rows  # noqa: E402

show_source(graph_batch_size)
sizes_run = [len(step.items) for step in engine.steps]
lists = {"every size": list(range(1, SEQS + 1)),
         "powers of two (vLLM's list begins so)": [2 ** i for i in range(SEQS.bit_length())
                                                   if 2 ** i <= SEQS],
         "batch 1 and the largest": [1, SEQS]}
print(f"batch sizes the {len(sizes_run)} steps ran: {sorted(set(sizes_run))}")
padding = {}
for name, capture_sizes in lists.items():
    padding[name] = padded_rows(sizes_run, capture_sizes) / sum(sizes_run)
    print(f"{name:>38}: {len(capture_sizes):>2} graphs, {padding[name]:.0%} more rows run than "
          f"the requests need")
assert padding["every size"] == 0 <= padding["powers of two (vLLM's list begins so)"] \
    <= padding["batch 1 and the largest"]

# %% [markdown]
# ## Summary
#
# - `minillm.fast.optimize` keeps the network chapter 02 built and changes only what its linear
#   layers hold: fused matrices (q, k, v; gate and up), each stored in the layout and dtype that
#   multiplies fastest here, with minillm's own C kernels on a CPU.
# - The readable and the fast model share the forward contract, so every runner takes either;
#   they give the same greedy tokens.
# - On a GPU, a small model's decode step is set by its kernel launches more than by its bytes.
# - A compiler fuses the small element-wise operations between the big products; at batch 1 on
#   a CPU the products, which read the weights, keep most of the time.
# - A serving step is host work (scheduling, inputs, sampling) plus the forward pass; async
#   scheduling overlaps the host's work for the next step with the device's pass, so a step
#   costs the larger of the two. CUDA graphs are captured per batch size, and a step pads up to
#   the next captured size: fewer graphs, more padding.
