# %% [markdown]
# # 05b · Appendix: inside the fast engine (optional)
#
# Lesson 05 measured the fast path that `minillm.load` returns and found batch-1 decode bound by
# memory bandwidth. This optional appendix opens that engine: what `minillm.fast.optimize`
# changes in the model chapter 02 built, and what a compiler (`torch.compile`) adds on top. No
# later lesson depends on it.

# %%
import os

import torch

import minillm
from minillm import fast as fast_engine
from minillm.course import show_source
from minillm.generation.agreement import agree
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.utils.devices import Timer, describe, pick_device

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = pick_device("auto")
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
#
# ## 2 · Compiling the decode step
#
# The source text names TorchScript among specialised inference engines; its successor is
# `torch.compile`, which traces a function and generates fused kernels (C++ on a CPU, Triton on a
# GPU). We compile one layer's feed-forward block (RMSNorm, the fused gate-up multiply, SiLU, the
# down multiply, the residual add) and time it against eager mode. Compiling takes a while the
# first time, so this cell runs only outside CI.

# %%
block = fast.layers[0]  # the fast model's first LlamaBlock: fused gate-up, FastLinear layers
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
    with Timer(device) as compiling:
        compiled = torch.compile(mlp_block)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), mlp_block(x), atol=1e-4, rtol=1e-4)
    print(f"compiling took {compiling.seconds:.0f} s")
    timed = compare(calls(mlp_block, x), calls(compiled, x), repeats=5, device=device)
    eager_t, compiled_t = (sorted(s)[len(s) // 2] / 200 for s in (timed.a, timed.b))
    print(f"eager {1e6 * eager_t:.0f} us, compiled {1e6 * compiled_t:.0f} us per call; compiled "
          f"over eager: {timed.spread_text()}; {load_average()}")
    faster = timed.above(1.0)
    print("verdict:", {False: "the compiled block is faster here", True: "the compiled block is "
                       "slower here", None: TOO_NOISY}[faster])

# %% [markdown]
# A compiler fuses the small element-wise operations (the norm, SiLU, the multiply, the add) into
# fewer kernels; it cannot make the two big matrix-vector products read memory faster. At batch 1
# on a CPU those products dominate, so expect a small gain at most; on a GPU, where each tiny
# kernel costs a launch, compiling (and CUDA graphs, `mode="reduce-overhead"`) matters far more.
#
# ## Summary
#
# - `minillm.fast.optimize` keeps the network chapter 02 built and changes only what its linear
#   layers hold: fused matrices (q, k, v; gate and up), each stored in the layout and dtype that
#   multiplies fastest here, with minillm's own C kernels on a CPU.
# - The readable and the fast model share the forward contract, so every runner takes either;
#   they give the same greedy tokens.
# - A compiler fuses the small element-wise operations between the big products; at batch 1 on
#   a CPU the products, which read the weights, keep most of the time.
