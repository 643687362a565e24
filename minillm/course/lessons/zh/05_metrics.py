# 中文版 · 05_metrics.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=93fb499f
# # 05 · 性能指标（measuring inference）：TTFT、TPOT、吞吐量与带宽上限
#
# 一个模型有多快？“每秒多少个词元”这一个数，掩盖了两种截然不同的等待：等第一个字出来，以及之后
# 每个字出来的节奏。本章先定义描述模型速度的四个指标，在真实模型上逐一测出来，再追问它们*为什么*
# 是这个值：答案是机器的内存带宽。
#
# 下面每个数字都是在这台机器上、在这次运行中测出来的。设置了环境变量 `CI` 时（课程的测试会设），
# 规模会缩小，让这个 notebook 一两分钟就能跑完。选读的附录 `05b_fast_engine` 打开了本课所测的
# 快速引擎。

# %% en=7a11d8d0
import os
import statistics

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm import fast as fast_engine
from minillm import kernels
from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.measure.comparison import TOO_NOISY, Comparison, compare, load_average
from minillm.utils.devices import Timer, best_time, describe, pick_device
from minillm.measure.metrics import predict_latency, throughput
from minillm.generation.kv_cache import KVCache
from minillm.model.memory import bytes_per_token
from minillm.quant.measure import bytes_moved_per_token, int8_decode_paths

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
for key, value in describe().items():
    print(f"{key:>12}: {value}")
if load_average():
    print(f"{load_average()}（还有别的程序在用这台机器：计时会随它们波动）")

# %% [markdown] en=aef9f876
# 我们用 minillm 自己的代码加载 SmolLM2-135M。`minillm.load` 默认给出快速路径；这里我们同时要了
# 可读的那个模型（`fast=False`，也就是第 02 章拆开看过的那个），再用 `minillm.fast.optimize`
# 自己做一份快速的副本，好拿两者对比（附录 05b 会看它的内部）。`minillm.generate` 两个都能跑，
# 快速的那个给出同样的词元。本章的一切都在上面打印的设备上运行，每块秒表都会等设备做完
# （`minillm.utils.devices.Timer`）：GPU 会把工作排进队列后立刻返回，不等它的时钟测到的只是排队。

# %% en=fa261250
model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)
fast = fast_engine.optimize(model)
# 问题的意思是“天空为什么是蓝色的？”
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Why is the sky blue?"}], add_generation_prompt=True)
N_NEW = 16 if CI else 48
print(f"提示词：{len(tokenizer.encode(prompt))} 个词元；我们最多要 {N_NEW} 个新词元")

# %% [markdown] en=92d0de27
# ## 1 · 四个指标
#
# 对一个请求，从它开始的时刻，以及每个新词元就绪的时刻出发：
#
# - **TTFT**，首个词元生成时间（time to first token，TTFT）：开始 → 第一个词元。分词和对整个
#   提示词做的那次预填充（prefill）都发生在这段时间里。
# - **TPOT**，每个输出词元的时间（time per output token，TPOT）：第一个词元*之后*各词元之间的
#   平均间隔。第一个词元不算在内：它来自预填充，而不是解码。
# - **端到端延迟**（end-to-end latency）：开始 → 最后一个词元。
# - **每秒词元数**（tokens per second）：对一个请求而言，解码速度 = 1 / TPOT；对许多请求而言，
#   **吞吐量**（throughput）= 它们的全部词元 / 它们一起花掉的墙钟时间。
#
# `minillm.generate` 记下每个词元的时刻；每个结果都以 `.metrics` 带着它们。

# %% en=903cba8d
minillm.generate(fast, tokenizer, prompt, max_new_tokens=2)  # 预热：最初几次调用比较慢
with Timer(device) as stopwatch:
    out = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
wall = stopwatch.seconds
m = out.metrics
print(out.text)
print()
print(m)

# %% [markdown] en=f5174413
# `.metrics` 是一个 `RequestMetrics`（`minillm/measure/metrics.py`）：它记下开始时间和每个词元的
# 时间，每个指标都是由它们算出来的一个只有几行的 property。本章用得最多的是这三个：

# %% en=ef9c4b27
from minillm.measure.metrics import RequestMetrics

for metric in (RequestMetrics.ttft, RequestMetrics.tpot, RequestMetrics.latency):
    show_source(metric.fget)  # property 背后的函数

# %% [markdown] en=155a3638
# **延迟 = TTFT + TPOT × (n − 1)。** 原始资料写的是“TTFT + TPOT × 词元数”。有 n 个新词元时，
# 第一个在 TTFT 结束时到达，之后只跟着 n − 1 个间隔。下面把每个词元从请求开始算起的时刻，和两个
# 公式对照（第 k 个词元按前者在 TTFT + TPOT × (k − 1)，按后者在 TTFT + TPOT × k）：

# %% en=6ebe971d
k = np.arange(1, m.n_tokens + 1)
since_start = 1000 * (np.array(m.token_times) - m.start)
plt.figure(figsize=(6.5, 3.4))
plt.plot(k, since_start, "o", ms=3, color="k", label="实测：第 k 个词元到达的时刻")
plt.plot(k, [1000 * predict_latency(m.ttft, m.tpot, i) for i in k], label="TTFT + TPOT × (k − 1)")
plt.plot(k, 1000 * (m.ttft + m.tpot * k), "--", label="TTFT + TPOT × k（原始资料的公式）")
plt.xlabel("第 k 个新词元")
plt.ylabel("从请求开始算起的毫秒数")
plt.title(f"一个请求的 {m.n_tokens} 个词元与两个公式的对照")
plt.legend(fontsize=8)
plt.show()

# %% en=abfcf963
ours = predict_latency(m.ttft, m.tpot, m.n_tokens)
source = m.ttft + m.tpot * m.n_tokens
print(f"TTFT {1000 * m.ttft:.1f} ms + TPOT {1000 * m.tpot:.1f} ms x ({m.n_tokens} - 1) "
      f"= {1000 * ours:.1f} ms")
print(f"TTFT {1000 * m.ttft:.1f} ms + TPOT {1000 * m.tpot:.1f} ms x {m.n_tokens}       "
      f"= {1000 * source:.1f} ms")
print(f"我们自己在调用外面掐的秒表：{1000 * wall:.1f} ms")
print(f"原始资料的公式多出一个 TPOT：{1000 * (source - ours):.1f} ms，"
      f"占这次回答的 {(source - ours) / ours:.1%}；若回答只有 2 个词元，会多出 "
      f"{m.tpot / (m.ttft + m.tpot):.0%}")
after_last = wall - ours
print(f"最后一个词元之后秒表又走了 {1000 * after_last:.1f} ms（把词元解码成文本、"
      f"组装结果）")
print("离秒表更近的是：" + ("TTFT + TPOT × (n − 1)" if abs(wall - ours) < abs(wall - source)
                                  else "×n 的公式，只是因为这次运行里最后一个词元之后的工作"
                                       "用了超过半个 TPOT"))
assert after_last >= 0  # 词元的时间戳都落在秒表计时的那次调用之内

# %% [markdown] en=9b5d6ca4
# n − 1 的公式经过第一个词元（那就是 TTFT）和最后一个词元（TPOT 是两者之间的平均间隔），所以对
# 单个请求来说，它按定义就成立。拿它和秒表对照，检验的其实是另一件事：词元的时间戳都落在调用之内，
# 最后一个词元之后还有一点收尾工作。收尾工作比一个 TPOT 短得多时，秒表也能把两个公式分开；机器忙时
# 未必分得开，但上面逐词元的时刻总能分开：×n 那条线的终点晚了整整一个 TPOT，回答越短，这一点越要紧。
#
# 中间的那些词元显示了间隔有多均匀：某个间隔慢了（机器在忙别的事），之后的点就都抬到线的上方，而线
# 依然终止在最后一个点上。

# %% [markdown] en=c3d91186
# 这算快吗？原始资料给的尺子是：TPOT 为 100 ms 就是每秒 10 个词元，约合每分钟 450 个英文单词，
# 比人阅读的速度还快（一个英文单词约为 1.3 个词元）。

# %% en=3cab892b
words_per_minute = 60 / m.tpot / 1.3
print(f"TPOT {1000 * m.tpot:.1f} ms = 每秒 {m.decode_tokens_per_second:.1f} 个词元 "
      f"= 每分钟约 {words_per_minute:.0f} 个英文单词")

# %% [markdown] en=cc33700a
# ### 实时观察
#
# 下面的图表流式地运行一次生成，随着词元到达画出每个词元的延迟：第一根柱子是 TTFT（橙色），其余
# 的是与上一个词元的间隔，那条线是累计的 TPOT。换一个提示词再点*生成*，就能试你自己的；它在模型
# 所在的设备上运行。勾上*对话模板*时（和第 04 章的演练场一样），你的文字会以用户消息的身份、按模型
# 的对话格式交给模型，于是一条指令会得到回答；取消勾选，就把原文直接交给模型去续写。模型只懂英文，
# 提示词请用英文写。
#
# 图表从不把自己的绘制算进计时：生成在它自己的线程里运行，每个词元一就绪就打上时间戳；图表根据这些
# 时间戳重绘。

# %% en=9d32e545
from minillm.course.widgets.latency import LatencyChart

# 提示词的意思是“写一首关于大海的俳句。”
chart = LatencyChart(fast, tokenizer, prompt="Write a haiku about the sea.",
                     max_new_tokens=N_NEW)
display(chart)
live = chart.run()

# %% [markdown] en=a916cc33
# ## 2 · 同时服务更多用户：吞吐量与每个用户的等待
#
# 服务器把 B 个请求放在一个批里跑时，每一步只为它们全体做一次前向传播。不管 B 是多少，每一步都只
# 读一遍权重，算术量却是 B 倍，同时产出 B 个词元。这一步的耗时随 B 增长多少，取决于机器（第 5 节）。
# 我们把同一个提示词同时发 B 次。

# %% en=05629652
BATCHES = [1, 2, 4] if CI else [1, 2, 4, 8, 16]  # 16：原始资料里的用户数
N_BATCH = 6 if CI else 16
sweep = []
for b in tqdm(BATCHES, desc="批大小"):
    outs = minillm.generate(fast, tokenizer, [prompt] * b, max_new_tokens=N_BATCH)
    t = throughput([o.metrics for o in outs])
    sweep.append((b, t))
    print(f"批大小 {b:>2}：合计每秒 {t.tokens_per_second:7.1f} 个词元，"
          f"TPOT {1000 * t.mean_tpot:6.1f} ms，TTFT {1000 * t.mean_ttft:6.1f} ms")

# %% en=82f2a7ac
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
bs = [b for b, _ in sweep]
ax1.plot(bs, [t.tokens_per_second for _, t in sweep], "o-")
ax1.set(xscale="log", xlabel="批大小（同时服务的用户数）", ylabel="每秒词元数，全体用户",
        title="吞吐量随批大小的变化")
ax2.plot(bs, [1000 * t.mean_tpot for _, t in sweep], "o-", color="tab:red")
ax2.set(xscale="log", xlabel="批大小（同时服务的用户数）", ylabel="ms",
        title="每个用户的 TPOT 随批大小的变化")
for ax in (ax1, ax2):
    ax.set_xticks(bs, [str(b) for b in bs])
plt.tight_layout()
plt.show()
first, last = sweep[0][1], sweep[-1][1]
print(f"批大小 {bs[-1]} 对比 1：吞吐量是 {last.tokens_per_second / first.tokens_per_second:.1f} 倍，"
      f"TPOT 是 {last.mean_tpot / first.mean_tpot:.1f} 倍")

# %% [markdown] en=c1f74448
# 原始资料用 16 个用户描述这种取舍：同时服务更多人，吞吐量上去了，而每个人看到的 TPOT 变长了。
# 上面的比值说明了这次运行的情况（每个批大小只跑了一次，所以机器某一刻忙起来就可能挪动一个点）。
# 第 06 章会搭建一个调度器，服务在不同时刻到达的请求。
#
# ## 3 · 多 512 个输入词元，还是多 8 个输出词元？
#
# 原始资料说，多加 512 个输入词元带来的延迟，通常比多生成 8 个输出词元要少。输入词元在一次并行的
# 预填充里处理完；输出词元则每个都要一次前向。我们用两个请求来检验：两者都从同一个短提示词和它的
# 第一个词元出发，一个在提示词前再加 512 个词元，另一个多要 8 个输出词元。哪个更慢，哪种追加就更贵。
# 两者轮流运行、重复几次，这样机器某一刻忙起来，两边都会碰上。

# %% en=2eaa7708
EXTRA = 128 if CI else 512
# 填充句的意思是“天空是蓝色的，因为空气散射蓝光多于红光。”
filler = tokenizer.encode(" The sky is blue because air scatters blue light more than red.")
short_ids = tokenizer.encode(prompt)
long_ids = (filler * (EXTRA // len(filler) + 1))[:EXTRA] + short_ids


def more_input():  # 多 EXTRA 个提示词词元，一个新词元
    minillm.generate(fast, tokenizer, long_ids, max_new_tokens=1)


def more_output():  # 短提示词，它的第一个新词元，再多 8 个
    minillm.generate(fast, tokenizer, short_ids, max_new_tokens=9, ignore_eos=True)


both = compare(more_input, more_output, repeats=3 if CI else 5, device=device)
print(f"多 {EXTRA} 个输入词元：{1000 * statistics.median(both.a):6.0f} ms（中位数）")
print(f"多 8 个输出词元：    {1000 * statistics.median(both.b):6.0f} ms")
print(f"8 个输出词元的时间比 {EXTRA} 个输入词元的时间：{both.spread_text()}；"
      f"{load_average()}")
holds = both.above(1.0)
print(f"在这台机器上（{device}）：" + {
    True: "说法成立：多 8 个输出词元更慢",
    False: f"说法不成立：多 {EXTRA} 个输入词元更慢",
    None: TOO_NOISY}[holds])

# %% [markdown] en=ecd18a48
# 为什么答案取决于机器？预填充每个词元大约做 2 × 参数量次浮点运算，所有词元在一次前向里完成：它是
# **计算受限**（compute-bound）的。解码为单个词元做的也是 2 × 参数量次运算，却要为此把每个权重从
# 内存里读一遍：它是**带宽受限**（bandwidth-bound，也常说访存密集型）的。所以，在每读一个字节能做许多
# 次运算的机器上（即它的*机器平衡点*高），这个说法才成立，GPU 就是这样（H100 的张量核心每读一个字节
# 的内存，大约能做 300 次 bf16 运算）；CPU 只能做几次。我们在这里把两个速率都测出来，算术按这台机器
# 推理时所用的数据类型测：CUDA GPU 上是 bf16（它的张量核心），CPU 上是 float32（它的快速算子所用的
# 类型）。

# %% en=bfbc0942
def matmul_flops(n=2048 if device.type == "cuda" else 1024, repeats=3):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / best_time(lambda: a @ b, device, repeats, warmup=1), dtype


flops, balance_dtype = matmul_flops()
bandwidth = read_bandwidth(device)
n_params = sum(p.numel() for p in model.parameters())
n_bytes = bytes_per_token(fast)
balance = flops / bandwidth
needed = (2 * n_params * EXTRA) / (8 * n_bytes)  # 预填充的 FLOP 数除以解码读取的字节数
print(f"{balance_dtype} 矩阵乘法：{flops / 1e9:.0f} GFLOP/s；"
      f"读带宽：{bandwidth / 1e9:.1f} GB/s")
print(f"机器平衡点：每字节 {balance:.1f} FLOP")
print(f"这个说法要求每字节超过 {needed:.0f} FLOP"
      f"（{EXTRA} 个词元 x 2 x {n_params / 1e6:.0f} M 个参数，对比 8 次读取，每次 "
      f"{n_bytes / 1e6:.0f} MB）")

# %% [markdown] en=fa9dc4bb
# 不过长输入也不是免费的：每个输入词元还要占用 KV 缓存的内存（第 03 章），而在 GPU 上限制长提示词
# 的正是这一点，而不是时间。
#
# ## 4 · 内存带宽瓶颈（memory-bandwidth bound）
#
# 每个解码步都要把每个权重读一遍，才能产出一个词元。一台每秒能读 B 字节的机器，在批大小为 1 时，
# 每秒解码的词元数不可能超过 B / (权重的字节数)，不管它的算术有多快。解码每读一个 4 字节的 float32
# 权重只做 2 次运算（一次乘法、一次加法）：每字节 0.5 FLOP，远低于上面的机器平衡点。运算单元都在
# 等内存。

# %% en=d37388cf
bound = decode_bound(n_bytes, bandwidth)
print(f"每个词元读取的权重：{n_bytes / 1e6:.0f} MB（float32）")
print(f"上限：{bandwidth / 1e9:.1f} GB/s / {n_bytes / 1e6:.0f} MB = 每秒 {bound:.1f} 个词元")
print(f"实际达到：每秒 {m.decode_tokens_per_second:.1f} 个词元"
      f"（上限的 {100 * m.decode_tokens_per_second / bound:.0f} %）")

# %% [markdown] en=c38dfcde
# 与上限之间的差距，是每一步里 Python 和算子调用的开销，以及矩阵-向量乘的算子读内存达不到全速。
#
# 组批（第 2 节）让 B 行分摊这次读取：字节数不变，算术量变成 B 倍。那么组批后的一步是不是几乎
# 不要钱？只有当 B 行的算术用时比读取短时才是。批大小扫描给了初步的印象；接下来把最宽的批的一个
# 解码步和单行的一个解码步轮流计时、各跑五次，再下结论（第 06 章在它的分页引擎上测的，也是这个
# 步时随行数的变化）：

# %% en=bcb37a54
one_step = sweep[0][1].mean_tpot
for b, t in sweep[1:]:
    print(f"批大小 {b:>2}：扫描中一步用时是批大小 1 的 {t.mean_tpot / one_step:4.1f} 倍")


def decode_step(rows, context=len(short_ids)):
    """返回一个函数：对 `rows` 条序列、在 `context` 个已缓存词元之上跑一个解码步，每次调用都是
    同一步。"""
    cache = KVCache.for_model(fast, rows, context + 1)
    with torch.inference_mode():
        fast(torch.randint(100, 20_000, (rows, context), device=device), cache=cache)
    token = torch.ones(rows, 1, dtype=torch.long, device=device)

    def step():
        with torch.inference_mode():
            fast(token, cache=cache)
        cache.crop(context)

    return step


widest = sweep[-1][0]
steps = compare(decode_step(1), decode_step(widest), repeats=5, device=device)
grows = steps.above(1.5)
print(f"{widest} 行的一步比 1 行的一步：{steps.spread_text()}；{load_average()}")
print(f"到 {widest} 行为止：" + {
    False: "几乎不要钱，读取决定用时",
    True: "一步的用时随行数增长：算术决定用时（计算受限）",
    None: TOO_NOISY}[grows])

# %% [markdown] en=f8771092
# 在一个 CPU 核上，一步的用时很快就随行数增长：几行就已经把它的算术能力占满了。在数据中心的 GPU
# 上，同样的一步到几十行都几乎不变。屋顶线模型告诉我们这个转变发生在哪里。

# %% [markdown] en=027bf641
# ## 5 · 屋顶线模型（roofline）：一张图装下每一步
#
# 第 2 到 4 节测了三件事，一张图就能解释它们：批大小为 1 时一步的带宽上限，一步的用时随批大小的
# 变化，以及预填充平摊到每个词元很便宜。第 06 章里一步的用时随行数的变化、第 08 章验证 k 个草稿
# 词元的那次前向，也都能用它解释。
#
# 每一份工作都要在它必须读取的 B 个字节上做 F 次浮点运算：它的**算术强度**（arithmetic intensity）
# 是 I = F / B，单位是每字节 FLOP。机器每秒最多做 P 次浮点运算（第 3 节测的矩阵乘法速率），每秒最多
# 读 W 字节（带宽），所以这份工作最多能跑到 min(P, I × W) FLOP/s：一面斜的屋顶（带宽受限）和一面平的
# 屋顶（计算受限）在**屋脊点**（ridge）I = P / W 处相交，也就是第 3 节的机器平衡点。
#
# 一次 r 行的前向传播（一个解码步里 r 条序列各一个词元，或者一次验证、一个提示词里同一条序列的
# r 个词元）只读一遍权重，每个权重用 r 次，所以 r 让它沿着屋顶向右移。`minillm.measure.roofline`
# 为这样的一次前向数出 F 和 B：

# %% en=b87f1d34
from minillm.measure.roofline import Roof, fastest_matmul, step_cost  # noqa: E402

show_source(step_cost)

# %% [markdown] en=a364a8ad
# 下面这些点都是在快速引擎上、以 float32 测的：第 2 节批大小扫描里的解码步（它的 TPOT 就是 B 行的
# 一步），在 64 个已缓存词元之后验证 k 个词元的一次前向（第 08 章推测解码里验证的那种形状），以及
# 一次预填充。

# %% en=2f9d1507
# 平的屋顶，按模型自己的数据类型（bf16 的屋顶会让 float32 的点显得更好看），取引擎在这台机器上
# 最快的内核测得的速率：PyTorch 的 matmul，或预填充实际用到的 minillm 自己的内核
peak = fastest_matmul(device, n=1024, repeats=5, dtype=fast.dtype)
roof = Roof(peak.flops, bandwidth)
cfg = model.config
context = len(tokenizer.encode(prompt)) + N_BATCH // 2  # 扫描过程中的平均上下文长度
points = {}  # 名字 -> (行数, 上下文长度, 秒数)
for b, t in sweep:
    points[f"解码，批大小 {b}"] = (b, context, t.mean_tpot)


def pass_seconds(rows, cached):
    """在 `cached` 个已缓存词元之后，对同一条序列的 `rows` 个词元做一次前向传播的用时。"""
    cache = KVCache.for_model(fast, 1, cached + rows)
    ids = torch.randint(100, 20_000, (1, cached + rows), device=device)
    with torch.inference_mode():
        if cached:
            fast(ids[:, :cached], cache=cache)

        def one_pass():
            fast(ids[:, cached:], cache=cache)
            cache.crop(cached)

        return best_time(one_pass, fast, repeats=3, warmup=1)


for k in (4, 16):
    points[f"验证，k={k}"] = (k, 64, pass_seconds(k, 64))
prefill_n = 128 if CI else 512
points[f"预填充，{prefill_n}"] = (prefill_n, prefill_n // 2, pass_seconds(prefill_n, 0))

measured_points = {}
for name, (rows, ctx, seconds) in points.items():
    f, nbytes = step_cost(cfg, rows, ctx, fast.dtype.itemsize, fast.dtype.itemsize)
    measured_points[name] = (f / nbytes, f / seconds)
    intensity, achieved = measured_points[name]
    print(f"{name:<16} I = 每字节 {intensity:6.2f} FLOP：{achieved / 1e9:6.1f} GFLOP/s，"
          f"是它那面屋顶的 {achieved / roof.attainable(intensity):4.0%}")
print(f"屋顶：{roof.peak_flops / 1e9:.0f} GFLOP/s（{peak.kernel}），"
      f"{roof.bandwidth / 1e9:.1f} GB/s，屋脊点在每字节 {roof.ridge:.1f} FLOP")

# %% en=185e56dd
grid = torch.logspace(-1.5, 3, 200)
fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(grid, [roof.attainable(float(i)) / 1e9 for i in grid], "k-", label="屋顶")
ax.axvline(roof.ridge, color="grey", ls=":", lw=1)
for name, (intensity, achieved) in measured_points.items():
    style = "o" if name.startswith("解码") else "s" if name.startswith("验证") else "^"
    ax.plot(intensity, achieved / 1e9, style, label=name)
ax.set(xscale="log", yscale="log", xlabel="算术强度（每读一个字节的 FLOP 数）",
       ylabel="GFLOP/s",
       title=f"这台机器（{device}）的屋顶线，SmolLM2，{str(fast.dtype)[6:]}")
ax.legend(fontsize=7, loc="lower right")
plt.tight_layout()
plt.show()

# %% en=82f53a7d
decode_1 = measured_points["解码，批大小 1"]
decode_last = measured_points[f"解码，批大小 {sweep[-1][0]}"]
rows_at_ridge = roof.ridge / decode_1[0]
print(f"批大小为 1 的解码步位于每字节 {decode_1[0]:.2f} FLOP，在屋脊点左边 "
      f"{roof.ridge / decode_1[0]:.0f} 倍处：它的上限就是第 4 节的带宽上限")
print(f"每多一行，强度就增加同样多，所以在这里一步大约到 {rows_at_ridge:.0f} 行时到达屋脊点；"
      f"过了它，每多一行都要付出全部的算术代价")
print(f"批大小 {sweep[-1][0]} 跑出的 FLOP/s 是批大小 1 的 {decode_last[1] / decode_1[1]:.1f} 倍")
assert decode_1[0] < roof.ridge  # 在这台机器上，批大小为 1 的解码是带宽受限的
assert decode_last[1] > 1.1 * decode_1[1]  # 多行分摊读取：每一步的 FLOP/s 更高
# 屋顶是一个上限；在共享的机器上，一个点可能略微超过片刻前测的屋顶，但绝不会超出很多
assert all(achieved < 1.25 * roof.attainable(i) for i, achieved in measured_points.values())

# %% [markdown] en=c472e168
# 读懂这张图，就把几章串了起来：
#
# - **05 章的上限**就是批大小为 1 时那面斜的屋顶：I × W FLOP/s，也就是每秒 W / 字节数个词元。
# - **06 章一步的用时随行数的变化**：r 行的一步，强度是 r 倍。在屋脊点左边，1 行和 r 行的一步用时
#   差不多（读取决定用时）；在它右边，算术决定用时，一步随行数增长。一个 CPU 核的屋脊点很低，几行
#   而已；数据中心 GPU 的则在几百（按 H100 公布的数字：约 990 bf16 TFLOP/s 对 3.35 TB/s，每字节
#   约 300 FLOP），所以在那里，组批在很长一段范围内对每一步几乎不要钱。
# - **08 章的验证**：验证 k 个词元的一次前向，就是同一条序列 k 行的一步，在屋顶上的位置和批大小 k
#   相同。只要 k 还在屋脊点左边，检查 k 个草稿的代价就约等于一个解码步；推测解码正是在这片空间里
#   起作用，这也是为什么在屋脊点低的机器上、或者批已经很大时，它的收益更小。
# - 几百个词元的**预填充**落在最右边，计算受限：这就是第 3 节里便宜的输入词元。

# %% [markdown] en=914f4420
# ## 6 · float32、bfloat16 与 int8 的对比
#
# bfloat16（bf16）把每个权重存成 2 字节而不是 4 字节：每个词元要读的字节减半，上限翻倍；int8 存成
# 1 字节（每行再加一个缩放因子），上限变成四倍。速度能不能跟上，取决于算子：GPU 原生支持 bf16 计算；
# 许多 CPU 不支持，PyTorch 在那里的通用 bf16 循环很慢。所以在 CPU 上，`minillm.fast` 让激活值保持
# float32，用它自己的小型 C 算子（`minillm/kernels/`，首次使用时编译）做乘法：这些算子只读一遍窄位宽
# 的权重，在寄存器里相乘，bf16 展宽成 float32，int8 则作为整数与舍入到 int16 的 x 相乘（定义见下文）。
# 变的只有读取的字节数。在 GPU 上，两个 int8 算子都不运行：每次调用都会构造一份权重的浮点副本（读 1 个
# 字节，再把副本写出去、读回来），所以下面的上限按每种格式实际搬运的字节数计算。第 07 章会完整地讲
# int8 的故事。

# %% en=2209daee
fast16 = fast_engine.optimize(model, "bf16")
fast8 = fast_engine.optimize(model, "int8")
rows = {}
for name, engine in [("float32", fast), ("bfloat16", fast16), ("int8", fast8)]:
    minillm.generate(engine, tokenizer, prompt, max_new_tokens=2)  # 预热（算子在此编译）
    result = minillm.generate(engine, tokenizer, prompt, max_new_tokens=N_NEW)
    rows[name] = result
    moved = bytes_moved_per_token(engine)  # GPU 上的 int8：再加上它构造的浮点副本
    bound_format = decode_bound(moved, bandwidth)
    print(f"{name:>9}：{result.metrics}  每个词元搬运 {moved / 1e6:.0f} MB，"
          f"上限 {bound_format:.0f} tok/s")
print("这里 int8 的解码路径：", "，".join(int8_decode_paths(fast8)),
      "（反量化：每次调用都要写出并读回每个权重的一份浮点副本）")
if device.type == "cpu":
    print("CPU 能力：", torch.backends.cpu.get_cpu_capability(),
          "| 正在使用的 minillm bf16 算子：", fast16.lm_head.kernel)
print("文本与 float32 的相同：", {k: r.text == rows["float32"].text for k, r in rows.items()})

# %% [markdown] en=098ec0f8
# bf16 保留每个权重尾数（mantissa）中的 7 个存储位（float32 保留 23 个），int8 每行 255 级，所以
# 生成几十个词元之后，它们的贪心解码文本可能会和 float32 的分道扬镳。第 07 章会测量这类质量代价。
#
# **把 x 舍入到 int16。** int8 算子做的是整数乘法，所以它先把每一行激活值 x 舍入成 16 位整数
# （int16），每行用它自己的缩放因子：s_x = max|x| / q_max，x_q = round(x / s_x)，得到从 −q_max 到
# q_max 的整数。一行权重存成 int8 数 w_q 及其缩放因子 s_w。于是每个输出就是整数和
# Σ w_q × x_q（用 32 位整数累加）乘以 s_x × s_w。q_max 取 int16 的最大值 32,767，行很长时取得更小，
# 以保证 K 个乘积（每个至多 128 × q_max）之和不会溢出 int32：q_max = min(32,767, (2³¹ − 1) / (128 K))。
# 舍入让 x 的每个值最多移动半级，即 s_x / 2：不到这一行最大值的 2e-5，比 int8 权重的 255 级精细得多。
# 下面对 SmolLM2 真实激活值的一行（第 0 层 gate 和 up 矩阵的输入）逐步写出来，并与算子对照：

# %% en=c9df2541
gate_up = fast8.layers[0].mlp.gate_up_proj  # 快速模型里的一个 int8 层
seen = []
hook = gate_up.register_forward_pre_hook(lambda layer, args: seen.append(args[0].detach()))
with torch.inference_mode():
    fast8(torch.tensor([short_ids], device=device))
hook.remove()
x = seen[0].reshape(-1, gate_up.in_features)[-1:].float().cpu()  # 最后一个词元的那一行
w_q, s_w = gate_up.qweight.cpu(), gate_up.scale.cpu().float()

q_max = min(32767, (2**31 - 1) // (128 * x.shape[1]))  # 对应 x 的这 K 个值
s_x = x.abs().max() / q_max  # 用 float32 计算，和算子一样
x_q = torch.round(x * (1 / s_x))  # 从 -q_max 到 q_max 的整数
print(f"K = {x.shape[1]} 时的 q_max：{q_max}")
integer_sum = (w_q.long() @ x_q[0].long()).float()  # 精确值，和算子的 int32 累加一样
y_int16 = integer_sum * (s_x * s_w)
y_float_x = x[0].double() @ (w_q.double() * s_w.double()[:, None]).T  # int8 权重，浮点 x
y_fp32 = fast.layers[0].mlp.gate_up_proj(x.to(device))[0].cpu().double()  # float32 权重


def relative(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


x_error, w_error = relative(y_int16, y_float_x), relative(y_float_x, y_fp32)
print(f"x 舍入到 int16，对比浮点的 x（两边都是 int8 权重）：最大输出的 {x_error:.1e}")
print(f"int8 权重，对比 float32 权重（两边的 x 都是浮点）：   {w_error:.1e}")
if kernels.available():
    kernel_error = relative(kernels.gemm_int8(x, w_q, s_w)[0], y_int16)
    print(f"minillm 的算子，对比逐步写出的整数和：             {kernel_error:.1e}")
    assert kernel_error < 1e-6  # 算子算的正是定义所说的
else:
    print("这台机器上没有编译出 minillm 的 int8 算子；上面几行就是在编译出它的机器上"
          "它所计算的内容")
assert x_error < w_error / 10  # 舍入 x 的代价远小于舍入权重的代价

# %% [markdown] en=f93f250e
# ## 7 · CPU 对比 GPU，以及 TPU
#
# 在 GPU 上，一个 135M 模型批大小为 1 的解码并不受带宽限制：H100 读完 SmolLM2 那 540 MB 的 float32
# 权重只需约 0.2 ms，而一个解码步要发起好几百个小算子（30 层，每层十几个操作），每个要花几微秒。
# 决定节奏的是这些启动，而不是字节数；这就是 CUDA 图和 `torch.compile` 在 GPU 上如此重要的
# 原因。附录 05b 在 CUDA GPU 上运行时会把它测出来。

# %% [markdown] en=f1122a54
# ⚠ 原始资料的经验法则：一个 7B 模型在 CPU 上每秒解码约 10 个词元，在一块 A6000 GPU 上每秒 100 个
# 以上，约为 10:1。第 4 节的上限可以检验它。一个 7B 模型（Llama-2-7B：67.4 亿个参数，这是它公布的
# 数字）用 fp16 存储时，每个词元要为每个参数读 2 个字节；A6000 每秒最多读 768 GB（NVIDIA 公布的
# 数字，这里没有测）。这两个数字各自在什么条件下才可能成立？

# %% en=5e0286e8
PARAMS_7B, A6000 = 6.74e9, 768e9  # 公布的数字：Llama-2-7B 的参数量，A6000 每秒读取的字节数
formats = {"fp16": 16, "int8": 8 + 16 / 4096,  # 每行 4,096 个权重配一个 16 位缩放因子
           "Q4_1（4 位，与我们的 GGUF 文件相同）": 4 + 32 / 32}  # 每 32 个权重 2 x 16 位
bounds = {}
for name, bits in formats.items():
    weights_7b = PARAMS_7B * bits / 8
    bounds[name] = A6000 / weights_7b
    print(f"7B，{name:<31}：每个词元 {weights_7b / 1e9:5.1f} GB -> A6000 至多 "
          f"{bounds[name]:5.0f} tok/s；这台机器（{bandwidth / 1e9:.1f} GB/s）至多 "
          f"{bandwidth / weights_7b:5.1f} tok/s")
for name, bits in [("fp16", 16), ("Q4_1", 5)]:
    print(f"在 CPU 上以 {name} 达到 10 tok/s，需要 {10 * PARAMS_7B * bits / 8 / 1e9:.0f} GB/s "
          f"的内存带宽")
for name, bound_7b in bounds.items():
    print(f"{name} 下单个用户 100 tok/s："
          f"{'未超出' if bound_7b >= 100 else '超出了'} A6000 的上限 {bound_7b:.0f}")
users_needed = 100 / bounds["fp16"]
print(f"fp16 下把 100 tok/s 当作吞吐量：至少 {users_needed:.1f} -> "
      f"每一步要有 {int(-(-users_needed // 1))} 个用户分摊每次读取")

# %% [markdown] en=6ad7ba43
# 所以，“A6000 上 100+”对 fp16 下的单个用户不可能成立：上面打印的上限远低于 100。用 int8 或 4 位
# 权重（llama.cpp 常用的格式）时它成立；或者把它当作吞吐量，两个及以上的用户组批，每个用户仍在 fp16
# 的上限之下，它也成立。“CPU 上 10 tok/s”需要上面打印的那么大的带宽：fp16 下要多通道服务器 CPU 的
# 带宽，4 位权重下要内存够快的台式机的带宽；不妨和这台机器自己的上限比一比。10:1 这个比例是带宽之比，
# 只有两边读同一种格式时才成立。（对我们这么小的模型，决定 GPU 节奏的反而是算子启动，正如本节开头
# 所说。）
#
# 加速器不只有 GPU。Google 的 **TPU**，即张量处理单元（tensor processing unit，TPU），围绕大型
# 矩阵乘法单元构建，由高带宽内存供数，通过 XLA 编译器编程（从 JAX，或者从 PyTorch 借助 `torch_xla`
# 包；本课程不在 TPU 上运行）。第 5 节的屋顶线模型在那里同样成立。下面用厂商公布的数字算一算：

# %% en=398a1a4a
published = {  # 稠密 16 位的 FLOP/s 与内存每秒字节数，取自厂商的数据手册
    "NVIDIA H100 SXM (GPU)": (989e12, 3.35e12),
    "Google TPU v5e": (197e12, 819e9),
}
print(f"{'这台机器，实测':<22}：屋脊点每字节 {roof.ridge:4.0f} FLOP；float32 的 SmolLM2 "
      f"在批大小 1 时至多 {bandwidth / n_bytes:6,.0f} tok/s")
for name, (peak, read) in published.items():
    print(f"{name:<22}：屋脊点每字节 {peak / read:4.0f} FLOP；16 位的 SmolLM2 "
          f"在批大小 1 时至多 {read / (n_bytes / 2):6,.0f} tok/s")

# %% [markdown] en=27700743
# TPU 的屋脊点和数据中心 GPU 的一样，落在右边每字节几百 FLOP 处：在那里，批大小为 1 的解码和在这里
# 一样受带宽限制，只有大批量才能用上它的算力。不同的是软件：XLA 预先把整个一步编译成一个程序，而
# 不是分别启动几百个算子（GPU 上 CUDA 图做的就是这件事）。
#
# ## 8 · 延迟与模型大小
#
# 原始资料说，延迟的增长比模型大小慢：MPT-30B 比 MPT-7B 慢约 2.5 倍（参数量是它的 4.3 倍）。我们用
# SmolLM2 自己的家族来检验：同样的 Llama 架构，采用 SmolLM2-360M 和 -1.7B 公布的形状，权重随机
# （速度不取决于数值）。为了省内存，每个形状各建一层和三层两个版本：完整模型的一步 = 一层的一步
# + (层数 − 1) × 两者之差的一半。每个形状都和 135M 的形状轮流计时，共三轮，三轮一致才下结论。

# %% en=7915b60a
from minillm.model import LlamaModel, ModelConfig

SHAPES = {  # SmolLM2 公布的配置：隐藏维度、层数、注意力头数、KV 头数、前馈维度
    "135M": (576, 30, 9, 3, 1536),
    "360M": (960, 32, 15, 5, 2560),
    "1.7B": (2048, 24, 32, 32, 8192),
}
if CI:
    SHAPES.pop("1.7B")


def shape_config(hidden, layers, heads, kv, ffn):
    return ModelConfig(arch="llama", vocab_size=49152, hidden_size=hidden, n_layers=layers,
                       n_heads=heads, n_kv_heads=kv, head_dim=64, intermediate_size=ffn,
                       rope_theta=100000.0, max_seq_len=2048, tie_embeddings=True)


def shape_steps(hidden, heads, kv, ffn):
    """这个形状分别建成一层和三层时的解码步函数（随机权重）。"""
    steps = []
    for layers in (1, 3):
        torch.manual_seed(0)
        config = shape_config(hidden, layers, heads, kv, ffn)
        engine = fast_engine.optimize(LlamaModel(config).to(device).eval().requires_grad_(False))
        cache = KVCache.for_model(engine, 1, 8)
        ids = torch.tensor([[1, 2, 3, 4]], device=device)
        with torch.inference_mode():
            engine(ids, cache=cache)

        def step(engine=engine, cache=cache, ids=ids):
            with torch.inference_mode():
                engine(ids[:, :1], cache=cache)
            cache.crop(4)

        steps.append(step)
    return steps


def model_step_seconds(steps, layers):
    """完整模型的一个解码步：一层的一步，加上 (layers - 1) 乘以三层与一层两步之差的一半。"""
    one, three = (best_time(step, device, 5, warmup=1) for step in steps)
    return one + (layers - 1) * max(three - one, 0.0) / 2


def parameters(hidden, layers, heads, kv, ffn):
    d, f = hidden, ffn  # 词嵌入与输出共享；q 和 o 是 d x d，k 和 v 是 d x (KV 头数 x 64)
    return 49152 * d + layers * (2 * d * d + 2 * d * kv * 64 + 3 * d * f + 2 * d) + d


hidden, base_layers, heads, kv, ffn = SHAPES["135M"]
base_steps = shape_steps(hidden, heads, kv, ffn)
sizes = {}  # 名字 -> (参数量是 135M 的几倍, Comparison：135M 的一步对比这个形状的一步)
for name, (hidden, layers, heads, kv, ffn) in tqdm(list(SHAPES.items())[1:], desc="模型形状"):
    steps = shape_steps(hidden, heads, kv, ffn)
    rounds = [(model_step_seconds(base_steps, base_layers), model_step_seconds(steps, layers))
              for _ in range(3)]  # 轮流计时：机器某一刻忙起来，两边都会碰上
    sizes[name] = (parameters(*SHAPES[name]) / parameters(*SHAPES["135M"]),
                   Comparison(*zip(*rounds)))
    print(f"{name}：{parameters(*SHAPES[name]) / 1e6:5.0f} M 个参数，解码一步 "
          f"{1000 * statistics.median(sizes[name][1].b):6.1f} ms，135M 的是 "
          f"{1000 * statistics.median(sizes[name][1].a):5.1f} ms")
    del steps

# %% en=5be69266
for name, (p_ratio, steps) in sizes.items():
    slower = steps.above(p_ratio)  # 每一轮里，延迟的增长是否都超过了参数量的增长？
    if slower is None and steps.near(p_ratio):  # 每一轮都与参数量之比相差不到 15%
        slower = "even"
    print(f"{name}：参数量 {p_ratio:4.1f} 倍，每个词元的延迟 {steps.spread_text()}："
          + {False: "延迟的增长比参数量慢",
             True: "延迟的增长比参数量快",
             "even": "延迟与参数量增长得差不多快（相差不到 15%）",
             None: TOO_NOISY}[slower])

# %% [markdown] en=d13ad8a4
# 怎么读这个结果：批大小为 1 时，一步的用时 = 固定部分（Python、算子启动、小的向量运算）+ 读权重的
# 时间。固定部分比读取大时，延迟的增长比参数量慢；一旦读取占了主导，它就大致随读取的字节数同步增长。
# 原始资料里 MPT 和 LLaMA-2 的数字来自 GPU，在那里更大的模型还会把工作分摊到更多的并行单元上；上面
# 打印的结果说明这个说法在这台机器上、对批大小为 1 的解码能适用到什么程度。
#
# ## 9 · 离线与交互
#
# 两种用途要的东西不同，而上面的批大小扫描已经把两者都测了：

# %% en=781c30e0
best_throughput = max(sweep, key=lambda s: s[1].tokens_per_second)
print(f"交互（聊天，一个用户）：批大小 1 -> TTFT {1000 * sweep[0][1].mean_ttft:.0f} ms，"
      f"TPOT {1000 * sweep[0][1].mean_tpot:.0f} ms")
print(f"离线（一堆文档）：批大小 {best_throughput[0]} -> "
      f"合计每秒 {best_throughput[1].tokens_per_second:.1f} 个词元，"
      f"是批大小 1 的 {best_throughput[1].tokens_per_second / sweep[0][1].tokens_per_second:.1f} 倍")

# %% [markdown] en=fedb753b
# - **交互**式的用途（聊天、代码补全）看的是 TTFT（回答多快开始）和 TPOT（流式输出是否比人读得快）。
#   小批量，短提示词。
# - **离线**的用途（一夜之间总结一千个文件）只在乎吞吐量：TTFT 几乎无关紧要，所以内存允许多大的批，
#   就组多大的批。
#
# ## 小结
#
# - TTFT、TPOT、延迟 = TTFT + TPOT × (n − 1)、吞吐量：每个 `minillm.generate` 的结果都以 `.metrics`
#   带着它们；`minillm.stream` 和实时图表把它们流式地展示出来。原始资料的“TTFT + TPOT × 词元数”把
#   第一个词元算了两次：多了一个 TPOT。
# - 批大小为 1 的解码受内存带宽和每一步的开销限制：每个词元都要读一遍所有权重。组批让用户们分摊这次
#   读取；在算子直接读窄位宽权重的地方，bf16 把它减半，int8（x 舍入到 int16）把它减到四分之一。
# - 屋顶线模型把每一步放进同一张图：在机器的两面屋顶之下，横轴是强度（每字节 FLOP），纵轴是 FLOP/s。
#   行数（一个批、一次验证、一个提示词）让一步向右移；过了屋脊点它就是计算受限的，随行数增长，一个
#   CPU 核几行之后就是这样。GPU 或 TPU 的屋脊点还要往右几百 FLOP 每字节。
# - 预填充是计算受限的；512 个输入词元是否比 8 个输出词元便宜，取决于机器算术与带宽之比，这个比值
#   我们测过了。
# - 在繁忙的机器上测出的结论，要让两边轮流跑、重复几次，重复之间不一致时就说
#   “噪声太大，无法下结论”。
# - 练习 notebook `exercises/zh/05_metrics.ipynb` 从原始时间戳算出这些指标，并把一步放到屋顶线上。选读的
#   附录 `05b_fast_engine` 打开了快速引擎。第 06 章在它们之上搭建连续批处理。
