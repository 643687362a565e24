# 中文版 · 10_interview_qa.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=d0db8dfa
# # 10 · 面试题（interview questions）
#
# 大模型推理面试常问的题目，每道题都给出答案，再用一个在 SmolLM2-135M-Instruct 上运行的代码单元格证明它，最后以一条 `assert` 收尾：答案在这次运行里不成立，它就会失败。原始资料不够严谨的地方，本章用 ⚠️ 标出。只靠公式就能得出的数字以算式的形式打印。
#
# 本章分四个 notebook，每个都可以单独坐下来学一次：
#
# | notebook | 题目 |
# |---|---|
# | 本 notebook | Q1–Q6，原始资料的六道题：自回归、温度、top-k/top-p、重复、显存、吞吐量；Q7–Q11：词元、模型、缓存 |
# | `10b_interview_engine` | Q12–Q24：预填充与解码、解码策略、性能测量、批处理、分页、量化、推测解码、张量并行 |
# | `10c_interview_serving` | Q25–Q32：FlashAttention、预填充/解码分离、KV 缓存量化、分块预填充、动态批处理、GQA/MQA/MLA、GPTQ/AWQ/SmoothQuant、EAGLE/MTP；最后是自测（self-check quiz） |
# | `10d_interview_frontier` | Q33–Q40：2026 年的面试新增的题目 |

# %% en=0120bf15
import os
import statistics
from collections import Counter

import torch

import minillm
from minillm.decoding import ProcessorList, TopKProcessor, TopPProcessor
from minillm.course.text_quality import repeated_ngram_rate
from minillm.utils.devices import Timer, describe
from minillm.generation.kv_cache import KVCache
from minillm.quant import weight_bytes
from minillm.generation.step_timing import kv_cache_formula_bytes

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时少生成几个词元
N = 8 if CI else 16              # 每个演示生成的新词元数
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% [markdown] en=152d9af5
# 回答这些问题要打开模型看内部，所以我们加载可读版的模型（`fast=False`，第 02 章的那个）。有些答案要比较两次运行得到的词元：在 CPU 上逐个严格比较；在 GPU 上则比较到第一处前两名 logits 几乎相等的位置为止，因为 GPU 算子的求和顺序随张量形状而变（`minillm.generation.agreement`）。

# %% en=2d0e229d
from minillm.generation.agreement import agree, rule

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("两次运行的词元这样比较：", rule(model))
ids = tokenizer.encode("The capital of France is")
print(f"{c.n_layers} 层，宽度 {c.hidden_size}，{c.n_heads} 个查询头，"
      f"{c.n_kv_heads} 个宽 {c.head_dim} 的 KV 头，词表 {c.vocab_size}")

# %% [markdown] en=35d79f6f
# ---
# # 第 1 部分 · 原始资料的六道题

# %% [markdown] en=5e2f8dcf
# ## Q1 · 大模型生成为什么是自回归（autoregressive）的？
#
# 解码器模型只学一件事：给定前面所有词元（token），预测下一个词元的概率分布 P(x_t \| x_<t)。因果掩码（causal mask）让位置 t 只能看到它之前的位置，所以生成时必须先选出第 t 个词元，才能计算第 t+1 个：一次前向传播（forward pass）产生一个新词元，把它接到输入后面，再做下一次。这就是自回归。提示词是事先已知的，可以在预填充（prefill）中一次并行算完；新词元却只能一个接一个地生成。
#
# 证明：每次追加一个 argmax 的循环复现了 `minillm.generate` 的输出，而且追加词元从不改变之前各位置的 logits。

# %% en=827a347e
out = minillm.generate(model, tokenizer, ids, max_new_tokens=N)
seq = list(ids)
with torch.inference_mode():
    for _ in range(len(out.token_ids)):  # 每个新词元一次前向传播
        seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    alone = model(torch.tensor([ids]))[0]
    extended = model(torch.tensor([seq]))[0, :len(ids)]
print(repr(out.text))
print("追加之后，提示词各位置 logits 的最大变化：",
      f"{(alone - extended).abs().max().item():.2e}")
assert agree(model, ids, seq[len(ids):], out.token_ids)
assert torch.allclose(alone, extended, atol=1e-3)

# %% [markdown] en=0e778e15
# ## Q2 · 温度（temperature）如何影响生成结果？温度为 0 会怎么样？
#
# 采样（sampling）前把 logits 除以温度 T：P_i = e^(z_i/T) / Σ_j e^(z_j/T)。T < 1 让分布更尖锐（更确定、更保守），T > 1 让分布更平坦（更多样、更随机）。除以正数不改变大小顺序，所以最可能的词元始终不变。T → 0 时全部概率集中到最大的 logit 上，采样就等价于贪心解码（greedy decoding）。⚠️ 严格说 T = 0 是除以零：各个库要么把它特殊处理成贪心解码，要么直接报错（minillm 和 transformers 在采样时都要求 T > 0）。

# %% en=a2e82b59
with torch.inference_mode():
    logits = model(torch.tensor([ids]))[0, -1]
temps = [0.1, 0.5, 1.0, 2.0]
entropy = []
for T in temps:
    p = torch.softmax(logits / T, dim=-1)
    entropy.append(float(-(p * p.clamp_min(1e-30).log()).sum()))
    print(f"T={T}：最可能的词元 {tokenizer.decode([int(p.argmax())])!r} p={p.max():.3f}，"
          f"熵 {entropy[-1]:.2f} nats")
greedy = minillm.generate(model, tokenizer, ids, max_new_tokens=N).token_ids
cold = [minillm.generate(model, tokenizer, ids, max_new_tokens=N, do_sample=True,
                         temperature=1e-3, seed=s).token_ids for s in (0, 1)]
try:
    minillm.GenerationConfig(do_sample=True, temperature=0)
    refused = False
except ValueError as error:
    refused = True
    print("采样时 T=0：", error)
print("T = 0.001 时用两个种子采样，都得到贪心解码的词元：", cold[0] == cold[1] == greedy)
assert cold[0] == cold[1] == greedy and refused  # 这次运行里 generate() 的实际行为

# %% [markdown] en=eef9a69d
# ## Q3 · Top-k 和 top-p 有什么区别？可以同时使用吗？
#
# Top-k 只保留概率最高的 k 个词元，k 是固定的：分布平坦时会砍掉有用的词元，分布尖锐时又会放进噪声。Top-p（核采样，nucleus sampling）保留累计概率刚好达到 p 的最小集合，集合大小随分布自适应。两者可以同时使用。⚠️ 原始资料说先做 top-p 再做 top-k；transformers 的顺序却是先 top-k 再 top-p，而且 top-p 作用在 top-k 之后重新归一化的分布上。顺序确实有影响：先做 top-k 保留的集合，总是先做 top-p 保留集合的子集，有时还更小。
#
# 下面在真实模型对一段文字每个位置的 logits 上实测：

# %% en=510ceef7
paragraph = ("The printing press was invented in the fifteenth century. It made books cheaper, "
             "and ideas spread faster across Europe than ever before. Within fifty years, "
             "millions of copies had been printed in hundreds of cities.")
text_ids = tokenizer.encode(paragraph)
with torch.inference_mode():
    rows = model(torch.tensor([text_ids]))[0].float()  # 每个位置一行 logits

def kept(chain, scores):
    return torch.isfinite(chain(None, scores))  # （位置，词表）形状的布尔张量

nucleus = kept(ProcessorList([TopPProcessor(0.9)]), rows).sum(-1)
top50 = kept(ProcessorList([TopKProcessor(50)]), rows).sum(-1)
print(f"top-p 0.9 保留 {nucleus.min()} 到 {nucleus.max()} 个词元"
      f"（中位数 {int(nucleus.median())}）；top-k 50 保留 {top50.unique().tolist()} 个")
assert nucleus.max() > 10 * nucleus.min() and (top50 == 50).all()

# %% en=bfe70cb3
differ = {}
for k, p in [(50, 0.9), (10, 0.8), (5, 0.95)]:
    k_first = kept(ProcessorList([TopKProcessor(k), TopPProcessor(p)]), rows)  # transformers 的顺序
    p_first = kept(ProcessorList([TopPProcessor(p), TopKProcessor(k)]), rows)  # 原始资料的顺序
    assert (k_first <= p_first).all()  # 先 top-k 时，绝不会保留先 top-p 时丢掉的词元
    differ[(k, p)] = int((k_first != p_first).any(-1).sum())
    print(f"top_k={k:>2}，top_p={p}：{len(rows)} 个位置中有 {differ[(k, p)]} 个保留的集合不同；"
          f"平均保留 {k_first.sum(-1).float().mean():.1f} 个词元"
          f"（先 top-k），对比 {p_first.sum(-1).float().mean():.1f} 个（先 top-p）")
assert sum(differ.values()) > 0  # 在真实的 logits 上，顺序会改变采样结果

# %% [markdown] en=c700516b
# 为什么是子集：先做 top-p 时，保留的是 min(k, 核的大小) 个词元。先做 top-k 时，k 个幸存者要重新归一化，每个概率都变大（除以它们的总和，而总和至多为 1），累计和会更早达到 p。

# %% [markdown] en=3227d5df
# ## Q4 · 如何减少大模型生成的重复？
#
# 贪心解码和束搜索（beam search）总是选最可能的续写，容易陷入循环。办法有：
#
# 1. 重复惩罚（repetition penalty，`repetition_penalty`）：出现过的词元，logit 为正时除以惩罚系数，为负时乘以它。⚠️ transformers 里提示词中的词元也算在内；原始资料推荐的 1.8 很强：下面的例子里，它让模型答不出提示词里给过的城市名，也没法照抄一句话。
# 2. `no_repeat_ngram_size`：禁止任何 n-gram 出现两次，这是硬性保证。
# 3. 带温度和 top-p 的采样，让输出不再确定地走进同一个循环。
# 4. 频率惩罚（frequency penalty）、存在惩罚（presence penalty），以及更好的训练数据。
#
# ⚠️ 原始资料还建议“降低温度”和“用束搜索”：两者都会让重复更严重。温度越低，采样越接近贪心解码；束搜索找的是整体概率最高的序列，而循环往往正是概率最高的续写。

# %% en=f435e098
loop_prompt = tokenizer.encode("I like apples. I like pears. I like")
M = 2 * N
runs = {"贪心解码": {}, "束搜索，4 束": {"num_beams": 4},
        "repetition_penalty=1.3": {"repetition_penalty": 1.3},
        "no_repeat_ngram_size=3": {"no_repeat_ngram_size": 3}}
rates = {}
for name, options in runs.items():
    r = minillm.generate(model, tokenizer, loop_prompt, max_new_tokens=M, ignore_eos=True,
                         **options)
    rates[name] = repeated_ngram_rate(r.token_ids, 3)
    print(f"{name:>24}：重复的三元组 {rates[name]:.0%}  {r.text!r}")
assert rates["贪心解码"] > 0 and rates["束搜索，4 束"] > 0  # 两者都陷入循环
assert rates["no_repeat_ngram_size=3"] == 0
assert rates["repetition_penalty=1.3"] < rates["贪心解码"]

# %% [markdown] en=a22a1de6
# 实测“降低温度”：同一个提示词，每个温度各用六个种子。

# %% en=4712a219
by_temperature = {}
for T in (0.3, 1.0):
    by_temperature[T] = [repeated_ngram_rate(minillm.generate(
        model, tokenizer, loop_prompt, max_new_tokens=M, ignore_eos=True, do_sample=True,
        temperature=T, seed=s).token_ids, 3) for s in range(6)]
    print(f"T = {T}：重复的三元组平均 {statistics.fmean(by_temperature[T]):.0%}"
          f"（{', '.join(f'{r:.0%}' for r in by_temperature[T])}）")
assert statistics.fmean(by_temperature[0.3]) > statistics.fmean(by_temperature[1.0])

# %% [markdown] en=ce9b2286
# 实测“repetition_penalty=1.8 很强”：一个答案就在提示词里的问题（“我的朋友 Priya 住在里斯本。Priya 住在哪座城市？”），以及一个照抄句子的请求。

# %% en=c969472d
from minillm.decoding import RepetitionPenaltyProcessor

fact = tokenizer.encode("My friend Priya lives in Lisbon. Priya lives in the city of")
lisbon = tokenizer.encode(" Lisbon")[0]
with torch.inference_mode():
    last = model(torch.tensor([fact]))[0, -1:]
p_lisbon, answers = {}, {}
for penalty in (1.0, 1.3, 1.8):
    scores = RepetitionPenaltyProcessor(penalty)(torch.tensor([fact], device=last.device),
                                                 last.clone())
    p_lisbon[penalty] = scores.softmax(-1)[0, lisbon].item()
    answers[penalty] = minillm.generate(model, tokenizer, fact, max_new_tokens=4,
                                        repetition_penalty=penalty).text
    print(f"repetition_penalty={penalty}：P(' Lisbon') = {p_lisbon[penalty]:.3f}，"
          f"贪心解码的回答 {answers[penalty]!r}")
copy = tokenizer.apply_chat_template([{"role": "user", "content": "Repeat this sentence "
                                       "exactly: The quick brown fox jumps over the lazy dog."}])
copies = {p: minillm.generate(model, tokenizer, copy, max_new_tokens=16,
                              repetition_penalty=p).text for p in (1.0, 1.8)}
for p, text in copies.items():
    print(f"照抄，repetition_penalty={p}：{text!r}")
assert answers[1.0].startswith(" Lisbon") and not answers[1.8].startswith(" Lisbon")
assert p_lisbon[1.8] < p_lisbon[1.0] / 5
sentence = "The quick brown fox jumps over the lazy dog"
assert sentence in copies[1.0] and sentence not in copies[1.8]

# %% [markdown] en=140d0c26
# ## Q5 · 为什么大模型推理时显存占用一直很高？
#
# 1. 权重在整个推理过程中常驻显存（n 十亿参数的 fp16 模型约占 2n GB）。
# 2. KV 缓存（KV cache）随上下文长度和并发数线性增长。
# 3. 监控上看到约 90% 的主要原因：推理服务引擎在启动时就把 KV 缓存池一次预留好。vLLM 先用最大的一步（`max_num_batched_tokens` 个词元）做一次性能剖析，量出激活的峰值，再用显存总量 × `gpu_memory_utilization`（默认 0.9）减去权重和这个峰值，剩下的全部切成 KV 块（SGLang 对应的参数是 `mem_fraction_static`）。所以服务一启动，哪怕还没有一个请求，`nvidia-smi` 显示的占用就约为 90%，之后也不随负载变化；要看负载，得看引擎报告的 KV 块使用率。
# 4. 中间激活和临时缓冲区。
# 5. PyTorch 的缓存分配器释放张量后并不把显存还给系统（`memory_reserved` 不降）。
#
# 解决办法：量化（quantization）、分页 KV 缓存（paged KV cache，即 PagedAttention）、限制最大长度与批大小、GQA/MQA；调低 `gpu_memory_utilization` 能让出显存，代价是池子变小，能同时服务的请求变少。

# %% en=7197b4b6
weights = weight_bytes(model)
cache = KVCache.for_model(model, batch_size=1, max_tokens=c.max_seq_len)  # 提前预留
with torch.inference_mode():
    model(torch.tensor([ids]), cache=cache)
print(f"权重：{weights / 1e6:.0f} MB，一直常驻")
print(f"为 {c.max_seq_len} 个词元预留的 KV 缓存：{cache.capacity_bytes / 1e6:.1f} MB；"
      f"实际存了 {cache.length} 个词元：{cache.nbytes / 1e6:.3f} MB")
for batch in (1, 16, 64):
    kv = kv_cache_formula_bytes(c, c.max_seq_len, 4, batch)
    print(f"批大小 {batch:>2}，上下文占满：KV {kv / 1e9:.2f} GB"
          f"（权重的 {kv / weights:.1f} 倍）")
assert cache.capacity_bytes == kv_cache_formula_bytes(c, c.max_seq_len, 4)
assert cache.nbytes == kv_cache_formula_bytes(c, len(ids), 4)
assert kv_cache_formula_bytes(c, c.max_seq_len, 4, 64) > weights

# %% [markdown] en=291774d8
# 监控为什么显示约 90%：把第 06 章的引擎按 vLLM 的办法配好池子，设备假定只有 1 GB（这个小模型的激活峰值略去不算），然后服务两个请求：

# %% en=320b5950
from minillm.engine.paged_cache import PagedKVPool

DEVICE_BYTES, UTILIZATION = 1e9, 0.9  # 假定的设备；vLLM 默认的 gpu_memory_utilization
per_block = PagedKVPool.for_model(model, 1, 16).bytes_per_block
num_blocks = int((UTILIZATION * DEVICE_BYTES - weights) // per_block)
if device.type == "cuda":
    torch.cuda.empty_cache()  # 先把缓存分配器空闲占着的显存还回去
# 没有 GPU 的显存统计时为 0：在 CPU 上，或在模拟的 GPU 上
before = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
engine = minillm.Engine(model, tokenizer, num_blocks=num_blocks, block_size=16, record=True)
grown = (torch.cuda.memory_reserved(device) - before) if before else None
pool_at_start = engine.pool.nbytes
held = weights + pool_at_start
print(f"权重 {weights / 1e6:.0f} MB + KV 池 {pool_at_start / 1e6:.0f} MB（{num_blocks} 个块，"
      f"每块 16 个词元）= 设备的 {held / DEVICE_BYTES:.0%}，这时还没有任何请求")
if grown is not None:
    print(f"引擎启动时，torch.cuda.memory_reserved 增加了 {grown / 1e6:.0f} MB")
engine.generate([ids, tokenizer.encode("Name a colour.")], max_new_tokens=N, ignore_eos=True)
busiest = max(step.paged_slots for step in engine.steps)
print(f"服务两个请求，最多用到池子 {num_blocks * 16:,} 个槽位中的 {busiest} 个"
      f"（{busiest / (num_blocks * 16):.1%}）；池子仍占 {engine.pool.nbytes / 1e6:.0f} MB，"
      f"设备的 {held / DEVICE_BYTES:.0%} 依然被占着")
assert engine.pool.nbytes == pool_at_start == num_blocks * per_block  # 只预留一次，一直占着
assert 0.85 < held / DEVICE_BYTES <= UTILIZATION and busiest < 0.05 * num_blocks * 16
assert grown is None or grown >= 0.9 * pool_at_start  # 在 GPU 上，这就是 nvidia-smi 会算进去的

# %% [markdown] en=1b47a99f
# ## Q6 · 如何提高推理吞吐量？
#
# 解码（decode）是带宽受限（bandwidth-bound，也常说访存密集型）的：每一步都要把全部权重读一遍，却只为每个序列算一个词元。把多个请求放进同一个批次，读一次权重就能服务多个序列，吞吐量（throughput，每秒的总词元数）大幅上升，代价是每个用户的 TPOT 变长。更进一步的手段：连续批处理（continuous batching，请求随到随加入）、PagedAttention（显存利用率高，能放下更大的批）、前缀缓存（prefix caching）、量化（要读的字节更少）、推测解码（speculative decoding）、张量并行（tensor parallelism）、更快的算子（FlashAttention、CUDA Graph）。

# %% en=3a4f4a78
users = [f"Question {i}: name a colour." for i in range(8)]
with Timer(device) as stopwatch:
    solo = [minillm.generate(model, tokenizer, u, max_new_tokens=N, ignore_eos=True)
             for u in users]
sequential_s = stopwatch.seconds
batched = minillm.generate(model, tokenizer, users, max_new_tokens=N, ignore_eos=True)
together = minillm.throughput([r.metrics for r in batched])
one_by_one = len(users) * N / sequential_s
print(f"逐个处理：{one_by_one:.1f} 词元/秒，共 {len(users) * N} 次前向传播")
print(f"{len(users)} 个一批：{together.tokens_per_second:.1f} 词元/秒，共 {N} 次前向"
      f"传播；每个用户的 TPOT 为 {1e3 * together.mean_tpot:.0f} ms，单独运行时为 "
      f"{1e3 * statistics.fmean(r.metrics.tpot for r in solo):.0f} ms")
assert sum(len(r.token_ids) for r in batched) == len(users) * N
assert together.tokens_per_second > one_by_one

# %% [markdown] en=9d0b07de
# ---
# # 第 2 部分 · 来自各章的题目：词元、模型、缓存

# %% [markdown] en=00476ca1
# ## Q7 · 词表以英文为主时，为什么 "你好，世界！" 比同样长的英文占更多词元？
#
# SmolLM2 使用字节级字节对编码（byte-level BPE）：文本先变成 UTF-8 字节，再按训练时学到的合并规则组合。词表主要从英文语料学来，常见的英文单词是一个词元；而一个汉字占 3 个字节，这些少见的字节组合在训练中没有被合并，一个汉字常常要 1–3 个词元。字节级的好处是没有未知词：任何文本都能编码，这叫字节回退（byte fallback）；代价是中文序列更长、更贵，也更快占满上下文。

# %% en=8fb5f1a8
for text in ["Hello, world!", "你好，世界！"]:
    t = tokenizer.encode(text)
    print(f"{text!r}：{len(text)} 个字符，{len(text.encode())} 个 UTF-8 字节，"
          f"{len(t)} 个词元")
    print("   每个词元的字节：", [tokenizer.token_bytes(i) for i in t])
zh = tokenizer.encode("你好，世界！")
assert len(zh) > len("你好，世界！") and len(zh) > len(tokenizer.encode("Hello, world!"))
assert tokenizer.decode(zh) == "你好，世界！"

# %% [markdown] en=31f2f66f
# ## Q8 · 字节对编码（BPE）的词表是怎么训练出来的？
#
# 从 256 个字节开始。统计训练文本中所有相邻词元对的出现次数，把最频繁的一对合并成一个新词元，记下这条合并规则；如此重复，直到词表达到目标大小。编码时按学到的顺序应用这些合并规则。
#
# 与词片（WordPiece）的区别：谷歌论文里的 WordPiece 按似然增益选择合并，即得分 count(ab) / (count(a)·count(b)) 最高的一对；编码时从词首开始每次取词表里最长的片段，并用 "##" 标记词内片段。字节级 BPE 没有未知词。⚠️ 常用的 `tokenizers` 库里的 WordPieceTrainer 其实和 BPE 一样按频率合并，只是把结果写成 WordPiece 的格式：第 01 章第 7 节验证过这一点。

# %% en=e1962d97
from minillm.tokenizer.bpe import pair_counts
from minillm.tokenizer.pretokenize import PreTokenizer
from minillm.tokenizer.train import train_simple

corpus = "low lower lowest newer newest wider widest " * 5
merges = train_simple(corpus, vocab_size=256 + 6, special_tokens=())
counts = Counter()  # 手工统计预分词后每个词内部的相邻字节对
for word in PreTokenizer()(corpus):
    counts.update(pair_counts(list(word.encode())))
best = max(counts.values())
print("最先学到的合并（词元 id；小于 256 的是字节）：", merges)
print("最频繁的字节对：", [(bytes(pair).decode(), n) for pair, n in counts.items()
                                    if n == best])
singles = Counter(b for word in PreTokenizer()(corpus) for b in word.encode())
score = {pair: n / (singles[pair[0]] * singles[pair[1]]) for pair, n in counts.items()}
by_score = max(score, key=score.get)
print(f"按 WordPiece 的似然得分，会先合并 {bytes(by_score).decode()!r}"
      f"（出现 {counts[by_score]} 次）；BPE 合并的是 {bytes(merges[0]).decode()!r}"
      f"（出现 {counts[merges[0]]} 次）")
assert len(merges) == 6 and counts[merges[0]] == best
assert merges[0] == min(pair for pair, n in counts.items() if n == best)  # 并列时取 id 最小的一对

# %% [markdown] en=5831501a
# ## Q9 · 特殊词元和对话模板有什么用？
#
# 特殊词元（special token）是词表中不会由普通文本切分出来的标记，例如 `<|im_start|>`、`<|im_end|>`、`<|endoftext|>`：它们标出对话的轮次、角色和结束。对话模板（chat template）把消息列表写成模型训练时见过的格式（SmolLM2 用的是 ChatML）。模板写错了，指令模型就会答非所问；结束标记则是生成的停止信号（EOS）。

# %% en=1593c8ea
chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi!"}])
chat_ids = tokenizer.encode(chat)
start_id = tokenizer.special_token_id("<|im_start|>")
end_id = tokenizer.special_token_id("<|im_end|>")
print(chat)
print("词元 id：", chat_ids)
assert chat.rstrip().endswith("<|im_start|>assistant")
assert chat_ids.count(start_id) >= 2 and end_id in chat_ids
assert end_id in c.eos_token_ids or end_id in tokenizer.eos_token_ids

# %% [markdown] en=f70b2ec2
# ## Q10 · 模型有多少参数，要多少显存？
#
# 每个参数在 fp32 中占 4 字节，fp16/bf16 占 2 字节，int8 占 1 字节，int4 占半个字节，所以 n 十亿参数的 fp16 模型约需 2n GB 来放权重。⚠️ 这只是权重：KV 缓存、激活和框架开销另算；这里的 "GB" 按 10⁹ 字节算，按 GiB（2³⁰ 字节）算要小 7%。GPT-3 的 175B 可以从它的结构算出来：每层约 12·d² 个参数（注意力 4d²，前馈网络 8d²），共 96 层。

# %% en=b2bbfebd
n_params = sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())
print(f"SmolLM2：{n_params / 1e6:.1f} M 个参数：fp32 占 {4 * n_params / 1e9:.3f} GB，"
      f"fp16 占 {2 * n_params / 1e9:.3f} GB（2n GB，n = {n_params / 1e9:.4f}）")
gpt3 = 12 * 96 * 12288 ** 2
print(f"按 GPT-3 公布的结构计算，12·L·d²，L = 96，d = 12,288：{gpt3 / 1e9:.1f} B "
      f"个参数（与通常所说的 175 B 相差 {gpt3 / 175e9 - 1:+.1%}）")
assert weight_bytes(model) == 4 * n_params  # 加载的权重每个参数占 4 字节

# %% [markdown] en=66780714
# ## Q11 · 为什么没有 KV 缓存时生成是 O(n²) 的？缓存改变了什么？
#
# 没有缓存时，第 i 步要把整个序列（i 个词元）重新过一遍模型，n 步共处理 1+2+…+n ≈ n²/2 个位置。由于因果掩码，旧位置的键（key）和值（value）永远不会改变，KV 缓存把它们存下来，每一步只处理一个新词元：总共 O(n) 个位置（注意力每一步仍要读 i 个键，但不再重新计算它们）。结果完全相同；缓存省下的是计算量，代价是显存。
#
# 省下的计算量能换来多少时间，要看序列长度。解码受带宽限制：序列短时，重算整个序列只花一步的几倍时间，远不到 n 倍（两种做法都要把全部权重读一遍）；序列越长，重算越接近计算受限，每一步的差距随长度增长。

# %% en=df9ab290
def run_counting_positions(**options):
    """贪心生成 N 个词元，并统计一共喂给模型多少个位置。"""
    fed = []
    hook = model.embed.register_forward_hook(lambda module, args, out: fed.append(args[0].numel()))
    try:
        out = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True, **options)
    finally:
        hook.remove()
    return out, sum(fed)


(cached, with_cache), (uncached, without) = (run_counting_positions(),
                                             run_counting_positions(use_cache=False))
p = len(ids)
print(f"生成 {N} 个新词元喂给模型的位置数：无缓存 {without} 个，有缓存 {with_cache} 个")
assert agree(model, ids, cached.token_ids, uncached.token_ids)
assert without == sum(p + i for i in range(N)) and with_cache == p + N - 1

# %% [markdown] en=55b4a8c9
# 这在时钟上能省下多少：长度为 n 时不用缓存的一步对比用缓存的一步，交替计时三轮，从 n = 16 开始把 n 翻倍，直到重算的耗时达到六倍（CPU 上几百个词元以内就会达到，GPU 要几千个）：

# %% en=a2aa0ea7
from minillm.measure import TOO_NOISY, compare, load_average


def one_step(n):
    """（长度为 n 时用缓存的一步，不用缓存的同一步）"""
    seq = torch.randint(c.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    seq = seq.to(device)
    kv = KVCache.for_model(model, 1, n)
    with torch.inference_mode():
        model(seq[:, :-1], cache=kv)

    @torch.inference_mode()
    def with_the_cache():
        kv.crop(n - 1)
        model(seq[:, -1:], cache=kv, logits_to_keep=1)

    @torch.inference_mode()
    def recomputing():
        model(seq, logits_to_keep=1)
    return with_the_cache, recomputing


steps, n = {}, 16
while True:
    steps[n] = compare(*one_step(n), repeats=3, device=device)
    print(f"{n:>4} 个词元：不用缓存的一步喂 {n} 个位置而不是 1 个；与用缓存那一步的耗时之比："
          f"{steps[n].spread_text()}")
    if steps[n].ratio > 6 or 2 * n > c.max_seq_len:
        break
    n *= 2
short, longest = steps[16], steps[n]
print({True: f"{n} 个词元时，每一轮都是重算更慢",
       None: TOO_NOISY, False: f"{n} 个词元时，重算并没有更慢"}
      [longest.above(1.0)], f"（{load_average()}）")
assert short.ratio < 16 / 2  # 序列短时：远不到一步的 n 倍
assert longest.above(1.0) and longest.ratio > 2 * short.ratio  # 差距随长度增长

# %% [markdown] en=33ec4596
# ## Q1–Q11 的要点
#
# - 面试时，公式（权重字节数、KV 字节数、处理的位置数）就是答案，测量就是证明。
# - 原始资料标了 ⚠️ 的地方：温度为 0、top-k 与 top-p 的顺序，以及三条对付重复的建议反而让重复更严重或伤害答案（降低温度、束搜索、惩罚取 1.8）。
# - 接着看 `10b_interview_engine`。
