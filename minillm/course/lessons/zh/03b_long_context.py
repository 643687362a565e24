# 中文版 · 03b_long_context.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=af6b83c9
# # 03b · 长上下文：长缓存上的注意力、FlashAttention 与更小的缓存
#
# 第 03 课搭好了 KV 缓存（KV cache），并在几百个词元的范围内给解码步计了时；在这个范围里，
# 有缓存的一步在各个长度上耗时几乎一样。可是对话历史、文档和代码动辄几千个词元，甚至更多。
# 这一课关注随文本长度增长的那些东西：
#
# - 解码步的注意力要读取缓存里的每一个键和值：到了某个长度，它的开销就会超过权重（第 1 节）；
# - 长提示词的预填充（prefill）要算出 n² 个注意力分数，除非像 FlashAttention 那样一块一块地算
#   （第 2 节）；
# - 缓存每个词元占多少字节取决于注意力的设计（第 3 节），而滑动窗口限制了它最多保留多少个词元，
#   代价多大则取决于它留下的是哪些词元（第 4 节）。

# %% en=9d17c3eb
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import kv_cache_formula_bytes
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.measure.memory_peak import peak_bytes
from minillm.model import attention_explicit
from minillm.model.flash_attention import flash_attention
from minillm.model.memory import bytes_per_token
from minillm.utils.devices import best_time, describe

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时用更小的规模
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% en=d47c7d7d
device = minillm.pick_device("auto")  # 本课运行在上面打印出的设备上
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
c = model.config
print(f"{c.n_layers} 层，{c.n_heads} 个查询头，{c.n_kv_heads} 个键/值头，每个头宽 "
      f"{c.head_dim}；上下文窗口 {c.max_seq_len} 个词元")

# %% [markdown] en=3c6d5a1b
# ## 1 · 长缓存上的注意力
#
# 一个有缓存的解码步分两部分：一是**权重**，每一步都和每个权重做同样的乘加、读同样多的字节；
# 二是**缓存上的注意力**，每走一步就要多读一个缓存下来的键和值。要看清第二部分，需要很长的上下文。
# 用几千个真实词元填满缓存要做一次很长的预填充；不过一步的开销与缓存里具体是什么数无关，
# 所以我们用形状正确的随机键和值把它填满，然后在 n 个缓存词元之上为一个解码步计时：

# %% en=c4d8b7fb
def cached_step(model, context):
    """返回一个函数：它在 `context` 个缓存词元（随机的键和值）之上运行一个解码步，
    每次调用都是同一步。"""
    cache = KVCache.for_model(model, batch_size=1, max_tokens=context + 1)
    for t in cache.keys + cache.values:
        t.normal_()
    cache.advance(context)
    token = torch.tensor([[1]], device=device)

    def step():
        with torch.inference_mode():
            model(token, cache=cache)
        cache.crop(context)  # 忘掉新词元：每次调用都是同一步

    return step


contexts = [64, 1024, 2048, 4096] + ([] if CI else [6144, c.max_seq_len - 1])
rounds = [[best_time(cached_step(model, n), model, repeats=5, warmup=1)  # 交替测量：机器忙的
           for n in contexts] for _ in tqdm(range(3), desc="轮次")]    # 时刻会落到每个 n 上
context_seconds = [min(times) for times in zip(*rounds)]
slope, weights_part = np.polyfit(contexts, context_seconds, 1)  # 一步 ≈ 权重 + slope × n
for n, t in zip(contexts, context_seconds):
    print(f"{n:>5} 个缓存词元：每步 {1e3 * t:6.1f} ms"
          f"（拟合：权重 {1e3 * weights_part:.1f} ms + 注意力 {1e3 * slope * n:5.1f} ms）")

# %% en=834bde35
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
grid_n = np.arange(1, contexts[-1] + 1)  # 测量过的范围
ax[0].plot(contexts, 1e3 * np.array(context_seconds), "o", label="实测的一步")
ax[0].stackplot(grid_n, 1e3 * weights_part * np.ones_like(grid_n, dtype=float),
                1e3 * slope * grid_n, labels=["权重：每一步都一样",
                                              "缓存上的注意力：随 n 增长"],
                alpha=0.4)
ax[0].set(xlabel="缓存的词元数 n", ylabel="每个解码步的 ms", title="有缓存的一步")
ax[0].legend(fontsize=8, loc="upper left")
ax[1].plot(grid_n, weights_part * grid_n, label="权重：总共 O(n)")
ax[1].plot(grid_n, slope * grid_n ** 2 / 2, label="注意力：总共 O(n²)")
ax[1].set(xlabel="已生成的词元数", ylabel="秒", title="两部分在 n 步上的累计")
ax[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown] en=606429d3
# 一步的耗时真的在增长吗，还是只是测长上下文时机器恰好更忙了？把最短和最长的上下文轮流计时，
# 重复五次：

# %% en=98714095
longer = compare(cached_step(model, contexts[0]), cached_step(model, contexts[-1]), repeats=5,
                 device=device)
grows = longer.above(1.1)
print(f"在 {contexts[-1]:,} 个缓存词元上的一步，对比在 {contexts[0]} 个上的一步："
      f"{longer.spread_text()}；{load_average()}")
print("结论：", {True: "一步的耗时随缓存增长：缓存上的注意力是实实在在的开销",
                   False: "没有测到增长", None: TOO_NOISY}[grows])
assert grows is not False  # 没有一次重复测到长缓存多花 10%：这个论断就不成立

# %% en=0c06d333
weight_bytes = bytes_per_token(model)  # 一个解码步要读的字节数
kv_per_token = kv_cache_formula_bytes(c, 1, 4)
if slope > 0:
    print(f"按拟合，在 n ≈ {weights_part / slope:,.0f} 个缓存词元时注意力那部分与权重那部分相当"
          f"（若在 n 步上累计，要到这个数的两倍才追上）")
else:
    print("拟合没有得到可以外推的斜率：" + TOO_NOISY)
print(f"只按字节算：{weight_bytes / 1e6:.0f} MB 的权重，对比每个缓存词元 "
      f"{kv_per_token / 1024:.0f} KiB 的键和值，两者在 n ≈ "
      f"{weight_bytes / kv_per_token:,.0f} 处相交")

# %% [markdown] en=1dcecf03
# 所以有了缓存，生成要做的是经过权重的 O(n) 工作量，外加 O(n²) 的注意力。每一步把全部权重读一遍、
# 把每个缓存的键和值也读一遍，所以单看字节数就能预测两部分在哪里相交；而实测的交点还包含了两部分
# 在这台机器上各自跑得多高效（权重走的是少数几个大矩阵乘法，注意力则是每层许多个小运算），
# 这就是上面打印的两个数不一样的原因。无论按哪个算，过了几千个词元，决定一步速度的就是缓存，
# 而不再是权重：长上下文服务面对的正是这种情形。

# %% [markdown] en=59b65a6b
# ## 2 · 长提示词：不建分数矩阵的注意力（FlashAttention）
#
# 预填充有它自己的注意力难题。第 02 章的注意力一次就把一个头的所有分数都建出来：查询数 × 键数
# 个数，对 n 个词元的提示词就是 n² 个，每层的每个头都是如此。SmolLM2 有 9 个头，用 float32 时
# 每层就是 9 × n² × 4 字节：在它 8,192 个词元的窗口上达到好几 GB（下面会测）。而这些分数只是
# 中间产物：这一层真正返回的，是每个头 n × 64 个数。
#
# **FlashAttention**（Dao et al., 2022）从不把它们建出来。它只需要一个想法：**在线 softmax**
# （online softmax）。对任意 m 都有 softmax(x)_i = e^(x_i − m) / Σ_j e^(x_j − m)，所以可以一边
# 分块读 x、一边计算。记住到目前为止见过的最大值 m 和到目前为止的和 l = Σ e^(x_j − m)；
# 当新的一块把最大值抬到 m' 时，把 l 乘以 e^(m − m')，再加上新一块的各项。在一个 12 个数的向量上、
# 每块 4 个：

# %% en=522fd50d
x = torch.tensor([1.0, 3.0, 0.5, 2.0, 6.0, 1.0, 0.0, 2.5, 4.0, 7.5, 1.0, 3.0])
m, total = float("-inf"), 0.0
for start in range(0, len(x), 4):
    piece = x[start:start + 4]
    m_new = max(m, piece.max().item())
    total = total * math.exp(m - m_new) + torch.exp(piece - m_new).sum().item()
    m = m_new
    print(f"读完 {piece.tolist()} 后：当前最大值 {m}，当前的和 {total:.4f}")
online = torch.exp(x - m) / total
print(f"与 softmax 的最大差值：{(online - x.softmax(0)).abs().max().item():.1e}")
assert torch.allclose(online, x.softmax(0), atol=1e-6)

# %% [markdown] en=e47acf40
# 注意力只多了一样东西：在 m 和 l 之外，再记一个按值加权的累计和 o，每当最大值变动，它也乘上同样的
# e^(m − m') 重新缩放。读完最后一块键之后，o / l 就是注意力的输出。把查询也切成块，任一时刻存在的
# 就只有“一块查询 × 一块键”。完全位于对角线上方的块（块里没有哪个查询能看到这些键）直接跳过，
# 这让因果提示词的工作量减半。下面是 minillm 用 PyTorch 写的版本：

# %% en=c68188d0
show_source(flash_attention)

# %% [markdown] en=b56ea4a5
# 它给出的数必须和普通注意力一样。我们在 SmolLM2 的形状上比较（9 个查询头，3 个键/值头，宽 64），
# 同时测出两者在峰值时各分配了多少内存：办法是在运行时盯住 PyTorch 创建的每一个张量
# （`minillm.measure.memory_peak.peak_bytes`）：

# %% en=9e339ba8
flash_lengths = [256, 512, 1024] + ([] if CI else [2048])  # 比较的是最后两个长度
gen = torch.Generator().manual_seed(0)
peaks = {"普通注意力": [], "分块注意力": []}
for n in tqdm(flash_lengths, desc="提示词长度"):
    q = torch.randn(1, c.n_heads, n, c.head_dim, generator=gen)
    k = torch.randn(1, c.n_kv_heads, n, c.head_dim, generator=gen)
    v = torch.randn(1, c.n_kv_heads, n, c.head_dim, generator=gen)
    plain_out, plain_peak = peak_bytes(attention_explicit, q, k, v)
    tiled_out, tiled_peak = peak_bytes(flash_attention, q, k, v, block_size=128)
    error = (plain_out - tiled_out).abs().max().item()
    assert error < 1e-5
    peaks["普通注意力"].append(plain_peak)
    peaks["分块注意力"].append(tiled_peak)
    print(f"{n:>5} 个词元：峰值时普通注意力 {plain_peak / 1e6:7.1f} MB，分块 "
          f"{tiled_peak / 1e6:5.1f} MB；最大差值 {error:.1e}")

# %% en=849a0d1f
plt.figure(figsize=(6, 3.5))
for name, values in peaks.items():
    plt.plot(flash_lengths, [b / 1e6 for b in values], "o-", label=name)
plt.xlabel("提示词的词元数 n")
plt.ylabel("峰值时分配的 MB")
plt.title("一层的注意力，SmolLM2 的头")
plt.legend()
plt.show()
n_max = flash_lengths[-1]
scores_bytes = c.n_heads * n_max ** 2 * 4
per_n2 = peaks["普通注意力"][-1] / n_max ** 2
print(f"在 {n_max} 个词元时，普通注意力在峰值时占用分数矩阵（{scores_bytes / 1e6:.0f} MB）的 "
      f"{peaks['普通注意力'][-1] / scores_bytes:.1f} 倍；分块版本只占 "
      f"{peaks['分块注意力'][-1] / 1e6:.1f} MB")
print(f"按同样的每 n² {per_n2:.0f} 字节算，32k 个词元的提示词用普通注意力每层需要 "
      f"{per_n2 * 32768 ** 2 / 1e9:.0f} GB")
assert peaks["普通注意力"][-1] >= scores_bytes > 4 * peaks["分块注意力"][-1]
print(f"{flash_lengths[-2]} -> {flash_lengths[-1]} 个词元：普通注意力 x"
      f"{peaks['普通注意力'][-1] / peaks['普通注意力'][-2]:.2f}，分块 x"
      f"{peaks['分块注意力'][-1] / peaks['分块注意力'][-2]:.2f}")
assert peaks["普通注意力"][-1] / peaks["普通注意力"][-2] > 3.5  # 词元数翻倍：约 4 倍（n²）
assert peaks["分块注意力"][-1] / peaks["分块注意力"][-2] < 2.5  # 最多约 2 倍（n）

# %% [markdown] en=fee37967
# 图例里的“分块注意力”就是分块计算的 FlashAttention。分块版本的内存像 n 一样增长（它的查询
# 和输出），普通版本则像 n² 一样增长。这就是为什么每个推理服务引擎在预填充时都用 FlashAttention
# 式的算子：长提示词放得下；而且在 GPU 上，这些块待在片上的高速存储里，n² 个分数也就从来不必在
# GPU 的显存之间来回搬运，它的速度正是从这里来的。minillm 的引擎调用 PyTorch 融合的
# `scaled_dot_product_attention`，硬件有这类算子时它就会用上；这里的 Python 版本是逐块循环的，
# 所以它展示的是算术和内存，而不是速度。

# %% [markdown] en=da502c60
# ## 3 · 缩小缓存：MHA、GQA、MQA、MLA
#
# 第 03 课测过缓存的大小：每个词元 2 × 层数 × kv_heads × head_dim × 字节数。键/值头有多少个，
# 是模型的一个设计选择。对每个词元、每一层，缓存存的是：
#
# - **MHA**，多头注意力（multi-head attention）：每个查询头各有一个键和一个值；
# - **GQA**，分组查询注意力（grouped-query attention，见第 02 章）：每组查询头共用一个；
# - **MQA**，多查询注意力（multi-query attention）：所有头共用一个键和一个值；
# - **MLA**，多头潜在注意力（multi-head latent attention，DeepSeek-V2 和 V3）：一个压缩过的潜在向量，
#   每个头的键和值都由学到的上投影从它重建出来，再加上一小段所有头共用、携带 RoPE 的键；
# - **滑动窗口注意力**（sliding window）改变的不是每个词元的字节数，而是保留多少个词元：每个词元只
#   关注最近的 W 个，更早的就可以丢掉（Mistral 7B 用的是 W = 4,096）。
#
# 下表按公开的结构参数计算（`minillm.generation.kv_designs`；每个模型实际公开采用的设计标了 *），
# 值为 16 位，分别给出每个词元的大小和一段 32k 词元对话的大小。SmolLM2 那一行先用真实的缓存核对：

# %% en=0c9c4485
from minillm.generation import kv_designs
from minillm.generation.kv_designs import PUBLISHED, cache_bytes

CONTEXT, WINDOW = 32_768, 4096
published = {"SmolLM2-135M": "GQA", "Llama-3-8B": "GQA", "DeepSeek-V3": "MLA"}
real = KVCache.for_model(model, batch_size=1, max_tokens=256)
real.advance(256)
assert kv_designs.bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA", 4) * 256 == real.nbytes
del real
print(f"{'模型':<13} {'设计':<5} {'每个词元':>10} {'32k 时':>10} "
      f"{'32k，窗口 4k':>18}")
at_32k = {}
for name, shape in PUBLISHED.items():
    for design in ("MHA", "GQA", "MQA", "MLA"):
        per_token = kv_designs.bytes_per_token(shape, design)
        if per_token is None:
            continue
        full, windowed = cache_bytes(shape, design, CONTEXT), cache_bytes(shape, design, CONTEXT,
                                                                          WINDOW)
        at_32k[(name, design)] = full
        star = "*" if published[name] == design else " "
        print(f"{name:<13} {design + star:<5} {per_token / 2**10:>6.1f} KiB {full / 2**30:>6.2f} GiB "
              f"{windowed / 2**30:>14.2f} GiB")

# %% en=4f52910b
labels = [f"{m} {d}{'*' if published[m] == d else ''}" for m, d in at_32k]
fig, ax = plt.subplots(figsize=(7, 1 + 0.35 * len(labels)))  # 每根柱子一行：标签不会重叠
ax.barh(labels, [b / 2**30 for b in at_32k.values()],
        color=[f"C{list(PUBLISHED).index(m)}" for m, _ in at_32k])
ax.invert_yaxis()  # 顺序与上表相同
ax.set(xscale="log", xlabel="32k 个词元时的 GiB（16 位）",
       title="不同注意力设计下一条序列的 KV 缓存")
plt.tight_layout()
plt.show()
mha, mqa, mla = (at_32k[("DeepSeek-V3", design)] for design in ("MHA", "MQA", "MLA"))
print(f"DeepSeek-V3 用 MLA 存的缓存，比它的 128 个头用 MHA 时少 {mha / mla:.0f} 倍，"
      f"是 MQA（所有头共用一个键/值头）时的 {mla / mqa:.1f} 倍")
assert mqa < mla < mha / 10  # MLA：比 MQA 多，比 MHA 少得多

# %% [markdown] en=02d9d9d1
# GQA 和 MQA 靠共用来缩小缓存：键/值头更少，每个服务更多的查询头。共用得越多，质量掉得越多；
# MQA 让所有头只用一个键和一个值，最省，损失也最大。MLA 并不是沿着这条路再往前走一步：从上面
# 打印的结果看，它每个词元存的比 MQA 多，比 MHA 少得多。它换来的是：缓存接近 MQA 的大小，
# 各个头却依然各不相同，质量接近 MHA：
#
# - 每个词元在每一层只缓存一个潜在向量，所有头共用它；
# - 每个头用自己学到的上投影，从这个潜在向量重建出自己的键和值，所以各个头关注的方式依然不同
#   （DeepSeek-V2 的论文报告 MLA 的效果与 MHA 持平甚至更好）；
# - RoPE 不进潜在向量：如果潜在向量和查询之间夹着一个随位置变化的旋转，键的上投影就没法并进
#   查询矩阵，所以 MLA 在潜在向量旁边另外缓存一小段**解耦的 RoPE 键**（decoupled RoPE key），
#   每个词元一份、所有头共用，只有这一段做旋转。
#
# 代价在计算：上投影（解码时它们可以并进查询矩阵和输出矩阵，于是一步读的是小小的潜在向量，
# 而不是完整的键和值）。
#
# ## 4 · 滑动窗口：W 个槽位的环形缓冲区
#
# 滑动窗口把缓存限制在 W 个词元以内，不管文本有多长；代价是任何一层都不能直接回看超过 W 个词元
# （信息仍能逐层向更远处传递，每层一个窗口）。
#
# 窗口最容易搭：每层一个有 W 个槽位的**环形缓冲区**（ring buffer）。第 n 个词元放进第 n mod W 个
# 槽位，覆盖第 n − W 个词元，而后者此后再也不会被任何查询看到。
# `minillm.generation.sliding_window.RingKVCache` 的接口与 `KVCache` 相同，所以模型不用改就能在它上面跑：

# %% en=822c33b4
from minillm.generation.sliding_window import RingKVCache, window_forward

show_source(RingKVCache.append)

# %% [markdown] en=f9b5d520
# 检验的办法：用 W 个槽位的环逐个词元地解码，把每一步的 logits 与“在整个序列上一次运行、全注意力
# 加上窗口掩码”的模型相比（`window_forward`：查询 i 能看到键 i − W + 1 … i）。

# %% en=20b915fb
W = 24 if CI else 64
# 这段文字的意思是“印刷机的历史始于十五世纪，当时约翰内斯·古腾堡造出了一台使用活字金属的印刷机。”
text_ids = tokenizer.encode("The history of the printing press begins in the fifteenth century, "
                            "when Johannes Gutenberg built a press with movable metal type. " * 8)
ids = torch.tensor([text_ids[:W + (16 if CI else 48)]])
ring = RingKVCache.for_model(model, batch_size=1, window=W)
held = []
with torch.inference_mode():
    steps_logits = [model(ids[:, :W // 2], cache=ring)]  # 一段放得进环里的提示词
    held.append(ring.nbytes)
    for t in range(W // 2, ids.shape[1]):
        steps_logits.append(model(ids[:, t:t + 1], cache=ring))
        held.append(ring.nbytes)
    ring_logits = torch.cat(steps_logits, dim=1)
    reference = window_forward(model, ids, W)
    full = model(ids)
window_error = (ring_logits - reference).abs().max().item()
inside = (ring_logits[:, :W] - full[:, :W]).abs().max().item()
beyond = (ring_logits[:, W:] - full[:, W:]).abs().max().item()
full_cache = kv_cache_formula_bytes(c, ids.shape[1], 4)
print(f"{ids.shape[1]} 个词元，窗口 {W}：环形缓存对比窗口掩码，logits 的最大差值 "
      f"{window_error:.1e}")
print(f"环形缓存对比全注意力：前 {W} 个词元上差 {inside:.1e}，之后差 {beyond:.2f}")
print(f"内存：最后环里存着 {held[-1]:,} 字节（{W} 个词元）；完整的缓存是 "
      f"{full_cache:,} 字节")
assert window_error < 1e-3
assert inside < 1e-3 < beyond  # 窗口填满之前相同，之后不同
assert held[-1] == max(held) == ring.capacity_bytes < full_cache

# %% [markdown] en=3fe071a6
# 窗口填满之前，环形缓存就是普通的注意力；填满之后，模型看到的东西变少，logits 也随之改变。
# 模型损失了多少？原因何在？很容易把账算在 SmolLM2 的训练方式上：它训练时总能看到整段文本。
# StreamingLLM（Xiao 等，2023）找到了一个更大的原因：训练好的模型会把很大一部分注意力投向文本
# 开头的几个词元，不管它们写的是什么（第 02 章的热力图里，SmolLM2 就有几个头盯着第一个词元）。
# softmax 总得把权重分出去，而开头的词元后面每个查询都看得到，于是成了一个头安放“用不上的
# 权重”的地方，它们就是**注意力汇点**（attention sink）。
# 窗口把它们挤出去以后，这部分权重无处可去，隐藏状态就偏离了模型在训练中见过的一切。
# StreamingLLM 的办法是：永远留着开头的 4 个词元，旁边再放最近的 W − 4 个，槽位还是 W 个。
#
# 衡量的尺子是**困惑度**（perplexity，第 07 章也用它）：对每个下一词元的负对数似然取平均再取
# exp，越低越好。我们在一段留出的英文文本上测它（`data/factbook_europe.txt`，《世界概况》里各国
# 的简介），只统计普通窗口丢掉第一个词元之后做出的预测。每种做法都像 `window_forward` 那样，在
# 每一层用自己的掩码把整段文本一次跑完。10 个词元、4 个槽位时的掩码如下（每行一个查询，• 表示
# 它能看到的键）：

# %% en=1acfe4f4
from minillm.generation.sliding_window import sliding_window_mask
from minillm.layers.attention import causal_mask
from minillm.tools.bench.quantization import held_out_ids
from minillm.utils.columns import pad

SINKS = 4


def sink_window_mask(n, window, sinks, device=None):
    """(查询, 键) 的布尔矩阵：每个查询能看到文本开头的 `sinks` 个词元，以及到它自己为止最近的
    `window - sinks` 个键：和普通窗口一样，最多 `window` 个键。"""
    first = torch.arange(n, device=device)[None, :] < sinks
    return sliding_window_mask(n, n, window - sinks, device) | (causal_mask(n, n, device) & first)


def rows(mask):
    return [" ".join("•" if seen else "·" for seen in row) for row in mask.tolist()]


print(pad("窗口 4", 22) + "2 个汇点 + 最近 2 个")
for plain, sinks in zip(rows(sliding_window_mask(10, 10, 4)), rows(sink_window_mask(10, 4, 2))):
    print(f"{plain:<22}{sinks}")

# %% en=dd3963d3
@torch.inference_mode()
def masked_forward(model, ids, mask):
    """每一层都用 `mask` 时整段序列的 logits（步骤与 window_forward 相同）。"""
    positions = torch.arange(ids.shape[1], device=ids.device)[None]
    x = model.run_layers(model.embed_tokens(ids, positions), positions, mask[None, None])
    return model.logits(x)


n_eval = 128 if CI else 1024
eval_ids = torch.tensor([held_out_ids(tokenizer, n_eval)], device=device)
masks = {"full": causal_mask(n_eval, n_eval, device),
         "window": sliding_window_mask(n_eval, n_eval, W, device),
         "sinks": sink_window_mask(n_eval, W, SINKS, device)}
label_of = {"full": "全注意力", "window": f"最近 {W} 个词元",
            "sinks": f"{SINKS} 个汇点 + 最近 {W - SINKS} 个"}
losses = {}  # 每个下一词元的负对数似然，依次在位置 0、1、…… 上预测
for name, mask in tqdm(masks.items(), desc="masks"):
    logits = masked_forward(model, eval_ids, mask)[0, :-1].float()
    losses[name] = F.cross_entropy(logits, eval_ids[0, 1:], reduction="none").cpu()
perplexity = {name: math.exp(loss[W:].mean().item()) for name, loss in losses.items()}
for name, value in perplexity.items():
    print(f"{pad(label_of[name], 24)} 困惑度 {value:7.2f}（{n_eval - 1 - W} 次预测）")
lost = perplexity["window"] - perplexity["full"]
won_back = (perplexity["window"] - perplexity["sinks"]) / lost if lost > 0 else float("nan")
if not lost > 0:
    verdict = "在这里窗口没有带来可测的损失"
elif won_back > 0.5:
    verdict = (f"留住开头的 {SINKS} 个词元，就挽回了窗口所造成损失的 {won_back:.1%}："
               "损失的大头是把它们挤了出去，而不是看不到的那部分文本")
elif won_back > 0:
    verdict = f"汇点只挽回了 {won_back:.1%}：损失的大头是看不到的那部分文本"
else:
    verdict = "在这里留住开头的词元什么也没挽回"
print("结论：", verdict)
assert lost > 0 and won_back > 0.5  # 上文的说法：损失的大头来自挤掉汇点

# %% en=9092412e
smooth = 16 if CI else 64  # 对这么多次预测取滑动平均
plt.figure(figsize=(7, 3.5))
for name, loss in losses.items():
    running = np.convolve(loss.numpy(), np.ones(smooth) / smooth, mode="valid")
    plt.plot(np.arange(smooth - 1, len(loss)), running, label=label_of[name])
plt.axvline(W, color="grey", linestyle=":", label="普通窗口丢掉第一个词元")
plt.xlabel("在文本中的位置")
plt.ylabel(f"每个词元的损失（{smooth} 个的平均）")
plt.title("同样 W 个槽位，留不留开头的词元")
plt.legend(fontsize=8)
plt.show()

# %% [markdown] en=8f5c85ba
# 第一个词元一离开普通窗口，它的损失就升到全注意力之上，并且一直下不来；留住 4 个汇点、槽位
# 数不变时，损失则始终贴近全注意力，剩下的那点差距，才是窗口真正看不到的那部分文本。所以，
# 用全注意力训练的模型套上普通窗口会失灵，主要是因为少了它的汇点：StreamingLLM 留住它们，
# 报告在固定大小的缓存下，困惑度在 400 万个词元上都保持平稳。（它还按词元在缓存里的位置、而不是
# 在文本里的位置来编号，这样 RoPE 就不会遇到训练时没见过的距离；我们的文本比 SmolLM2 的
# 8,192 个词元的上下文窗口短，所以这里直接用文本本身的位置就行。）放到环形缓冲区里，汇点就是
# 4 个永远不被覆盖的槽位。
#
# 近来的许多模型把两种层混着用。Gemma 2 一比一地交替：一层带 4,096 个词元的窗口，下一层是能看到
# 全部内容的全局层。Gemma 3 则每个全局层配五个窗口层（窗口 1,024 个词元）。假如 SmolLM2 的 30 层
# 也按同样的模式排布，在 32k 个词元时各种布局能保留多少缓存：

# %% en=336de88d
def mixed_cache(window, local_per_global, tokens=CONTEXT):
    """假如每个全局层配 `local_per_global` 个窗口层，SmolLM2 的 16 位缓存在 `tokens` 个词元
    之后占多少字节。"""
    per_layer = kv_designs.bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA") // c.n_layers
    local = c.n_layers * local_per_global // (local_per_global + 1)
    return per_layer * ((c.n_layers - local) * tokens + local * min(window, tokens))


everything = mixed_cache(window=CONTEXT, local_per_global=0)
for name, window, ratio in [("Gemma 2 式，1:1", 4096, 1), ("Gemma 3 式，5:1", 1024, 5)]:
    kept = mixed_cache(window, ratio)
    print(f"{name}，窗口 {window:,}：{kept / 2**20:5.0f} MiB，是完整缓存 "
          f"{everything / 2**20:.0f} MiB 的 {kept / everything:.0%}")

# %% [markdown] en=6745751b
# 全局层仍能看到整段文本；窗口层只保留最近的 W 个词元。窗口层越多，缓存越小：Gemma 3 正是用这种
# 取舍，支持最长 128k 个词元的上下文。

# %% [markdown] en=fb95e096
# ## 小结
#
# - 一个有缓存的解码步由权重和缓存上的注意力组成；后者随每个缓存的词元增长，过了几千个词元，
#   一步的速度就由它决定。
# - 长提示词的注意力不必建出 n × n 的分数：在线 softmax 逐块计算它（FlashAttention），内存像 n
#   而不是 n² 那样增长。
# - GQA 和 MQA 靠共用键/值头缩小缓存，代价是质量；MLA 每个词元缓存一个潜在向量，每个头用上投影
#   从中得到自己的键和值，外加一小段解耦的 RoPE 键：缓存接近 MQA（虽然更大），质量接近 MHA。
# - 滑动窗口（一个环形缓冲区）限制了保留的词元数。在它旁边留住开头的 4 个词元（注意力汇点，
#   StreamingLLM），就能挽回普通窗口给全注意力模型造成的大部分损失；把窗口层和全局层混着用，
#   则两者的好处各取一部分。
#
# 练习 03 的最后一题会为单个查询搭出在线 softmax。接下来是第 04 章。
