# 中文版 · 05b_fast_engine.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=ca0ec32e
# # 05b · 附录：快速引擎的内部（选读）
#
# 第 05 课测量了 `minillm.load` 返回的快速路径，发现批大小为 1 时的解码受内存带宽限制，
# 即**带宽受限**（bandwidth-bound）。这篇选读的附录打开这个引擎看一看：`minillm.fast.optimize`
# 对第 02 章搭的模型改了什么，在 GPU 上是什么决定了它一步的速度，以及编译器（`torch.compile`）
# 还能在此之上添些什么。后面的课都不依赖这篇附录。

# %% en=6c5e3b61
import os

import torch

import minillm
from minillm import fast as fast_engine
from minillm.course import show_source
from minillm.generation.agreement import agree
from minillm.generation.kv_cache import KVCache
from minillm.measure.bandwidth import read_bandwidth
from minillm.measure.comparison import TOO_NOISY, compare, load_average
from minillm.model.memory import bytes_per_token
from minillm.utils.devices import Timer, describe, pick_device

CI = bool(os.environ.get("CI"))
torch.manual_seed(0)
device = pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
for key, value in describe().items():
    print(f"{key:>12}: {value}")

model, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)  # 可读的那个版本
fast = fast_engine.optimize(model)
# 问题的意思是“天空为什么是蓝色的？”
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Why is the sky blue?"}], add_generation_prompt=True)
N_NEW = 16 if CI else 48

# %% [markdown] en=3d8b8792
# ## 1 · `optimize` 改了什么
#
# `minillm.fast.optimize` 并没有另写一个模型。它复制的是同一个网络，也就是前面几课拆开看过的那些
# `LlamaBlock` 和 `Attention` 层，改的只是线性层里存的东西：q、k、v 融合成一个矩阵（一次乘法代替
# 三次，见 `Attention.fuse`），gate 和 up 也融合在一起，每个矩阵都换成 `FastLinear`，按在这台机器上
# 乘得最快的布局存储（两种布局它都会计时比较），语言模型头也不例外。下面各打印一层：

# %% en=ef993dc1
print(model.layers[0])
print(fast.layers[0])

# %% [markdown] en=0cbe1239
# 注意力层的投影这一步，是唯一知道融合这回事的地方：

# %% en=2380d9fd
show_source(type(fast.layers[0].attn).project)

# %% [markdown] en=968414c1
# 而 `FastLinear.forward` 就是乘法本身：它的布局、在乘法里顺带加上的偏置（`addmm`），
# 以及窄位宽权重走的那些路径：

# %% en=2779f035
show_source(fast_engine.FastLinear.forward)

# %% [markdown] en=da6b0c36
# 两者遵守同一个前向接口，所以 `generate` 两个都能跑，贪心解码出的词元也一样：

# %% en=6414d157
plain = minillm.generate(model, tokenizer, prompt, max_new_tokens=N_NEW)
out = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
print(f"可读的 minillm：{plain.metrics}")
print(f"快速的 minillm：{out.metrics}")
same = sum(a == b for a, b in zip(plain.token_ids, out.token_ids))
print(f"选中的布局：{fast.layout}；{len(out.token_ids)} 个位置中有 {same} 个词元相同")
# float32 按另一种顺序求和（融合后的矩阵）：相差约 1e-4，所以在 CPU 上完全一致
assert agree(model, out.prompt_token_ids, plain.token_ids[:16], out.token_ids[:16])

# %% [markdown] en=3bf37369
# `python -m minillm bench latency` 在同一个进程里、用同一份权重，交替比较快速引擎和 transformers
# 的 `generate()`：TTFT、TPOT、解码和预填充的每秒词元数、两者之比，以及第 05 课的带宽上限；
# 覆盖 float32、bf16 和 int8，装了 llama.cpp 的话也会一起比较。请在终端里运行它（要花几分钟）。

# %% [markdown] en=40e97689
# ## 2 · 在 GPU 上：瓶颈是启动次数，而不是字节
#
# 第 05 课第 7 节论证过：在 GPU 上，小模型一个解码步的耗时取决于它启动了多少次算子，即
# **算子启动**（kernel launch），而不是它要读多少字节。这篇附录在 CUDA GPU 上运行时，下面的单元格
# 会把这一点测出来：CPU 和 GPU 各自的解码速度；一步的实际耗时，对比以实测带宽读完它那些字节所需的
# 时间；以及一步启动了多少个算子。

# %% en=874702f1
if device.type == "cuda":
    from torch.profiler import ProfilerActivity, profile, supported_activities

    bandwidth = read_bandwidth(device)
    n_bytes = bytes_per_token(fast)
    cpu_model = minillm.load("smollm2-135m", device="cpu")[0]
    rows = {}
    for name, engine in [("cpu", cpu_model), ("cuda", fast)]:
        minillm.generate(engine, tokenizer, prompt, max_new_tokens=2)  # 预热
        r = minillm.generate(engine, tokenizer, prompt, max_new_tokens=N_NEW)
        rows[name] = r
        print(f"{name:>5}: {r.metrics}")
    gpu_tpot = rows["cuda"].metrics.tpot
    speeds = {name: r.metrics.decode_tokens_per_second for name, r in rows.items()}
    print(f"GPU / CPU 的解码速度之比：{speeds['cuda'] / speeds['cpu']:.1f}x")
    print(f"按实测的 {bandwidth / 1e9:.0f} GB/s，光读字节每个词元要 "
          f"{1000 * n_bytes / bandwidth:.2f} ms；实际一步要 {1000 * gpu_tpot:.2f} ms"
          f"（是带宽上限的 {gpu_tpot * bandwidth / n_bytes:.0f} 倍）")
    if ProfilerActivity.CUDA in supported_activities():  # 带 CUDA 性能分析器的 PyTorch 构建
        cache = KVCache.for_model(fast, 1, 64)
        step_ids = torch.tensor([[1, 2, 3, 4]], device=device)
        with torch.inference_mode():
            fast(step_ids, cache=cache)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fast(step_ids[:, :1], cache=cache)
                torch.cuda.synchronize()
        launches = sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")
        print(f"一个解码步启动了 {launches} 个 GPU 算子：摊下来每个约 "
              f"{1e6 * gpu_tpot / max(launches, 1):.1f} us")
    else:
        print("这个 PyTorch 的性能分析器看不到 CUDA 算子，所以没有统计启动次数")
else:
    print(f"这里没有 CUDA GPU（{device}）；这篇附录在 CUDA GPU 上运行时，这个单元格才会测量"
          "（scripts/gpu_check.sh 会在 CUDA 机器上跑完整门课程）。")

# %% [markdown] en=4ea4423f
# **CUDA 图**（CUDA graph）能省掉大部分启动：GPU 把一个解码步的所有算子录制一次，之后用一次启动
# 把它们整个重放。重放执行的正是录下的那些算子，用的是同一块显存，所以这一步不能依赖 Python 在
# 每个词元上临时决定的任何值：新词元和它的位置放在 GPU 张量里，新的键和值写到这个位置张量所指的
# 地方。minillm 在注意力上图省事：它读缓存所在那一档的全部槽位，把位置之后的槽位屏蔽掉
# （`show_source(minillm.fast.graph.StaticDecodeStep.__call__)`），所以在 256 个槽位的那一档里，
# 生成到第 10 个词元时它照样读满 256 个槽位。这是 minillm 的简化，并不是 CUDA 图的规矩。推理服务
# 引擎把每条序列的长度（以及它的块表）也放在设备张量里，图里的注意力算子只读每个缓存已经填上的
# 部分；它们按补齐后的批大小各录一张图（1、2、4、8……个请求：5 个请求的批重放 8 个请求的那张图）；
# vLLM V1 起初用的是分段的图（piecewise）：各层的矩阵乘法、归一化和激活函数录进图里，每一步长度
# 都在变的注意力则在各段之间、在图外运行（后来在注意力算子允许的地方，它也把整个解码步录成一张图）。
#
# minillm 的快速路径在 CUDA 上对每个批大小为 1 的解码步都重放它的图；
# `fast.fused_decode.cuda_graph = False` 可以关掉它。图属于模型，每档缓存大小录一张（256 个槽位、
# 512 个……）：下面的预热运行负责录制，之后同样大小的生成都只重放，它们缓存里的键和值会被搬进图
# 自己的缓冲区。

# %% en=442a9f47
if device.type == "cuda":
    with_graph = {}
    for on in (True, False):
        fast.fused_decode.cuda_graph = on
        minillm.generate(fast, tokenizer, prompt, max_new_tokens=2)  # 预热
        with_graph[on] = minillm.generate(fast, tokenizer, prompt, max_new_tokens=N_NEW)
        print(f"CUDA 图{'开' if on else '关'}：{with_graph[on].metrics}")
    fast.fused_decode.cuda_graph = True
    tpot_on, tpot_off = (with_graph[on].metrics.tpot for on in (True, False))
    print(f"TPOT {1000 * tpot_off:.2f} ms -> 用图后 {1000 * tpot_on:.2f} ms："
          f"每个词元快 {tpot_off / tpot_on:.1f} 倍")
    print("词元相同：", agree(fast, with_graph[True].prompt_token_ids,
                                with_graph[True].token_ids, with_graph[False].token_ids),
          f"（比较方式：{minillm.generation.agreement.rule(fast)}）")
else:
    print(f"这里没有 CUDA GPU（{device}）：CUDA 图是 CUDA 的功能，这个单元格只在 CUDA GPU 上测量。")

# %% [markdown] en=540778f6
# ## 3 · 编译解码步
#
# 原始资料在专用推理引擎里提到了 TorchScript；它的继任者是 `torch.compile`：追踪一个函数，
# 生成融合算子（fused kernel），在 CPU 上生成 C++，在 GPU 上生成 Triton。我们编译可读模型某一层的
# 前馈块（RMSNorm、gate 和 up 两次乘法、SiLU、down 乘法、残差相加：都是编译器能追踪的 PyTorch
# 运算），再和即时执行模式（eager mode）轮流计时比较。快速模型的块不行：它调用的是 minillm 自己的
# C 算子，编译器看不进去。第一次编译要花一些时间，所以这个单元格只在 CI 之外运行。

# %% en=8204c99c
block = model.layers[0]  # 可读模型的第一个 LlamaBlock：都是普通的 PyTorch 层
hidden_size = model.config.hidden_size


def mlp_block(x):
    return x + block.mlp(block.mlp_norm(x))


def calls(fn, x, n=200):
    """返回一个函数，它把 `fn(x)` 调用 n 次：一次计时覆盖许多次很短的调用。"""
    def run():
        with torch.inference_mode():
            for _ in range(n):
                fn(x)
    return run


x = torch.randn(1, hidden_size, device=device)
if CI:
    print("CI 下跳过：在小 CPU 上编译要几十秒")
else:
    with Timer(device) as compiling:
        compiled = torch.compile(mlp_block)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), mlp_block(x), atol=1e-4, rtol=1e-4)
    print(f"编译用了 {compiling.seconds:.0f} 秒")
    timed = compare(calls(mlp_block, x), calls(compiled, x), repeats=5, device=device)
    eager_t, compiled_t = (sorted(s)[len(s) // 2] / 200 for s in (timed.a, timed.b))
    print(f"每次调用：即时执行 {1e6 * eager_t:.0f} us，编译后 {1e6 * compiled_t:.0f} us；"
          f"编译后相对即时执行：{timed.spread_text()}；{load_average()}")
    faster = timed.above(1.0)
    if faster is None and timed.near(1.0):  # 每一轮都与即时执行相差不到 15%
        faster = "even"
    print("结论：", {False: "在这台机器上编译后的块更快", True: "在这台机器上编译后的块"
                       "更慢", "even": "在这台机器上编译后的块与即时执行差不多快（相差不到 15%）", None: TOO_NOISY}[faster])

# %% [markdown] en=e91fedaf
# 编译器把那些细碎的逐元素运算（归一化、SiLU、乘法、加法）融合成更少的算子；它没法让三个大的
# 矩阵-向量乘积读内存读得更快。在 CPU 上、批大小为 1 时，时间大多花在这些乘积上，所以即使结论显示
# 有提升，提升也不大。在 GPU 上，每个小算子都要付一次启动的开销，编译（以及 CUDA 图，
# 即 `mode="reduce-overhead"`）的作用就大得多。
#
# ## 小结
#
# - `minillm.fast.optimize` 保留第 02 章搭的网络，只改它的线性层里存的东西：融合后的矩阵（q、k、v；
#   gate 和 up），每个都按在这台机器上乘得最快的布局和数据类型存储，在 CPU 上用 minillm 自己的
#   C 算子。
# - 可读模型和快速模型遵守同一个前向接口，所以每个运行器两者都能接；它们给出同样的贪心解码词元。
# - 在 GPU 上，小模型一个解码步的耗时更多取决于算子启动，而不是字节。
# - 编译器把大乘积之间的细碎逐元素运算融合起来；在 CPU 上、批大小为 1 时，读权重的那些乘积仍然占去
#   大部分时间。
