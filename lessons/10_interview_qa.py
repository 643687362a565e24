# %% [markdown]
# # 10 · Interview questions (面试题)
#
# The questions an LLM-inference interview asks, each answered in Chinese and English side by
# side, 中英对照, and proved by a cell on SmolLM2-135M-Instruct that ends in an `assert`: it fails
# if the answer is wrong on this run. Where the source text is imprecise, the notebook says so
# (⚠️). Numbers that follow from a formula alone are printed as arithmetic.
#
# Four notebooks, each a sitting of its own:
#
# | notebook | questions |
# |---|---|
# | this one | Q1–Q6, the source's six: autoregression, temperature, top-k/top-p, repetition, memory, throughput; Q7–Q11: tokens, the model, the cache |
# | `10b_interview_engine` | Q12–Q24: prefill and decode, decoding, measuring, batching, paging, quantization, speculation, tensor parallelism |
# | `10c_interview_serving` | Q25–Q32: FlashAttention, disaggregation, KV-cache quantization, chunked prefill, dynamic batching, GQA/MQA/MLA, GPTQ/AWQ/SmoothQuant, EAGLE/MTP; the self-check quiz |
| `10d_interview_frontier` | Q33–Q40: what interviews in 2026 add |

# %%
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

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
N = 8 if CI else 16              # new tokens per demonstration
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% [markdown]
# The answers open the model up, so we load the readable model (`fast=False`, chapter 02's).
# Where an answer compares the tokens of two runs, it compares exactly on a CPU and up to the
# first near tie of the top two logits on a GPU, whose kernels sum in shape-dependent orders
# (`minillm.generation.agreement`).

# %%
from minillm.generation.agreement import agree, rule

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("tokens of two runs are compared", rule(model))
ids = tokenizer.encode("The capital of France is")
print(f"{c.n_layers} layers, width {c.hidden_size}, {c.n_heads} query heads, "
      f"{c.n_kv_heads} KV heads of width {c.head_dim}, vocabulary {c.vocab_size}")

# %% [markdown]
# ---
# # Part 1 · The source text's six questions

# %% [markdown]
# ## Q1 · 大模型生成为什么是自回归的？ Why is generation autoregressive?
#
# | 中文 | English |
# |---|---|
# | 解码器模型只学习一件事：给定前面所有词元，预测下一个词元的概率分布 P(x_t \| x_<t)。因果掩码让位置 t 只能看到它之前的位置，所以生成时必须先选出第 t 个词元，才能计算第 t+1 个：一次前向传播产生一个新词元，再把它接到输入后面继续。这就是自回归。提示词（已知的部分）可以在预填充中并行处理，但新词元只能一个接一个生成。 | A decoder-only model learns one thing: the distribution of the next token given all earlier ones, P(x_t \| x_<t). The causal mask lets position t see only positions before it, so token t must be chosen before token t+1 can be computed: one forward pass yields one new token, which is appended to the input for the next pass. That is autoregression. The prompt, known in advance, is processed in parallel (prefill); new tokens can only come one at a time. |
#
# The proof: a loop of one argmax at a time reproduces `minillm.generate`, and appending tokens
# never changes the earlier positions' logits.

# %%
out = minillm.generate(model, tokenizer, ids, max_new_tokens=N)
seq = list(ids)
with torch.inference_mode():
    for _ in range(len(out.token_ids)):  # one forward pass per new token
        seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    alone = model(torch.tensor([ids]))[0]
    extended = model(torch.tensor([seq]))[0, :len(ids)]
print(repr(out.text))
print("largest change of the prompt's logits after appending:",
      f"{(alone - extended).abs().max().item():.2e}")
assert agree(model, ids, seq[len(ids):], out.token_ids)
assert torch.allclose(alone, extended, atol=1e-3)

# %% [markdown]
# ## Q2 · Temperature 如何影响生成结果？Temperature=0 会怎么样？ How does temperature change the output, and what happens at 0?
#
# | 中文 | English |
# |---|---|
# | 采样前把 logits 除以温度 T：P_i = e^(z_i/T) / Σ_j e^(z_j/T)。T < 1 让分布更尖锐（更确定、更保守），T > 1 让分布更平坦（更多样、更随机）。除以正数不改变大小顺序，所以最可能的词元始终不变。T → 0 时全部概率集中到最大的 logit 上，采样等价于贪心解码。⚠️ 严格说 T = 0 是除以零：各个库把它特殊处理成贪心（或直接报错，minillm 和 transformers 在采样时都要求 T > 0）。 | Before sampling, the logits are divided by the temperature T: P_i = e^(z_i/T) / Σ_j e^(z_j/T). T < 1 sharpens the distribution (surer, more conservative), T > 1 flattens it (more varied, more random). Dividing by a positive number keeps the order, so the most likely token never changes. As T → 0 all probability moves to the largest logit, and sampling becomes greedy decoding. ⚠️ Strictly, T = 0 divides by zero: libraries special-case it as greedy, or refuse it (minillm and transformers require T > 0 when sampling). |

# %%
with torch.inference_mode():
    logits = model(torch.tensor([ids]))[0, -1]
temps = [0.1, 0.5, 1.0, 2.0]
entropy = []
for T in temps:
    p = torch.softmax(logits / T, dim=-1)
    entropy.append(float(-(p * p.clamp_min(1e-30).log()).sum()))
    print(f"T={T}: top token {tokenizer.decode([int(p.argmax())])!r} p={p.max():.3f}, "
          f"entropy {entropy[-1]:.2f} nats")
greedy = minillm.generate(model, tokenizer, ids, max_new_tokens=N).token_ids
cold = [minillm.generate(model, tokenizer, ids, max_new_tokens=N, do_sample=True,
                         temperature=1e-3, seed=s).token_ids for s in (0, 1)]
try:
    minillm.GenerationConfig(do_sample=True, temperature=0)
    refused = False
except ValueError as error:
    refused = True
    print("T=0 when sampling:", error)
print("sampling at T = 0.001 with two seeds gives greedy's tokens:", cold[0] == cold[1] == greedy)
assert cold[0] == cold[1] == greedy and refused  # what generate() did in this run

# %% [markdown]
# ## Q3 · Top-k 和 Top-p 有什么区别？可以同时使用吗？ Top-k against top-p: what is the difference, and can they be combined?
#
# | 中文 | English |
# |---|---|
# | Top-k 只保留概率最高的 k 个词元，k 固定；分布平坦时会砍掉有用的词元，分布尖锐时又会放进噪声。Top-p（核采样）保留累计概率刚好达到 p 的最小集合，集合大小随分布自适应。两者可以同时使用。⚠️ 原文说先做 top-p 再做 top-k；transformers 的顺序是先 top-k 再 top-p，而且 top-p 作用在 top-k 之后重新归一化的分布上。顺序确实有影响：先 top-k 保留的集合总是先 top-p 保留集合的子集，并且有时更小。 | Top-k keeps the k most likely tokens, a fixed number: on a flat distribution it cuts useful tokens, on a peaked one it lets in noise. Top-p (nucleus sampling) keeps the smallest set whose probability reaches p, so its size adapts to the distribution. They can be combined. ⚠️ The source says top-p first, then top-k; transformers applies top-k first, then top-p, on the renormalised top-k distribution. The order matters: the set kept with top-k first is always a subset of the set kept with top-p first, and sometimes smaller. |
#
# Measured on the real model's logits at every position of a paragraph:

# %%
paragraph = ("The printing press was invented in the fifteenth century. It made books cheaper, "
             "and ideas spread faster across Europe than ever before. Within fifty years, "
             "millions of copies had been printed in hundreds of cities.")
text_ids = tokenizer.encode(paragraph)
with torch.inference_mode():
    rows = model(torch.tensor([text_ids]))[0].float()  # one row of logits per position

def kept(chain, scores):
    return torch.isfinite(chain(None, scores))  # (positions, vocab) booleans

nucleus = kept(ProcessorList([TopPProcessor(0.9)]), rows).sum(-1)
top50 = kept(ProcessorList([TopKProcessor(50)]), rows).sum(-1)
print(f"top-p 0.9 keeps between {nucleus.min()} and {nucleus.max()} tokens "
      f"(median {int(nucleus.median())}); top-k 50 keeps {top50.unique().tolist()}")
assert nucleus.max() > 10 * nucleus.min() and (top50 == 50).all()

# %%
differ = {}
for k, p in [(50, 0.9), (10, 0.8), (5, 0.95)]:
    k_first = kept(ProcessorList([TopKProcessor(k), TopPProcessor(p)]), rows)  # transformers
    p_first = kept(ProcessorList([TopPProcessor(p), TopKProcessor(k)]), rows)  # the source
    assert (k_first <= p_first).all()  # top-k first never keeps a token top-p first drops
    differ[(k, p)] = int((k_first != p_first).any(-1).sum())
    print(f"top_k={k:>2}, top_p={p}: the kept sets differ at {differ[(k, p)]} of {len(rows)} "
          f"positions; tokens kept on average {k_first.sum(-1).float().mean():.1f} "
          f"(top-k first) against {p_first.sum(-1).float().mean():.1f} (top-p first)")
assert sum(differ.values()) > 0  # on real logits the order changes what is sampled

# %% [markdown]
# Why a subset: top-p first keeps min(k, nucleus size) tokens. Top-k first renormalises the k
# survivors, so each probability grows (divided by their total, at most 1) and the running sum
# reaches p sooner.

# %% [markdown]
# ## Q4 · 如何减少大模型生成的重复？ How do you reduce repetition?
#
# | 中文 | English |
# |---|---|
# | 贪心解码和束搜索总选最可能的续写，容易陷入循环。办法：① repetition_penalty（出现过的词元 logit 为正时除以惩罚系数、为负时乘以它；⚠️ transformers 中提示词里的词元也算，原文推荐的 1.8 很强：下面的例子里，它让模型答不出提示词里出现过的地名，也无法照抄一句话）；② no_repeat_ngram_size（禁止任何 n-gram 出现两次，硬性保证）；③ 采样加温度、top-p，让输出不再确定地走进同一个循环；④ frequency/presence penalty、更好的训练数据。⚠️ 原文还建议"降低温度"和"束搜索"：两者都会让重复更严重。温度越低，采样越接近贪心解码；束搜索找的是整体概率最高的序列，而循环往往正是概率最高的续写。 | Greedy decoding and beam search always take the likeliest continuation and easily fall into loops. Remedies: (1) repetition_penalty (a seen token's logit is divided by the penalty when positive, multiplied when negative; ⚠️ in transformers prompt tokens count too, and the source's typical 1.8 is strong: below, it stops the model from naming a city the prompt gave, and from copying a sentence); (2) no_repeat_ngram_size (no n-gram may appear twice: a hard guarantee); (3) sampling with temperature and top-p, so the output no longer walks deterministically into the same loop; (4) frequency/presence penalties, better training data. ⚠️ The source also advises "lower the temperature" and "beam search": both make repetition worse. The lower the temperature, the closer sampling comes to greedy decoding; beam search looks for the likeliest sequence, and a loop is often the likeliest continuation. |

# %%
loop_prompt = tokenizer.encode("I like apples. I like pears. I like")
M = 2 * N
runs = {"greedy": {}, "beam search, 4 beams": {"num_beams": 4},
        "repetition_penalty=1.3": {"repetition_penalty": 1.3},
        "no_repeat_ngram_size=3": {"no_repeat_ngram_size": 3}}
rates = {}
for name, options in runs.items():
    r = minillm.generate(model, tokenizer, loop_prompt, max_new_tokens=M, ignore_eos=True,
                         **options)
    rates[name] = repeated_ngram_rate(r.token_ids, 3)
    print(f"{name:>24}: repeated trigrams {rates[name]:.0%}  {r.text!r}")
assert rates["greedy"] > 0 and rates["beam search, 4 beams"] > 0  # both loop
assert rates["no_repeat_ngram_size=3"] == 0
assert rates["repetition_penalty=1.3"] < rates["greedy"]

# %% [markdown]
# "Lower the temperature", measured: six seeds at each temperature, on the same prompt.

# %%
by_temperature = {}
for T in (0.3, 1.0):
    by_temperature[T] = [repeated_ngram_rate(minillm.generate(
        model, tokenizer, loop_prompt, max_new_tokens=M, ignore_eos=True, do_sample=True,
        temperature=T, seed=s).token_ids, 3) for s in range(6)]
    print(f"T = {T}: repeated trigrams {statistics.fmean(by_temperature[T]):.0%} on average "
          f"({', '.join(f'{r:.0%}' for r in by_temperature[T])})")
assert statistics.fmean(by_temperature[0.3]) > statistics.fmean(by_temperature[1.0])

# %% [markdown]
# "repetition_penalty=1.8 is strong", measured on a question whose answer is in the prompt and
# a request to copy a sentence:

# %%
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
    print(f"repetition_penalty={penalty}: P(' Lisbon') = {p_lisbon[penalty]:.3f}, "
          f"greedy answer {answers[penalty]!r}")
copy = tokenizer.apply_chat_template([{"role": "user", "content": "Repeat this sentence "
                                       "exactly: The quick brown fox jumps over the lazy dog."}])
copies = {p: minillm.generate(model, tokenizer, copy, max_new_tokens=16,
                              repetition_penalty=p).text for p in (1.0, 1.8)}
for p, text in copies.items():
    print(f"copy, repetition_penalty={p}: {text!r}")
assert answers[1.0].startswith(" Lisbon") and not answers[1.8].startswith(" Lisbon")
assert p_lisbon[1.8] < p_lisbon[1.0] / 5
sentence = "The quick brown fox jumps over the lazy dog"
assert sentence in copies[1.0] and sentence not in copies[1.8]

# %% [markdown]
# ## Q5 · 为什么大模型推理时显存占用一直很高？ Why does inference memory stay high?
#
# | 中文 | English |
# |---|---|
# | ① 权重在整个推理过程中常驻显存（n 十亿参数的 fp16 模型约 2n GB）；② KV 缓存随上下文长度和并发数线性增长；③ 监控上看到约 90% 的主要原因：推理服务引擎在启动时就把 KV 缓存池一次预留好。vLLM 先用最大的一步（max_num_batched_tokens 个词元）做一次性能剖析，量出激活的峰值，再把显存总量 × gpu_memory_utilization（默认 0.9）减去权重和激活峰值后剩下的全部切成 KV 块（SGLang 对应的参数是 mem_fraction_static）。所以服务一启动，哪怕一个请求都没有，nvidia-smi 显示的占用就约为 90%，之后也不随负载变化；要看负载，得看引擎报告的 KV 块使用率。④ 中间激活、临时缓冲区；⑤ PyTorch 的缓存分配器释放张量后并不把显存还给系统（memory_reserved 不降）。解决：量化、分页 KV 缓存（PagedAttention）、限制最大长度与批大小、GQA/MQA；调低 gpu_memory_utilization 能让出显存，代价是池变小，能同时服务的请求变少。 | (1) The weights stay resident for the whole run (about 2n GB for n billion parameters in fp16); (2) the KV cache grows linearly with context length and with concurrent sequences; (3) the main reason a monitor shows about 90%: a serving engine reserves its KV-cache pool up front, at start-up. vLLM profiles one step of the largest size (max_num_batched_tokens tokens) to measure the activations' peak, then cuts everything left of gpu_memory_utilization (0.9 by default) × the GPU's memory, after the weights and that peak, into KV blocks (SGLang's setting is mem_fraction_static). So from the first second, with no request at all, nvidia-smi shows about 90% used, and the figure does not move with the load: the engine's KV-block usage is what shows the load. (4) activations and scratch buffers; (5) PyTorch's caching allocator keeps freed memory reserved instead of returning it. Remedies: quantization, a paged KV cache (PagedAttention), limits on length and batch, GQA/MQA; a lower gpu_memory_utilization gives memory back at the price of a smaller pool, so fewer requests at once. |

# %%
weights = weight_bytes(model)
cache = KVCache.for_model(model, batch_size=1, max_tokens=c.max_seq_len)  # reserved up front
with torch.inference_mode():
    model(torch.tensor([ids]), cache=cache)
print(f"weights: {weights / 1e6:.0f} MB, resident all the time")
print(f"KV cache reserved for {c.max_seq_len} tokens: {cache.capacity_bytes / 1e6:.1f} MB; "
      f"holding {cache.length} tokens: {cache.nbytes / 1e6:.3f} MB")
for batch in (1, 16, 64):
    kv = kv_cache_formula_bytes(c, c.max_seq_len, 4, batch)
    print(f"batch {batch:>2} at the full context: KV {kv / 1e9:.2f} GB "
          f"({kv / weights:.1f}x the weights)")
assert cache.capacity_bytes == kv_cache_formula_bytes(c, c.max_seq_len, 4)
assert cache.nbytes == kv_cache_formula_bytes(c, len(ids), 4)
assert kv_cache_formula_bytes(c, c.max_seq_len, 4, 64) > weights

# %% [markdown]
# Why a monitor reads about 90%: chapter 06's engine sized as vLLM sizes its pool, for a pretend
# device of 1 GB (this small model's activation peak left out), then serving two requests:

# %%
from minillm.engine.paged_cache import PagedKVPool

DEVICE_BYTES, UTILIZATION = 1e9, 0.9  # a pretend device; vLLM's default gpu_memory_utilization
per_block = PagedKVPool.for_model(model, 1, 16).bytes_per_block
num_blocks = int((UTILIZATION * DEVICE_BYTES - weights) // per_block)
if device.type == "cuda":
    torch.cuda.empty_cache()  # what the caching allocator holds unused goes back first
# 0 where there are no GPU memory statistics: on a CPU, on a simulated GPU
before = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
engine = minillm.Engine(model, tokenizer, num_blocks=num_blocks, block_size=16, record=True)
grown = (torch.cuda.memory_reserved(device) - before) if before else None
pool_at_start = engine.pool.nbytes
held = weights + pool_at_start
print(f"weights {weights / 1e6:.0f} MB + KV pool {pool_at_start / 1e6:.0f} MB ({num_blocks} "
      f"blocks of 16 tokens) = {held / DEVICE_BYTES:.0%} of the device, before any request")
if grown is not None:
    print(f"torch.cuda.memory_reserved grew by {grown / 1e6:.0f} MB when the engine started")
engine.generate([ids, tokenizer.encode("Name a colour.")], max_new_tokens=N, ignore_eos=True)
busiest = max(step.paged_slots for step in engine.steps)
print(f"serving two requests used at most {busiest} of the pool's {num_blocks * 16:,} slots "
      f"({busiest / (num_blocks * 16):.1%}); the pool still holds {engine.pool.nbytes / 1e6:.0f} "
      f"MB, and {held / DEVICE_BYTES:.0%} of the device stays taken")
assert engine.pool.nbytes == pool_at_start == num_blocks * per_block  # reserved once, kept
assert 0.85 < held / DEVICE_BYTES <= UTILIZATION and busiest < 0.05 * num_blocks * 16
assert grown is None or grown >= 0.9 * pool_at_start  # on a GPU, what nvidia-smi would count

# %% [markdown]
# ## Q6 · 如何提高推理吞吐量？ How do you raise throughput?
#
# | 中文 | English |
# |---|---|
# | 解码是带宽受限的：每一步都要把全部权重读一遍，但只为每个序列算一个词元。把多个请求放进同一个批次，一次读权重就能服务多个序列，吞吐量（每秒总词元数）大幅上升，代价是每个用户的 TPOT 变长。进一步：连续批处理（请求随到随加入）、PagedAttention（显存利用率高，能放下更大的批）、前缀缓存、量化（读的字节更少）、推测解码、张量并行、更快的算子（FlashAttention、CUDA Graph）。 | Decode is memory-bound: every step reads all the weights but computes only one token per sequence. Put several requests in one batch and one read of the weights serves them all: throughput (total tokens per second) rises sharply, at the price of a longer TPOT for each user. Further: continuous batching (requests join as they come), PagedAttention (memory is used well, so larger batches fit), prefix caching, quantization (fewer bytes to read), speculative decoding, tensor parallelism, faster kernels (FlashAttention, CUDA graphs). |

# %%
users = [f"Question {i}: name a colour." for i in range(8)]
with Timer(device) as stopwatch:
    solo = [minillm.generate(model, tokenizer, u, max_new_tokens=N, ignore_eos=True)
             for u in users]
sequential_s = stopwatch.seconds
batched = minillm.generate(model, tokenizer, users, max_new_tokens=N, ignore_eos=True)
together = minillm.throughput([r.metrics for r in batched])
one_by_one = len(users) * N / sequential_s
print(f"one at a time: {one_by_one:.1f} tokens/s over {len(users) * N} forward passes")
print(f"batch of {len(users)}: {together.tokens_per_second:.1f} tokens/s over {N} forward "
      f"passes; each user's TPOT {1e3 * together.mean_tpot:.0f} ms against "
      f"{1e3 * statistics.fmean(r.metrics.tpot for r in solo):.0f} ms alone")
assert sum(len(r.token_ids) for r in batched) == len(users) * N
assert together.tokens_per_second > one_by_one

# %% [markdown]
# ---
# # Part 2 · From every chapter: tokens, the model, the cache

# %% [markdown]
# ## Q7 · 为什么 "你好，世界！" 比同样长的英文占更多词元？ Why does Chinese text cost more tokens with an English-centred vocabulary?
#
# | 中文 | English |
# |---|---|
# | SmolLM2 使用字节级 BPE：文本先变成 UTF-8 字节，再按训练时学到的合并规则组合。词表主要从英文语料学来，常见英文单词是一个词元；而一个汉字占 3 个字节，罕见的字节组合没有被合并，一个汉字常常要 1–3 个词元。字节级的好处是没有未知词（任何文本都能编码，称为字节回退），代价是中文序列更长、更贵、更占上下文。 | SmolLM2 uses byte-level BPE: text becomes UTF-8 bytes, which the merges learned in training combine. The vocabulary was learned mostly from English, so a common English word is one token, while a Chinese character is 3 bytes whose rare combinations were never merged: a character often costs 1 to 3 tokens. Being byte-level means nothing is unknown (any text can be encoded: byte fallback), at the price of longer, costlier Chinese sequences that fill the context sooner. |

# %%
for text in ["Hello, world!", "你好，世界！"]:
    t = tokenizer.encode(text)
    print(f"{text!r}: {len(text)} characters, {len(text.encode())} UTF-8 bytes, "
          f"{len(t)} tokens")
    print("   bytes of each token:", [tokenizer.token_bytes(i) for i in t])
zh = tokenizer.encode("你好，世界！")
assert len(zh) > len("你好，世界！") and len(zh) > len(tokenizer.encode("Hello, world!"))
assert tokenizer.decode(zh) == "你好，世界！"

# %% [markdown]
# ## Q8 · BPE 是怎么训练出来的？ How is a BPE vocabulary trained?
#
# | 中文 | English |
# |---|---|
# | 从 256 个字节开始。统计训练文本中所有相邻词元对的出现次数，把最频繁的一对合并成一个新词元，记下这条合并规则；重复，直到词表达到目标大小。编码时按学到的顺序应用合并规则。与 WordPiece 的区别：谷歌论文中的 WordPiece 按似然增益选合并，即得分 count(ab) / (count(a)·count(b)) 最高的一对，编码时从词首起每次取词表里最长的片段，并用 "##" 标记词内片段；字节级 BPE 没有未知词。⚠️ 常用的 `tokenizers` 库里的 WordPieceTrainer 其实按频率合并（和 BPE 一样），只是把结果写成 WordPiece 的格式：第 01 章第 7 节验证了这一点。 | Start from the 256 bytes. Count every adjacent pair of tokens in the training text, merge the most frequent pair into a new token, record that merge; repeat until the vocabulary has the target size. Encoding applies the merges in the order learned. Against WordPiece: WordPiece as Google described it merges the pair with the highest likelihood score, count(ab) / (count(a)·count(b)), encodes by taking the longest vocabulary piece from the start of each word, and marks word-inner pieces with "##"; byte-level BPE has no unknown token. ⚠️ The widely used `tokenizers` package's WordPieceTrainer merges by frequency, as BPE does, and only writes the result in WordPiece's form: chapter 01 §7 shows it. |

# %%
from minillm.tokenizer.bpe import pair_counts
from minillm.tokenizer.pretokenize import PreTokenizer
from minillm.tokenizer.train import train_simple

corpus = "low lower lowest newer newest wider widest " * 5
merges = train_simple(corpus, vocab_size=256 + 6, special_tokens=())
counts = Counter()  # every adjacent byte pair inside the pre-tokenized words, by hand
for word in PreTokenizer()(corpus):
    counts.update(pair_counts(list(word.encode())))
best = max(counts.values())
print("first merges (token ids; < 256 are bytes):", merges)
print("most frequent byte pairs:", [(bytes(pair).decode(), n) for pair, n in counts.items()
                                    if n == best])
singles = Counter(b for word in PreTokenizer()(corpus) for b in word.encode())
score = {pair: n / (singles[pair[0]] * singles[pair[1]]) for pair, n in counts.items()}
by_score = max(score, key=score.get)
print(f"WordPiece's likelihood score would merge {bytes(by_score).decode()!r} first "
      f"({counts[by_score]} times); BPE merged {bytes(merges[0]).decode()!r} "
      f"({counts[merges[0]]} times)")
assert len(merges) == 6 and counts[merges[0]] == best
assert merges[0] == min(pair for pair, n in counts.items() if n == best)  # ties: smallest ids

# %% [markdown]
# ## Q9 · 特殊词元和对话模板有什么用？ What are special tokens and the chat template for?
#
# | 中文 | English |
# |---|---|
# | 特殊词元是词表中不由普通文本切分产生的标记，例如 `<\|im_start\|>`、`<\|im_end\|>`、`<\|endoftext\|>`：它们标出对话轮次、角色和结束。对话模板把消息列表写成模型训练时见过的格式（SmolLM2 用 ChatML）。模板错了，指令模型会答非所问；结束标记就是生成的停止信号（EOS）。 | Special tokens are vocabulary entries that ordinary text never splits into, such as `<\|im_start\|>`, `<\|im_end\|>`, `<\|endoftext\|>`: they mark turns, roles and the end. The chat template writes a list of messages in the format the model was trained on (ChatML for SmolLM2). With the wrong template an instruct model answers badly; the end marker is the stop signal (EOS) of generation. |

# %%
chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi!"}])
chat_ids = tokenizer.encode(chat)
start_id = tokenizer.special_token_id("<|im_start|>")
end_id = tokenizer.special_token_id("<|im_end|>")
print(chat)
print("ids:", chat_ids)
assert chat.rstrip().endswith("<|im_start|>assistant")
assert chat_ids.count(start_id) >= 2 and end_id in chat_ids
assert end_id in c.eos_token_ids or end_id in tokenizer.eos_token_ids

# %% [markdown]
# ## Q10 · 模型有多少参数，要多少显存？ How many parameters, and how much memory?
#
# | 中文 | English |
# |---|---|
# | 每个参数在 fp32 中占 4 字节，fp16/bf16 占 2 字节，int8 占 1 字节，int4 半个字节，所以 n 十亿参数的 fp16 模型约需 2n GB 来放权重。⚠️ 这只是权重：KV 缓存、激活和框架开销另算；"GB" 按 10⁹ 字节算，按 GiB（2³⁰）算要小 7%。GPT-3 的 175B 可以从结构算出：每层约 12·d² 个参数（注意力 4d²，前馈 8d²），共 96 层。 | Each parameter takes 4 bytes in fp32, 2 in fp16/bf16, 1 in int8, half a byte in int4, so an fp16 model of n billion parameters needs about 2n GB for its weights. ⚠️ Only the weights: the KV cache, activations and framework overhead come on top; "GB" means 10⁹ bytes, 7% less in GiB (2³⁰). GPT-3's 175B follows from its shape: about 12·d² parameters a layer (4d² attention, 8d² feed-forward), 96 layers. |

# %%
n_params = sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())
print(f"SmolLM2: {n_params / 1e6:.1f} M parameters: {4 * n_params / 1e9:.3f} GB in fp32, "
      f"{2 * n_params / 1e9:.3f} GB in fp16 (2n GB with n = {n_params / 1e9:.4f})")
gpt3 = 12 * 96 * 12288 ** 2
print(f"GPT-3 from its published shape, 12·L·d² with L = 96, d = 12,288: {gpt3 / 1e9:.1f} B "
      f"parameters ({gpt3 / 175e9 - 1:+.1%} against the 175 B quoted)")
assert weight_bytes(model) == 4 * n_params  # the loaded weights take 4 bytes a parameter

# %% [markdown]
# ## Q11 · 为什么没有 KV 缓存时生成是 O(n²)？缓存改变了什么？ Why is generation O(n²) without a KV cache, and what does the cache change?
#
# | 中文 | English |
# |---|---|
# | 没有缓存时，第 i 步要把整个序列（i 个词元）重新过一遍模型，n 步共处理 1+2+…+n ≈ n²/2 个位置。由于因果掩码，旧位置的键和值不会改变，KV 缓存把它们存下来，每步只处理一个新词元：总计 O(n) 个位置（注意力本身每步仍读 i 个键，但不再重算）。结果完全相同；缓存省下的是计算量，代价是显存。省下的计算量能省多少时间，要看序列长度：解码受带宽限制，序列短时，重算整个序列只花一步的几倍时间，远不到 n 倍（两种做法都要把权重读一遍）；序列越长，重算越接近计算受限，每步的差距随长度增长。 | Without a cache, step i runs the whole sequence (i tokens) through the model again: n steps process 1+2+…+n ≈ n²/2 positions. Because of the causal mask the old positions' keys and values never change, so the KV cache stores them and each step processes only the new token: O(n) positions in all (attention still reads i keys a step, but nothing is recomputed). The result is identical; what the cache saves is compute, at the price of memory. How much time that saves depends on the length: decode is bandwidth-bound, so while the sequence is short, recomputing it costs a small multiple of one step, far from n times (both ways read all the weights once); as the sequence grows, recomputing becomes compute-bound and the gap per step grows with the length. |

# %%
def run_counting_positions(**options):
    """Greedy generation of N tokens, and how many positions the model was fed in all."""
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
print(f"positions fed to the model for {N} new tokens: {without} without a cache, "
      f"{with_cache} with one")
assert agree(model, ids, cached.token_ids, uncached.token_ids)
assert without == sum(p + i for i in range(N)) and with_cache == p + N - 1

# %% [markdown]
# What that saves on the clock: one step at length n without the cache against one with it,
# timed interleaved three times, doubling n from 16 until recomputing takes six times as long
# (a CPU gets there within a few hundred tokens, a GPU needs thousands):

# %%
from minillm.measure import TOO_NOISY, compare, load_average


def one_step(n):
    """(a step at length n with the cache, the same step without it)."""
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
    print(f"{n:>4} tokens: a step without the cache feeds {n} positions instead of 1; its time "
          f"over a cached step's: {steps[n].spread_text()}")
    if steps[n].ratio > 6 or 2 * n > c.max_seq_len:
        break
    n *= 2
short, longest = steps[16], steps[n]
print({True: f"at {n} tokens recomputing was slower in every repetition",
       None: TOO_NOISY, False: f"at {n} tokens recomputing was not slower"}
      [longest.above(1.0)], f"({load_average()})")
assert short.ratio < 16 / 2  # short: far from n times one step
assert longest.above(1.0) and longest.ratio > 2 * short.ratio  # the gap grows with the length

# %% [markdown]
# ## What to take away from Q1–Q11
#
# - In an interview the formula (weight bytes, KV bytes, positions processed) is the answer and
#   the measurement is the proof.
# - The source text's ⚠️ places: temperature 0, the order of top-k and top-p, and three remedies
#   for repetition that make it worse or hurt the answer (lower T, beams, a penalty of 1.8).
# - Continue with `10b_interview_engine`.
