# 中文版 · 07b_kv_quantization.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=8d9213d6
# # 07b · 附录：8 位的 KV 缓存
#
# 第 03 课第 5 节发现，KV 缓存（KV cache）随每个请求的每个词元（token）不断增长，并给出了三种对策：
# 减少键/值头的个数（第 03b 课）、分页（第 06 章），以及让每个值占更少的字节。这篇附录实现第三种。
# 第 07 课把*权重*存成了更少的位数；这里改为把键和值存成 8 位。这就是
# **KV 缓存量化（KV-cache quantization）**。
#
# 我们把 SmolLM2 的键和值分别存成 int8 和 fp8（8 位浮点数），并比较两种选取缩放因子的办法。
# 然后在真实模型上测量：它省下了什么（每个词元的字节数），付出了什么（logits 误差、
# 困惑度、贪心解码的文本），以及同样的内存能多放下多少词元。

# %% en=492e6b89
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.course.tokenizer_samples import corpus
from minillm.engine import Engine, PagedKVPool, QuantizedKVPool
from minillm.generation.agreement import first_difference
from minillm.generation.kv_cache import KVCache
from minillm.generation.kv_quant import FORMATS, HeadRanges, KVFormat
from minillm.generation.quantized_kv_cache import QuantizedKVCache
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.tools.bench.quantization import held_out_ids
from minillm.utils.columns import Label

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时用更小的规模
torch.manual_seed(0)
model, tokenizer = minillm.load("smollm2-135m")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
c = model.config
print(f"{c.n_layers} 层，{c.n_kv_heads} 个键/值头，每个头 {c.head_dim} 个值")
EVAL_TOKENS = 128 if CI else 256  # 用来给各个缓存打分的留出文本
CALIBRATION_TOKENS = 32 if CI else 128  # 另一段文本，用来定每个头的缩放因子

# %% [markdown] en=0f8965f8
# ## 1 · 一个词元占多少字节
#
# 每个词元都会在每一层、每个键/值头里留下一个键向量和一个值向量：用 float32 存，
# 就是 2 × 30 × 3 × 64 × 4 字节。我们建四个各有 1,000 个词元槽位的缓存，把各自分配的字节数除以 1,000：
#
# - **float32**：前面每一课用的 `KVCache`；
# - **bf16**：同样的缓存，但用 16 位，这是 GPU 服务器的默认存法；
# - **8 位，逐词元缩放因子**：每个词元在每个头里的向量各有一个缩放因子（一个 float32）；
# - **8 位，逐头缩放因子**：每层每个头一个固定的缩放因子，不必为每个词元另存什么。
#
# 逐头缩放因子需要先在样本文本上做一次校准；这个单元格就做了这件事，第 3 节再解释它。

# %% en=e1ee4e90
SLOTS = 1000
calibration_ids = torch.tensor([tokenizer.encode(corpus("english"))[:CALIBRATION_TOKENS]])
with torch.inference_mode():
    floats = KVCache.for_model(model, 1, CALIBRATION_TOKENS)
    model(calibration_ids, cache=floats)  # 跑一次：它的键和值给出取值范围
ranges = HeadRanges.calibrate(floats)

caches = {
    "float32": KVCache.for_model(model, 1, SLOTS),
    "bf16": KVCache(c.n_layers, 1, c.n_kv_heads, c.head_dim, SLOTS, dtype=torch.bfloat16),
    "8 位，逐词元": QuantizedKVCache.for_model(model, 1, SLOTS, "int8"),
    "8 位，逐头": QuantizedKVCache.for_model(model, 1, SLOTS, "int8", ranges),
}
per_token = {name: cache.capacity_bytes / SLOTS for name, cache in caches.items()}
for name, size in per_token.items():
    print(f"{Label(name):>18}：每个词元 {size:7,.0f} 字节，"
          f"float32 的字节数 / 它的 = {per_token['float32'] / size:.2f}")

# %% [markdown] en=b69534f1
# 与 float32 相比，8 位大约省下 4 倍；与 GPU 服务器常用的 bf16 相比，大约 2 倍。逐词元缩放因子要多花一点：
# 每 64 个单字节的值旁边要多存一个 float32（每 68 个字节里有 4 个）。

# %% [markdown] en=b7efebe0
# ## 2 · 两种 8 位格式
#
# 两种格式都把 `x / scale` 存进一个字节，读回时算 `q × scale`：
#
# - **int8** 是均匀网格：从 −127 到 127 共 255 级，处处步长相同。这就是第 07 课的
#   对称量化（absmax）取整：最大的 |x| 映射到 127。
# - **fp8-e4m3** 是一种极小的浮点数：1 个符号位、4 个指数位和 3 个存下来的尾数（mantissa）位，
#   最大值 448。它的步长随数值增大而变大，所以无论数值大小，*相对*误差都差不多（最多 1/16）。
#   从 NVIDIA 的 Hopper 起，GPU 可以直接做 fp8 乘法；这里是模拟的：以 `torch.float8_e4m3fn`
#   存储，算注意力前再转回 float32。
#
# 两者的全部差别就在 `KVFormat.quantize` 的一行里：

# %% en=ff7f1874
show_source(KVFormat)

# %% [markdown] en=38032c7e
# 把同一组值交给两种格式，缩放到让最大的值恰好是该格式的最大值：int8 的误差处处一样大，
# fp8 的误差随数值增大而变大。

# %% en=68028c03
x = torch.linspace(-1, 1, 2001)
small = x.abs() < 0.1
errors = {}
fig, ax = plt.subplots(figsize=(7, 3))
for name, fmt in FORMATS.items():
    scale = fmt.token_scale(x)  # 最大的 |x|（1.0）映射到 127 或 448
    errors[name] = (fmt.dequantize(fmt.quantize(x, scale), scale, torch.float32) - x).abs()
    ax.plot(x, errors[name], label=name, lw=0.8)
    print(f"{name:>9}：最大误差 {errors[name].max():.4f}，平均 {errors[name].mean():.5f}，"
          f"|x| < 0.1 时的平均：{errors[name][small].mean():.5f}")
ax.set(xlabel="值（1.0 = 向量中最大的值）", ylabel="|舍入误差|",
       title="一个向量的值存成 8 位后的舍入误差")
ax.legend()
plt.show()
int8_error, fp8_error = errors["int8"], errors["fp8_e4m3"]
assert fp8_error.max() > int8_error.max(), "fp8 在大的值上应当损失更多"
assert fp8_error[small].mean() < int8_error[small].mean(), "在小的值上损失更少"

# %% [markdown] en=5e504278
# ## 3 · 缩放因子从哪里来
#
# 一个值存进去之前，就得先定好缩放因子。常见的答案有两种：
#
# - **逐词元**：一个词元的键到来时，每个头的向量各得一个缩放因子，即它最大的 |值| 除以 127（或 448）。
#   不用做任何准备，也不会有值落在网格之外；代价是要存这些缩放因子（第 1 节）。
# - **逐头**：每层每个头一个缩放因子，在上线服务之前就定好。它来自**校准（calibration）**：
#   让模型跑一遍样本文本，记下每个头最大的 |值|。不必为每个词元存任何东西，但以后出现的值
#   如果超过了校准时见过的范围，就会被截断。
#
# 我们的逐头范围来自莎士比亚作品的开头几行（本课程的英文语料），在第 1 节里算好：

# %% en=57b09684
show_source(HeadRanges.calibrate)

# %% [markdown] en=35231f62
# 这个缓存本身遵守第 03 课的 KV 缓存约定：`append` 接收 float32 的键和值，把它们存成 8 位，
# 再返回到目前为止存下的全部内容（已反量化（dequantize）），这样注意力看到的恰好就是缓存里存的东西。

# %% en=8316b809
show_source(QuantizedKVCache.append)

# %% [markdown] en=3a510825
# 逐词元缩放因子由向量中最大的值决定。如果某个通道（头的向量里 64 个位置之一）总比其余的大得多，
# 每个词元的缩放因子就都由它决定，其他通道只能用一张粗糙的网格。第 07 课的激活值也遇到过同样的事
# （离群特征（outlier feature））。SmolLM2 的键和值有没有这样的通道？对每一层，我们取校准文本的键，
# 求出每个通道最大的 |值|，再用最大的通道除以中位数通道：

# %% en=09a6e077
def channel_ratio(tensors):
    """逐层：最大通道的 max |值| 除以中位数通道的，取最差的那个头。"""
    ratios = []
    for t in tensors:  # (1, 键/值头数, 词元数, head_dim)
        per_channel = t[0].abs().amax(dim=1)  # (键/值头数, head_dim)
        ratios.append((per_channel.amax(-1) / per_channel.median(-1).values).max().item())
    return ratios


key_ratio, value_ratio = channel_ratio(floats.keys), channel_ratio(floats.values)
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(key_ratio, "o-", label="键")
ax.plot(value_ratio, "s-", label="值")
ax.set(xlabel="层", ylabel="最大通道 / 中位数通道", yscale="log",
       title=f"SmolLM2 各通道的取值范围（{CALIBRATION_TOKENS} 个校准词元）")
ax.legend()
plt.show()
median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
print(f"各层的中位数：键 {median(key_ratio):.1f} 倍，值 {median(value_ratio):.1f} 倍")

# %% [markdown] en=88fcc9fc
# 键的通道范围更宽（见上面打印的结果）：键向量中的某个通道可能比典型通道大好几倍，于是在逐词元
# 缩放因子下，键的其余通道分到的级数比值少。下面的断言让这次运行来检验这个说法。第 8 节会提到
# 基于这一观察的方法。

# %% en=ef8b2a7a
assert median(key_ratio) > median(value_ratio), (key_ratio, value_ratio)

# %% [markdown] en=a5ed3f79
# ## 4 · 它让模型的预测付出多少
#
# 现在做真正的测量。我们把同一段留出的英文文本（`data/factbook_europe.txt`，与第 07 课相同）
# 分别送进五个缓存，每个只跑一遍，让每个位置的注意力读的都是存下来的键和值，再把每个缓存的
# logits 与 float32 的比较：
#
# - **困惑度（perplexity）**，与第 07 课相同：越低越好；
# - **logits 误差**：在所有位置和词表项上 |Δ| 的最大值和平均值；
# - **top-1 一致率**：最可能的下一个词元与 float32 相同的位置所占的比例。
#
# 逐头缩放因子来自莎士比亚，而不是这段文本：校准从不接触用来评判它的文本。表和图里的
# “逐词元”和“逐头”就指这两种缩放因子。

# %% en=5cc78d71
eval_ids = torch.tensor([held_out_ids(tokenizer, EVAL_TOKENS)])
VARIANTS = {"float32": None,
            "int8 逐词元": ("int8", None), "int8 逐头": ("int8", ranges),
            "fp8 逐词元": ("fp8_e4m3", None), "fp8 逐头": ("fp8_e4m3", ranges)}


def cache_for(variant, tokens):
    if VARIANTS[variant] is None:
        return KVCache.for_model(model, 1, tokens)
    fmt, head_ranges = VARIANTS[variant]
    return QuantizedKVCache.for_model(model, 1, tokens, fmt, head_ranges)


logits = {}
with torch.inference_mode():
    for name in tqdm(VARIANTS, desc="缓存"):
        logits[name] = model(eval_ids, cache=cache_for(name, EVAL_TOKENS))[0]

rows = {}
for name, got in logits.items():
    nll = F.cross_entropy(got[:-1], eval_ids[0, 1:].to(got.device)).item()
    diff = (got - logits["float32"]).abs()
    agree = (got.argmax(-1) == logits["float32"].argmax(-1)).float().mean().item()
    rows[name] = dict(perplexity=math.exp(nll), largest=diff.max().item(),
                      mean=diff.mean().item(), top1=agree)
base = rows["float32"]["perplexity"]
print(f"{EVAL_TOKENS} 个留出词元")
print(f"{Label('缓存'):>16} {Label('困惑度'):>15} {Label('最大 |Δ|'):>8} "
      f"{Label('平均 |Δ|'):>9} {Label('top-1'):>7}")
for name, r in rows.items():
    print(f"{Label(name):>16} {r['perplexity']:7.3f} ({r['perplexity'] / base - 1:+.1%}) "
          f"{r['largest']:8.3f} {r['mean']:9.4f} {r['top1']:7.1%}")

# %% en=1ef303e4
quantized = [name for name in rows if name != "float32"]
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
left.bar(quantized, [rows[n]["mean"] for n in quantized], color="tab:orange")
left.set(ylabel="平均 |logits 误差|", title="相对 float32 缓存的 logits 误差")
right.bar(quantized, [100 * (rows[n]["perplexity"] / base - 1) for n in quantized])
right.axhline(0, color="k", lw=0.8)
right.set(ylabel="困惑度变化（%）", title=f"{EVAL_TOKENS} 个留出词元上的困惑度")
for ax in (left, right):
    ax.tick_params(axis="x", labelrotation=25)
plt.tight_layout()
plt.show()

# %% [markdown] en=d4432777
# 这次运行说明了以下几点，下面的断言逐一检验：
#
# - 舍入是真实存在的：每个 8 位缓存都会让 logits 发生变化；
# - 四种 8 位缓存中，逐词元缩放的 int8 让 logits 变得最少；
# - 对每种格式，逐词元缩放因子都胜过固定的逐头缩放因子：固定的缩放因子必须覆盖校准时见过的最大值，
#   于是典型的词元只能用更粗的网格；
# - 每个 8 位缓存的困惑度都与 float32 相差不到 5%。
#
# 只有几百个词元时，这么小的困惑度变化可正可负（舍入甚至可能让它降低）：要衡量舍入造成了什么，
# logits 误差是更稳定的指标。

# %% en=503ff1d6
mean_error = {name: rows[name]["mean"] for name in quantized}
assert all(rows[name]["largest"] > 0 for name in quantized), "有个 8 位缓存什么都没改变"
assert min(mean_error, key=mean_error.get) == "int8 逐词元", mean_error
for fmt in ("int8", "fp8"):
    assert mean_error[f"{fmt} 逐词元"] < mean_error[f"{fmt} 逐头"], mean_error
assert all(abs(rows[n]["perplexity"] / base - 1) < 0.05 for n in quantized), rows

# %% [markdown] en=a5e5a05c
# ## 5 · 经由引擎的贪心解码文本
#
# 第 06 章的引擎可以按要求把它的缓存池存成 8 位：
# `Engine(model, tokenizer, kv_cache_format="int8")`（逐词元缩放因子）。它的池通过两个方法写入和读取，
# 8 位的池替换了这两个方法：

# %% en=e3b37e84
show_source(QuantizedKVPool.read)

# %% [markdown] en=d37ebed3
# 同一个对话提示词，用贪心解码（greedy decoding）分别经过一个 float32 池和两个 8 位池。
# logits 的微小变化只在两个候选几乎打平的地方才会改变一个词元；第一次改变之后，几段文本就各走各的路了。

# %% en=9cee9a62
N_NEW = 12 if CI else 48
# 提示词的意思是“解释一下什么是 KV 缓存。”
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Explain what a KV cache is."}], add_generation_prompt=True)
texts = {}
for fmt in tqdm([None, "int8", "fp8_e4m3"], desc="引擎"):
    engine = Engine(model, tokenizer, num_blocks=16, block_size=16, kv_cache_format=fmt)
    texts[fmt or "float32"] = engine.generate([prompt], max_new_tokens=N_NEW)[0]
for name, out in texts.items():
    split = first_difference(out.token_ids, texts["float32"].token_ids)
    same = "词元完全相同" if split is None else f"从第 {split} 个词元起不同"
    print(f"{name:>9}（{same}）：{out.text!r}")

# %% [markdown] en=cc1e3e3c
# ## 6 · 它换来的更长上下文
#
# 决定一台服务器能保留多少词元的是内存，而不是算力。给每个池同样的预算 256 MiB，
# 让它能放多少个 16 词元的块就放多少。每个池的字节数都按它自己的张量来数：

# %% en=1f170301
BUDGET = 256 * 2**20
POOLS = {"float32": lambda n: PagedKVPool.for_model(model, n, 16),
         "int8 逐词元": lambda n: QuantizedKVPool.for_model(model, n, 16, "int8"),
         "fp8 逐头": lambda n: QuantizedKVPool.for_model(model, n, 16, "fp8_e4m3", ranges)}
fits = {}
for name, make in POOLS.items():
    blocks = BUDGET // make(1).bytes_per_block
    pool = make(blocks)  # 真的分配出来：我们数的是它的张量的字节数
    assert pool.nbytes <= BUDGET
    fits[name] = blocks * pool.block_size
    print(f"{Label(name):>16}：{blocks:5,} 个块，{fits[name]:6,} 个词元，占 "
          f"{pool.nbytes / 2**20:.1f} MiB（float32 的 {fits[name] / fits['float32']:.2f} 倍）")
    del pool
context = 2048
for name, tokens in fits.items():
    print(f"{Label(name):>16}：可同时容纳 {tokens // context} 段 {context:,} 词元"
          "的对话")

# %% en=218f6aef
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(list(fits), [t / 1000 for t in fits.values()])
ax.set(ylabel="千词元", title="256 MiB 的 KV 池实际能放下的词元数")
plt.show()

# %% [markdown] en=2648432b
# 服务器真正在乎的，是在更大的模型上省下同样的比例。Llama-3-8B 有 32 层 × 8 个键/值头 × 128 个值；
# 在一块 80 GB 的 GPU 上，它的 bf16 权重大约占 16 GB。下面打印的算式（第 03 课的公式，不是测量）
# 给出剩下的内存用 bf16 和用 8 位键值各能放下多少：

# %% en=e6a835ed
free = 80e9 - 16e9
llama_bf16 = 2 * 32 * 8 * 128 * 2
llama_8bit = 2 * 32 * 8 * (128 + 4)  # 每个值一个字节，每个头每个词元一个 float32 缩放因子
for name, size in [("bf16", llama_bf16), ("8 位", llama_8bit)]:
    print(f"{Label(name):>7}：每个词元 {size:,} 字节，约 {free / size / 1e3:,.0f} 千个词元，"
          f"即 {free / size / 8192:.0f} 个 8,192 词元的请求")

# %% [markdown] en=f90a9316
# ## 7 · 它在这里和在 GPU 上各花多少时间
#
# 融合的解码步（附录 05b）和 minillm 的 C 注意力算子读的都是 float32 缓存。8 位缓存没法把它的张量
# 直接交给它们，只能在每一步的 `append` 里把存下的内容反量化，走通用的注意力路径。minillm 在第一个
# 这样的缓存建好时会提示一次（就是上面 stderr 上打印的那一行）。所以在这台 CPU 上，我们不指望
# 更小的缓存带来加速。我们在同样的上下文之后，分别用 float32 缓存和 int8 缓存给解码步计时，
# 交替进行、重复几次（第 05 课在繁忙机器上做比较的办法）：

# %% en=00238b81
CONTEXT, STEPS = (32, 4) if CI else (192, 8)  # 上下文：留出文本的一部分
context_ids = eval_ids[:, :CONTEXT]
next_id = eval_ids[:, CONTEXT:CONTEXT + 1]
timed = {"float32": KVCache.for_model(model, 1, CONTEXT + STEPS),
         "int8": QuantizedKVCache.for_model(model, 1, CONTEXT + STEPS, "int8")}
with torch.inference_mode():
    for cache in timed.values():
        model(context_ids, cache=cache)  # 两者的上下文相同


def decode_steps(cache):
    """上下文之后的 STEPS 个解码步（先把缓存裁回到上下文）。"""
    def run():
        cache.crop(CONTEXT)
        with torch.inference_mode():
            for _ in range(STEPS):
                model(next_id, cache=cache)
    return run


timing = compare(decode_steps(timed["float32"]), decode_steps(timed["int8"]),
                 repeats=3 if CI else 5)
print(f"{CONTEXT} 个词元之后的 {STEPS} 个解码步；{load_average()}")
print(f"int8 缓存 / float32 缓存：{timing.spread_text()}")
verdict = timing.above(1.0)
print(TOO_NOISY if verdict is None else
      "在这里，int8 缓存的解码步更慢" if verdict else
      "在这里，int8 缓存的解码步并不更慢")

# %% [markdown] en=28ba6027
# GPU 服务器则既省空间又省时间：它的注意力算子直接读 8 位的键和值，而一个解码步要把整个缓存读一遍，
# 读的字节数只有 bf16 的一半。
#
# ## 8 · 真实的引擎怎么做
#
# - **vLLM 和 SGLang**：`kv_cache_dtype="fp8"` 把键和值存成 fp8，每层的键一个缩放因子、值一个缩放因子，
#   离线校准（或干脆取 1.0）；它们的注意力算子直接读 fp8。
# - **transformers 的 `QuantizedCache`**：按组存成 4 位或 2 位，最近的若干词元先保持全精度，
#   攒够了再一起量化。
# - **KIVI**（2024）做到了 2 位：键按*通道*取缩放因子，值按词元取缩放因子。第 3 节的离群通道
#   正是键需要另一种粒度的原因。
#
# ## 小结
#
# - 8 位的键和值比 float32 少占约 4 倍字节，比 bf16 少约 2 倍；逐词元缩放因子每 64 字节多加 4 字节。
# - int8 是均匀网格；fp8-e4m3 在各种大小的值上保持差不多的相对误差。
# - 逐词元缩放因子不需要校准，而且让 SmolLM2 的 logits 变化最小；逐头缩放因子不必为每个词元存东西，
#   但会截断校准时没见过的值。
# - 在这段文本上，困惑度的代价很小（第 4 节的表）；换来的空间才是关键：同样的内存能放下约 float32 4 倍的词元。
