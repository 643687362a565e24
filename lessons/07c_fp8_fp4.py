# %% [markdown]
# # 07c · Appendix: FP8 and FP4 weights, measured
#
# Hopper GPUs multiply FP8 natively, Blackwell FP4. DeepSeek-V3 was trained in FP8 and gpt-oss
# ships its experts in MXFP4. This appendix to chapter 07 rounds SmolLM2's weights to each of these
# formats and measures what it costs, as perplexity on held-out text, beside the 4-bit integer
# formats of chapter 07:
#
# - the formats: E4M3 against E5M2, and FP4 (E2M1) (section 1);
# - scale granularity: per tensor, per channel, per 128x128 block (section 2);
# - MXFP4 and NVFP4: small blocks, and how their scales are stored (section 3);
# - the whole model's perplexity under each, against int4 (section 4);
# - W4A8: 4-bit weights with 8-bit activations (section 5).
#
# Every format is **emulated** (`minillm.quant.float_formats`): the numbers are rounded to the
# format and multiplied in float32, so the accuracy is the format's and the speed is not. With `CI`
# set (the course's tests) the held-out text is shorter.

# %%
import os

import torch

import minillm
from minillm.course import show_source
from minillm.measure import load_average
from minillm.quant.float_formats import (E2M1, SCHEMES, activations_in_int8, fake_quantize,
                                         weights_in)
from minillm.quant.grid import rtn
from minillm.quant.measure import perplexity
from minillm.tools.bench.quantization import held_out_ids
from minillm.utils.columns import Label  # pads by screen columns: a Chinese label lines up too

CI = bool(os.environ.get("CI"))  # a shorter text when the notebook runs in the test suite
print(load_average())

device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
eval_ids = held_out_ids(tokenizer, 128 if CI else 512)  # the CIA World Factbook on Europe
base_ppl = perplexity(model, eval_ids, window=512)
print(f"{len(eval_ids)} held-out tokens; perplexity of the model as loaded: {base_ppl:.3f}")

# %% [markdown]
# ## 1 · The formats
#
# A float spends its bits on a sign, an exponent and a mantissa. Its steps grow with the value:
# each power of two holds the same number of steps, so a small number keeps its relative
# precision beside a large one (an integer grid has equal steps everywhere).

# %%
for name, dtype in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
    info = torch.finfo(dtype)
    print(f"FP8 {name}: largest {info.max:>7g}, smallest normal {info.tiny:.2e}, "
          f"step at 1: {info.eps}")
print(f"FP4 e2m1: the magnitudes {E2M1.tolist()}")
assert torch.finfo(torch.float8_e4m3fn).max == 448 and torch.finfo(torch.float8_e5m2).max == 57344

# %% [markdown]
# - **E4M3** (4 exponent bits, 3 mantissa bits) has the finer steps; **E5M2** the wider range.
#   Inference scales weights and activations into range first, so it wants the steps: E4M3.
#   Gradients span many orders of magnitude, so the classic training recipe keeps E5M2 for them
#   (DeepSeek-V3 uses E4M3 throughout, with fine-grained scales).
# - **FP4 (E2M1)** has 8 magnitudes: between 4 and 6 there is nothing. It works only with a scale
#   for every small block of numbers.
#
# ## 2 · How many numbers share a scale
#
# A scale maps a group of numbers onto the format: the group's largest |value| lands on the
# format's largest. For int8 (chapter 07) the scale decides the steps; for a float it mostly
# decides which small numbers fall below the format's range. The layer with the largest outlier
# (the largest |weight| against the layer's typical one), rounded each way:

# %%
linears = {name: m for name, m in model.named_modules()
           if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
outlier = {name: (m.weight.abs().max() / m.weight.pow(2).mean().sqrt()).item()
           for name, m in linears.items()}
layer = max(outlier, key=outlier.get)
w = linears[layer].weight.detach().float()
print(f"{layer} {tuple(w.shape)}: largest |weight| {outlier[layer]:.0f}x its RMS")
error = {}
for name, scheme in SCHEMES.items():
    error[name] = ((fake_quantize(w, scheme) - w).norm() / w.norm()).item()
    print(f"{Label(name):>30}: {scheme.bits(w.shape):5.2f} bits a weight, relative error "
          f"{error[name]:6.2%}")
assert error["fp8 e4m3, per channel"] < error["fp8 e5m2, per channel"]  # 3 mantissa bits, not 2
assert error["NVFP4"] < error["MXFP4"]

# %% [markdown]
# - FP8 E4M3 errs about half as much as E5M2, whatever the scale: a mantissa bit halves the step.
# - FP8's three scales differ little on a weight, because a float's steps follow the value. They
#   matter for activations, whose outliers reach far further (chapter 07, section 9), which is
#   why DeepSeek-V3 scales its activations per 1x128 tile and its weights per 128x128 block.
# - The 4-bit formats err several times more, and there the block size and the scale's format
#   decide: the next section.
#
# ## 3 · MXFP4 and NVFP4
#
# - **MXFP4** (the OCP Microscaling standard) shares one scale among 32 numbers, stored as
#   E8M0: a power of two, 8 bits. The largest number of a block lands between 4 and 8 times the
#   scale, so up to half of FP4's range can go unused.
# - **NVFP4** (Blackwell) shares one scale among 16 numbers, stored in E4M3, under one fp32
#   scale for the whole tensor: finer blocks and a scale that lands the block's largest on 6.
#
# The same FP4 grid in blocks of 32 with an exact (fp16) scale separates the two effects:

# %%
show_source(fake_quantize, start="if scheme.scale ==", stop="q = round_to")
parts = ["fp4, blocks of 32, fp16 scale", "MXFP4", "NVFP4"]
for name in parts:
    print(f"{Label(name):>30}: relative error {error[name]:6.2%}")
assert error["fp4, blocks of 32, fp16 scale"] < error["MXFP4"]

# %% [markdown]
# The power-of-two scale costs MXFP4 a share of its accuracy on this layer; NVFP4's smaller
# blocks and FP8 scales win it back, for a quarter of a bit more a weight. Each block of 16
# integers with an fp16 scale ("int4, blocks of 16") costs 5 bits.
#
# ## 4 · The whole model
#
# Every linear layer's weight rounded to each format (the embedding, which the LM head shares, as
# loaded), then the perplexity of the held-out text. One caveat first: SmolLM2's weights come
# from a Q4_1 file (chapter 07, section 5), so every weight already lies on a 4-bit grid with a
# scale and a minimum per block of 32. That grid, applied again, finds the same weights:

# %%
with weights_in(model, lambda weight: rtn(weight, 4, 32)):  # Q4_1's own grid: scale and minimum
    q4_1_again = perplexity(model, eval_ids, window=512)
print(f"Q4_1's grid again: perplexity {q4_1_again:.3f} (as loaded: {base_ppl:.3f})")
assert abs(q4_1_again / base_ppl - 1) < 1e-3

# %% [markdown]
# So the table below measures each format's error on top of Q4_1, against formats with one
# scale and no minimum (int4 here is symmetric, -7 to 7, as GGUF's Q4_0): a fair comparison among
# them, not against Q4_1, whose grid the weights were made on.

# %%
ppl = {}
for name, scheme in SCHEMES.items():
    with weights_in(model, scheme):
        ppl[name] = perplexity(model, eval_ids, window=512)
    print(f"{Label(name):>30}: {scheme.bits(w.shape):5.2f} bits, perplexity {ppl[name]:7.3f} "
          f"({ppl[name] / base_ppl - 1:+7.2%})")
assert all(ppl[name] < 1.05 * base_ppl for name in SCHEMES if "e4m3" in name)
assert ppl["NVFP4"] < ppl["MXFP4"] and ppl["int4, blocks of 32"] < ppl["MXFP4"]
four_bit = [n for n in SCHEMES if SCHEMES[n].fmt in ("e2m1", "int4")]
assert max(ppl[n] for n in SCHEMES if "e4m3" in n) < min(ppl[n] for n in four_bit)
print(f"closest to the model among the 4-bit formats: {min(four_bit, key=ppl.get)}")
assert ppl["NVFP4"] < ppl["int4, blocks of 16"]

# %% [markdown]
# - FP8 E4M3 costs the model a few percent at most, with any of the three scales (the 4-bit
#   formats cost tens of percent): at 8 bits the choice is made by the activations and the
#   hardware, not by the weights.
# - At 4 bits the small blocks and the scale's format decide. MXFP4 loses to the symmetric int4
#   with the same 32-number blocks, whose fp16 scale is exact. NVFP4, at 4.5 bits, beats even
#   the 5-bit int4 in blocks of 16.
# - A model trained for its format (gpt-oss's expert weights were post-trained in MXFP4) loses
#   far less than one rounded after the fact, as here.
#
# ## 5 · W4A8: 4-bit weights, 8-bit activations
#
# W4A16 (4-bit weights, 16-bit activations) reads few bytes: the choice for decode. A prefill is
# compute-bound, and there **W4A8** multiplies on 8-bit units too: the activations are rounded
# to int8 (or FP8) per token as they enter each linear layer. What rounding the activations adds:

# %%
with activations_in_int8(model):
    a8 = perplexity(model, eval_ids, window=512)
print(f"{Label('activations int8 alone'):>30}: perplexity {a8:7.3f} ({a8 / base_ppl - 1:+7.2%})")
w4a8 = {}
for name in ("int4, blocks of 32", "NVFP4"):
    with weights_in(model, SCHEMES[name]), activations_in_int8(model):
        w4a8[name] = perplexity(model, eval_ids, window=512)
    print(f"{Label(name + ' + A8'):>30}: perplexity {w4a8[name]:7.3f} "
          f"(W4A16 {ppl[name]:7.3f})")
assert a8 > base_ppl and w4a8["NVFP4"] > ppl["NVFP4"]  # the activations add their own error

# %% [markdown]
# Rounding the activations costs more than FP8 weights did: their outliers (chapter 07, section
# 7) set each token's scale. On top of NVFP4 weights it adds its own error; on top of int4 the
# two errors can partly cancel on a short text. W4A8 recipes therefore smooth or rotate the
# activations first (SmoothQuant, chapter 07; QServe; rotations as in QuaRot), or keep them in
# FP8.
#
# ## Summary
#
# - E4M3 for inference, E5M2 where range matters more than steps (gradients).
# - A scale per tensor, channel or 128x128 block: for FP8 weights almost the same; for
#   activations and for 4 bits, the finer the better.
# - MXFP4: blocks of 32, a power-of-two scale, 4.25 bits. NVFP4: blocks of 16, an FP8 scale
#   under a tensor scale, 4.5 bits, and the smaller error.
# - W4A8 adds the activations' error to the weights'.

# %%
print(f"as loaded {base_ppl:.3f}; fp8 e4m3 per channel {ppl['fp8 e4m3, per channel']:.3f}; "
      f"MXFP4 {ppl['MXFP4']:.3f}; NVFP4 {ppl['NVFP4']:.3f}; int4 blocks of 32 "
      f"{ppl['int4, blocks of 32']:.3f}; NVFP4 + A8 {w4a8['NVFP4']:.3f}")
print(f"{load_average()} at the end of this run")
