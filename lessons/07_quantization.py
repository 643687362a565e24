# %% [markdown]
# # 07 · Quantization: smaller weights, measured on the real model
#
# **Quantization (量化)** stores a model's weights with fewer bits: 16-bit floats instead of 32,
# or 8-bit and 4-bit integers with a few float scales. This chapter builds int8 and int4 weights
# into minillm, decodes the 4-bit format the course model actually ships in, and measures on
# SmolLM2-135M what each scheme costs in quality and what it buys in memory and speed.
#
# Every number below is measured in this run, on this machine. When the environment variable `CI`
# is set (the course's tests), the sizes shrink.

# %%
import copy
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm import quant
from minillm.measure.bandwidth import read_bandwidth
from minillm.measure.comparison import load_average
from minillm.utils.columns import Label  # pads a label by its width on screen
from minillm.utils.devices import best_time
from minillm.fast import optimize
from minillm.tools.bench.quantization import benchmark, held_out_ids, machine, plot_benchmark, table

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
# The readable model (fast=False): this chapter swaps and inspects its linear layers one by one.
model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)
n_params = sum(p.numel() for p in model.parameters())
print(f"{n_params / 1e6:.1f} M parameters on {device}; {torch.get_num_threads()} threads")

# %% [markdown]
# ## 1 · Why quantize: memory and bandwidth
#
# A weight in float32 (fp32) takes 4 bytes; in bfloat16 (bf16) or float16 (fp16) 2; in int8 1;
# in int4 half a byte (plus the scales). Memory is the first reason: a model of n billion
# parameters needs about 2n GB in fp16, so halving the bytes halves the machine it needs.
#
# Speed is the second. Chapter 05 showed that a decode step at batch 1 reads *every* weight once
# to make one token, so decode speed is capped by memory bandwidth (内存带宽) / bytes of weights.
# Fewer bytes, higher cap:

# %%
bandwidth = read_bandwidth(device)
print(f"this machine reads about {bandwidth / 1e9:.1f} GB/s")
for name, bits in [("fp32", 32), ("bf16/fp16", 16), ("int8", 8 + 32 / 576),
                   ("int4 (Q4_1)", 5)]:
    gb = n_params * bits / 8 / 1e9
    print(f"{name:>12}: {gb:.3f} GB of weights -> at most {bandwidth / 1e9 / gb:7.1f} tokens/s")

# %% [markdown]
# The cap assumes the kernel reads the small weights *directly*. Whether it does is the whole
# story of section 6.
#
# ## 2 · Floats with fewer bits: fp16 and bf16
#
# Both 16-bit formats keep a sign, an exponent and a mantissa (尾数). fp16 stores 10 mantissa
# bits and 5 exponent bits (finer steps, small range); bf16 stores 7 mantissa bits and keeps
# fp32's 8 exponent bits (the same range, coarser steps). fp32 stores 23. `torch.finfo` shows the
# trade:

# %%
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):>15}: {info.bits} bits, largest {info.max:.3g}, "
          f"step after 1.0 = {info.eps:.3g}")
w = model.layers[0].mlp.gate_proj.weight.detach().float().cpu()
for dtype in (torch.bfloat16, torch.float16):
    err = (w.to(dtype).float() - w).abs()
    print(f"{str(dtype):>15}: a real weight matrix rounds with mean error {err.mean():.2e}")

# %% [markdown]
# ## 3 · Integers: absmax, and scale with minimum, on a small tensor
#
# **absmax** (对称量化, symmetric): one scale s = max|x| / 127 maps x to integers q = round(x / s)
# in -127..127, and back to q · s. Zero stays exactly zero.
#
# **Scale and minimum** (非对称量化, asymmetric): s = (max − min) / (2^bits − 1),
# q = round((x − min) / s) in 0..2^bits − 1, back to q · s + min. It uses every code when the
# numbers are not centred on zero. GGUF's Q4_1 stores exactly this: a scale d and a minimum m.
# (minillm's functions for it carry the common name `zeropoint_quantize`.)

# %%
x = torch.tensor([-1.2, -0.4, 0.0, 0.3, 0.9, 2.5])
q, scale = quant.absmax_quantize(x, bits=8)
print("absmax int8   q =", q.flatten().tolist(), f" scale = {scale.item():.5f}")
print("  back:", [round(v, 4) for v in quant.absmax_dequantize(q, scale, x.shape).tolist()])
q, scale, lo = quant.zeropoint_quantize(x, bits=4, granularity="tensor")
print("scale and minimum, 4 bits: q =", q.flatten().tolist(),
      f" scale = {scale.item():.4f}, minimum = {lo.item()}")
min_back = quant.zeropoint_dequantize(q, scale, lo, x.shape)
print("  back:", [round(v, 4) for v in min_back.tolist()])
print("4-bit absmax error:", (quant.roundtrip(x, "absmax", 4) - x).abs().max().item(),
      " 4-bit scale-and-minimum error:", (min_back - x).abs().max().item())

# %% [markdown]
# A true **zero-point** (零点) is different: an *integer* code z that stands for 0.0, with
# x ≈ s · (q − z) and z = round(−min / s). It is the asymmetric scheme of PyTorch's and ONNX's
# int8 (`torch.quantize_per_tensor(x, scale, zero_point, ...)`). Because z is a whole code, 0.0
# comes back exactly (padding, ReLU outputs and pruned weights stay 0); the minimum of Q4_1 is
# any float, so 0.0 lands between two codes:

# %%
s_, z = scale.item(), round(-lo.item() / scale.item())  # z: the integer code of 0.0
q_z = (torch.round(x / s_) + z).clamp(0, 15)
zp_back = (q_z - z) * s_
print(f"zero-point z = {z}; q =", q_z.int().tolist())
print("  back:", [round(v, 4) for v in zp_back.tolist()])
at_zero = x == 0
print(f"0.0 comes back as {min_back[at_zero].item():.4f} with scale and minimum, "
      f"{zp_back[at_zero].item():.4f} with a zero-point; largest error "
      f"{(min_back - x).abs().max().item():.4f} and {(zp_back - x).abs().max().item():.4f}")

# %% [markdown]
# The source of the scale matters more than the formula. One scale per tensor (per-tensor) lets a
# single large number spoil the resolution of all the others; one per output row (per-channel,
# 逐通道) or per group of 32 numbers in a row (group-wise, 分组) fits each scale to fewer numbers.
# On a real weight matrix of the model:

# %%
w = model.layers[5].mlp.down_proj.weight.detach().float().cpu()
results = {}
for bits, method in [(8, "absmax"), (4, "zeropoint")]:
    for granularity in ("tensor", "channel", "group"):
        back = quant.roundtrip(w, method, bits, granularity, 32)
        results[(bits, granularity)] = (back - w).pow(2).mean().sqrt().item()
fig, ax = plt.subplots(figsize=(6, 3))
labels = [f"int{b}\n{g}" for b, g in results]
ax.bar(labels, list(results.values()), color=["C0"] * 3 + ["C1"] * 3)
ax.set(ylabel="RMS error", yscale="log", title="layers.5.mlp.down_proj: error by granularity")
plt.show()

# %% [markdown]
# ## 4 · minillm's quantized layers
#
# minillm keeps two storage formats. **int8** is weight-only (仅权重量化), symmetric, one scale per
# output channel. **int4** cuts each row into groups of 32 with a float16 scale and minimum each,
# two 4-bit numbers a byte: GGUF Q4_1's scheme, 5 bits a weight.

# %%
show_source(quant.quantize_int8)
show_source(quant.quantize_int4)

# %% [markdown]
# A quantized linear layer keeps the small numbers and, in its plain teaching path, rebuilds the
# float weight on every call before an ordinary matrix multiply. `quantize(model, scheme)` swaps
# every `nn.Linear` of a copy of the model for one; `minillm.model` itself does not change.

# %%
show_source(quant.QuantizedLinear.forward_dequantize)
show_source(quant.quantize)

# %%
int8_model = minillm.quantize(model, "int8")
print(int8_model.layers[0].mlp)
print(f"weights: fp32 {quant.weight_bytes(model) / 1e6:.1f} MB -> int8 "
      f"{quant.weight_bytes(int8_model) / 1e6:.1f} MB (linear layers "
      f"{quant.weight_bytes(model, linear_only=True) / 1e6:.1f} -> "
      f"{quant.weight_bytes(int8_model, linear_only=True) / 1e6:.1f} MB)")

# %% [markdown]
# The embedding table stays in fp32: SmolLM2 ties it to the LM head (the same matrix turns the
# last hidden state into logits), and minillm reads it as a plain tensor. It is a fifth of the
# parameters, which is why the whole model shrinks less than its linear layers.
#
# ## 5 · The course model's file, decoded by hand
#
# The GGUF file stores every linear weight as Q4_1 blocks of 20 bytes: a float16 scale d, a
# float16 minimum m, and 16 bytes holding 32 numbers of 4 bits (byte j: weight j in the low
# nibble, weight j + 16 in the high one). The first block of layer 0's gate projection:

# %%
path = minillm.model_file("smollm2-135m")
blocks = quant.q4_1_blocks(path, "blk.0.ffn_gate.weight")
fields = quant.gguf_q4_1.block_fields(blocks[0])
print(f"{len(blocks)} blocks; block 0 bytes: {fields['hex']}")
print(f"d = {fields['d']}, m = {fields['m']}")
print("q =", fields["q"])

# %%
show_source(quant.decode_q4_1_block)

# %%
by_hand = quant.decode_q4_1_block(blocks[0])
by_gguf = quant.gguf_dequantize_q4_1(blocks[:1])[0]
print(by_hand[:6])
assert np.array_equal(by_hand.view(np.uint32), by_gguf.view(np.uint32))
ours = model.layers[0].mlp.gate_proj.weight[0, :32].detach().cpu().numpy()
assert np.array_equal(by_hand, ours)
print("by hand == gguf's dequantize, bit for bit, == minillm's weight row 0, numbers 0..31")

# %% [markdown]
# So minillm's "fp32" model is the Q4_1 file expanded: every weight already lies on a Q4_1 grid.
# int4 with the same groups of 32 finds that grid again almost exactly; groups of 64 straddle two
# blocks and must round. Keep this in mind when reading the table: the fp32 baseline *is* a 4-bit
# model, so "int4" here measures re-quantization, and "int4 g64" shows what coarser groups cost.
# No 16-bit SmolLM2 is on this machine, so this chapter never measures what int4 costs a 16-bit
# model: the course's baseline is the Q4_1 file itself.

# %%
w = model.layers[0].mlp.gate_proj.weight.detach().float().cpu()
for g in (32, 64):
    back = quant.dequantize_int4(*quant.quantize_int4(w, g))
    print(f"int4, groups of {g}: max |error| {(back - w).abs().max().item():.2e}")

# %% [markdown]
# ## 6 · The measurement: memory against quality against speed
#
# Every scheme on the same held-out English text (`data/factbook_europe.txt`, World Factbook
# country summaries, public domain, none of it in the model's prompts):
#
# - **perplexity (困惑度)**: exp(mean negative log-likelihood of each next token); lower is better;
# - **logit error** against fp32 (maximum and mean |Δ| over every position and vocabulary entry)
#   and **top-1 agreement**: the share of positions whose most likely token is fp32's;
# - **prefill and decode tokens/s** from `minillm.generate`'s metrics (chapter 05).
#
# "int8" (`minillm.quantize`, layer by layer; the LM head stays float32) runs minillm's int8
# kernel for decode steps; "int8 dequant" rebuilds the float weight every call (section 7).

# %%
if CI:
    sizes = dict(text_tokens=64, window=64, prompt_tokens=8, new_tokens=3)
    rows = ("fp32", "bf16", "fp16", "int8", "int8 dequant", "int4")
else:
    sizes = dict(text_tokens=256, window=256, prompt_tokens=32, new_tokens=8)
    rows = ("fp32", "bf16", "fp16", "int8", "int8 dequant", "int4", "int4 g64")
measured = benchmark(model, tokenizer, rows, **sizes)
display(Markdown(table(measured)))

# %%
fig = plot_benchmark(measured, f"SmolLM2-135M, {sizes['text_tokens']} held-out tokens")
plt.show()

# %% [markdown]
# Read the quality columns first: the 16-bit floats and int8 barely move the logits; int4 with
# GGUF's groups returns the same weights (section 5); coarser groups cost more. Then the speed
# columns, which on a CPU usually do *not* follow the bytes. The next section shows why.

# %% [markdown]
# ## 7 · Why transformers' int8 is slower than fp16, and minillm's int8 paths
#
# Hugging Face's int8 inference is often clearly slower than fp16, with much less memory.
# What transformers runs for `load_in_8bit=True` is **LLM.int8()**
# (Dettmers et al., 2022; the bitsandbytes library), and it is not a weight-only scheme: it
# quantizes the *activations* as well, so that the multiply itself is int8 × int8, summed in
# int32. Large models have a few **outlier features** (离群特征): hidden dimensions whose
# activations are far larger than the rest. One scale per row would let them spoil every other
# number of the row, so LLM.int8() splits each matrix product in two:
#
# 1. find the input columns where some |x| exceeds a threshold (6.0);
# 2. multiply those columns of x, and the matching columns of the weight, in fp16;
# 3. quantize every other column, each row of x with its own absmax scale, and multiply with
#    the int8 weight (one scale per output row), summing in int32;
# 4. scale the int32 result back and add the fp16 part.
#
# Half a dozen operations (kernel launches on a GPU) where fp16 runs one multiply: at batch 1
# they cost more than the int8 weight saves. bitsandbytes needs a CUDA GPU, so we run its
# arithmetic written out in PyTorch (`minillm.quant.llm_int8`):

# %%
from minillm.quant.llm_int8 import THRESHOLD, LLMInt8Linear, outlier_columns  # noqa: E402

show_source(LLMInt8Linear.__call__)

# %% [markdown]
# First, what it would find in SmolLM2: the activations entering every linear layer on a held-out
# text, and the features (input columns) where some value passes the threshold of 6.0 (the
# largest over the 30 layers of each kind):

# %%
linear_inputs = {}  # layer name -> the input it saw
hooks = [m.register_forward_pre_hook(
    lambda mod, args, name=name: linear_inputs.__setitem__(name, args[0][0].detach().cpu()))
    for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
sample = torch.tensor([held_out_ids(tokenizer, 64 if CI else 256)], device=device)
with torch.inference_mode():
    model(sample)
for h in hooks:
    h.remove()
by_kind = {}
for name, x_in in linear_inputs.items():
    kind = name.split(".")[-1]
    cols = outlier_columns(x_in, THRESHOLD)
    row_share = (x_in.abs() > THRESHOLD).any(-1).float().mean().item()
    n_cols, share, biggest = by_kind.get(kind, (0, 0.0, 0.0))
    by_kind[kind] = (max(n_cols, len(cols)), max(share, row_share),
                     max(biggest, x_in.abs().max().item()))
for kind, (n_cols, share, biggest) in by_kind.items():
    width = linear_inputs[next(n for n in linear_inputs if n.endswith(kind))].shape[-1]
    print(f"{kind:>10} inputs: largest |x| {biggest:7.1f}; up to {n_cols:>3} of {width} features "
          f"over {THRESHOLD}, touching up to {share:.0%} of the tokens")

# %% [markdown]
# Then its accuracy on one real layer and input: the linear layer whose input holds the largest
# value. The product with the int8 weight alone is the baseline; LLM.int8() with and without the
# outlier split; all against float32:

# %%
probe = max(linear_inputs, key=lambda name: linear_inputs[name].abs().max().item())
x_probe = linear_inputs[probe].float()
w_probe = dict(model.named_modules())[probe].weight.detach().float().cpu()
exact = x_probe @ w_probe.T
weight_only = x_probe @ quant.dequantize_int8(*quant.quantize_int8(w_probe)).T
llm8 = LLMInt8Linear(w_probe)
errors = {
    "int8 weights, float activations": weight_only,
    "LLM.int8(): outliers in fp16": llm8(x_probe),
    "int8 x int8, no outlier split": llm8(x_probe, decompose=False),
}
outlier_cols = outlier_columns(x_probe).numel()
print(f"{probe}: {outlier_cols} outlier feature(s) of {x_probe.shape[1]}")
for name, y in errors.items():
    rel = ((y - exact).norm() / exact.norm()).item()
    errors[name] = rel
    print(f"{Label(name):>32}: relative error {rel:.2e}")
if outlier_cols:
    assert errors["int8 x int8, no outlier split"] > errors["LLM.int8(): outliers in fp16"]

# %% [markdown]
# And the cost of its steps, at batch 1 (a decode step) and 128 rows (a prefill), against one
# float32 multiply. The emulation multiplies with PyTorch's `torch._int_mm`, not bitsandbytes'
# CUDA kernel; what carries over is that every step beyond the multiply is extra work:

# %%
repeats = 5 if CI else 30
for rows_in in (1, 128):
    x_rows = x_probe[torch.arange(rows_in) % x_probe.shape[0]]  # real rows, repeated if short
    plain_t = best_time(lambda: x_rows @ w_probe.T, device, repeats, warmup=1)
    int8_t = best_time(lambda: llm8(x_rows), device, repeats, warmup=1)
    print(f"{rows_in:>3} row(s): float32 {1e3 * plain_t:6.3f} ms, LLM.int8() emulated "
          f"{1e3 * int8_t:6.3f} ms ({int8_t / plain_t:.1f}x)")

# %% [markdown]
# Quantizing the activations costs accuracy that int8 weights alone do not, and the split takes
# back the part the outlier features cause. (The paper finds outlier features in every layer
# from about 6.7B parameters.)
#
# ### minillm's weight-only int8: four ways to multiply
#
# minillm's int8 *stores* only the weights in int8, like the int8 of GPU inference servers; the
# activations arrive in float. `quant.Int8Linear` can multiply in four ways (its `path`):
#
# - **dequantize**: rebuild a float copy of the weight on every call, then a plain multiply.
# - **fused**: PyTorch's weight-only int8 kernel (`torch._weight_int8pack_mm`), a fused kernel
#   (融合算子): it multiplies with the int8 numbers directly, never writing a float weight.
# - **dynamic**: fbgemm's int8 GEMM through PyTorch, which quantizes the *activations* too (one
#   scale for the call's rows) and multiplies int8 by int8: LLM.int8() without the outlier split.
# - **kernel**: minillm's own (`minillm/kernels/c/matmul_int8.c`): it rounds each row of x to
#   16-bit integers (int16) with the row's own scale and multiplies them with the int8 weights
#   in integers, as chapter 05 §6 writes out. It reads a quarter of float32's bytes, and x's
#   rounding (tens of thousands of steps) is far finer than the weights' (255). The fast path's
#   int8 uses it.
#
# We time one layer (1536 × 576, the gate projection) at batch 1 (a decode step) and with 128
# rows (a prefill):

# %%
from minillm.quant.linear import dynamic_int8_available, kernel_int8_available  # noqa: E402

lin = copy.deepcopy(model.layers[0].mlp.gate_proj).float().cpu()  # timed on the CPU
layer8, layer4 = quant.Int8Linear.from_linear(lin), quant.Int4Linear.from_linear(lin)
w32 = lin.weight.detach()
w16, wbf = w32.half(), w32.bfloat16()
repeats = 5 if CI else 30
kernel_times = {}
with torch.inference_mode():
    for rows_in in (1, 128):
        x = torch.randn(rows_in, 576)
        calls = {
            "fp32": lambda: F.linear(x, w32),
            "bf16": lambda: F.linear(x.bfloat16(), wbf),
            "fp16": lambda: F.linear(x.half(), w16),
            "int8 dequantize": lambda: layer8.forward_dequantize(x),
            "int4 dequantize": lambda: layer4(x),
        }
        if quant.fused_int8_available():
            calls["int8 fused"] = lambda: layer8.forward_fused(x)
        if dynamic_int8_available():
            calls["int8 dynamic"] = lambda: layer8.forward_dynamic(x)
        if kernel_int8_available():
            calls["int8 kernel"] = lambda: layer8.forward_kernel(x)
        for name, fn in calls.items():
            kernel_times[(name, rows_in)] = best_time(fn, device, repeats, warmup=1)
names = list(dict.fromkeys(n for n, _ in kernel_times))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, rows_in in zip(axes, (1, 128)):
    ax.barh(names, [1e3 * kernel_times[(n, rows_in)] for n in names])
    ax.set(xlabel="ms per call (fastest)", title=f"{rows_in} row(s): "
           + ("decode step" if rows_in == 1 else "prefill"))
fig.tight_layout()
plt.show()
for rows_in in (1, 128):
    base = kernel_times[("fp32", rows_in)]
    print(f"{rows_in:>3} row(s): " + ", ".join(
        f"{n} {kernel_times[(n, rows_in)] / base:.1f}x" for n in names) + " (time / fp32's)")
print("CPU instruction set PyTorch uses here:", torch.backends.cpu.get_cpu_capability())

# %% [markdown]
# The ratios change from machine to machine. The **dequantize** paths build a full-size float
# weight every call, so they lose to fp32 at batch 1: the "slow int8". The **dynamic** and
# **kernel** paths read a quarter of the bytes and win at batch 1; with 128 rows the multiply is
# compute-bound. There fp32 wins back on a CPU whose integer dot products are no wider than its
# float multiply-adds (AVX2), and loses where they are wider: AVX-512's (VNNI) and Intel's AMX
# tiles (docs/benchmarks.md). So the fast path rebuilds the float weight for an int8 prefill on
# AVX2 only. fp16/bf16 are converted on the fly on a CPU without 16-bit arithmetic.
#
# The dynamic path also rounds every activation to 8 bits. Decoding the held-out text token by
# token, as a decode step sees it, shows what that costs:

# %%
from minillm.generation.kv_cache import KVCache  # noqa: E402


def stepwise(m, ids):
    cache, nll, rows = KVCache.for_model(m, 1, len(ids)), 0.0, []
    with torch.inference_mode():
        for i in range(len(ids) - 1):
            logits = m(torch.tensor([[ids[i]]]), cache=cache)[0, -1].float().cpu()
            nll += F.cross_entropy(logits[None], torch.tensor([ids[i + 1]])).item()
            rows.append(logits)
    return math.exp(nll / (len(ids) - 1)), torch.stack(rows)


step_ids = held_out_ids(tokenizer, 48 if CI else 128)
cpu_model = model if device.type == "cpu" else copy.deepcopy(model).cpu()
fast8 = optimize(cpu_model, "int8")
paths = {"fp32": cpu_model}
if kernel_int8_available():
    paths["int8 kernel"] = fast8
if dynamic_int8_available():
    fast8_dynamic = copy.deepcopy(fast8)
    quant.set_int8_path(fast8_dynamic, "dynamic")
    paths["int8 dynamic"] = fast8_dynamic
steps = {name: stepwise(m, step_ids) for name, m in tqdm(paths.items(), desc="paths")}
error = {}
for name, (ppl, logits) in steps.items():
    error[name] = (logits - steps["fp32"][1]).abs().mean().item()
    print(f"{Label(name):>12}: perplexity {ppl:.3f} "
          f"({ppl / steps['fp32'][0] - 1:+.2%} against fp32), "
          f"mean |logit - fp32's| {error[name]:.4f}, {len(step_ids) - 1} tokens one at a time")
if "int8 kernel" in error and "int8 dynamic" in error:
    assert error["int8 kernel"] < error["int8 dynamic"]  # x in int8 costs more than in int16

# %% [markdown]
# ### The whole model at batch 1: int8 beats fp32 and bf16
#
# `minillm.load(..., weights="int8")` (or `optimize(model, "int8")`) runs every linear layer of
# the fast path, the LM head included, through the int8 kernel. At batch 1 the speed follows the
# bytes per token, up to chapter 05's bound (bandwidth / bytes); 16 rows are compute-bound.

# %%
from minillm.measure.bandwidth import decode_bound  # noqa: E402
from minillm.model.memory import bytes_per_token  # noqa: E402

engines = {"fp32": optimize(cpu_model), "bf16": optimize(cpu_model, "bf16"), "int8": fast8}
chat = tokenizer.apply_chat_template([{"role": "user", "content": "Why is the sky blue?"}],
                                     add_generation_prompt=True)
new = 12 if CI else 32
bandwidth = read_bandwidth("cpu")
speeds = {}
for name, engine in engines.items():
    minillm.generate(engine, tokenizer, chat, max_new_tokens=2)  # warm up
    one = minillm.generate(engine, tokenizer, chat, max_new_tokens=new, ignore_eos=True)
    sixteen = minillm.generate(engine, tokenizer, [chat] * 16, max_new_tokens=new // 2,
                               ignore_eos=True)
    speeds[name] = (one.metrics.decode_tokens_per_second,
                    16 / sixteen[0].metrics.tpot)  # 16 rows per step
    bound = decode_bound(bytes_per_token(engine), bandwidth)
    print(f"{name:>5}: {bytes_per_token(engine) / 1e6:5.0f} MB a token, batch 1 "
          f"{speeds[name][0]:5.1f} tok/s ({speeds[name][0] / bound:.0%} of its bound "
          f"{bound:.0f}), batch 16 {speeds[name][1]:6.1f} tok/s in all")
# int8 reads a quarter of fp32's bytes: at batch 1 it cannot be much more than that much faster.
# A ratio beyond the bytes' means a disturbed timing: both are measured again, the faster kept.
byte_ratio = bytes_per_token(engines["fp32"]) / bytes_per_token(engines["int8"])
for _ in range(2):
    if speeds["int8"][0] / speeds["fp32"][0] <= 1.125 * byte_ratio:
        break
    for name in ("fp32", "int8"):
        again = minillm.generate(engines[name], tokenizer, chat, max_new_tokens=new,
                                 ignore_eos=True).metrics.decode_tokens_per_second
        speeds[name] = (max(speeds[name][0], again), speeds[name][1])
ratio = speeds["int8"][0] / speeds["fp32"][0]
if ratio <= 1.125 * byte_ratio:
    print(f"int8 at batch 1: {ratio:.2f}x fp32, "
          f"{speeds['int8'][0] / speeds['bf16'][0]:.2f}x bf16; at batch 16: "
          f"{speeds['int8'][1] / speeds['fp32'][1]:.2f}x fp32")
else:
    print(f"int8 at batch 1: disturbed ({ratio:.2f}x fp32 measured, above the {byte_ratio:.1f}x "
          f"its bytes allow; {load_average()})")

# %% [markdown]
# So int8 is slow when it rebuilds a float weight or pays for extra steps, and fast at batch 1
# when a kernel reads the int8 weight once.

# %% [markdown]
# ## 8 · Better rounding at 3 and 4 bits: GPTQ and AWQ
#
# Every scheme so far rounds each weight to its nearest grid point: **round-to-nearest**
# (就近舍入, RTN). That makes each *weight's* error small, but a layer is judged by its *output*,
# y = x Wᵀ, on real inputs. Two methods round smarter, both with a little **calibration data**
# (校准数据): real text run through the model to see each layer's inputs.
#
# - **GPTQ** (Frantar et al., 2022) fixes the errors' *sum*. The inputs of a layer are
#   correlated, so after rounding one column of W, GPTQ nudges the columns not yet rounded to
#   cancel the error it made in the output. The best nudge comes from H = mean of xᵀx over the
#   calibration inputs, the Hessian (海森矩阵), inverted once per layer.
# - **AWQ** (Lin et al., 2023) fixes the errors that *matter most*. A weight column that meets a
#   large input feature passes its rounding error on multiplied by it. AWQ scales those columns
#   up before rounding and the inputs down by the same factor, so they get finer steps; the
#   factor is mean|x_j|^α, with α searched per layer.
#
# Both keep RTN's grid (a scale and a minimum per group). GPTQ's core loop:

# %%
from minillm.quant import calibration  # noqa: E402
from minillm.quant.gptq import gptq  # noqa: E402

show_source(gptq)

# %% [markdown]
# The measurement rounds the linear layers of the first few blocks of SmolLM2 to two grids:
# **3 bits, one group per row**, and **4 bits in groups of 128** (the usual format of GPTQ and
# AWQ checkpoints; a 576-wide row ends with a group of 64). The calibration is the *end* of the
# held-out text, the perplexity is measured on its *start*, so no token is in both. For each
# method: the output error on the calibration inputs, ‖x(W − Ŵ)ᵀ‖ / ‖xWᵀ‖ (mean over the
# layers), the perplexity of the whole model, and the seconds spent rounding.

# %%
text_ids = held_out_ids(tokenizer)
calibration_ids = text_ids[-(256 if CI else 2048):]
eval_ids = text_ids[:64 if CI else 256]
rounded_blocks = range(2 if CI else 3)
names = calibration.linear_names(model, rounded_blocks)
stats = calibration.input_stats(model, calibration_ids, names)
base_ppl = quant.perplexity(model, eval_ids, window=256)
print(f"{len(names)} linear layers in blocks 0-{rounded_blocks[-1]} of {len(model.layers)}; "
      f"{len(calibration_ids)} calibration tokens; fp32 perplexity {base_ppl:.2f}")
rounding = []
for bits, group in tqdm([(3, None), (4, 128)], desc="grids"):
    for method in calibration.METHODS:
        rounded, errors, seconds = calibration.round_layers(model, stats, method, bits, group)
        rounding.append(dict(bits=bits, group=group or "row", method=method, seconds=seconds,
                             error=float(np.mean(list(errors.values()))),
                             ppl=quant.perplexity(rounded, eval_ids, window=256)))
        del rounded
for r in rounding:
    whole = r["seconds"] * len(model.layers) / len(rounded_blocks)
    print(f"{r['bits']} bits, group {Label(str(r['group'])):>4}, {r['method']:>4}: output error "
          f"{r['error']:.4f}, perplexity {r['ppl']:6.2f} ({r['ppl'] - base_ppl:+.2f}), "
          f"{r['seconds']:5.1f} s here, about {whole:4.0f} s for all 30 blocks")

# %%
by_grid = {(r["bits"], r["method"]): r for r in rounding}
for bits in (3, 4):
    assert by_grid[(bits, "gptq")]["error"] < min(by_grid[(bits, "rtn")]["error"],
                                                  by_grid[(bits, "awq")]["error"])
    best = min(calibration.METHODS, key=lambda m: by_grid[(bits, m)]["ppl"])
    print(f"{bits} bits: the lowest perplexity is {best}'s; " + ", ".join(
        f"{m} {by_grid[(bits, m)]['ppl'] - base_ppl:+.2f}" for m in calibration.METHODS)
        + " against fp32")

# %% [markdown]
# What to read in it:
#
# - GPTQ has the smallest output error *on the calibration inputs*, what it minimises (the
#   assert checks it). Perplexity is measured on other text, where its gain can be smaller: with
#   too few calibration tokens it fits the calibration text, not the language.
# - AWQ searches one number per layer, so it has little room to fit the calibration text: it
#   can lose on the calibration error and still win on perplexity.
#
# ## 9 · W8A8, SmoothQuant and FP8: where the outliers go
#
# **W4A16** (4-bit weights, 16-bit activations, what GPTQ and AWQ produce) cuts the bytes a
# decode step reads: the choice when decode is bandwidth-bound. A prefill or a large batch is
# compute-bound; there **W8A8** (int8 weights *and* activations) runs the multiply itself on
# int8 units. Its obstacle is section 7's outlier features: they set each token row's scale.
# LLM.int8() keeps those columns in fp16;
# **SmoothQuant** (Xiao et al., 2022) divides each input feature j by
# s_j = max|x_j|^0.5 / max|W[:, j]|^0.5 and multiplies W's column j by it, which leaves x Wᵀ
# unchanged and moves half the outlier into the weights. **FP8** (e4m3: 4 exponent bits, 3
# mantissa bits) spends the 8 bits on a float grid whose steps grow with the value; recent GPUs
# multiply it natively.
#
# A fair comparison gives both formats the same scales: **one per tensor**, then **one per row**
# (per token of x, per output channel of W). The error of rounding x, W and both, on section 7's
# layer with the largest activations:

# %%
from minillm.quant.fp8 import fp8_roundtrip  # noqa: E402
from minillm.quant.grid import rtn  # noqa: E402
from minillm.quant.smoothquant import smooth_scales, w8a8  # noqa: E402


def int8(t, scales):
    return quant.roundtrip(t, "absmax", 8, scales)


def fp8(t, scales):
    return fp8_roundtrip(t) if scales == "tensor" else torch.stack([fp8_roundtrip(r) for r in t])


def relative_error(y):
    return ((y - exact).norm() / exact.norm()).item()


formats = {"int8": int8, "FP8 e4m3": fp8}
granularities = {"tensor": "one scale per tensor", "channel": "per token and per row"}
eight_bit = {}
print(f"{Label(''):>36} {Label('x only'):>9} {Label('W only'):>9} {Label('both'):>9}")
for fmt, rounded in formats.items():
    for scales, scale_words in granularities.items():
        x8, w8 = rounded(x_probe, scales), rounded(w_probe, scales)
        eight_bit[(fmt, scales)] = [relative_error(x8 @ w_probe.T),
                                    relative_error(x_probe @ w8.T), relative_error(x8 @ w8.T)]
        print(f"{Label(f'{fmt}, {scale_words}'):>36} "
              + " ".join(f"{e:9.2e}" for e in eight_bit[(fmt, scales)]))

# %% [markdown]
# int8's steps are even, so its scale decides everything: one scale per tensor lets the largest
# number set every step, and the error grows several times. FP8's steps grow with the value, so
# per tensor is nearly as good as per row (a common FP8 recipe). With per-row scales each wins
# where its grid fits: FP8 on the activations, whose outliers span a wide range, int8 on the
# weights, where 255 even steps are finer than 3 mantissa bits. The asserts check each:

# %%
assert eight_bit[("int8", "tensor")][2] > 2 * eight_bit[("int8", "channel")][2]
assert eight_bit[("FP8 e4m3", "tensor")][2] < 1.25 * eight_bit[("FP8 e4m3", "channel")][2]
assert eight_bit[("FP8 e4m3", "channel")][0] < eight_bit[("int8", "channel")][0]  # x only
assert eight_bit[("int8", "channel")][1] < eight_bit[("FP8 e4m3", "channel")][1]  # W only

# %% [markdown]
# SmoothQuant and W4A16 on the same layer, against int8 with per-token and per-row scales:

# %%
x_max = x_probe.abs().amax(0)
smooth = smooth_scales(x_max, w_probe)
ways = {
    "W8A8, int8 per token and per row": w8a8(x_probe, w_probe),
    "SmoothQuant, then W8A8 as above": w8a8(x_probe, w_probe, smooth),
    "W4A16, 4 bits in groups of 128": x_probe @ rtn(w_probe, 4, 128).T,
}
spread = x_max.max() / x_max.median()
print(f"{probe}: the largest feature's max|x| is {spread:.0f}x the median feature's, "
      f"{(x_max / smooth).max() / (x_max / smooth).median():.0f}x after smoothing")
w8a8_error = {}
for name, y in ways.items():
    w8a8_error[name] = relative_error(y)
    print(f"{Label(name):>34}: relative error {w8a8_error[name]:.2e}")
assert (w8a8_error["SmoothQuant, then W8A8 as above"]
        < w8a8_error["W8A8, int8 per token and per row"])

# %% [markdown]
# W4A16 is chosen for its bytes, not for the accuracy of one product: at batch 1 the bytes set
# the speed.

# %% [markdown]
# ## 10 · What a dedicated kernel reaches: llama.cpp
#
# llama.cpp runs the very same Q4_1 file with hand-written SIMD kernels that multiply with the
# 4-bit blocks directly, never building a float weight. `python -m minillm bench latency` times
# minillm, transformers' `generate()` and, when `llama-cpp-python` is installed (it builds from
# source), llama.cpp on the same file, prompt and thread count, in one run.
# `docs/benchmarks.md` keeps that report from the course's machine, at 1 and 2 threads, with
# the command that printed it.

# %% [markdown]
# ## 11 · Pruning and distillation, in brief
#
# Quantization keeps every weight with fewer bits. Two other ways to shrink a model:
#
# - **Pruning (剪枝)** removes weights. Magnitude pruning zeroes the smallest |w| of each row.
#   Unstructured zeros save nothing unless a sparse format or kernel uses them; structured pruning
#   (whole heads, channels or layers) shrinks the matrices themselves but needs retraining.
# - **Knowledge distillation (知识蒸馏)** trains a small *student* model to match a large *teacher*'s
#   output distribution (a KL-divergence loss on the teacher's softened probabilities), not just
#   the right token. SmolLM2 was not distilled: it was pretrained directly on a very large
#   text corpus, then tuned to follow instructions.
#
# How quickly does quality fall when weights go away, without retraining?

# %%
ids = held_out_ids(tokenizer, 64 if CI else 128)
fractions = [0.0, 0.3, 0.6] if CI else [0.0, 0.2, 0.4, 0.6]
ppl = [quant.perplexity(quant.magnitude_prune(model, f), ids, window=len(ids))
       for f in fractions]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot([100 * f for f in fractions], ppl, "o-")
ax.set(xlabel="% of each linear layer's weights zeroed", ylabel="perplexity", yscale="log",
       title="magnitude pruning, no retraining")
plt.show()

# %% [markdown]
# ## 12 · Where this fits
#
# - `minillm.quantize(model, scheme)` works on the plain model from `minillm.load`; the result
#   runs in `minillm.generate` unchanged.
# - `minillm.load(name, weights="int8")` is the int8 row through minillm's kernel on chapter
#   05's fast path. Quantize *or* optimize a model, not both.
# - The KV cache can be stored in fewer bits too: appendix 07b measures it.
# - FP8 and FP4 weights (MXFP4, NVFP4) and W4A8, measured as perplexity: appendix 07c.
#
# The full table on this machine: `.venv/bin/python scripts/bench_quantization.py` (2,048
# held-out tokens; `--small` for a quick run). Exercises: `exercises/07_quantization.ipynb`.

# %%
print(machine())
