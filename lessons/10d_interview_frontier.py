# %% [markdown]
# # 10d · Interview questions (面试题), part four: what 2026 interviews add
#
# Q33–Q40 of chapter 10, after `10c_interview_serving`: mixture of experts, FP8 and FP4, long
# context, the scheduler's choices, multi-LoRA serving, and two classics. As before, each answer
# is in Chinese and English, proved by a cell that ends in an `assert`: on SmolLM2 where a real
# model can show it, with exact arithmetic where the idea is arithmetic.

# %%
import math
import os

import torch
import torch.nn.functional as F

import minillm
from minillm.tokenizer.samples import corpus
from minillm.generation.kv_cache import KVCache
from minillm.measure import TOO_NOISY, compare, load_average
from minillm.utils.columns import Label  # pads by screen columns: a Chinese label lines up too
from minillm.utils.devices import describe

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
REPEATS = 3                      # interleaved repetitions behind each timing verdict
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")
print(load_average())

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
book = tokenizer.encode(corpus("english")[:20_000])  # Shakespeare, for every input below

# %% [markdown]
# ---
# # Part 8 · What 2026 interviews add
#
# Where the engine has no part for an idea (a router, FP4, LoRA), the cell builds a small one.

# %% [markdown]
# ## Q33 · MoE 的总参数和激活参数有什么区别？专家并行怎么通信？ Total against active parameters in an MoE, and how does expert parallelism communicate?
#
# | 中文 | English |
# |---|---|
# | MoE 把前馈网络换成很多个专家，路由器为每个词元选 top-k 个。总参数决定显存，激活参数决定每个词元的计算量：DeepSeek-V3 共 6710 亿参数，每个词元激活 370 亿（256 个路由专家选 8 个，外加 1 个共享专家）。批大小为 1 的解码只读选中的专家，字节数接近 37B 的稠密模型；B 个词元在均匀路由下平均覆盖 E(1 − (1 − k/E)^B) 个专家，几百个词元就几乎全覆盖，一步读的字节与 671B 的稠密模型相同，省下的只是计算量。专家并行把整个专家放在不同的 GPU 上：每个 MoE 层用一次 all-to-all 把词元分发（dispatch）到专家所在的卡，再用一次 all-to-all 合并（combine）结果；注意力通常做数据并行（DP attention）。DeepEP 是 DeepSeek 开源的 all-to-all 通信库（预填充用高吞吐内核，解码用低延迟内核，分发用 FP8）；EPLB 按统计的负载复制热门专家，并把专家分到各卡，使负载均衡。 | An MoE replaces the feed-forward network by many experts; a router sends each token to its top k. Total parameters set the memory, active ones the compute per token: DeepSeek-V3 has 671 B and activates 37 B (8 of 256 routed experts plus 1 shared). Batch-1 decode reads only the chosen experts, about a 37 B dense model's bytes; B tokens touch E(1 − (1 − k/E)^B) experts on average under uniform routing, nearly all of them at a few hundred tokens, so a step then reads as much as a dense 671 B model and saves compute only. Expert parallelism puts whole experts on different GPUs: each MoE layer dispatches every token to its experts' GPUs (an all-to-all) and combines the results back (another); attention usually runs data-parallel (DP attention). DeepEP is DeepSeek's all-to-all library (high-throughput kernels for prefill, low-latency ones for decode, FP8 dispatch); EPLB replicates hot experts from measured loads and packs experts onto GPUs to balance them. |
#
# The arithmetic first, from DeepSeek-V3's published configuration:

# %%
V3 = dict(hidden=7168, layers=61, dense_layers=3, dense_ffn=18432, expert_ffn=2048, experts=256,
          top_k=8, vocab=129280, heads=128, q_rank=1536, kv_rank=512, nope=128, rope=64,
          v_dim=128)  # DeepSeek-V3's config.json; one shared expert in each MoE layer
d, E, k, heads = V3["hidden"], V3["experts"], V3["top_k"], V3["heads"]
mla = (d * V3["q_rank"] + V3["q_rank"] * heads * (V3["nope"] + V3["rope"])
       + d * (V3["kv_rank"] + V3["rope"]) + V3["kv_rank"] * heads * (V3["nope"] + V3["v_dim"])
       + heads * V3["v_dim"] * d)  # the attention's projections
expert, moe_layers = 3 * d * V3["expert_ffn"], V3["layers"] - V3["dense_layers"]
always = (V3["layers"] * mla + V3["dense_layers"] * 3 * d * V3["dense_ffn"]
          + moe_layers * (expert + E * d) + 2 * V3["vocab"] * d)  # shared expert and router
total, active = always + moe_layers * E * expert, always + moe_layers * k * expert
print(f"DeepSeek-V3: {total / 1e9:.1f} B parameters, {active / 1e9:.1f} B active per token")
for batch in (1, 8, 64, 256):
    touched = E * (1 - (1 - k / E) ** batch)  # distinct experts per layer, uniform routing
    read = always + moe_layers * touched * expert  # fp8: one byte a parameter
    print(f"batch {batch:>3}: {touched:5.1f} of {E} experts a layer; a decode step reads "
          f"{read / 1e9:3.0f} GB, {read / batch / 1e9:5.2f} GB a token")
print(f"all-to-all per token and MoE layer: dispatch {k * d / 1e3:.0f} kB (fp8), combine "
      f"{2 * k * d / 1e3:.0f} kB (bf16); {moe_layers * 3 * k * d / 1e6:.1f} MB a forward pass")
assert abs(total / 671e9 - 1) < 0.01 and abs(active / 37e9 - 1) < 0.03
assert E * (1 - (1 - k / E) ** 256) > 0.99 * E  # a batch of 256 reads nearly every expert

# %% [markdown]
# Then a real layer: layer 5's 1,536 feed-forward neurons cut into 16 experts of 96, and a linear
# router fitted (least squares, on 1,024 tokens) to predict what each expert adds. It picks 4 a
# token; on 256 other tokens, the load and the experts each batch reads:

# %%
LAYER, EXPERTS, TOP = 5, 16, 4
mlp = model.layers[LAYER].mlp
captured = []
hook = mlp.register_forward_pre_hook(lambda m, args: captured.append(args[0][0].float().cpu()))
with torch.inference_mode():
    for start in range(0, 1280, 256):  # layers 0 to LAYER are enough to see its inputs
        ids = torch.tensor([book[start:start + 256]], device=device)
        positions = torch.arange(256, device=device)[None]
        model.run_layers(model.embed_tokens(ids, positions), positions,
                         layers=model.layers[:LAYER + 1])
hook.remove()
x_fit, x_test = torch.cat(captured[:4]), captured[4]
gate, up, down = (p.weight.detach().float().cpu()
                  for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
h = (F.silu(x_fit @ gate.T) * (x_fit @ up.T)).unflatten(-1, (EXPERTS, -1))  # 16 x 96 neurons
adds = torch.einsum("ten,den->ted", h, down.unflatten(1, (EXPERTS, -1))).norm(dim=-1)
router = torch.linalg.lstsq(F.pad(x_fit, (0, 1), value=1.0), adds.log(),
                            driver="gelsd").solution  # SVD: the same answer on every run
chosen = (F.pad(x_test, (0, 1), value=1.0) @ router).topk(TOP, -1).indices
load = torch.bincount(chosen.flatten(), minlength=EXPERTS)
print(f"tokens per expert: {load.tolist()}; the busiest gets "
      f"{load.max() / load.float().mean():.2f}x the mean")
touched = {}
for batch in (1, 4, 16, 64):
    seen = [len(set(chosen[s:s + batch].flatten().tolist())) for s in range(0, 256, batch)]
    touched[batch] = sum(seen) / len(seen)
    print(f"batch {batch:>2}: {touched[batch]:4.1f} of {EXPERTS} experts read (uniform routing: "
          f"{EXPERTS * (1 - (1 - TOP / EXPERTS) ** batch):4.1f})")
assert touched[1] == TOP and touched[64] > 0.9 * EXPERTS
assert load.max() > 1.2 * load.float().mean()  # uneven: what EPLB's replicas even out

# %% [markdown]
# One token reads 4 experts, a batch of 64 nearly all 16: an MoE saves bandwidth at small batches
# only. And the load is uneven even on text of one kind: with one expert per GPU, the GPU of the
# busiest expert would set everyone's pace.

# %% [markdown]
# ## Q34 · FP8 的 E4M3 和 E5M2 有什么区别？MXFP4 和 NVFP4 又是什么？ E4M3 against E5M2, and what are MXFP4 and NVFP4?
#
# | 中文 | English |
# |---|---|
# | 两种 FP8 都是 8 位浮点数，只是指数位和尾数位分法不同。E4M3：4 位指数、3 位尾数，最大 448，1 附近的间隔是 1/8；E5M2：5 位指数、2 位尾数，最大 57344，范围大得多，精度差一倍。推理时权重和激活先用缩放因子放进范围，更需要精度，用 E4M3；训练时梯度的数量级跨度大，更需要范围，经典做法是前向 E4M3、梯度 E5M2（DeepSeek-V3 靠细粒度缩放全用 E4M3）。缩放粒度指多少个数共用一个缩放因子：每个张量、每个通道，或每个 128×128 的块（DeepSeek-V3 的权重）。FP4（E2M1）只有 8 个非负值（0 与 0.5 到 6 之间的 7 个），必须用小块：MXFP4（OCP 标准）每 32 个数共用一个 E8M0 缩放因子（2 的整数次幂）；NVFP4（Blackwell）每 16 个数共用一个 E4M3 缩放因子，外加整个张量的 FP32 缩放因子，误差更小，每个权重多 0.25 位。 | Both FP8 formats are 8-bit floats that split their bits differently. E4M3 has 4 exponent and 3 mantissa bits: largest value 448, a step of 1/8 at 1. E5M2 has 5 and 2: largest 57,344, far more range at half the precision. Inference scales weights and activations into range first and needs precision: E4M3. Gradients span many orders of magnitude and need range: the classic training recipe is E4M3 forward, E5M2 for gradients (DeepSeek-V3 uses E4M3 throughout, with fine-grained scales). Scale granularity is how many numbers share a scale: a tensor, a channel, or a 128×128 block (DeepSeek-V3's weights). FP4 (E2M1) has 8 magnitudes, 0 and seven from 0.5 to 6, so it needs small blocks: MXFP4 (the OCP standard) shares an E8M0 scale, a power of two, among 32 numbers; NVFP4 (Blackwell) shares an E4M3 scale among 16, under an FP32 scale for the tensor: a smaller error for a quarter of a bit more a weight. |
#
# The proof on layer 5's gate projection (1,536 × 576), each format emulated in PyTorch:

# %%
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # fp4's magnitudes
LARGEST = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
for name, dtype in FP8.items():
    print(f"{name}: largest {torch.finfo(dtype).max:g}, step at 1: {torch.finfo(dtype).eps}")


def fake_quantize(w, fmt, tile, scale="fp32"):
    """`w` rounded to `fmt`, one scale (fp32, E8M0 or E4M3) per tile of (rows, columns)."""
    rows, cols = w.shape
    r, k = tile[0] or rows, tile[1] or cols
    x = F.pad(w, (0, -cols % k, 0, -rows % r)).unflatten(1, (-1, k)).unflatten(0, (-1, r))
    amax = x.abs().amax((1, 3), keepdim=True).clamp_min(1e-12)
    s = amax / LARGEST[fmt]
    if scale == "e8m0":  # the OCP MX rule: 2^(floor(log2 amax) - 2), as 6 = 1.5 x 2^2
        s = 2.0 ** (torch.floor(torch.log2(amax)) - 2)
    elif scale == "e4m3":
        per_tensor = w.abs().max() / (448 * 6)
        s = (s / per_tensor).to(torch.float8_e4m3fn).float() * per_tensor
    if fmt == "e2m1":  # the nearest of the eight magnitudes (6 for anything larger), sign kept
        q = (x / s).sign() * E2M1[torch.bucketize((x / s).abs(), (E2M1[1:] + E2M1[:-1]) / 2)]
    else:
        q = (x / s).to(FP8[fmt]).float()
    return (q * s).flatten(2, 3).flatten(0, 1)[:rows, :cols]


SCHEMES = {"fp8 e4m3, one scale": ("e4m3", (None, None), "fp32"),
           "fp8 e5m2, one scale": ("e5m2", (None, None), "fp32"),
           "fp8 e4m3, 128x128 blocks": ("e4m3", (128, 128), "fp32"),
           "fp4, one scale": ("e2m1", (None, None), "fp32"),
           "fp4, a scale per row": ("e2m1", (1, None), "fp32"),
           "MXFP4": ("e2m1", (1, 32), "e8m0"), "NVFP4": ("e2m1", (1, 16), "e4m3")}
error = {}
for name, (fmt, tile, scale) in SCHEMES.items():
    shared = (tile[0] or gate.shape[0]) * (tile[1] or gate.shape[1])  # numbers per scale
    bits = (4 if fmt == "e2m1" else 8) + (32 if scale == "fp32" else 8) / shared
    error[name] = float((fake_quantize(gate, fmt, tile, scale) - gate).norm() / gate.norm())
    print(f"{Label(name):>25}: {bits:5.2f} bits a weight, error {error[name]:6.2%}")
fp8_ratio = error["fp8 e5m2, one scale"] / error["fp8 e4m3, one scale"]
assert 1.5 < fp8_ratio < 2.5  # one mantissa bit fewer: twice the step
assert abs(error["fp8 e4m3, 128x128 blocks"] / error["fp8 e4m3, one scale"] - 1) < 0.1
assert error["NVFP4"] < error["MXFP4"] < error["fp4, one scale"] / 2

# %% [markdown]
# For fp8 the scale barely matters to these weights: a float keeps its relative step across its
# range. For fp4 it is everything: with one scale, every weight below 1/24 of the largest rounds
# to zero; blocks more than halve the error, and NVFP4's e4m3 scale beats MXFP4's power of two.
# (The model's file stores these weights as Q4_1, int4 in groups of 32 with a scale and a
# minimum, so int4 would give them back exactly: it is left out.)

# %% [markdown]
# ## Q35 · 怎样让模型处理比训练时更长的上下文？什么是注意力汇聚点？ How do you run a model past its trained context length, and what are attention sinks?
#
# | 中文 | English |
# |---|---|
# | RoPE 的第 i 对维度每个位置转 θ_i = base^(−2i/d) 弧度；超过训练长度 L，低频的几对会转到训练时没见过的角度。位置插值（PI）把所有频率除以 s：角度不越界，但高频维度也被压缩，需要微调。NTK-aware 缩放改为放大 base（base·s^(d/(d−2))）：最高频的一对几乎不变，最低频的一对正好缩小 s 倍，不微调也能用一些。YaRN 按每对维度在 L 内转的圈数分段：波长小于 L/32 的不动，大于 L 的按 s 插值，中间线性过渡，再给注意力的 logits 乘一个温度系数（√(1/t) = 0.1·ln s + 1），少量微调即可把上下文扩展数倍。注意力汇聚点（StreamingLLM）：模型把大量注意力放在开头几个词元上，不论内容，因为 softmax 的权重之和必须为 1，总得有个去处。滑动窗口一旦把它们挤出去，困惑度就暴涨；保留前 4 个词元再加滑动窗口，缓存大小固定，质量接近完整注意力。 | RoPE turns pair i of a head's dimensions by θ_i = base^(−2i/d) radians a position; past the trained length L, the slow pairs reach angles training never showed. Position interpolation (PI) divides every frequency by s: no angle leaves the trained range, but the fast pairs are squeezed too, so it needs fine-tuning. NTK-aware scaling enlarges the base instead (base·s^(d/(d−2))): the fastest pair barely changes, the slowest is divided by exactly s, and it works somewhat without fine-tuning. YaRN treats each pair by its turns within L: wavelengths below L/32 stay, those above L are divided by s, a linear ramp between, plus a temperature on the attention logits (√(1/t) = 0.1·ln s + 1); a little fine-tuning stretches the context several times. Attention sinks (StreamingLLM): models put much attention on the first few tokens whatever they say, because softmax weights must sum to 1 and need somewhere to go. A sliding window that evicts them makes perplexity explode; keeping the first 4 tokens beside the window holds the cache at a fixed size with quality close to full attention. |
#
# The arithmetic first: each scaling applied to SmolLM2's 32 rotation frequencies for a context
# four times its 8,192 tokens.

# %%
s, trained = 4, c.max_seq_len
exponent = torch.arange(c.head_dim // 2, dtype=torch.float64) * 2 / c.head_dim
freq = c.rope_theta ** -exponent  # radians a position, pair by pair
wavelength = 2 * math.pi / freq  # tokens per full turn
ramp = ((trained / wavelength - 1) / (32 - 1)).clamp(0, 1)  # YaRN, alpha 1 and beta 32
scaled = {"PI": freq / s,
          "NTK-aware": (c.rope_theta * s ** (c.head_dim / (c.head_dim - 2))) ** -exponent,
          "YaRN": freq / s * (1 - ramp) + freq * ramp}
print("pair  wavelength   " + "  ".join(f"{name:>9}" for name in scaled)
      + "   (new frequency / old)")
for i in (0, 8, 16, 20, 24, 31):
    print(f"{i:>4} {wavelength[i]:>10,.0f}   "
          + "  ".join(f"{float(f[i] / freq[i]):>9.3f}" for f in scaled.values()))
print(f"YaRN's attention temperature: sqrt(1/t) = {0.1 * math.log(s) + 1:.3f}")
ntk, yarn, fast, slow = scaled["NTK-aware"], scaled["YaRN"], wavelength < trained / 32, \
    wavelength > trained
assert torch.isclose(ntk[0], freq[0]) and torch.isclose(ntk[-1], freq[-1] / s)
assert torch.equal(yarn[fast], freq[fast]) and torch.allclose(yarn[slow], freq[slow] / s)

# %% [markdown]
# The engine scales RoPE too: `minillm.load(..., rope_scaling=(kind, factor))`, kind "pi",
# "ntk" or "yarn" (and "none": the trained angles, read further), the frequencies that
# transformers computes for its `rope_scaling` types "linear" and "yarn". PI and NTK-aware are
# the formulas above. For YaRN the same pairs stay and the same pairs are divided by s, but the
# reference code, and so transformers and the engine, ramps the pairs between linearly by their
# index, where the paper's formula above ramps them by their turns.

# %%
from minillm.layers.rope import RopeScaling, rope_frequencies

engine = {name: rope_frequencies(c.head_dim, c.rope_theta,
                                 RopeScaling(kind, s, trained))[0].double()
          for name, kind in (("PI", "pi"), ("NTK-aware", "ntk"), ("YaRN", "yarn"))}
middle = ~(fast | slow)
gap = ((engine["YaRN"] - yarn).abs() / yarn)[middle].max()
print(f"YaRN's {int(middle.sum())} middle pairs: the two ramps differ by up to {gap:.0%}")
for name in ("PI", "NTK-aware"):
    assert torch.allclose(engine[name], scaled[name], rtol=1e-5)
assert torch.allclose(engine["YaRN"][fast | slow], yarn[fast | slow], rtol=1e-5)

# %% [markdown]
# What a scaling costs where the model needs none: SmolLM2 scaled for four times its context
# reads a passage inside its trained length (a held-out stretch of the corpus, far from the
# 20,000 characters above).

# %%
from minillm.quant.measure import perplexity

passage = tokenizer.encode(corpus("english"))[100_000:100_000 + (512 if CI else 2048)]
inside = {}
for kind in ("none", "pi", "ntk", "yarn"):
    scaled_model, _ = minillm.load("smollm2-135m", dtype=torch.float32, device=device,
                                   fast=False, rope_scaling=(kind, float(s)))
    inside[kind] = perplexity(scaled_model, passage, window=len(passage))
    del scaled_model
for kind, value in inside.items():
    print(f"{kind:>5} x{s}: perplexity {value:6.1f} over the first {len(passage):,} tokens")
assert inside["pi"] > 2 * inside["none"]
assert inside["none"] < inside["ntk"] < 1.1 * inside["none"]
assert inside["none"] < inside["yarn"] < 1.25 * inside["none"]

# %% [markdown]
# Past the trained length a single prefill of 32,768 tokens takes minutes on a CPU, so this
# cell reads what `python scripts/rope_scaling.py --json data/rope_scaling.json` measured: one
# passage of 16,384 and of 32,768 tokens read whole, the perplexity inside the first 8,192 and
# past them, with the command, the machine and its load (run the script to measure yours).

# %%
import json

from minillm.tokenizer.samples import DATA

recorded = json.loads((DATA / "rope_scaling.json").read_text(encoding="utf-8"))
print(f"{recorded['command']}: {recorded['machine']}, {recorded['cpus']} CPUs, "
      f"load average {recorded['load before']:.1f}")
print(f"{'RoPE':>5} {Label('factor'):>6} {Label('tokens'):>7} {Label('inside 8,192'):>13} "
      f"{Label('past 8,192'):>11}")
past = {}
for row in recorded["rows"]:
    past[row["scaling"], row["factor"]] = row["past"]
    print(f"{row['scaling']:>5} {row['factor']:>6} {row['tokens']:>7,} {row['inside']:>13.1f} "
          f"{'' if row['past'] is None else format(row['past'], '.1f'):>11}")
within = {(row["scaling"], row["factor"]): row["inside"] for row in recorded["rows"]}
trained_ppl = within["none", 1]
for factor in (2, 4):
    assert past["none", factor] > 4 * trained_ppl and within["pi", factor] > 3 * trained_ppl
    for kind in ("ntk", "yarn"):
        assert within[kind, factor] < 1.15 * trained_ppl and past[kind, factor] < 1.3 * trained_ppl

# %% [markdown]
# None of these models was fine-tuned. With the trained angles, the text past 8,192 tokens is
# lost: perplexity four times its value inside at 2x, over thirty times at 4x. Position
# interpolation keeps every angle in range but squeezes the fast pairs too, and the model reads
# badly everywhere, inside the window as much as past it: PI needs the fine-tuning its paper
# gave it. NTK-aware and YaRN leave the fast pairs alone, and SmolLM2 reads all 32,768 tokens
# within 30% of its perplexity inside the window, for a cost of 5 to 11% inside it. Untuned, on
# this model, the two are level: the YaRN paper's lead over NTK-aware is measured after a short
# fine-tuning.

# %% [markdown]
# Then the sinks, measured: SmolLM2 reads a passage with full attention, with a sliding window of
# 32 tokens in every layer, and with that window plus the first 4 tokens (perplexity over the
# tokens after the first 32, where the window cuts something).

# %%
from minillm.generation.sliding_window import sliding_window_mask
from minillm.layers.attention import causal_mask

WINDOW, SINKS = 32, 4
text = book[5000:5000 + (256 if CI else 512)]
n = len(text)


def windowed_perplexity(mask=None):
    ids = torch.tensor([text], device=device)
    positions = torch.arange(n, device=device)[None]
    with torch.inference_mode():
        hidden = model.run_layers(model.embed_tokens(ids, positions), positions,
                                  None if mask is None else mask[None, None])
        logits = model.logits(hidden)[0, WINDOW:-1].float()
    return math.exp(F.cross_entropy(logits, ids[0, WINDOW + 1:]).item())


window = sliding_window_mask(n, n, WINDOW, device)
sinks = causal_mask(n, n, device) & (torch.arange(n, device=device) < SINKS)
ppl = {"full attention": windowed_perplexity(),
       f"window of {WINDOW}": windowed_perplexity(window),
       f"window of {WINDOW} + {SINKS} sinks": windowed_perplexity(window | sinks)}
for name, value in ppl.items():
    print(f"{Label(name):>22}: perplexity {value:8.1f} over {n - WINDOW - 1} tokens")
full, windowed, kept = ppl.values()
assert kept < windowed / 4 and kept < 2 * full

# %% [markdown]
# Four tokens out of hundreds decide whether the model works: the first tokens mean nothing
# special, they are where attention goes when it has nowhere better to go.

# %% [markdown]
# ## Q36 · 抢占时，重算和换出到 CPU 内存各有什么代价？ Preemption: recompute or swap to CPU memory?
#
# | 中文 | English |
# |---|---|
# | KV 缓存满了，调度器要抢占一个正在运行的请求，把它的块让给别人。重算丢掉它的 KV 缓存，等它回来时把提示词和已生成的词元重新预填充：约 2 × 参数量 × 词元数 次浮点运算，外加注意力，不占额外存储。换出把它的 KV 块复制到 CPU 内存，回来时再复制回 GPU：搬运 KV 字节数的两倍，走 PCIe 这类慢得多的链路，还占 CPU 内存。比较的是：每个词元重算的浮点运算数除以换出的字节数，对 GPU 算力除以链路带宽。GQA、MLA 让每个词元的 KV 很小，大模型每个词元的计算量大，换出划算；小模型，或者链路正忙时，重算更便宜。vLLM V1 只用重算：实现简单，被抢占的请求回来时，它的块还可能留在前缀缓存里；V0 还支持换出。 | When the KV cache is full, the scheduler preempts a running request and gives its blocks to others. Recompute drops its KV cache and, when it returns, prefills its prompt and generated tokens again: about 2 × parameters × tokens FLOPs plus attention, and no extra storage. Swap copies its KV blocks to CPU memory and back: twice its KV bytes over a far slower link such as PCIe, plus the CPU memory. Compare the FLOPs a token costs to recompute over the bytes it costs to swap with the GPU's compute over the link's bandwidth: GQA and MLA make a token's KV small and large models make its FLOPs many, so swap pays; for small models, or when the link is busy, recompute is cheaper. vLLM V1 recomputes only: it is simpler, and a preempted request may find its blocks still in the prefix cache; V0 also had swap. |
#
# The proof on SmolLM2: a request's KV cache brought back both ways (a prefill into the emptied
# cache; every layer's keys and values copied to CPU memory and back), timed interleaved.

# %%
from minillm.generation.kv_designs import PUBLISHED, bytes_per_token

kv_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # fp32 keys and values
params = sum(p.numel() for p in model.parameters())
print(f"SmolLM2 in fp32, per token: recompute {2 * params / 1e6:.0f} MFLOP, swap "
      f"{2 * kv_token / 1e3:.0f} kB out and back: {params / kv_token:,.0f} FLOP a byte")
verdicts, sizes = {}, {}
for length in (32, 128) if CI else (32, 128, 256):
    prompt = torch.tensor([book[:length]], device=device)
    cache = KVCache.for_model(model, batch_size=1, max_tokens=length)
    host = [torch.empty(t.shape) for t in cache.keys + cache.values]  # CPU memory
    if device.type == "cuda":
        host = [h.pin_memory() for h in host]

    def recompute():
        cache.reset()
        with torch.inference_mode():
            model(prompt, cache=cache)

    def swap():
        for t, h in zip(cache.keys + cache.values, host):
            h.copy_(t)  # out
            t.copy_(h)  # and back

    recompute()
    sizes[length] = cache.nbytes
    timing = compare(swap, recompute, REPEATS, device=device)
    verdicts[length] = timing.above(1.0)
    said = {True: "swap was faster every time", None: TOO_NOISY,
            False: "recompute was faster every time"}[verdicts[length]]
    print(f"{length:>4} tokens: swap moves {2 * cache.nbytes / 1e6:5.2f} MB, recompute runs "
          f"{2 * params * length / 1e9:5.1f} GFLOP; recompute / swap time "
          f"{timing.spread_text()}: {said}")
h100 = 989e12 / 64e9  # H100: bf16 dense FLOP/s over PCIe 5 x16 bytes/s, one way
for design in ("GQA", "MHA"):  # Llama-3-8B as published, and with full multi-head attention
    per_byte = 8.0e9 / bytes_per_token(PUBLISHED["Llama-3-8B"], design)
    print(f"Llama-3-8B with {design}: {per_byte:,.0f} FLOP a byte; an H100 at peak: {h100:,.0f}")
assert all(sizes[length] == kv_token * length for length in sizes)  # the formula is the cache
assert device.type != "cpu" or all(v is not False for v in verdicts.values())  # one memory

# %% [markdown]
# On a CPU the "link" is a copy within one memory, far faster than any prefill: swap wins at
# every length (the last assert checks it there). On a GPU the copy crosses PCIe while the
# prefill runs on tensor cores: the verdicts above say which won on yours. For a larger model at
# peak, more FLOPs a byte than the H100's figure means swap pays: GQA's Llama-3-8B is well above
# it, the same model with full multi-head attention about at it.

# %% [markdown]
# ## Q37 · 什么是 goodput？QPS、并发数和延迟是什么关系？ What is goodput, and how do QPS, concurrency and latency relate?
#
# | 中文 | English |
# |---|---|
# | 吞吐量数完成了多少请求；有效吞吐量（goodput）只数满足服务等级目标（SLO）的请求，比如 TTFT 不超过 1 秒、TPOT 不超过 50 毫秒。负载越高，吞吐量一直涨到引擎饱和为止，排队却拉长 TTFT、大批量拉长 TPOT，超出 SLO 的请求越来越多，有效吞吐量反而下降（DistServe 等优化的正是它）。Little 定律：系统里的平均请求数（并发数）= 吞吐量 × 平均延迟，对任何稳定的系统都成立。QPS 是每秒到达的请求数（开环压测固定它），并发数是同时在处理的请求数（闭环压测固定它）：每秒 10 个请求、每个 2 秒，平均有 20 个在处理；固定 8 个并发、每个 2 秒，QPS 最多是 4。压测报告要写明固定的是哪个，并给出 SLO 下的有效吞吐量。 | Throughput counts the requests completed; goodput only those that met the service-level objectives (SLOs), say a TTFT within 1 s and a TPOT within 50 ms. As load grows, throughput rises until the engine saturates, while queueing stretches TTFT and larger batches stretch TPOT: more requests miss the SLO and goodput falls (DistServe and others optimise it). Little's law: the mean number of requests in the system (concurrency) = throughput × mean latency, for any stable system. QPS is the arrival rate (an open-loop load test fixes it); concurrency is the requests in flight (a closed-loop test fixes it): at 10 requests a second taking 2 s each, 20 are in flight on average; with 8 in flight at 2 s each, QPS is at most 4. A load-test report says which one it fixed, and gives the goodput under the SLO. |
#
# The proof on chapter 06's engine, its clock moved by its measured steps: a request served alone
# sets the SLO (TTFT and TPOT within 3x its own); then requests arrive at three rates, from half
# of what one-at-a-time serving could take to eight times it.

# %%
from minillm.engine.disaggregation import serve_colocated

REQUESTS, NEW = (6, 6) if CI else (8, 12)
prompts = [book[100 * i:100 * i + 48] for i in range(REQUESTS)]
settings = {"max_new_tokens": NEW, "ignore_eos": True}


def serve(arrivals):
    engine = minillm.Engine(model, tokenizer, num_blocks=128, block_size=16, max_num_seqs=4,
                            enable_prefix_caching=False)
    return serve_colocated(engine, arrivals).metrics


serve([(0.0, prompts[0], settings)])  # a first run warms the engine's code paths up
alone = serve([(0.0, prompts[0], settings)])[0]
print(f"alone: TTFT {1e3 * alone.ttft:.0f} ms, TPOT {1e3 * alone.tpot:.0f} ms, latency "
      f"{alone.latency:.2f} s")
runs = {}
for load in (0.5, 2, 8):
    qps = load / alone.latency
    done = serve([(i / qps, p, settings) for i, p in enumerate(prompts)])
    start, span = done[0].start, max(r.start + r.latency for r in done) - done[0].start
    met = sum(r.ttft <= 3 * alone.ttft and r.tpot <= 3 * alone.tpot for r in done)
    latency = sum(r.latency for r in done) / len(done)
    instants = [start + span * (j + 0.5) / 1000 for j in range(1000)]
    in_flight = sum(r.start <= t < r.start + r.latency for t in instants for r in done) / 1000
    # throughput, goodput, requests in the SLO, mean latency, mean requests in flight
    runs[load] = (len(done) / span, met / span, met, latency, in_flight)
    print(f"QPS {qps:4.2f}: throughput {len(done) / span:.2f}/s, goodput {met / span:.2f}/s "
          f"({met} of {len(done)} in the SLO); latency {latency:.2f} s; requests in flight "
          f"{in_flight:.2f}, throughput x latency {len(done) / span * latency:.2f}")
(low, _, low_met, _, _), (high, high_good, high_met, _, _) = runs[0.5], runs[8]
assert all(abs(flight / (rate * wait) - 1) < 0.05 for rate, _, _, wait, flight in runs.values())
assert high > low and high_good < high and high_met < low_met

# %% [markdown]
# ## Q38 · 多个 LoRA 适配器怎样在同一个批里服务？ How are many LoRA adapters served in one batch?
#
# | 中文 | English |
# |---|---|
# | LoRA 只训练每个投影旁边的两个小矩阵：W 不变，输出变成 xWᵀ + x Aᵀ Bᵀ，A 是 r × d_in，B 是 d_out × r，r 通常是 8 到 64，一个适配器只占基座模型的千分之几。把适配器合并进权重（W + BA）最快，但每个适配器要一份完整权重，请求也只能按适配器分批。多 LoRA 服务共用一份基座权重：基座的矩阵乘法整个批只做一次，每行再按自己的适配器编号收集（gather）A 和 B，做两个很小的矩阵乘法。Punica 的 SGMV/BGMV 内核按段或按行做这种收集；S-LoRA 把适配器放在 CPU 内存里，用统一分页把用到的适配器和 KV 缓存一起放进显存，一台机器能服务上千个适配器。vLLM 的 --enable-lora 和 SGLang 也这样做。 | LoRA trains two small matrices beside each projection: W stays, the output becomes xWᵀ + x Aᵀ Bᵀ with A of r × d_in and B of d_out × r, r usually 8 to 64, so an adapter is a few thousandths of the base model. Merging an adapter into the weights (W + BA) is fastest, but costs a full copy of the weights per adapter, and requests batch only with their own adapter. Multi-LoRA serving shares one copy of the base weights: the base multiply runs once for the whole batch, then each row gathers the A and B of its adapter by index and does two small multiplies. Punica's SGMV/BGMV kernels gather by segment or by row; S-LoRA keeps adapters in CPU memory and pages those in use into GPU memory with the KV cache (unified paging), serving thousands of adapters on one machine. vLLM's --enable-lora and SGLang do the same. |
#
# The proof on layer 5's gate projection and its inputs from Q33: two random adapters of rank 8,
# one batch of three requests (adapter 0, adapter 1, none), each row checked against its adapter
# merged into the weights. Lesson 09 §5 serves two adapters on minillm's engine, in one batch
# against one batch per adapter, and times both.

# %%
RANK = 8
seed = torch.Generator().manual_seed(0)
A = torch.randn(2, RANK, gate.shape[1], generator=seed) / gate.shape[1] ** 0.5  # (rank, in)
B = 0.05 * torch.randn(2, gate.shape[0], RANK, generator=seed)  # (out, rank)


def multi_lora(x, rows):
    """The base weight once for the batch, plus each row's adapter (-1: none), gathered."""
    pick = rows.clamp(min=0)
    delta = x @ A[pick].transpose(1, 2) @ B[pick].transpose(1, 2)
    return x @ gate.T + delta * (rows >= 0)[:, None, None]


x = x_test[:96].reshape(3, 32, -1)  # three requests of 32 tokens
rows = torch.tensor([0, 1, -1])
together = multi_lora(x, rows)
alone = [x[j] @ (gate + B[a] @ A[a]).T if a >= 0 else x[j] @ gate.T
         for j, a in enumerate(rows.tolist())]  # each adapter merged: W + B A
gap = max((together[j] - alone[j]).abs().max().item() for j in range(3))
effect = (alone[0] - x[0] @ gate.T).abs().max().item()
print(f"an adapter here: {A[0].numel() + B[0].numel():,} parameters beside {gate.numel():,}")
print(f"one batch against each row alone: largest difference {gap:.1e}; an adapter moves the "
      f"outputs by up to {effect:.2f}")
assert gap < 1e-4 < effect

# %% [markdown]
# ## Q39 · 为什么缓存 K 和 V，而不缓存 Q？ Why are K and V cached, and Q is not?
#
# | 中文 | English |
# |---|---|
# | 解码时，新词元在每一层的输出是 softmax(q_new · Kᵀ / √d) · V：只需要新词元自己的查询，以及所有位置（含它自己）的键和值。过去位置的查询只用来算过去位置自己的输出，那些输出已经算完、不会再变（因果掩码让前面的位置看不到后面）。所以键和值以后每一步都要再读，值得缓存；查询只用一次，缓存它只会白占显存（SmolLM2 的查询比键加值还宽：9 个查询头对 3 个键值头）。这也是为什么每步解码只处理一个新词元，而每步的注意力开销随上下文线性增长。 | In decode, the new token's output in each layer is softmax(q_new · Kᵀ / √d) · V: it needs only the new token's own query and the keys and values of every position, itself included. Earlier positions' queries served only to compute their own outputs, which are done and never change (the causal mask keeps earlier positions from seeing later tokens). So keys and values are read again at every later step and are worth caching; a query is used once, and caching it would only take memory (SmolLM2's queries are wider than its keys and values together: 9 query heads against 3 key/value heads). That is also why a decode step runs one new token, and why each step's attention grows linearly with the context. |
#
# The proof: a decode step with the cache gives the logits of a full pass; in the first layer,
# zeroing every earlier query leaves the last position's output as it was, moving one key does
# not.

# %%
from minillm.layers.attention import attention_explicit

tokens = torch.tensor([book[3000:3065]], device=device)  # 64 tokens, then the new one
first = model.layers[0]
with torch.inference_mode():
    cache = KVCache.for_model(model, batch_size=1, max_tokens=65)
    model(tokens[:, :-1], cache=cache)  # prefill: every k and v kept
    step = model(tokens[:, -1:], cache=cache)[0, -1].float().cpu()  # one new query
    full = model(tokens)[0, -1].float().cpu()
    q, k, v = first.attn.project(first.attn_norm(model.embed(tokens)))
    last = attention_explicit(q, k, v)[:, :, -1]
    no_past_q, moved_k = q.clone(), k.clone()
    no_past_q[:, :, :-1] = 0
    moved_k[:, :, 10] += 1.0
    q_effect = (attention_explicit(no_past_q, k, v)[:, :, -1] - last).abs().max().item()
    k_effect = (attention_explicit(q, moved_k, v)[:, :, -1] - last).abs().max().item()
print(f"decode step with the cache against a full pass: largest logit difference "
      f"{(step - full).abs().max().item():.1e}")
print(f"last position's attention output: moved {q_effect:.1e} by zeroing the earlier queries, "
      f"{k_effect:.1e} by moving one earlier key")
assert (step - full).abs().max() < 1e-3 and q_effect < 1e-6 and k_effect > 1e-4

# %% [markdown]
# ## Q40 · FlashAttention v1、v2、v3 和 Flash-Decoding 各改进了什么？ FlashAttention v1, v2, v3 and Flash-Decoding: what did each change?
#
# | 中文 | English |
# |---|---|
# | v1（2022）：把 Q、K、V 切成放得进片上 SRAM 的块，用在线 softmax 逐块累加，分数矩阵从不写回显存，额外显存从 O(n²) 降到 O(n)，结果精确（Q25）。v2（2023）：减少矩阵乘法以外的运算（归一化的除法最后只做一次），除批和头外还沿序列长度并行，重新划分 warp 的工作，在 A100 上达到峰值算力的 50%–73%，约为 v1 的两倍。v3（2024，Hopper）：用 TMA 和 WGMMA 异步流水、warp 分工（warp specialization），让 softmax 与矩阵乘法重叠，并支持 FP8，H100 上 FP16 约 740 TFLOPS。Flash-Decoding（2023）针对解码：批为 1 时只有一个查询，按批和头并行的块太少，大部分 SM 空闲；它把 KV 的长度切成多段并行计算，每段给出局部的最大值、指数和与未归一化的输出，再按 exp(m_i − m) 缩放合并，结果与一次算完相同，长上下文解码最多快 8 倍。 | v1 (2022): Q, K and V cut into tiles that fit in on-chip SRAM, accumulated with the online softmax; the score matrix is never written to GPU memory, the extra memory drops from O(n²) to O(n), and the result is exact (Q25). v2 (2023): fewer operations outside the matrix multiplies (the normalising division once, at the end), parallel over the sequence length as well as batch and heads, and the work split differently among warps: 50–73% of an A100's peak, about twice v1. v3 (2024, Hopper): asynchrony with TMA and WGMMA and warp specialization, so that the softmax overlaps the matrix multiplies, and FP8: about 740 TFLOPS in FP16 on an H100. Flash-Decoding (2023) is for decode: at batch 1 there is one query, parallelizing over batch and heads gives too few blocks, and most SMs sit idle; it splits the KV length into chunks computed in parallel, each giving its partial maximum, sum of exponentials and unnormalised output, merged after rescaling by exp(m_i − m): the same result as one pass, up to 8x faster decode on long contexts. |
#
# The proof on the first layer: one decode step's query against a long text's keys and values,
# in one pass and in 2, 4 and 16 chunks, merged.

# %%
from minillm.layers.attention import repeat_kv

long_ids = torch.tensor([book[:256 if CI else 1024]], device=device)
with torch.inference_mode():
    q, k, v = (t.float().cpu() for t in first.attn.project(first.attn_norm(model.embed(long_ids))))
q = q[:, :, -1:]  # the decode step's query: the last token's


def split_kv_decode(q, k, v, splits):
    """Each chunk's maximum m, sum l and output o (in parallel on a GPU), merged."""
    k, v = (repeat_kv(t, q.shape[1] // t.shape[1]) for t in (k, v))
    partial = []
    for k_part, v_part in zip(k.chunk(splits, 2), v.chunk(splits, 2)):
        scores = q @ k_part.transpose(-2, -1) / math.sqrt(q.shape[-1])
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m)
        partial.append((m, p.sum(-1, keepdim=True), p @ v_part))
    m = torch.stack([m_i for m_i, _, _ in partial]).amax(0)
    l = sum(l_i * torch.exp(m_i - m) for m_i, l_i, _ in partial)
    return sum(o_i * torch.exp(m_i - m) for m_i, _, o_i in partial) / l


one_pass = attention_explicit(q, k, v)  # the query is the last of the keys: it sees them all
gaps = {splits: (split_kv_decode(q, k, v, splits) - one_pass).abs().max().item()
        for splits in (2, 4, 16)}
print(f"{long_ids.shape[1]} keys; the largest difference from one pass: "
      + ", ".join(f"{gap:.1e} in {splits} chunks" for splits, gap in gaps.items()))
print(f"work items at batch 1: {c.n_heads} heads alone, {16 * c.n_heads} with 16 chunks; an "
      "H100 has 132 SMs")
assert all(gap < 1e-5 for gap in gaps.values())

# %% [markdown]
# ## What to take away
#
# - An MoE saves compute per token; it saves bytes only at small batches.
# - Low-bit formats split their bits between values and scales: fp8 holds its precision at any
#   scale, fp4 needs a scale every 16 or 32 numbers.
# - Long context: stretch the slow RoPE frequencies, and keep the attention sinks.
# - Scheduling is arithmetic: FLOPs against bytes for preemption, Little's law for concurrency,
#   an SLO for goodput.
# - Keys and values are cached because every later step reads them; the online softmax's merge
#   lets attention be tiled and split.
