# 中文版 · 05_metrics_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=c28cccf9
# # 练习 05 · 性能指标
#
# 课上给一次生成的每个词元都计了时。这里由你亲手搭出 minillm 中负责测量的部分：一个请求的各项指标、
# 延迟公式、给词元流计时的函数、多个请求的吞吐量，以及屋顶线模型（roofline）下一次前向传播的最短
# 用时。每个请求由一个开始时间 `start` 和一个列表 `token_times` 描述：每个新词元就绪的时刻（单位为秒，
# 用同一个时钟）。
#
# 在各自的单元格里写好函数并运行，然后运行它下面的检查单元格。检查会在许多组输入上把你的函数和
# minillm 自己的实现（`minillm.measure.metrics`、`minillm.measure.roofline`）作对比。也可以在终端里
# 检查：`pytest --nbval-lax exercises/zh/05_metrics.ipynb`。

# %% en=0b813e81
import math
import os
import time

import minillm
from minillm.course.checks import ch05_metrics as checks

start, token_times = 0.0, [0.30, 0.35, 0.40, 0.45, 0.50]

# %% [markdown] en=b5f0fdf9
# ## 1 · 一个请求的指标
#
# 请写出 `request_metrics(start, token_times)`，返回一个含三个数的字典，单位都是秒：
#
# - `"ttft"`：首个词元生成时间（time to first token，TTFT），从开始到第一个词元；
# - `"tpot"`：每个输出词元的时间（time per output token，TPOT），即第一个词元*之后*各词元之间的平均
#   间隔：n 个词元有 n − 1 个间隔。第一个词元出自预填充，所以不算在内。只有一个词元时没有间隔：
#   返回 `float("nan")`；
# - `"latency"`：端到端延迟（end-to-end latency），用户等完整个回答用了多久。

# %% [task] en=415109de
def request_metrics(start, token_times):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def request_metrics(start, token_times):
    n = len(token_times)
    gaps = (token_times[-1] - token_times[0]) / (n - 1) if n > 1 else math.nan
    return {"ttft": token_times[0] - start, "tpot": gaps, "latency": token_times[-1] - start}

# %% [check] en=0f96c9ac
checks.check_request_metrics(request_metrics)

# %% [markdown] en=c3b9ef30
# ## 2 · 预测延迟
#
# 原始资料说，延迟 = TTFT + TPOT × 输出词元数。请写出 `predict_latency(ttft, tpot, n_tokens)`，
# 预测一个有 `n_tokens` 个新词元的回答的延迟。当心：n 个词元的回答，在第一个词元之后有几个 TPOT
# 间隔？检查会把你的预测和它那些请求实测的延迟作对比。

# %% [task] en=d8248c07
def predict_latency(ttft, tpot, n_tokens):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def predict_latency(ttft, tpot, n_tokens):
    return ttft + tpot * (n_tokens - 1)

# %% [check] en=776b203f
checks.check_predict_latency(predict_latency)

# %% [markdown] en=22249234
# ## 3 · 给词元流计时
#
# `minillm.generation.loop.stream(model, tokenizer, prompt, ...)` 在回答的每一段就绪时逐段产出它。
# 请写出 `time_stream(stream, clock)`：消费这样一个流，返回 `(start, token_times, items)`：
#
# - `start = clock()`，要在向流要任何东西*之前*读（预填充发生在你等第一项的时候，它属于 TTFT）；
# - 每一项到达后立刻读一次 `clock()`，并把这一项留下。
#
# 读时间一律用传给你的 `clock`（检查给你的是一个它手动拨动的时钟；下面的演示给的是
# `time.perf_counter`）。

# %% [task] en=4df66034
def time_stream(stream, clock):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def time_stream(stream, clock):
    start, token_times, items = clock(), [], []
    for item in stream:
        token_times.append(clock())
        items.append(item)
    return start, token_times, items

# %% [check] en=8fbbe135
checks.check_time_stream(time_stream)

# %% [markdown] en=963b8f20
# 你的两个函数，用在真实模型上（提示词的意思是“法国的首都是”，模型接着往下写）：

# %% en=52c4cb62
from minillm.generation.loop import stream

model, tokenizer = minillm.load("smollm2-135m", device="cpu")
new_tokens = 8 if os.environ.get("CI") else 24
try:
    t0, times, pieces = time_stream(
        stream(model, tokenizer, "The capital of France is", max_new_tokens=new_tokens),
        time.perf_counter)
    print("".join(pieces))
    print({k: f"{1000 * v:.1f} ms" for k, v in request_metrics(t0, times).items()})
except NotImplementedError:
    print("先在上面写好 time_stream 和 request_metrics")

# %% [markdown] en=40e5fe61
# ## 4 · 吞吐量（throughput）
#
# 服务器同时运行好几个请求。请写出 `throughput(requests)`，其中 `requests` 是由 `(start, token_times)`
# 对组成的列表：它们的全部新词元数，除以从第一个开始到最后一个词元的墙钟时间。（把每个请求各自的每秒
# 词元数加起来，会把它们共同经历的时间重复计算。）

# %% [task] en=a61eff52
def throughput(requests):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def throughput(requests):
    tokens = sum(len(times) for _, times in requests)
    first = min(start for start, _ in requests)
    last = max(times[-1] for _, times in requests)
    return tokens / (last - first)

# %% [check] en=13b42c3f
checks.check_throughput(throughput)

# %% [markdown] en=44cb5f2f
# `minillm.measure.metrics` 里有同样的定义（`RequestMetrics`、`predict_latency`、`TokenClock`、
# `throughput`），每个 `minillm.generate` 的结果都以 `.metrics` 带着它们。

# %% [markdown] en=45c59295
# ## 5 · 屋顶线模型（roofline）
#
# 一次 `rows` 个词元的前向传播（`rows` 个请求的一个解码步，或者一个 `rows` 个词元的提示词），每一行都要
# 和每个权重相乘一次：每行、每个权重 2 FLOP，一次乘法加一次加法。不管有多少行，它都只把每个权重读一遍：
# 读 `n_weights × bytes_per_weight` 个字节（KV 缓存不算）。机器每秒最多做 `peak_flops` 次浮点运算，
# 每秒最多读 `bandwidth` 字节，而且两件事可以同时进行。
#
# 请写出 `roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth)`：这次前向在那台
# 机器上最少要花的时间，单位为秒。

# %% [task] en=b9479da9
def roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth):
    arithmetic = 2 * n_weights * rows / peak_flops
    reading = n_weights * bytes_per_weight / bandwidth
    return max(arithmetic, reading)

# %% [check] en=d56b35ea
checks.check_roofline_seconds(roofline_seconds)

# %% [markdown] en=458f3b5c
# 把你的函数用在公布的数字上：一个 7B 模型（Llama-2-7B，67.4 亿个权重），fp16，跑在一块 H100 上
# （989 TFLOP/s，3.35 TB/s）。到屋脊点为止，多加几行对每一步几乎不增加开销；过了它，每一步都随行数
# 增长。

# %% en=2897c1cf
try:
    for rows in [1, 16, 64, 256, 1024, 4096]:
        seconds = roofline_seconds(rows, 6.74e9, 2, 989e12, 3.35e12)
        print(f"{rows:>5} 行：每一步至少 {1000 * seconds:7.2f} ms，每秒至多 "
              f"{rows / seconds:9,.0f} 个词元")
except NotImplementedError:
    print("先在上面写好 roofline_seconds")
