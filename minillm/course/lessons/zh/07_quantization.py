# 中文版 · 07_quantization.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=4aba8650
# # 07 · 量化：更小的权重，在真实模型上测量
#
# **量化（quantization）**就是用更少的比特存放模型的权重：用 16 位浮点数代替 32 位，或者用
# 8 比特、4 比特的整数再配上少量浮点缩放因子。本章在 minillm 里实现 int8 和 int4 权重，亲手
# 解码课程模型实际发布时所用的 4 比特格式，并在 SmolLM2-135M 上测量每种方案在质量上付出多少、
# 在内存和速度上换回多少。
#
# 下面的每个数字都是在这台机器上、这次运行中测出来的。设置了环境变量 `CI` 时（课程的测试），
# 规模会缩小。

# %% en=b3c317a0
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
from minillm.utils.columns import Label  # 按屏幕上的宽度补齐标签
from minillm.utils.devices import best_time
from minillm.fast import optimize
from minillm.tools.bench.quantization import benchmark, held_out_ids, machine, plot_benchmark, table

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
# 可读版模型（fast=False）：本章要把它的线性层一个个换掉、逐个查看
model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)
n_params = sum(p.numel() for p in model.parameters())
print(f"{n_params / 1e6:.1f} M 个参数，在 {device} 上；{torch.get_num_threads()} 个线程")

# %% [markdown] en=35275b8d
# ## 1 · 为什么要量化：内存与带宽
#
# 一个权重用 float32（fp32）存要 4 个字节；用 bfloat16（bf16）或 float16（fp16）要 2 个；
# 用 int8 要 1 个；用 int4 只要半个字节（另加缩放因子）。第一个理由是内存：n B 参数的模型
# 用 fp16 存大约需要 2n GB，字节数减半，所需的机器也就减半。
#
# 第二个理由是速度。第 05 章讲过，批大小为 1 时，每个解码步为了生成一个词元要把*每个*权重
# 读一遍，所以解码速度的上限是内存带宽（memory bandwidth）除以权重的字节数。字节越少，
# 上限越高：

# %% en=00a8c4c7
bandwidth = read_bandwidth(device)
print(f"这台机器的读取带宽约为 {bandwidth / 1e9:.1f} GB/s")
for name, bits in [("fp32", 32), ("bf16/fp16", 16), ("int8", 8 + 32 / 576),
                   ("int4 (Q4_1)", 5)]:
    gb = n_params * bits / 8 / 1e9
    print(f"{name:>12}：权重 {gb:.3f} GB -> 最多 {bandwidth / 1e9 / gb:7.1f} 词元/秒")

# %% [markdown] en=3f810119
# 这个上限有个前提：算子（kernel）*直接*读取小权重。它到底是不是这样读的，正是第 6 节要讲的
# 全部故事。
#
# ## 2 · 比特更少的浮点数：fp16 与 bf16
#
# 两种 16 位格式都由符号位、指数和尾数（mantissa）组成。fp16 有 10 位尾数、5 位指数（步长更细，
# 范围小）；bf16 有 7 位尾数，保留了 fp32 的 8 位指数（范围相同，步长更粗）。fp32 的尾数是
# 23 位。`torch.finfo` 把这种取舍摆了出来：

# %% en=51efb303
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):>15}：{info.bits} 位，最大值 {info.max:.3g}，"
          f"1.0 之后的下一个数与它相差 {info.eps:.3g}")
w = model.layers[0].mlp.gate_proj.weight.detach().float().cpu()
for dtype in (torch.bfloat16, torch.float16):
    err = (w.to(dtype).float() - w).abs()
    print(f"{str(dtype):>15}：一个真实权重矩阵舍入后的平均误差为 {err.mean():.2e}")

# %% [markdown] en=0bbd7e65
# ## 3 · 整数：absmax，以及“缩放因子加最小值”，先在一个小张量上试
#
# **absmax**，即对称量化（symmetric quantization）：一个缩放因子 s = max|x| / 127，把 x
# 映射成 -127..127 之间的整数 q = round(x / s)，还原时取 q · s。0 仍然精确地是 0。
#
# **缩放因子加最小值**，即非对称量化（asymmetric quantization）：
# s = (max − min) / (2^bits − 1)，q = round((x − min) / s)，取值 0..2^bits − 1，还原时取
# q · s + min。数值不以 0 为中心时，它能用上每一个编码。GGUF 的 Q4_1 存的正是这两个量：
# 缩放因子 d 和最小值 m。（minillm 里对应的函数沿用了常见的名字 `zeropoint_quantize`。）

# %% en=14fc8d18
x = torch.tensor([-1.2, -0.4, 0.0, 0.3, 0.9, 2.5])
q, scale = quant.absmax_quantize(x, bits=8)
print("absmax int8   q =", q.flatten().tolist(), f" 缩放因子 = {scale.item():.5f}")
print("  还原：", [round(v, 4) for v in quant.absmax_dequantize(q, scale, x.shape).tolist()])
q, scale, lo = quant.zeropoint_quantize(x, bits=4, granularity="tensor")
print("缩放因子加最小值，4 比特：q =", q.flatten().tolist(),
      f" 缩放因子 = {scale.item():.4f}，最小值 = {lo.item()}")
min_back = quant.zeropoint_dequantize(q, scale, lo, x.shape)
print("  还原：", [round(v, 4) for v in min_back.tolist()])
print("4 比特 absmax 的误差：", (quant.roundtrip(x, "absmax", 4) - x).abs().max().item(),
      " 4 比特缩放因子加最小值的误差：", (min_back - x).abs().max().item())

# %% [markdown] en=978cb41d
# 真正的**零点（zero-point）**是另一回事：它是一个代表 0.0 的*整数*编码 z，x ≈ s · (q − z)，
# 其中 z = round(−min / s)。PyTorch 和 ONNX 的 int8 用的就是这种非对称方案
# （`torch.quantize_per_tensor(x, scale, zero_point, ...)`）。因为 z 是一个整编码，0.0
# 能精确地还原（填充、ReLU 的输出和剪掉的权重都仍是 0）；而 Q4_1 的最小值可以是任意浮点数，
# 于是 0.0 落在两个编码之间：

# %% en=3b5c747b
s_, z = scale.item(), round(-lo.item() / scale.item())  # z：代表 0.0 的整数编码
q_z = (torch.round(x / s_) + z).clamp(0, 15)
zp_back = (q_z - z) * s_
print(f"零点 z = {z}；q =", q_z.int().tolist())
print("  还原：", [round(v, 4) for v in zp_back.tolist()])
at_zero = x == 0
print(f"0.0 用缩放因子加最小值还原为 {min_back[at_zero].item():.4f}，"
      f"用零点还原为 {zp_back[at_zero].item():.4f}；最大误差分别为 "
      f"{(min_back - x).abs().max().item():.4f} 和 {(zp_back - x).abs().max().item():.4f}")

# %% [markdown] en=6add0e26
# 比公式更要紧的，是缩放因子按什么范围来算。整个张量一个缩放因子（per-tensor）时，一个大数就会
# 拖垮其余所有数的分辨率；每个输出行一个（per-channel，逐通道），或者一行里每 32 个数一组、
# 每组一个（group-wise，分组），都让每个缩放因子只需照顾更少的数。在模型的一个真实权重矩阵上：

# %% en=42f3ca6a
w = model.layers[5].mlp.down_proj.weight.detach().float().cpu()
results = {}
for bits, method in [(8, "absmax"), (4, "zeropoint")]:
    for granularity in ("tensor", "channel", "group"):
        back = quant.roundtrip(w, method, bits, granularity, 32)
        results[(bits, granularity)] = (back - w).pow(2).mean().sqrt().item()
fig, ax = plt.subplots(figsize=(6, 3))
labels = [f"int{b}\n{g}" for b, g in results]
ax.bar(labels, list(results.values()), color=["C0"] * 3 + ["C1"] * 3)
ax.set(ylabel="均方根误差", yscale="log", title="layers.5.mlp.down_proj：不同粒度的误差")
plt.show()

# %% [markdown] en=67f5db47
# ## 4 · minillm 的量化层
#
# minillm 有两种存储格式。**int8** 是仅权重量化（weight-only quantization）、对称的，每个输出
# 通道一个缩放因子。**int4** 把每一行切成 32 个数一组，每组一个 float16 缩放因子和一个最小值，
# 一个字节装两个 4 比特数：这就是 GGUF Q4_1 的方案，每个权重 5 比特。

# %% en=46f70a53
show_source(quant.quantize_int8)
show_source(quant.quantize_int4)

# %% [markdown] en=fd49959e
# 量化后的线性层只保存这些小数字；在它朴素的教学路径里，每次调用都先重建浮点权重，再做一次普通的
# 矩阵乘法。`quantize(model, scheme)` 把模型副本里的每个 `nn.Linear` 都换成这样的层；
# `minillm.model` 本身不会改变。

# %% en=4ac16003
show_source(quant.QuantizedLinear.forward_dequantize)
show_source(quant.quantize)

# %% en=7bdb0a4c
int8_model = minillm.quantize(model, "int8")
print(int8_model.layers[0].mlp)
print(f"权重：fp32 {quant.weight_bytes(model) / 1e6:.1f} MB -> int8 "
      f"{quant.weight_bytes(int8_model) / 1e6:.1f} MB（其中线性层 "
      f"{quant.weight_bytes(model, linear_only=True) / 1e6:.1f} -> "
      f"{quant.weight_bytes(int8_model, linear_only=True) / 1e6:.1f} MB）")

# %% [markdown] en=7638e770
# 词嵌入表仍是 fp32：SmolLM2 把它与语言模型头绑在一起（同一个矩阵把最后的隐藏状态变成
# logits），minillm 把它当作普通张量来读。它占参数总量的五分之一，所以整个模型缩小的比例不如
# 线性层那么多。
#
# ## 5 · 亲手解码课程模型的文件
#
# GGUF 文件把每个线性层的权重存成 20 字节一块的 Q4_1 块：一个 float16 缩放因子 d、一个
# float16 最小值 m，以及 16 个字节，装着 32 个 4 比特数（第 j 个字节的低半字节是第 j 个权重，
# 高半字节是第 j + 16 个）。下面是第 0 层门控投影的第一块：

# %% en=dade8256
path = minillm.model_file("smollm2-135m")
blocks = quant.q4_1_blocks(path, "blk.0.ffn_gate.weight")
fields = quant.gguf_q4_1.block_fields(blocks[0])
print(f"共 {len(blocks)} 块；第 0 块的字节：{fields['hex']}")
print(f"d = {fields['d']}，m = {fields['m']}")
print("q =", fields["q"])

# %% en=3b0b7809
show_source(quant.decode_q4_1_block)

# %% en=643f78e1
by_hand = quant.decode_q4_1_block(blocks[0])
by_gguf = quant.gguf_dequantize_q4_1(blocks[:1])[0]
print(by_hand[:6])
assert np.array_equal(by_hand.view(np.uint32), by_gguf.view(np.uint32))
ours = model.layers[0].mlp.gate_proj.weight[0, :32].detach().cpu().numpy()
assert np.array_equal(by_hand, ours)
print("手工解码 == gguf 的反量化，逐位相同，也 == minillm 权重第 0 行的第 0..31 个数")

# %% [markdown] en=c9e9da69
# 可见 minillm 的“fp32”模型其实就是展开后的 Q4_1 文件：每个权重本来就落在 Q4_1 的网格上。
# 同样按 32 个数分组的 int4 几乎能原样找回这个网格；按 64 个分组则会跨两个块，只好重新舍入。
# 读后面的表时请记住这一点：fp32 基线*本身就是*一个 4 比特模型，所以这里的“int4”测的是再次
# 量化的代价，“int4 g64”则显示更粗的分组要付出多少。这台机器上没有 16 位的 SmolLM2，因此本章
# 从不测量 int4 对一个 16 位模型的代价：课程的基线就是 Q4_1 文件本身。

# %% en=7c4a2573
w = model.layers[0].mlp.gate_proj.weight.detach().float().cpu()
for g in (32, 64):
    back = quant.dequantize_int4(*quant.quantize_int4(w, g))
    print(f"int4，每组 {g} 个：最大 |误差| {(back - w).abs().max().item():.2e}")

# %% [markdown] en=d15374a8
# ## 6 · 测量：内存、质量与速度
#
# 每种方案都在同一段留出（held-out）的英文文本上测（`data/factbook_europe.txt`，
# 《世界概况》（World Factbook）里的国家简介，属于公有领域，模型的提示词里一句也没有用到）：
#
# - **困惑度（perplexity）**：每个下一词元的负对数似然取平均再取 exp；越低越好；
# - 相对 fp32 的 **logit 误差**（在所有位置、所有词表项上的最大和平均 |Δ|），以及
#   **top-1 一致率**：最可能的词元与 fp32 相同的位置所占的比例；
# - 来自 `minillm.generate` 指标（第 05 章）的**预填充和解码的每秒词元数**。
#
# “int8”（`minillm.quantize`，逐层替换；语言模型头仍是 float32）在解码步里走 minillm 的 int8
# 算子；“int8 dequant”每次调用都重建浮点权重（第 7 节）。

# %% en=93de5f5b
if CI:
    sizes = dict(text_tokens=64, window=64, prompt_tokens=8, new_tokens=3)
    rows = ("fp32", "bf16", "fp16", "int8", "int8 dequant", "int4")
else:
    sizes = dict(text_tokens=256, window=256, prompt_tokens=32, new_tokens=8)
    rows = ("fp32", "bf16", "fp16", "int8", "int8 dequant", "int4", "int4 g64")
measured = benchmark(model, tokenizer, rows, **sizes)
display(Markdown(table(measured)))

# %% en=9be76fbf
fig = plot_benchmark(measured, f"SmolLM2-135M，{sizes['text_tokens']} 个留出词元")
plt.show()

# %% [markdown] en=d68ffdf5
# 先看质量那几列：16 位浮点和 int8 几乎不改变 logits；按 GGUF 分组的 int4 返回的是同样的权重
# （第 5 节）；分组越粗，代价越大。再看速度那几列：在 CPU 上，它们通常*并不*跟着字节数走。
# 下一节解释原因。

# %% [markdown] en=4e906768
# ## 7 · 为什么 transformers 的 int8 比 fp16 慢，以及 minillm 的几条 int8 路径
#
# Hugging Face 的 int8 推理内存省得多，却常常明显比 fp16 慢。transformers
# 在 `load_in_8bit=True` 时跑的是 **LLM.int8()**（Dettmers 等，2022；bitsandbytes 库），它并不是
# 只量化权重的方案：它把*激活*也量化了，让乘法本身成为 int8 × int8、在 int32 里累加。大模型里
# 有少数几个**离群特征（outlier feature）**：激活值远大于其余维度的那几个隐藏维度。如果每行只用
# 一个缩放因子，它们会拖垮这一行其余所有数的精度，所以 LLM.int8() 把每次矩阵乘法拆成两部分：
#
# 1. 找出输入里有某个 |x| 超过阈值（6.0）的那些列；
# 2. 把 x 的这些列和权重里对应的列用 fp16 相乘；
# 3. 其余的列全部量化，x 的每一行用它自己的 absmax 缩放因子，再与 int8 权重（每个输出行一个
#    缩放因子）相乘，在 int32 里累加；
# 4. 把 int32 的结果缩放回来，再加上 fp16 那部分。
#
# fp16 只做一次乘法，这里却要做五六个操作（在 GPU 上各是一次算子启动）：批大小为 1 时，它们的开销
# 比 int8 权重省下的还多。bitsandbytes 需要 CUDA GPU，所以我们运行的是用 PyTorch 写出来的同一套
# 算术（`minillm.quant.llm_int8`）：

# %% en=8f3d0985
from minillm.quant.llm_int8 import THRESHOLD, LLMInt8Linear, outlier_columns  # noqa: E402

show_source(LLMInt8Linear.__call__)

# %% [markdown] en=42917fd4
# 先看它在 SmolLM2 里会找到什么：在一段留出文本上，进入每个线性层的激活，以及有某个值超过
# 阈值 6.0 的那些特征（输入列）（每种层取 30 层中的最大值）：

# %% en=ac245623
linear_inputs = {}  # 层名 -> 它看到的输入
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
    print(f"{kind:>10} 的输入：最大 |x| 为 {biggest:7.1f}；{width} 个特征中最多 {n_cols:>3} 个"
          f"超过 {THRESHOLD}，最多涉及 {share:.0%} 的词元")

# %% [markdown] en=597f95b4
# 再看它在一个真实的层和输入上的精度：选输入里含最大值的那个线性层。基线是只用 int8 权重的
# 乘积；再比较做和不做离群拆分的 LLM.int8()；全部以 float32 为准：

# %% en=e0953572
probe = max(linear_inputs, key=lambda name: linear_inputs[name].abs().max().item())
x_probe = linear_inputs[probe].float()
w_probe = dict(model.named_modules())[probe].weight.detach().float().cpu()
exact = x_probe @ w_probe.T
weight_only = x_probe @ quant.dequantize_int8(*quant.quantize_int8(w_probe)).T
llm8 = LLMInt8Linear(w_probe)
errors = {
    "int8 权重，浮点激活": weight_only,
    "LLM.int8()：离群特征走 fp16": llm8(x_probe),
    "int8 × int8，不拆分离群特征": llm8(x_probe, decompose=False),
}
outlier_cols = outlier_columns(x_probe).numel()
print(f"{probe}：{x_probe.shape[1]} 个特征中有 {outlier_cols} 个离群特征")
for name, y in errors.items():
    rel = ((y - exact).norm() / exact.norm()).item()
    errors[name] = rel
    print(f"{Label(name):>32}：相对误差 {rel:.2e}")
if outlier_cols:
    assert errors["int8 × int8，不拆分离群特征"] > errors["LLM.int8()：离群特征走 fp16"]

# %% [markdown] en=3fec0979
# 再看各个步骤的开销：批大小为 1（一个解码步）和 128 行（一次预填充）时，与一次 float32 乘法相比。
# 模拟用 PyTorch 的 `torch._int_mm` 做乘法，而不是 bitsandbytes 的 CUDA 算子；能搬过去的结论是：
# 乘法之外的每一步都是额外的工作：

# %% en=6dc8219c
repeats = 5 if CI else 30
for rows_in in (1, 128):
    x_rows = x_probe[torch.arange(rows_in) % x_probe.shape[0]]  # 真实的行，不够时重复使用
    plain_t = best_time(lambda: x_rows @ w_probe.T, device, repeats, warmup=1)
    int8_t = best_time(lambda: llm8(x_rows), device, repeats, warmup=1)
    print(f"{rows_in:>3} 行：float32 {1e3 * plain_t:6.3f} ms，模拟的 LLM.int8() "
          f"{1e3 * int8_t:6.3f} ms（{int8_t / plain_t:.1f}x）")

# %% [markdown] en=9e4a0e6c
# 量化激活会损失精度，只量化权重则不会；拆分把离群特征造成的那部分损失找了回来。（论文发现，
# 从大约 6.7B 参数起，每一层都有离群特征。）
#
# ### minillm 的仅权重 int8：四种乘法
#
# minillm 的 int8 只把权重*存*成 int8，和 GPU 推理服务器上的 int8 一样；激活以浮点数进来。
# `quant.Int8Linear` 有四种乘法（它的 `path`），下面的图里依次叫“int8 反量化”“int8 融合”
# “int8 动态”和“int8 算子”：
#
# - **dequantize**：每次调用都重建一份浮点权重，再做普通乘法。
# - **fused**：PyTorch 的仅权重 int8 算子（`torch._weight_int8pack_mm`），
#   一个融合算子（fused kernel）：它直接拿 int8 数相乘，从不写出浮点权重。
# - **dynamic**：通过 PyTorch 调用 fbgemm 的 int8 GEMM，它把*激活*也量化（这次调用的所有行共用
#   一个缩放因子），做 int8 乘 int8：也就是不做离群拆分的 LLM.int8()。
# - **kernel**：minillm 自己的算子（`minillm/kernels/c/matmul_int8.c`）：它把 x 的每一行用该行
#   自己的缩放因子舍入成 16 位整数（int16），再与 int8 权重做整数乘法，第 05 章第 6 节写出过
#   这个过程。它读的字节数是 float32 的四分之一，而 x 的舍入（几万个台阶）比权重的（255 个）
#   细得多。快速路径的 int8 用的就是它。
#
# 我们在批大小为 1（一个解码步）和 128 行（一次预填充）两种情况下，为一个层（1536 × 576 的
# 门控投影）计时：

# %% en=5100d481
from minillm.quant.linear import dynamic_int8_available, kernel_int8_available  # noqa: E402

lin = copy.deepcopy(model.layers[0].mlp.gate_proj).float().cpu()  # 在 CPU 上计时
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
            "int8 反量化": lambda: layer8.forward_dequantize(x),
            "int4 反量化": lambda: layer4(x),
        }
        if quant.fused_int8_available():
            calls["int8 融合"] = lambda: layer8.forward_fused(x)
        if dynamic_int8_available():
            calls["int8 动态"] = lambda: layer8.forward_dynamic(x)
        if kernel_int8_available():
            calls["int8 算子"] = lambda: layer8.forward_kernel(x)
        for name, fn in calls.items():
            kernel_times[(name, rows_in)] = best_time(fn, device, repeats, warmup=1)
names = list(dict.fromkeys(n for n, _ in kernel_times))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, rows_in in zip(axes, (1, 128)):
    ax.barh(names, [1e3 * kernel_times[(n, rows_in)] for n in names])
    ax.set(xlabel="每次调用的毫秒数（最快一次）", title=f"{rows_in} 行："
           + ("解码步" if rows_in == 1 else "预填充"))
fig.tight_layout()
plt.show()
for rows_in in (1, 128):
    base = kernel_times[("fp32", rows_in)]
    print(f"{rows_in:>3} 行：" + "，".join(
        f"{n} {kernel_times[(n, rows_in)] / base:.1f}x" for n in names) + "（时间 / fp32 的时间）")
print("PyTorch 在这里用的 CPU 指令集：", torch.backends.cpu.get_cpu_capability())

# %% [markdown] en=a836061f
# 这些比值因机器而异。**dequantize** 路径每次调用都要建一整份浮点权重，所以批大小为 1 时输给
# fp32：这就是“慢的 int8”。**dynamic** 和 **kernel** 路径只读四分之一的字节，批大小为 1 时更快；
# 到了 128 行，乘法变成计算受限，在大多数 CPU 上 fp32 又赢了回来（有整数矩阵单元的 CPU，即 Intel
# 的 AMX，除外：docs/benchmarks.md），所以快速路径在那里预填充时会重建浮点权重。在没有 16 位算术的
# CPU 上，fp16/bf16 要临时转换。
#
# dynamic 路径还把每个激活舍入到 8 比特。像解码步那样逐个词元地解码这段留出文本，就能看出
# 这样做的代价：

# %% en=888bd27e
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
    paths["int8 算子"] = fast8
if dynamic_int8_available():
    fast8_dynamic = copy.deepcopy(fast8)
    quant.set_int8_path(fast8_dynamic, "dynamic")
    paths["int8 动态"] = fast8_dynamic
steps = {name: stepwise(m, step_ids) for name, m in tqdm(paths.items(), desc="路径")}
error = {}
for name, (ppl, logits) in steps.items():
    error[name] = (logits - steps["fp32"][1]).abs().mean().item()
    print(f"{Label(name):>12}：困惑度 {ppl:.3f}"
          f"（相对 fp32 {ppl / steps['fp32'][0] - 1:+.2%}），"
          f"平均 |logit - fp32 的 logit| {error[name]:.4f}，逐个解码 {len(step_ids) - 1} 个词元")
if "int8 算子" in error and "int8 动态" in error:
    assert error["int8 算子"] < error["int8 动态"]  # x 用 int8 比用 int16 损失更大

# %% [markdown] en=3a4288ee
# ### 整个模型在批大小为 1 时：int8 胜过 fp32 和 bf16
#
# `minillm.load(..., weights="int8")`（或 `optimize(model, "int8")`）让快速路径的每个线性层，
# 包括语言模型头，都走 int8 算子。批大小为 1 时，速度跟着每个词元要读的字节数走，上限是第 05 章的
# 那个界（带宽 / 字节数）；16 行则是计算受限的。

# %% en=856b9306
from minillm.measure.bandwidth import decode_bound  # noqa: E402
from minillm.model.memory import bytes_per_token  # noqa: E402

engines = {"fp32": optimize(cpu_model), "bf16": optimize(cpu_model, "bf16"), "int8": fast8}
# 问题的意思是“天空为什么是蓝色的？”
chat = tokenizer.apply_chat_template([{"role": "user", "content": "Why is the sky blue?"}],
                                     add_generation_prompt=True)
new = 12 if CI else 32
bandwidth = read_bandwidth("cpu")
speeds = {}
for name, engine in engines.items():
    minillm.generate(engine, tokenizer, chat, max_new_tokens=2)  # 预热
    one = minillm.generate(engine, tokenizer, chat, max_new_tokens=new, ignore_eos=True)
    sixteen = minillm.generate(engine, tokenizer, [chat] * 16, max_new_tokens=new // 2,
                               ignore_eos=True)
    speeds[name] = (one.metrics.decode_tokens_per_second,
                    16 / sixteen[0].metrics.tpot)  # 每步 16 行
    bound = decode_bound(bytes_per_token(engine), bandwidth)
    print(f"{name:>5}：每个词元 {bytes_per_token(engine) / 1e6:5.0f} MB，批大小 1 时 "
          f"{speeds[name][0]:5.1f} 词元/秒（达到其上限 {bound:.0f} 的 "
          f"{speeds[name][0] / bound:.0%}），批大小 16 时合计 {speeds[name][1]:6.1f} 词元/秒")
# int8 读的字节是 fp32 的四分之一：批大小 1 时，它不可能比这个倍数快出很多。
# 超过字节比的倍数说明计时受了干扰：两者都重测一次，保留较快的那次。
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
    print(f"批大小 1 时 int8 是 fp32 的 {ratio:.2f}x，"
          f"bf16 的 {speeds['int8'][0] / speeds['bf16'][0]:.2f}x；批大小 16 时是 fp32 的 "
          f"{speeds['int8'][1] / speeds['fp32'][1]:.2f}x")
else:
    print(f"批大小 1 时 int8：受干扰（测得 fp32 的 {ratio:.2f}x，超过其字节所允许的 "
          f"{byte_ratio:.1f}x；{load_average()}）")

# %% [markdown] en=3a7f262e
# 所以，int8 在重建浮点权重或多出步骤时慢；有一个只读一遍 int8 权重的算子时，批大小为 1 就快。

# %% [markdown] en=2e8dfde9
# ## 8 · 3 比特和 4 比特下更好的舍入：GPTQ 与 AWQ
#
# 到目前为止，每种方案都把每个权重舍入到离它最近的网格点：**就近舍入（round-to-nearest，
# RTN）**。这样每个*权重*的误差都很小，但评判一个层的是它在真实输入上的*输出* y = x Wᵀ。有两种
# 方法舍入得更聪明，它们都要用一点**校准数据（calibration data）**：把真实文本送进模型，看清每个
# 层的输入。这一步叫作校准（calibration）。
#
# - **GPTQ**（Frantar 等，2022）修正误差的*总和*。一个层的各个输入彼此相关，所以 GPTQ 每舍入
#   W 的一列，就微调尚未舍入的那些列，抵消这一列在输出里造成的误差。最好的微调量来自
#   H = 校准输入上 xᵀx 的均值，即海森矩阵（Hessian），每个层只需求一次逆。
# - **AWQ**（Lin 等，2023）修正*最要紧*的误差。一个权重列若碰上很大的输入特征，它的舍入误差就
#   会被放大同样的倍数传下去。AWQ 在舍入前把这些列放大、把对应的输入缩小同样的倍数，让它们
#   得到更细的步长；倍数取 mean|x_j|^α，α 逐层搜索。
#
# 两者都沿用 RTN 的网格（每组一个缩放因子和一个最小值）。GPTQ 的核心循环如下：

# %% en=d3385809
from minillm.quant import calibration  # noqa: E402
from minillm.quant.gptq import gptq  # noqa: E402

show_source(gptq)

# %% [markdown] en=e1dfe43e
# 测量时，把 SmolLM2 前几个块里的线性层舍入到两种网格：**3 比特、每行一组**，以及
# **4 比特、每 128 个一组**（GPTQ 和 AWQ 检查点的常见格式；576 宽的一行最后一组是 64 个）。
# 校准用留出文本的*末尾*，困惑度在它的*开头*上测，所以没有哪个词元两边都用到。对每种方法，我们
# 报告校准输入上的输出误差 ‖x(W − Ŵ)ᵀ‖ / ‖xWᵀ‖（对各层取平均）、整个模型的困惑度，以及舍入
# 花了多少秒。

# %% en=d9628f1e
text_ids = held_out_ids(tokenizer)
calibration_ids = text_ids[-(256 if CI else 2048):]
eval_ids = text_ids[:64 if CI else 256]
rounded_blocks = range(2 if CI else 3)
names = calibration.linear_names(model, rounded_blocks)
stats = calibration.input_stats(model, calibration_ids, names)
base_ppl = quant.perplexity(model, eval_ids, window=256)
print(f"{len(model.layers)} 个块中第 0-{rounded_blocks[-1]} 块的 {len(names)} 个线性层；"
      f"{len(calibration_ids)} 个校准词元；fp32 的困惑度 {base_ppl:.2f}")
rounding = []
for bits, group in tqdm([(3, None), (4, 128)], desc="网格"):
    for method in calibration.METHODS:
        rounded, errors, seconds = calibration.round_layers(model, stats, method, bits, group)
        rounding.append(dict(bits=bits, group=group or "整行", method=method, seconds=seconds,
                             error=float(np.mean(list(errors.values()))),
                             ppl=quant.perplexity(rounded, eval_ids, window=256)))
        del rounded
for r in rounding:
    whole = r["seconds"] * len(model.layers) / len(rounded_blocks)
    print(f"{r['bits']} 比特，分组 {Label(str(r['group'])):>4}，{r['method']:>4}：输出误差 "
          f"{r['error']:.4f}，困惑度 {r['ppl']:6.2f}（{r['ppl'] - base_ppl:+.2f}），"
          f"这里用了 {r['seconds']:5.1f} 秒，全部 30 个块约需 {whole:4.0f} 秒")

# %% en=78db980c
by_grid = {(r["bits"], r["method"]): r for r in rounding}
for bits in (3, 4):
    assert by_grid[(bits, "gptq")]["error"] < min(by_grid[(bits, "rtn")]["error"],
                                                  by_grid[(bits, "awq")]["error"])
    best = min(calibration.METHODS, key=lambda m: by_grid[(bits, m)]["ppl"])
    print(f"{bits} 比特：困惑度最低的是 {best}；相对 fp32：" + "，".join(
        f"{m} {by_grid[(bits, m)]['ppl'] - base_ppl:+.2f}" for m in calibration.METHODS)
        + "")

# %% [markdown] en=a3c26fec
# 该从中读出什么：
#
# - GPTQ 在*校准输入上*的输出误差最小，这正是它最小化的目标（assert 检查了这一点）。困惑度是在
#   另一段文本上测的，它在那里的优势可能小一些：校准词元太少时，它拟合的是校准文本，而不是语言。
# - AWQ 每层只搜索一个数，几乎没有余地去拟合校准文本：它可能在校准误差上输，却在困惑度上赢。
#
# ## 9 · W8A8、SmoothQuant 与 FP8：离群值去了哪里
#
# **W4A16**（4 比特权重、16 位激活，GPTQ 和 AWQ 产出的就是这种）减少了一个解码步要读的字节：
# 解码受带宽限制时就选它。预填充或大批量是计算受限的；这时 **W8A8**（权重*和*激活都是 int8）
# 让乘法本身跑在 int8 运算单元上。它的障碍是第 7 节的离群特征：它们决定了每个词元那一行的缩放
# 因子。LLM.int8() 把这些列留在 fp16；**SmoothQuant**（Xiao 等，2022）把每个输入特征 j 除以
# s_j = max|x_j|^0.5 / max|W[:, j]|^0.5，同时把 W 的第 j 列乘以它，x Wᵀ 保持不变，离群值则有
# 一半挪进了权重。**FP8**（e4m3：4 位指数、3 位尾数）把这 8 个比特花在一个步长随数值增大的浮点
# 网格上；新近的 GPU 能原生地做 FP8 乘法。
#
# 公平的比较要给两种格式同样的缩放因子：先是**整个张量一个**，再是**每行一个**（x 每个词元一个，
# W 每个输出通道一个）。在第 7 节里激活最大的那个层上，看只舍入 x、只舍入 W、两者都舍入的误差：

# %% en=28c9a332
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
granularities = {"tensor": "整个张量一个缩放因子", "channel": "逐词元、逐行"}
eight_bit = {}
print(f"{Label(''):>36} {Label('仅 x'):>9} {Label('仅 W'):>9} {Label('两者'):>9}")
for fmt, rounded in formats.items():
    for scales, scale_words in granularities.items():
        x8, w8 = rounded(x_probe, scales), rounded(w_probe, scales)
        eight_bit[(fmt, scales)] = [relative_error(x8 @ w_probe.T),
                                    relative_error(x_probe @ w8.T), relative_error(x8 @ w8.T)]
        print(f"{Label(f'{fmt}，{scale_words}'):>36} "
              + " ".join(f"{e:9.2e}" for e in eight_bit[(fmt, scales)]))

# %% [markdown] en=777a1ff6
# int8 的步长处处相等，所以一切取决于缩放因子：整个张量一个缩放因子，最大的数就定下了所有的步长，
# 误差会大好几倍。FP8 的步长随数值增大，所以整个张量一个几乎和每行一个一样好（FP8 的常见做法）。
# 每行一个缩放因子时，两者各在适合自己网格的地方胜出：FP8 胜在离群值跨度很宽的激活上，int8 胜在
# 权重上，那里 255 个等距的台阶比 3 位尾数更细。下面的 assert 逐一检查：

# %% en=9e201d5b
assert eight_bit[("int8", "tensor")][2] > 2 * eight_bit[("int8", "channel")][2]
assert eight_bit[("FP8 e4m3", "tensor")][2] < 1.25 * eight_bit[("FP8 e4m3", "channel")][2]
assert eight_bit[("FP8 e4m3", "channel")][0] < eight_bit[("int8", "channel")][0]  # 只舍入 x
assert eight_bit[("int8", "channel")][1] < eight_bit[("FP8 e4m3", "channel")][1]  # 只舍入 W

# %% [markdown] en=f7735982
# SmoothQuant 和 W4A16 也在同一层上，与激活逐词元、权重逐行的 int8 相比：

# %% en=5383217f
x_max = x_probe.abs().amax(0)
smooth = smooth_scales(x_max, w_probe)
ways = {
    "W8A8：int8，激活逐词元、权重逐行": w8a8(x_probe, w_probe),
    "SmoothQuant 后的 W8A8（缩放同上）": w8a8(x_probe, w_probe, smooth),
    "W4A16：4 比特，每 128 个一组": x_probe @ rtn(w_probe, 4, 128).T,
}
spread = x_max.max() / x_max.median()
print(f"{probe}：最大特征的 max|x| 是中位特征的 {spread:.0f}x，"
      f"平滑之后是 {(x_max / smooth).max() / (x_max / smooth).median():.0f}x")
w8a8_error = {}
for name, y in ways.items():
    w8a8_error[name] = relative_error(y)
    print(f"{Label(name):>34}：相对误差 {w8a8_error[name]:.2e}")
assert (w8a8_error["SmoothQuant 后的 W8A8（缩放同上）"]
        < w8a8_error["W8A8：int8，激活逐词元、权重逐行"])

# %% [markdown] en=90a268ef
# 选 W4A16 看中的是它的字节数，而不是单次乘积的精度：批大小为 1 时，决定速度的是字节数。

# %% [markdown] en=5efaa060
# ## 10 · 专用算子能做到什么：llama.cpp
#
# llama.cpp 运行的正是同一个 Q4_1 文件，它用手写的 SIMD 算子直接拿 4 比特块做乘法，从不构建
# 浮点权重。`python -m minillm bench latency` 在一次运行里，用同一个文件、同一个提示词、同样的
# 线程数，给 minillm、transformers 的 `generate()` 计时，装了 `llama-cpp-python`（要从源码构建）
# 时也给 llama.cpp 计时。
# `docs/benchmarks.md` 保存着课程所用机器上 1 个和 2 个线程时的这份报告，连同打印它的命令。

# %% [markdown] en=1b82c490
# ## 11 · 剪枝与蒸馏，简述
#
# 量化保留每个权重，只是用更少的比特。另外还有两种缩小模型的办法：
#
# - **剪枝（pruning）**去掉权重。幅度剪枝把每行里 |w| 最小的那些置零。非结构化的零只有在稀疏格式
#   或稀疏算子利用它们时才省得下东西；结构化剪枝（整个注意力头、通道或层）让矩阵本身变小，
#   但需要重新训练。
# - **知识蒸馏（knowledge distillation）**训练一个小的*学生*模型去匹配大的*教师*模型的输出
#   分布（对教师软化后的概率用 KL 散度作损失），而不只是匹配正确的那个词元。SmolLM2 没有经过
#   蒸馏：它直接在非常大的文本语料上预训练，再微调成能听从指令。
#
# 不重新训练的话，权重去掉之后质量掉得有多快？

# %% en=a25b1925
ids = held_out_ids(tokenizer, 64 if CI else 128)
fractions = [0.0, 0.3, 0.6] if CI else [0.0, 0.2, 0.4, 0.6]
ppl = [quant.perplexity(quant.magnitude_prune(model, f), ids, window=len(ids))
       for f in fractions]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot([100 * f for f in fractions], ppl, "o-")
ax.set(xlabel="每个线性层置零的权重比例（%）", ylabel="困惑度", yscale="log",
       title="幅度剪枝，不重新训练")
plt.show()

# %% [markdown] en=ee799263
# ## 12 · 这一章在全局中的位置
#
# - `minillm.quantize(model, scheme)` 作用于 `minillm.load` 得到的普通模型；结果不加改动就能在
#   `minillm.generate` 里运行。
# - `minillm.load(name, weights="int8")` 就是表里走第 05 章快速路径、用 minillm 算子的那一行
#   int8。一个模型要么量化，要么优化，不要两样都做。
# - KV 缓存也可以用更少的比特存放，即 KV 缓存量化（KV-cache quantization）：
#   附录 07b 会测量它。
#
# 这台机器上的完整表格：`.venv/bin/python scripts/bench_quantization.py`（2,048 个留出词元；
# 想快速跑一遍就加 `--small`）。练习：`exercises/zh/07_quantization.ipynb`。

# %% en=53bc1bbb
print(machine())
