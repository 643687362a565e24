# 中文版 · 03b_long_context.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=0ba4fc2f
# # 03b · 长上下文：长缓存上的注意力、FlashAttention 与更小的缓存
#
# 第 03 课搭好了 KV 缓存（KV cache），并在几百个词元的范围内给解码步计了时；在这个范围里，
# 有缓存的一步在各个长度上耗时几乎一样。可是对话历史、文档和代码动辄几千个词元，甚至更多。
# 这一课关注随文本长度增长的那些东西：
#
# - 解码步的注意力要读取缓存里的每一个键和值：到了某个长度，它的开销就会超过权重（第 1 节）；
# - 长提示词的预填充（prefill）要算出 n² 个注意力分数，除非像 FlashAttention 那样一块一块地算
#   （第 2 节）；
# - 缓存每个词元占多少字节取决于注意力的设计（第 3 节），而滑动窗口限制了它最多保留多少个词元
#   （第 4 节）。

# %% en=e08ec2e6
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
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
           for n in contexts] for _ in tqdm(range(3), desc="轮次")]      # 时刻会落到每个 n 上
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

# %% en=339442e9
labels = [f"{m} {d}{'*' if published[m] == d else ''}" for m, d in at_32k]
fig, ax = plt.subplots(figsize=(7, 1 + 0.35 * len(labels)))  # 每根柱子一行：标签不会重叠
ax.barh(labels, [b / 2**30 for b in at_32k.values()],
        color=[f"C{list(PUBLISHED).index(m)}" for m, _ in at_32k])
ax.invert_yaxis()  # 顺序与上表相同
ax.set(xscale="log", xlabel="32k 个词元时的 GiB（16 位）",
       title="不同注意力设计下一条序列的 KV 缓存")
plt.tight_layout()
plt.show()
mha, mla = at_32k[("DeepSeek-V3", "MHA")], at_32k[("DeepSeek-V3", "MLA")]
print(f"DeepSeek-V3 用 MLA 存的缓存，比它的 128 个头用 MHA 时少 {mha / mla:.0f} 倍")

# %% [markdown] en=53c4b3ab
# MQA 和 MLA 把缓存缩得最小；MQA 的代价在质量（所有头共用一个键），MLA 的代价在计算（上投影；
# 解码时它们可以并进查询矩阵和输出矩阵）。
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

# %% [markdown] en=7fe2c046
# 窗口填满之前，环形缓存就是普通的注意力；填满之后，模型看到的东西变少，logits 也随之改变。
# SmolLM2 是用全注意力训练的，所以加了窗口，它说的话就会变；用窗口训练出来的模型（Mistral 7B）
# 损失要小得多。
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

# %% [markdown] en=9439f6ae
# ## 小结
#
# - 一个有缓存的解码步由权重和缓存上的注意力组成；后者随每个缓存的词元增长，过了几千个词元，
#   一步的速度就由它决定。
# - 长提示词的注意力不必建出 n × n 的分数：在线 softmax 逐块计算它（FlashAttention），内存像 n
#   而不是 n² 那样增长。
# - MHA、GQA、MQA 和 MLA 每个词元存的字节越来越少；滑动窗口（一个环形缓冲区）限制了保留的词元数，
#   把窗口层和全局层混着用，则两者的好处各取一部分。
#
# 练习 03 的最后一题会为单个查询搭出在线 softmax。接下来是第 04 章。
