# 中文版 · 03_kv_cache.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=1b488f14
# # 03 · 预填充、解码与 KV 缓存
#
# 第 02 章搭好了前向传播：输入词元 id，每个位置输出一行 logits。一个只会预测下一个词元的模型，
# 要靠一个循环才能真正“写”出文字：选一个词元，接到序列末尾，再跑一遍。本章就在 minillm 里
# 搭出这个循环，也就是**生成**（generation）。
#
# 生成分两个阶段：
#
# - **预填充**（prefill）：对整个提示词做一次前向传播，所有位置同时计算；
# - **解码**（decode）：每次前向传播只产生一个新词元，而且每个词元都依赖前一个，
#   所以这个循环是**自回归**（autoregressive）的。
#
# 如果照直去做，每个解码步都要把整个序列重新算一遍。**KV 缓存**（KV cache）把前面各步算好的
# 东西（注意力的键和值）留下来，这样每一步只需处理新来的那个词元。我们会测量它省下了多少、
# 在内存上付出了多少，以及生成是怎样知道该停下来的。
#
# 本章分两课。这一课搭出循环和缓存；下一课 `03b_long_context` 关注随文本长度增长的那些东西：
# 长缓存上的注意力、用于长提示词的 FlashAttention，以及能缩小缓存的各种注意力设计。

# %% en=4a2376f4
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.devices import describe
from minillm.generation.loop import Sequence, generate, stream, token_steps
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import (decode_step_times, kv_cache_formula_bytes,
                                            prefill_time, recompute_step_time)

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时用更小的规模
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% en=b7b1ccd6
device = minillm.pick_device("auto")  # 本课运行在上面打印出的设备上
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
c = model.config
print(f"{c.n_layers} 层，{c.n_heads} 个查询头，{c.n_kv_heads} 个键/值头，每个头宽 "
      f"{c.head_dim}；上下文窗口 {c.max_seq_len} 个词元；EOS id 为 {c.eos_token_ids}")

# %% [markdown] en=44d485c9
# ## 1 · 把自回归循环写出来
#
# 最简单的生成器是这样的：在序列上运行模型，取最可能的下一个词元（即贪心解码，其他做法见第 04 章），
# 接到序列末尾，如此反复。每一步都把到目前为止的**整个**序列喂给模型。

# %% en=313427a9
def generate_no_cache(model, ids, new_tokens):
    ids = list(ids)
    seen = 0  # 所有步骤加起来，模型处理过的词元位置数
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids]))   # (1, len(ids), vocab)
            seen += len(ids)
            ids.append(int(logits[0, -1].argmax()))  # 最后一个位置预测下一个词元
    return ids, seen

prompt = "The history of the printing press begins in"
prompt_ids = tokenizer.encode(prompt)
plain_ids, plain_seen = generate_no_cache(model, prompt_ids, 16)
print(repr(tokenizer.decode(plain_ids[len(prompt_ids):])))
print(f"提示词 {len(prompt_ids)} 个词元，生成 16 个新词元：模型一共处理了 {plain_seen} "
      f"个词元位置")

# %% [markdown] en=952a888d
# 提示词是英文（“印刷机的历史始于”），模型续写的也是英文。
#
# 第 n 步要处理提示词加上 n 个词元，可真正用到的只有最后一个位置的 logits。提示词有 p 个词元、
# 生成 n 个新词元时，总共要处理 p + (p+1) + ... + (p+n-1) 个位置：它随 n 呈平方增长，
# 即 **O(n²)**（第 3 节还会单独算注意力那一份，它涨得更快）。前面各位置算出的结果全被扔掉，
# 然后又重算一遍。

# %% [markdown] en=68b1078f
# ## 2 · 预填充：一次并行处理整个提示词
#
# 生成开始之前，提示词就已经完整地摆在那里，所以它的所有位置可以一起通过模型：对整个提示词，
# 每个权重只做一次矩阵乘法，而不是每个词元各做一次。这就是预填充。它的耗时怎样随提示词长度增长？

# %% en=fb6d24a7
lengths = [1, 8, 32, 64, 128] + ([] if CI else [256, 512])
prefill_seconds = [prefill_time(model, n, repeats=2) for n in tqdm(lengths, desc="预填充")]
for n, s in zip(lengths, prefill_seconds):
    print(f"{n:>4} 个词元：{1e3 * s:7.1f} ms（每个词元 {1e3 * s / n:6.2f} ms）")

# %% en=303ce72d
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(lengths, [1e3 * s for s in prefill_seconds], "o-")
ax[0].set(xlabel="提示词的词元数", ylabel="预填充时间（ms）", title="预填充时间")
ax[1].plot(lengths, [1e3 * s / n for s, n in zip(prefill_seconds, lengths)], "o-")
ax[1].set(xlabel="提示词的词元数", ylabel="每个词元的 ms", yscale="log",
          title="平均到每个提示词词元的预填充时间")
plt.tight_layout()
plt.show()

# %% en=1d6b5a0f
one, most = prefill_seconds[0], prefill_seconds[-1]
print(f"1 个词元用 {1e3 * one:.1f} ms；{lengths[-1]} 个词元用 {1e3 * most:.1f} ms："
      f"词元数是 {lengths[-1]} 倍，时间只是 {most / one:.1f} 倍")

# %% [markdown] en=cbafdd6c
# 一次处理许多词元，平均到每个词元的开销远低于逐个处理：整个提示词只需从内存读一遍权重，
# 算术运算也都落在又大又高效的矩阵乘法里。解码做不到这一点，因为第 n+1 个词元依赖第 n 个。
# 所以生成的过程是：先是一段快速、并行的预填充，再接一段缓慢、串行的解码（第 05 章会把两者
# 分别量成 TTFT 和 TPOT）。

# %% [markdown] en=b9cea198
# ## 3 · KV 缓存
#
# 在解码器里，位置 i 的输出只取决于位置 ≤ i 的词元（因果掩码）。所以第 n+1 个词元到来时，
# 为位置 1..n 算出的东西一样也不会变。位置 n+1 需要从它们那里拿的，只是每一层注意力的
# **键**（key）和**值**（value）。把这些存下来，解码步就只需让新词元通过模型：
#
# - 预填充把每个提示词词元的键和值写进缓存；
# - 每个解码步追加一个词元的键和值，它的注意力则读取缓存里的全部键和值。
#
# `minillm.KVCache` 为每一层预先分配一个键张量和一个值张量，形状为
# (batch, kv_heads, max_tokens, head_dim)。每个注意力层都会调用 `append`：

# %% en=be49cb87
show_source(KVCache.append)

# %% [markdown] en=49b450ba
# 下面是第 1 节的循环加上缓存之后的样子。改动的只有标了 `# NEW` 的那几行：

# %% en=214467ee
def generate_with_cache(model, ids, new_tokens):
    ids = list(ids)
    seen = 0
    cache = KVCache.for_model(model, batch_size=1,                       # NEW
                              max_tokens=len(ids) + new_tokens)          # NEW
    step_input = ids                                                     # NEW：预填充
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(torch.tensor([step_input]), cache=cache)     # NEW：cache=
            seen += len(step_input)                                      # NEW：step_input
            ids.append(int(logits[0, -1].argmax()))
            step_input = [ids[-1]]                                       # NEW：解码
    return ids, seen

cached_ids, cached_seen = generate_with_cache(model, prompt_ids, 16)
from minillm.generation.agreement import agree  # noqa: E402 （CPU 上要求完全相同；第 3 节细说）
assert agree(model, prompt_ids, cached_ids[len(prompt_ids):], plain_ids[len(prompt_ids):])
print(f"生成的 {len(cached_ids) - len(prompt_ids)} 个词元完全相同；处理的位置数：有缓存 "
      f"{cached_seen} 个，没有缓存 {plain_seen} 个")

# %% [markdown] en=52bba2d1
# 词元一样，工作量却少得多。把生成 n 个新词元的工作量分成两部分来数：
#
# - **经过权重的部分**（每一层的每一次矩阵乘法）。没有缓存时，第 i 步要把全部 i 个位置重新跑一遍：
#   每步 O(n) 个位置，总共 O(n²)。有了缓存，提示词只过一遍，之后每步一个位置：每步 O(1)，
#   总共 O(n)。
# - **注意力**。有缓存时，新词元的查询要读取前面全部 i 个词元缓存下来的键和值：每步 O(n)，
#   总共 O(n²)。没有缓存时，每一步都要在全部 i 个位置上重做一遍因果注意力，每个查询都要和它之前的
#   所有键配对：大约 i²/2 个查询-键对，每步 O(n²)，总共 O(n³)。
#
# 所以缓存让这两部分都少了一个 n 的因子。上面两个循环数过各自处理的位置数；用同样的规则，
# 也能数出注意力的查询-键对数（按每层、每个头计）：

# %% en=80a1dc8d
def work(p, n, cached):
    """提示词有 p 个词元、再生成 n 个新词元时，（经过权重的位置数，注意力的查询-键对数），
    分有无 KV 缓存两种情况。"""
    if cached:  # 先预填充，之后每步一个位置，它关注前面所有位置
        return p + n - 1, p * (p + 1) // 2 + sum(p + i + 1 for i in range(n - 1))
    lengths = [p + i for i in range(n)]  # 每一步都把整个序列重新跑一遍
    return sum(lengths), sum(length * (length + 1) // 2 for length in lengths)


p = len(prompt_ids)
assert work(p, 16, cached=True)[0] == cached_seen  # 规则数出来的正是两个循环实际跑的
assert work(p, 16, cached=False)[0] == plain_seen
print(f"{'新词元数':>10} {'位置数：有缓存':>17} {'无缓存':>12} {'查询-键对：有缓存':>14} "
      f"{'无缓存':>16}")
for n in [256, 512, 1024, 2048]:
    (pos_c, pairs_c), (pos_n, pairs_n) = work(p, n, True), work(p, n, False)
    print(f"{n:>10} {pos_c:>17,} {pos_n:>12,} {pairs_c:>14,} {pairs_n:>16,}")
print(f"词元数翻倍：位置数有缓存时 x{work(p, 2048, True)[0] / work(p, 1024, True)[0]:.1f}，"
      f"无缓存时 x{work(p, 2048, False)[0] / work(p, 1024, False)[0]:.1f}；"
      f"查询-键对有缓存时 x{work(p, 2048, True)[1] / work(p, 1024, True)[1]:.1f}，"
      f"无缓存时 x{work(p, 2048, False)[1] / work(p, 1024, False)[1]:.1f}")

# %% [markdown] en=f85d2085
# 词元数翻倍时：有缓存，两部分大约分别变为 2 倍和 4 倍（O(n)、O(n²)）；没有缓存，则大约是 4 倍
# 和 8 倍（O(n²)、O(n³)）。第 4 节会给每一步计时。minillm 的循环 `token_steps` 对一整批序列
# 运行带缓存的循环，并加上第 6 节的停止规则。它每产生一个词元就 yield 一次，所以 `generate`
# 和 `stream` 可以共用它：

# %% en=1a76d77b
show_source(token_steps)

# %% [markdown] en=354ba598
# `minillm.generate` 把它包了一层；`use_cache=False` 则改跑第 1 节那种每步重算的循环。
# 两者给出同样的词元（测试套件在十个提示词 × 64 个词元上检查过）。两者把同样的乘积按不同的顺序
# 相加，所以在 GPU 上，碰到两个候选几乎并列时可能会分道扬镳；下面的检查会说明在这台机器上
# 按什么标准比较（`minillm.generation.agreement`）：

# %% en=3401db8a
from minillm.generation.agreement import agree, rule

print("比较方式：", rule(model))
for use_cache in (True, False):
    out = generate(model, tokenizer, prompt, max_new_tokens=16, use_cache=use_cache)
    print(f"use_cache={use_cache!s:<5} {out.finish_reason:<6} {out.text!r}")
    assert agree(model, prompt_ids, out.token_ids,
                 cached_ids[len(prompt_ids):][:len(out.token_ids)])

# %% [markdown] en=87161ba3
# ## 4 · 有无缓存时每一步的延迟
#
# 现在给每个解码步计时。有缓存时，第 n 步只处理一个词元（注意力还要读 n 个缓存的位置，对这个
# 模型来说开销不大）。没有缓存时，第 n 步要在全部 p + n 个词元上跑完整的前向传播。带缓存的循环
# 我们每一步都计时；不带缓存的那一步则只在一些抽样的长度上计时（对恰好那么多词元做一次前向传播，
# 和无缓存循环在那一步做的一样），这样就不必等完整个平方级的循环。

# %% en=4dfddc52
steps = 64 if CI else 256
stride = 16
story_ids = tokenizer.encode("The history of the printing press begins in")
decode_step_times(model, tokenizer, story_ids, 4)  # 预热
cached_times, _ = decode_step_times(model, tokenizer, story_ids, steps)
sampled = list(range(0, steps, stride)) + [steps - 1]
p = len(story_ids)
nocache_sampled = [recompute_step_time(model, p + n)
                   for n in tqdm(sampled, desc="无缓存的解码步")]
nocache_times = np.interp(range(steps), sampled, nocache_sampled)

# %% en=65ad7051
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(range(1, steps), 1e3 * np.array(cached_times[1:]), label="有 KV 缓存")
ax[0].plot(sampled[1:], 1e3 * np.array(nocache_sampled[1:]), "o-", label="无缓存")
ax[0].set(xlabel="解码步", ylabel="每步 ms", title="每个解码步的时间")
ax[0].legend()
ax[1].plot(range(steps), np.cumsum(cached_times), label="有 KV 缓存")
ax[1].plot(range(steps), np.cumsum(nocache_times), label="无缓存")
ax[1].set(xlabel="新词元数", ylabel="秒", title="生成 n 个词元的总时间")
ax[1].legend()
plt.tight_layout()
plt.show()

# %% en=96e5c11d
total_cached, total_nocache = sum(cached_times), float(np.sum(nocache_times))
late = slice(steps - stride, steps)
print(f"{steps} 个新词元：有缓存 {total_cached:.2f} 秒，无缓存 {total_nocache:.2f} 秒："
      f"快了 {total_nocache / total_cached:.1f} 倍")
print(f"第 {steps} 个词元附近的一步：有缓存 {1e3 * np.median(cached_times[late]):.1f} ms，"
      f"无缓存 {1e3 * np.median(nocache_times[late]):.1f} ms")
early = slice(1, 1 + stride)
print(f"有缓存的解码步：第 1-{stride} 步的中位数 {1e3 * np.median(cached_times[early]):.1f} ms，"
      f"最后 {stride} 步的中位数 {1e3 * np.median(cached_times[late]):.1f} ms")

# %% [markdown] en=5bb7fd54
# 左图：没有缓存时，每一步的耗时随序列变长而增长，因为它要把整个序列重新处理一遍；有缓存时，
# 在这些长度上每步的时间几乎是平的。右图是总时间，也就是左图曲线下的面积：没有缓存时曲线向上弯，
# 有缓存时看上去是一条直线。每多一个词元，差距就拉大一些（基准测试 `scripts/bench_kv_cache.py`
# 一直测到 512）。
#
# 在这些长度上，一个有缓存的解码步几乎全花在权重上：几百个缓存词元上的注意力，跟每一步都要乘上的
# 1.35 亿个权重相比微不足道。但它随每个缓存的词元增长，到几千个词元时就由它来决定速度了：
# 第 03b 课会测出这个转折点在哪里。

# %% [markdown] en=9f76fefb
# ## 5 · 缓存的代价：内存
#
# 每个词元都会在每一层、为每个键/值头留下一个键向量和一个值向量。所以一条序列的缓存占用
#
# **字节数 = 2 × 层数 × kv_heads × head_dim × 词元数 × 每个值的字节数**
#
# （2 代表键和值两份）。我们用一段提示词填满一个缓存，把实测的大小和公式对照一下：

# %% en=0b1070e9
tokens = 1024 if CI else 2048
cache = KVCache.for_model(model, batch_size=1, max_tokens=tokens)
with torch.inference_mode():
    model(torch.randint(c.vocab_size, (1, tokens)), cache=cache)
formula = kv_cache_formula_bytes(c, tokens, bytes_per_value=4)
allocated = sum(t.untyped_storage().nbytes() for t in cache.keys + cache.values)
print(f"{tokens} 个词元，fp32：实测 {cache.nbytes:,} 字节，已分配 {allocated:,} 字节，"
      f"公式 {formula:,} 字节")
assert cache.nbytes == formula == allocated
print(f"每个词元：{cache.nbytes // tokens:,} 字节 = {cache.nbytes / tokens / 1024:.1f} KiB")
del cache

# %% [markdown] en=51927097
# 对 SmolLM2 来说这不算大：它只有 3 个键/值头（分组查询注意力，见第 02 章）和 30 层。更大的模型
# 就是另一回事了。按它们公开的结构参数，以 fp16（2 字节）计：

# %% en=b31c253f
models = {  # 层数、kv 头数、head_dim、参数量（十亿）、上下文窗口
    "SmolLM2-135M": (c.n_layers, c.n_kv_heads, c.head_dim, 0.135, c.max_seq_len),
    "Llama-2-7B": (32, 32, 128, 6.7, 4096),
    "Llama-2-13B": (40, 40, 128, 13.0, 4096),
    "Llama-3-8B (GQA)": (32, 8, 128, 8.0, 8192),
    "Llama-2-70B (GQA)": (80, 8, 128, 69.0, 4096),
    "GPT-3 175B": (96, 96, 128, 175.0, 2048),
}
shape = type("Shape", (), {})
print(f"{'模型':<18} {'每个词元':>10} {'4,096 个词元时':>16} {'fp16 权重':>13}")
for name, (layers, heads, dim, billions, window) in models.items():
    shape.n_layers, shape.n_kv_heads, shape.head_dim = layers, heads, dim
    per_token = kv_cache_formula_bytes(shape, 1, 2)
    print(f"{name:<18} {per_token / 2**10:>8.0f} KiB {per_token * 4096 / 2**30:>13.2f} GiB "
          f"{2 * billions:>10.1f} GB")

# %% [markdown] en=f7ecdd9d
# 7B 的 Llama-2 每个词元要存半兆字节：仅仅一段 4,096 个词元的对话，就要在 13 GB 权重之外再加
# 2 GiB 的缓存。而服务器要为每个请求各存一份缓存：

# %% en=140fa4c2
shape.n_layers, shape.n_kv_heads, shape.head_dim = 32, 32, 128
batches = [1, 2, 4, 8, 16, 32]
cache_gib = [kv_cache_formula_bytes(shape, 4096, 2, batch=b) / 2**30 for b in batches]
plt.figure(figsize=(6, 3.5))
plt.bar([str(b) for b in batches], cache_gib, label="KV 缓存（每个请求 4,096 个词元）")
plt.axhline(2 * 6.7 * 1e9 / 2**30, color="k", ls="--", label="权重（fp16）")
plt.xlabel("同时服务的请求数")
plt.ylabel("GiB")
plt.title("fp16 的 Llama-2-7B：KV 缓存与权重对比")
plt.legend()
plt.show()
crossing = next(b for b, g in zip(batches, cache_gib) if g > 2 * 6.7e9 / 2**30)
print(f"同时服务 {crossing} 个请求起，缓存就比模型本身还大")

# %% [markdown] en=f4d115ec
# 这就是为什么即使模型本身“放得下”，推理时的内存占用依然居高不下：权重是固定的，缓存却随每个
# 请求的每个词元增长，而且在请求结束之前必须一直留在内存里。对策有三种：
#
# - **更少的键/值头**：分组查询注意力已经让 Llama-3-8B 的缓存比 Llama-2-7B 少 4 倍；第 03b 课会
#   比较走得更远的几种设计，以及限制保留词元数的滑动窗口；
# - **每个值更少的字节**：键和值用 8 比特而不是 16 或 32 比特存储：附录 07b 在 SmolLM2 上量出
#   int8 与 fp8 的键和值能省下多少、要付出多少；
# - **分页**：随着请求增长，以小块为单位分配内存，而不是为它可能永远不会生成的词元提前预留
#   （第 06 章；这里 minillm 的缓存是一开始就预分配 `max_tokens` 个位置的）。

# %% [markdown] en=fec23d92
# ## 6 · 何时停止
#
# 循环在以下几种情况中最先出现的那一种发生时结束：
#
# - 遇到**序列结束**（end-of-sequence，EOS）词元：这是模型自己发出的“说完了”的信号。SmolLM2 的
#   对话轮次以 `<|im_end|>` 结束；
# - 达到 **max_new_tokens**：用户给定的词元预算；
# - 遇到**停止字符串**（stop string）：用户对文本设的条件，在文本上检查（同一个字符串可以被切成
#   各种不同的词元组合）。返回的文本在它之前截止。
#
# `finish_reason` 说明是哪一种：

# %% en=12480c86
# 问题的意思是“说出三种水果。”
question = tokenizer.apply_chat_template([{"role": "user", "content": "Name three fruits."}])
for options in [dict(max_new_tokens=64), dict(max_new_tokens=5),
                dict(max_new_tokens=64, stop=["\n2."])]:
    out = generate(model, tokenizer, question, **options)
    print(f"{str(options):<38} -> {out.finish_reason:<6} {len(out.token_ids):>2} 个词元 "
          f"{out.text!r}")

# %% [markdown] en=6c01924a
# EOS 词元保留在 `token_ids` 里（它确实是模型生成的），但不出现在 `text` 中。每条序列的这些规则
# 都放在一个小类里：

# %% en=bc2dcc80
show_source(Sequence.add)

# %% [markdown] en=148bcf0c
# 同一个循环也能流式输出：只要一段文本可以安全地显示（绝不会是半个 UTF-8 字符，也绝不会是一个
# 可能发展成停止字符串的开头），`stream` 就立刻把它交出来。

# %% en=36836038
pieces = list(stream(model, tokenizer, question, max_new_tokens=24))
print(pieces)

# %% [markdown] en=068bb256
# ## 7 · 长短不一的一批序列
#
# 多个提示词可以共用每一次前向传播。它们长短不一，所以较短的提示词在左边补齐（padding）；
# **注意力掩码**（attention mask）把补齐的位置遮住，位置 id 也只数真正的词元。这样每一行给出的
# 词元，和它单独生成时完全一样：

# %% en=600db857
# 三个提示词的意思：“法国的首都是”“1, 2, 3,”“很久很久以前，在一个小村庄旁边”
prompts = ["The capital of France is", "1, 2, 3,", "Once upon a time, in a small village by"]
batch = generate(model, tokenizer, prompts, max_new_tokens=12)
for text, row in zip(prompts, batch):
    alone = generate(model, tokenizer, text, max_new_tokens=12)
    assert agree(model, row.prompt_token_ids, row.token_ids, alone.token_ids)
    print(f"{len(row.prompt_token_ids):>2} 个提示词词元 -> {row.text!r}")

# %% [markdown] en=924aa588
# ## 小结
#
# - 预填充在一次并行计算中处理整个提示词；平均到每个词元，它比解码便宜得多。
# - 解码是自回归的：每次前向传播产生一个词元。没有缓存时，第 n 步要重新处理全部 n 个词元：
#   经过权重的部分每步 O(n) 个位置、总共 O(n²)，覆盖所有位置的因果注意力每步 O(n²)、总共 O(n³)。
# - KV 缓存保存每一层的键和值，因此每一步只有一个位置经过权重（总共 O(n)），注意力把 n 个缓存的
#   键各读一次（每步 O(n)，总共 O(n²)）。
# - 缓存的代价是内存：每条序列 2 × 层数 × kv_heads × head_dim × 词元数 × 字节数。对大模型和大量
#   用户来说，它能赶上甚至超过权重本身。
# - 生成在遇到 EOS、达到 max_new_tokens 或遇到停止字符串时停止；`finish_reason` 说明是哪一种。
#
# 接下来，第 03b 课沿着缓存走向长上下文：缓存上的注意力从哪里开始决定速度、用于长提示词的
# FlashAttention，以及缩小缓存的各种设计。然后第 04 章会用各种解码策略替换 argmax。
