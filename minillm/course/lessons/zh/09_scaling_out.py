# 中文版 · 09_scaling_out.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=223dd4f9
# # 09 · 横向扩展：多个进程、一个真正的服务器，以及一次负载测试
#
# SmolLM2-135M 在哪台笔记本电脑上都装得下。而一个 700 亿参数的模型，用 fp16 存储大约要 140 GB
# （n 十亿个参数需要 2n GB，见第 02 章），一块 GPU 装不下。本章先讲推理是怎样分摊到多个设备上的，
# 并真的在两个进程上把它跑起来；然后转向服务：把 minillm 自己的 OpenAI 兼容服务器跑起来，再用一个
# 负载测试客户端去测它。这个客户端对任何同类服务器（vLLM、SGLang、llama.cpp 的服务器）都适用。
#
# 分摊工作的几种方式，切分的东西各不相同：
#
# - **模型并行（model parallelism）**是个总称，指把*一个模型的权重*切分到多个设备上。它分两种：
#   - **张量并行（tensor parallelism）**：每一层的矩阵都被切开，所有设备一起算每一层
#     （第 1–3 节）；
#   - **流水线并行（pipeline parallelism）**：相邻的层放在不同的设备上，就像装配线上的一个个
#     工位；把一批数据切成若干微批次，就能让每个工位同时忙起来（第 4 节）。
# - **专家并行（expert parallelism）**：在混合专家模型里，一个个完整的专家放在不同的设备上，
#   每个词元被送到它所选专家所在的设备（第 8 节）；
# - **数据并行（data parallelism）**：多份完整的模型副本，各自服务自己的请求。
#
# 大规模部署会把它们组合起来用：机器内部用张量并行，机器之间用流水线并行，专家用专家并行，
# 用户多了再加数据并行。本课程依据的原始资料把“层放在不同设备上”叫作模型并行，把“阶段相互重叠”
# 叫作流水线并行。其实这是同一种切分的两个侧面：层放在不同设备上*就是*流水线并行，而只有把一批
# 数据切成微批次之后，各个阶段才会重叠；不切的话，同一时刻只有一个设备在干活（第 4 节会画出来）。
#
# 下面的每个数字都是在这次运行中测出来的。设置了环境变量 `CI` 时（课程的测试就是这样），各项
# 规模会缩小，让这个 notebook 在两个 CPU 核上几分钟就能跑完。

# %% en=6399dc61
import math
import os
import time

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course import show_source
from minillm.utils.devices import Timer
from minillm.distributed import (all_reduce_cost, compare_pipeline_parallel,
                                 compare_tensor_parallel, split_evenly)
from minillm.measure import load_average

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
print(f"{load_average() or f'{os.cpu_count()} CPUs'}：计时会随机器的负载变化")

# %% [markdown] en=5a2ffeda
# ## 1 · 把一个线性层切成两半的两种方法
#
# 线性层计算 `y = x @ W.T`，其中 `W` 的形状是 (out, in)。它可以按两种方式切分给一组进程；
# 组里的进程从 0 开始编号，这个编号叫作进程编号（rank）。两种切法是：
#
# - **列并行（column-parallel）**：每个进程持有 `W` 的一部分*行*（也就是一部分输出特征），并用
#   完整的输入算出这些输出。各进程的输出拼接起来。
# - **行并行（row-parallel）**：每个进程持有 `W` 的一部分*列*（也就是一部分输入特征），以及 `x`
#   中对应的那一片。每个进程算出整个输出的一个部分和；把这些部分和加起来就是一次
#   **全归约（all-reduce）**，这是张量并行唯一需要的集合通信操作。

# %% en=408b3b1b
x = torch.randn(2, 8, dtype=torch.float64)
W = torch.randn(6, 8, dtype=torch.float64)
y = x @ W.T
rows, cols = split_evenly(6, 2), split_evenly(8, 2)
column = torch.cat([x @ W[r.start:r.stop].T for r in rows], dim=-1)
row = sum(x[:, c.start:c.stop] @ W[:, c.start:c.stop].T for c in cols)
print("每个进程的行：", rows, " 每个进程的列：", cols)
print(f"列并行的最大误差 {(column - y).abs().max():.1e}，"
      f"行并行的最大误差 {(row - y).abs().max():.1e}")

# %% [markdown] en=8ad579e1
# 画成图：进程 0 的那一份是蓝色，进程 1 的是橙色。

# %% en=8d343dc6
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for ax, title, split in ((axes[0], "列并行：W 的行", "rows"),
                         (axes[1], "行并行：W 的列", "cols")):
    grid = torch.zeros(6, 8)
    for rank, part in enumerate(rows if split == "rows" else cols):
        if split == "rows":
            grid[part.start:part.stop, :] = rank
        else:
            grid[:, part.start:part.stop] = rank
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9)
    ax.set_title(title)
    ax.set_xlabel("输入特征")
    ax.set_ylabel("输出特征")
plt.tight_layout()
plt.show()

# %% [markdown] en=7c4a37f5
# Megatron-LM 的做法是把两者配成一对，使两层之间的激活值根本不必传输：
#
# - **注意力**：查询、键、值的投影*按头*做列并行（每个进程算若干个完整的头；在分组查询注意力中，
#   一个键/值头跟着它对应的那些查询头走）；输出投影做行并行：一次全归约。
# - **前馈网络**：gate 和 up 做列并行，down 做行并行：再一次全归约。
#
# 所以每个块要对隐藏状态做两次全归约。词嵌入、各个归一化层和语言模型头则在每个进程上各复制一份。
# minillm 的实现（`minillm/distributed/tensor_parallel.py`）：

# %% en=58c7d93d
from minillm.distributed import tensor_parallel

show_source(tensor_parallel.shard_mlp)

# %% [markdown] en=e25d8260
# ## 2 · 一次全归约的代价
#
# 每个词元、每次全归约传输一个隐藏向量：`hidden_size` 个数。对 SmolLM2（30 层，宽度 576）用 fp32
# 来算。（本章一直留在 CPU 上：各个进程通过 gloo 共享这台机器的 CPU 核；如果每个进程各有一块
# GPU，启动器会给进程 r 分配 `cuda:r`，并改用 nccl。）

# %% en=f0015c9e
model, tokenizer = minillm.load("smollm2-135m", device="cpu")
config = model.config
calls, per_token = all_reduce_cost(config, tokens=1, bytes_per_value=4)
print(f"每次前向传播 {calls} 次全归约，每个进程每个词元 {per_token:,} 字节"
      f"（2 x {config.n_layers} x {config.hidden_size} x 4）")

# %% [markdown] en=5f3d0308
# ## 3 · 在两个进程上运行 SmolLM2
#
# `compare_tensor_parallel` 先在本进程里运行完整的模型，再启动两个由 `torch.distributed`
# 连接起来的进程（CPU 上用 gloo 后端，GPU 上用 nccl），每个进程持有一半的注意力头和一半的前馈网络，
# 然后比较两者：提示词上的 logits，以及两个进程合作贪心生成的词元。SmolLM2 有 3 个键/值头，所以
# 切分是 2 + 1：不均匀，但结果依然精确。（这个单元格要启动两个 Python 进程，各自加载一遍模型，
# 需要等一会儿。）

# %% en=a7de535d
prompt_ids = tokenizer.encode("The capital of France is")  # “法国的首都是”
NEW = 3 if CI else 6
with Timer("cpu") as stopwatch:
    tp = compare_tensor_parallel("smollm2-135m", prompt_ids, world_size=2, new_tokens=NEW)
tp_seconds = stopwatch.seconds
print(tp)
print("一个进程：", repr(tokenizer.decode(tp.reference_tokens)))
print("两个进程：", repr(tokenizer.decode(tp.parallel_tokens)))
print(f"（{tp_seconds:.0f} 秒，大部分花在启动进程和加载模型上）")
assert tp.max_abs_diff < 1e-4 and tp.top1_agree and tp.tokens_equal

# %% [markdown] en=288f4395
# 两边的 logits 相差约 1e-5，并不完全相等：两个部分和相加的顺序，与一次矩阵乘法内部累加的顺序
# 不同，而浮点加法不满足结合律。
#
# 每个进程都数了自己做了多少次全归约：先是提示词的那次前向传播，然后是 `generate`：它自己的
# 预填充，以及第一个新词元之后每个新词元各一步解码。

# %% en=3e5b1022
rank0, rank1 = tp.ranks
n_prompt = len(prompt_ids)
want_calls, want_bytes = all_reduce_cost(config, tokens=n_prompt)
print(f"提示词的前向传播（{n_prompt} 个词元）：实测 {rank0['prefill_calls']} 次，"
      f"{rank0['prefill_bytes']:,} 字节；公式给出 {want_calls} 次，{want_bytes:,} 字节")
decode_calls = rank0["total_calls"] - 2 * rank0["prefill_calls"]
decode_bytes = rank0["total_bytes"] - 2 * rank0["prefill_bytes"]
steps = decode_calls // calls
print(f"解码：{steps} 步，实测每个词元 {decode_bytes // steps:,} 字节，"
      f"公式给出 {per_token:,} 字节")
assert (rank0["prefill_calls"], rank0["prefill_bytes"]) == (want_calls, want_bytes)
assert decode_bytes == steps * per_token and steps == NEW - 1
print("每个进程的键/值头数：", rank0["kv_heads"], rank1["kv_heads"],
      "；前馈网络的行数：", rank0["ffn_rows"], rank1["ffn_rows"])

# %% [markdown] en=a3787fc3
# 每层两次全归约，每个词元都要做，这就是张量并行只在*一台*机器内部使用的原因：NVLink 这样的
# 高速互连几微秒就能传完几百 KB，但每次全归约还得等最慢的那个进程，并付出一笔固定的启动延迟；
# 而换成机器之间的网络，这两项都会更糟。当一个模型在一个设备上放不下，或者每个设备分到的那份
# 矩阵足够大时，张量并行才划算。（这次运行没有给它计时：大部分时间都花在了启动进程和加载模型上。）
#
# ## 4 · 流水线并行
#
# 另一种切法：进程 0 运行第 0–14 层，把隐藏状态发给进程 1；进程 1 运行第 15–29 层和语言模型头。
# 每个词元在每个阶段边界上只发送一次，但一个阶段在干活时，另一个阶段只能等着。

# %% en=8bb95d99
pp = compare_pipeline_parallel("smollm2-135m", prompt_ids, world_size=2)
print(pp)
for r in pp.ranks:
    print(f"阶段 {pp.ranks.index(r)}：第 {r['layers'][0]}-{r['layers'][-1]} 层，"
          f"{r['held_parameters'] / 1e6:.1f} M 个参数，发送了 {r['sent_bytes']:,} 字节")
assert pp.max_abs_diff < 1e-4 and pp.top1_agree
assert pp.ranks[0]["sent_bytes"] == n_prompt * config.hidden_size * 4
whole = sum(p.numel() for p in model.parameters())
held = sum(r["held_parameters"] for r in pp.ranks)
table = model.embed.weight.numel()
print(f"各阶段合计持有 {held / 1e6:.1f} M 个参数；模型本身有 {whole / 1e6:.1f} M 个；"
      f"词嵌入表有 {table / 1e6:.1f} M 个")
assert abs(held - whole - table) < 0.01 * table  # 多出来的正是两个阶段都持有的词嵌入表

# %% [markdown] en=c7f18839
# 两个阶段都持有词嵌入（语言模型头与它共享权重），所以它们合起来持有的参数比模型本身还多。
# 等待的那段时间就是**流水线气泡（pipeline bubble）**。实际系统把一批数据切成若干
# **微批次（micro-batch）**，让每个阶段都忙起来：阶段 1 处理微批次 1 的同时，阶段 0 已经在处理
# 微批次 2 了。下面是这种调度（GPipe 的调度，只画前向）：

# %% en=d473e687
def pipeline_schedule(stages, micro_batches):
    """(阶段, 微批次, 开始的时间槽)：微批次 m 在时间槽 s + m 到达阶段 s。"""
    return [(s, m, s + m) for s in range(stages) for m in range(micro_batches)]


fig, axes = plt.subplots(1, 2, figsize=(10, 2.4), sharey=True)
for ax, mb in zip(axes, (1, 4)):
    for s, m, t in pipeline_schedule(4, mb):
        ax.barh(s, 1, left=t, color=plt.cm.tab10(m), edgecolor="white")
    slots = 4 + mb - 1
    busy = 4 * mb / (4 * slots)
    ax.set_title(f"{mb} 个微批次：各阶段有 {busy:.0%} 的时间在忙")
    ax.set_xlabel("时间槽")
axes[0].set_ylabel("阶段")
axes[0].invert_yaxis()
plt.tight_layout()
plt.show()

# %% [markdown] en=357c5cec
# 4 个阶段、m 个微批次时，各阶段有 m / (m + 3) 的时间在忙。
#
# ## 5 · vLLM 和 SGLang 怎样大规模提供服务
#
# 人们实际部署的引擎，都是由第 03–08 章的那些思想，再加上一个集群所需的东西搭起来的。Text
# Generation Inference 曾是这里的第三个名字，但它的维护者已在 2026 年 3 月将其归档；vLLM 和
# SGLang 仍是部署最广的两个开源引擎：
#
# | 思想 | minillm 章节 | vLLM | SGLang |
# |---|---|---|---|
# | KV 缓存 | 03 | 有 | 有 |
# | 连续批处理（continuous batching） | 06 | 有 | 有 |
# | 分页 KV 缓存 | 06 | PagedAttention（由 vLLM 首创） | 每页一个词元 |
# | 前缀缓存 | 06 | 块哈希（自动前缀缓存） | 基数树（RadixAttention） |
# | 分块预填充 | 06 | 默认开启 | 默认开启 |
# | 预填充/解码分离 | 06 | KV 连接器（NIXL、LMCache、Mooncake） | 用 Mooncake 或 NIXL 传输 |
# | 量化权重 | 07 | GPTQ、AWQ、fp8、GGUF | GPTQ、AWQ、fp8、GGUF |
# | 推测解码 | 08 | 草稿模型、n-gram、EAGLE、Medusa、MTP | 草稿模型、n-gram、EAGLE-2/3、MTP |
# | 张量并行 | 09 | `--tensor-parallel-size N` | `--tp-size N` |
# | 流水线并行 | 09 | `--pipeline-parallel-size N` | `--pp-size N` |
# | 专家并行 | 09 | `--enable-expert-parallel` | `--ep-size N` |
# | 融合的 GPU 算子 | 05 | FlashAttention、CUDA 图 | FlashInfer、CUDA 图 |
#
# 推测解码那一行列出了三种不需要单独草稿模型的做法（第 08 章用的是草稿模型，或者提示词查找）：
# **Medusa** 给目标模型加上几个额外的输出头，每个头根据同一个最后隐藏状态，多往后猜一个词元；
# **EAGLE** 训练一个单层的草稿网络，它读的是目标模型的隐藏状态，而不只是词元，所以它的猜测
# 更常被接受；**多词元预测**（multi-token prediction，MTP，DeepSeek-V3 用的就是它）在训练模型
# 本身时加上额外的模块来预测后面的几个词元，推理时就拿它们当草稿。和第 08 章一样，目标模型在
# 一次传播里检查它们。贪心验证和拒绝采样（第 08 章的规则；EAGLE 把它用在一棵草稿树上）给出的正是
# 目标模型的输出；Medusa 论文采样时用的是典型接受（typical acceptance），目标模型觉得足够可能的
# 草稿词元都留下：被接受的一串更长，但采样出来的文字不再严格服从目标模型的分布。
#
# 在服务层之下，还有一些专用引擎会针对某一类硬件把模型编译好：**TensorRT**（NVIDIA 的编译器，
# 面向语言模型的是 TensorRT-LLM）会融合层，并为每种 GPU 挑选算子；**TorchScript**（以及如今的
# `torch.compile`/`torch.export`）则把 PyTorch 模型变成一个不需要 Python 就能运行的计算图。
# vLLM 和 SGLang 也都支持 **OpenAI API**，所以同一个客户端可以和两者中的任何一个对话。用本章的
# 负载测试客户端测一台 vLLM 服务器：
#
# ```
# vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --port 8000       # 在有 GPU 的机器上运行
# python -m minillm bench serve --url http://127.0.0.1:8000 --requests 200 --concurrency 16 \
#     --prompt-tokens 256 --tokens 128 --json vllm.json
# ```
#
# ## 6 · minillm 自己的服务器
#
# `python -m minillm serve` 把第 06 章的引擎放到 FastAPI 和 uvicorn 后面；除非另行指定，它只监听
# 127.0.0.1（仅限本机访问）。一个后台线程负责让引擎一步步运行；每个 HTTP 请求在自己的队列上
# 等待，所以来自不同客户端的请求会加入同一个连续批次：

# %% en=1c8d6459
from minillm.tools.server import ServerThread, runner

show_source(runner.EngineLoop._run)

# %% [markdown] en=ef90a4d3
# 我们在这个 notebook 内部、在一个空闲端口上，用上面加载的模型把它启动在后台。（在终端里，
# `python -m minillm serve --port 8000` 会在单独的进程里做同样的事。）

# %% en=5d2aaf1f
import httpx

from minillm.engine import Engine

engine = Engine(model, tokenizer, num_blocks=256, max_num_seqs=16)
server = ServerThread(engine, "smollm2-135m").start()
print("服务地址：", server.url)
print(httpx.get(server.url + "/v1/models").json())

# %% [markdown] en=43d8bf91
# 发一个对话请求，以流式方式返回：每个服务器发送事件（server-sent event）携带引擎在一步中
# 生成好的文本。

# %% en=86c344c7
import json

# 问题的意思是“法国的首都是哪里？”
body = {"model": "smollm2-135m", "max_tokens": 24, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": "What is the capital of France?"}]}
with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as r:
    for line in r.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"]
            print(delta.get("content", ""), end="", flush=True)
print()

# %% [markdown] en=df9f0fd8
# 对不合法的请求，服务器返回 4xx 状态码和一条 OpenAI 格式的错误信息，绝不会崩溃：

# %% en=12ea64fc
bad = httpx.post(server.url + "/v1/completions", timeout=30,
                 json={"prompt": "Hello", "max_tokens": -5})
print(bad.status_code, bad.json()["error"]["message"])

# %% [markdown] en=49dd4022
# ## 7 · 给服务器做负载测试
#
# 负载测试客户端（`minillm.tools.loadtest`，或者 `python -m minillm bench serve --url URL`）
# 按给定的**并发数（concurrency）**发出一组固定的、带随机种子的请求，以流式方式接收每个回答，
# 并报告 TTFT、TPOT 和延迟（定义同第 05 章）的 p50、p90 和 p99，以及吞吐量。我们在几个不同的
# 并发数下运行它：请求越多，每次前向传播里共享的请求就越多。

# %% en=898d79e0
from minillm.tools import loadtest

CONCURRENCY = (1, 2, 4) if CI else (1, 4, 8)
OUT_TOKENS = 8 if CI else 16
reports = {}
for c in CONCURRENCY:
    work = loadtest.Workload(requests=max(3, 2 * c), concurrency=c, prompt_tokens=16,
                             output_tokens=OUT_TOKENS, seed=0, max_seconds=120)
    reports[c] = loadtest.run(server.url, work)
    assert reports[c]["ok"] == reports[c]["requests"], reports[c]["error_examples"]
print(loadtest.table(reports[CONCURRENCY[-1]]))

# %% en=58e93e2e
cs = list(reports)
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
axes[0].plot(cs, [reports[c]["throughput_tok_s"] for c in cs], "o-")
axes[0].set_title("吞吐量（输出词元/秒）")
axes[1].plot(cs, [reports[c]["tpot_ms"]["p50"] for c in cs], "o-", label="p50")
axes[1].plot(cs, [reports[c]["tpot_ms"]["p99"] for c in cs], "o--", label="p99")
axes[1].set_title("TPOT（毫秒）")
axes[1].legend()
for ax in axes:
    ax.set_xlabel("并发数")
plt.tight_layout()
plt.show()
for c in cs:
    r = reports[c]
    print(f"并发数 {c}：{r['throughput_tok_s']:.1f} 词元/秒，TTFT p50 "
          f"{r['ttft_ms']['p50']:.0f} ms，TPOT p50 {r['tpot_ms']['p50']:.0f} ms，p99 延迟 "
          f"{r['latency_ms']['p99']:.0f} ms")
gain = reports[cs[-1]]["throughput_tok_s"] / reports[cs[0]]["throughput_tok_s"]
slower = reports[cs[-1]]["tpot_ms"]["p50"] / reports[cs[0]]["tpot_ms"]["p50"]
print(f"并发数 {cs[-1]} 与 1 相比：吞吐量 x{gain:.2f}，每个用户的 TPOT x{slower:.2f}；"
      f"引擎在一步中最多同时运行了 {server.loop.max_batch} 个请求")

# %% [markdown] en=8b8e9ddb
# 第 05 章预言过这种取舍，现在换成了跨 HTTP 客户端：同时服务的用户越多，吞吐量应当越高，而每个
# 用户的 TPOT 会变长。上面的比值就是这次运行对它的检验（运行时间很短，所以在繁忙的机器上噪声
# 很大）。服务器自己的计数器显示：每个请求都完成了，每个 KV 块也都回到了池里：

# %% en=893f7c7c
health = httpx.get(server.url + "/health").json()
print({k: health[k] for k in ("completed", "cancelled", "free_blocks", "num_blocks",
                              "prefix_cache_hit_rate")})
server.stop()
print("服务器已停止")

# %% [markdown] en=7fe32983
# ## 8 · 推理的发展方向，简述
#
# **混合专家（mixture of experts，MoE）。** 前馈网络变成许多个“专家”；一个小小的路由器把每个
# 词元送到它得分最高的 k 个专家那里。模型持有全部专家的参数，但每个词元只计算其中 k 个
# （Mixtral：8 个专家，每个词元用 2 个）。

# %% en=f3f5733b
class TinyMoE(torch.nn.Module):
    def __init__(self, width=16, hidden=32, experts=8, k=2):
        super().__init__()
        self.k = k
        self.router = torch.nn.Linear(width, experts, bias=False)
        self.experts = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.SiLU(),
                                torch.nn.Linear(hidden, width)) for _ in range(experts))

    def forward(self, x):
        weights, chosen = self.router(x).softmax(-1).topk(self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # 被路由到专家 e 的词元
            if len(token):
                out[token] += weights[token, slot, None] * expert(x[token])
        return out, chosen


moe = TinyMoE()
tokens = torch.randn(10, 16)
out, chosen = moe(tokens)
per_expert = sum(p.numel() for p in moe.experts[0].parameters())
print(f"参数：{sum(p.numel() for p in moe.parameters()):,}；"
      f"每个词元用到的：{moe.k * per_expert + moe.router.weight.numel():,}")
print("每个词元选中的专家：", chosen.tolist())

# %% [markdown] en=5e6d425d
# 专家并行把专家本身分散开：8 个专家放在 4 个设备上时，设备 d 完整地持有专家 2d 和 2d + 1。
# 专家内部什么都不切（那是张量并行）；取而代之的是，每个词元的隐藏状态被发送到它所选的 k 个
# 专家所在的设备，结果再传回来。这种交换叫作 **all-to-all**，而张量并行需要的是全归约。流量由
# 路由器决定，所以专家受欢迎的设备会收到更多数据：

# %% en=5f28acc5
DEVICES = 4
device_of = torch.arange(len(moe.experts)) // (len(moe.experts) // DEVICES)
received = torch.bincount(device_of[chosen].flatten(), minlength=DEVICES)
print(f"{len(tokens)} 个词元 x {moe.k} 个专家 = 发送了 {received.sum().item()} 个隐藏状态；"
      f"设备 0-{DEVICES - 1} 分别收到 {received.tolist()}")

# %% [markdown] en=f66b87cc
# **稀疏注意力（sparse attention）。** 完整的因果注意力要把每个词元和它之前的每个词元都比较
# 一遍：共 n(n+1)/2 对。滑动窗口（Mistral 的做法）只保留最近的 w 个，于是计算量和 KV 缓存都只
# 线性增长；其他模式则再加上几个全局词元，或者按固定步长取一些块。

# %% en=54f77cfd
n, w = 4096, 512
full_pairs = n * (n + 1) // 2
window_pairs = sum(min(i + 1, w) for i in range(n))
print(f"{n} 个词元：因果注意力 {full_pairs:,} 对，窗口 {w}：{window_pairs:,} 对"
      f"（{window_pairs / full_pairs:.0%}）")

# %% [markdown] en=b7c894b4
# **端侧推理（on-device inference）。** 在手机上，限制来自内存和电池，所以模型要小，还要量化
# （第 07 章）。SmolLM2-135M 的权重在各种位宽下的大小：

# %% en=c49cf74b
from minillm.quant.gguf_q4_1 import BLOCK_BYTES, BLOCK_WEIGHTS

params = sum(p.numel() for p in model.parameters())
int4_bits = 8 * BLOCK_BYTES / BLOCK_WEIGHTS  # GGUF Q4_1，第 07 章：每 32 个权重 20 字节
for name, bits in (("fp32", 32), ("fp16", 16), ("int8", 8), ("int4", int4_bits)):
    print(f"{name:>5}: {params * bits / 8 / 2**20:7.0f} MiB")
print(f"（{params / 1e6:.0f} M 个参数；int4 按每个权重 {int4_bits:g} 比特计：4 比特的编码，"
      f"再加上每块 {BLOCK_WEIGHTS} 个权重共用的 fp16 缩放系数和最小值）")

# %% [markdown] en=0399b8fc
# **自适应计算（adaptive computation）。** 并不是每个词元都需要走完所有层：“提前退出”
# （early exit）在答案已经清楚时就停下。往 SmolLM2 内部看一眼（即“logit lens”）：在每一层之后
# 都接上最终的归一化层和语言模型头，然后对文本的每个位置，找出从哪一层开始，排第一的词元就不再
# 变化、一直是最终的那个。

# %% en=e61bc5cd
# 意思是“法国的首都是巴黎。德国的首都是柏林。一，二，三，四，五，六，七，八。”
text = ("The capital of France is Paris. The capital of Germany is Berlin. "
        "One, two, three, four, five, six, seven, eight.")
ids = torch.tensor([tokenizer.encode(text)])
hidden = {}
hooks = [layer.register_forward_hook(
    lambda mod, args, out, i=i: hidden.__setitem__(i, out[0] if isinstance(out, tuple) else out))
    for i, layer in enumerate(model.layers)]
with torch.inference_mode():
    final = model(ids)[0].argmax(-1)                       # (位置,)
for h in hooks:
    h.remove()
with torch.inference_mode():  # model.logits：最终的归一化层和语言模型头
    tops = torch.stack([model.logits(hidden[i])[0].argmax(-1)
                        for i in sorted(hidden)])          # (层, 位置)
n_layers = tops.shape[0]
settled = []
for pos in range(tops.shape[1]):
    same = (tops[:, pos] == final[pos]).tolist()
    settled.append(next(i for i in range(n_layers) if all(same[i:])) + 1)  # 需要的层数
plt.figure(figsize=(8, 2.5))
plt.bar(range(len(settled)), settled)
plt.xticks(range(len(settled)), [tokenizer.decode([t]) for t in ids[0].tolist()],
           rotation=90, fontsize=7)
plt.ylabel("需要的层数")
plt.title("过了这些层之后，排第一的下一个词元预测就不再变化")
plt.tight_layout()
plt.show()
print(f"在这些层之后立即退出，可以省掉 "
      f"{1 - sum(settled) / (n_layers * len(settled)):.0%} 的逐层计算；"
      f"{len(settled)} 个位置中有 {sum(s < n_layers for s in settled)} 个提前确定")

# %% [markdown] en=52153e0c
# 提前退出的模型要经过专门训练，才能让这样的退出可靠；这个模型没有这样训练过，所以 logit lens
# 只能告诉我们，对这段文本来说，预测在哪里确定下来。
#
# **能耗（energy）。** 每个词元的能耗 = 功率 ÷ 每秒词元数。这里不测功率：把 `WATTS` 设成你机器的
# 功率（满载的笔记本电脑 CPU 大约 15–45 W；一块数据中心 GPU 300–700 W，但每秒服务的词元要多得多）。

# %% en=a640413d
WATTS = 30.0  # 一个假设值：改成你机器的功耗
best = max(reports.values(), key=lambda r: r["throughput_tok_s"])
joules = WATTS / best["throughput_tok_s"]
print(f"按 {best['throughput_tok_s']:.1f} 词元/秒、假设功率 {WATTS:.0f} W 计算："
      f"每个词元 {joules:.2f} J，每千个词元 {joules * 1000 / 3600:.2f} Wh")

# %% [markdown] en=4d100df3
# ## 结语
#
# 这次运行的数字，来自负载测试客户端对 minillm 自己的服务器的测量：

# %% en=8b5caebf
for c, r in reports.items():
    print(f"并发数 {c:>2}：{r['requests']:>2} 个请求，每个 {OUT_TOKENS} 个词元，"
          f"{r['throughput_tok_s']:6.1f} 输出词元/秒，TTFT p50 {r['ttft_ms']['p50']:6.0f} ms，"
          f"TPOT p50 {r['tpot_ms']['p50']:5.0f} ms，p99 延迟 {r['latency_ms']['p99']:6.0f} ms")
print(f"两个进程上的张量并行：logit 最大差值 {tp.max_abs_diff:.1e}，贪心解码的"
      f"词元相同：{tp.tokens_equal}；每个进程每个词元全归约 {per_token:,} 字节")
print(f"{load_average()}（本次运行结束时）")

# %% [markdown] en=0a1a34f7
# 同一个客户端可以测量任何 OpenAI 兼容的服务器：把 `--url` 指向 GPU 上的一台 vLLM 或 SGLang
# 服务器，再拿它的 p99 延迟和吞吐量和这里的数字比一比。
