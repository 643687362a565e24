# %% [markdown]
# # 10 · Interview questions (面试题)
#
# Twenty-four questions an LLM-inference interview asks: the six of the source text first, then
# questions drawn from every chapter of this course. Each answer is given in Chinese and English
# side by side, 中英对照, and each is followed by a cell that shows the answer on the real model,
# SmolLM2-135M-Instruct, with minillm's own engine, and ends in an `assert`. An answer you can
# prove on a real model is an answer you can defend in an interview.
#
# Where the source text's answer is imprecise, the notebook says so (⚠️) and shows why.
#
# At the end, a self-check quiz (an ipywidgets form) asks you to answer before it reveals.
#
# | part | questions |
# |---|---|
# | the source's six | Q1–Q6: autoregression, temperature, top-k/top-p, repetition, memory, throughput |
# | tokenization, the model | Q7–Q10 |
# | prefill, decode, KV cache | Q11–Q14 |
# | decoding, measuring | Q15–Q17 |
# | batching, paging, prefixes | Q18–Q20 |
# | quantization, speculation, scaling out | Q21–Q24 |

# %%
import os
import statistics
import time
from collections import Counter

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import minillm
from minillm.course.checks import ch10_interview as checks
from minillm.decoding import ProcessorList, TopKProcessor, TopPProcessor
from minillm.course.text_quality import mean_logprob, repeated_ngram_rate
from minillm.utils.devices import Timer, describe
from minillm.generation.kv_cache import KVCache
from minillm.quant import perplexity, quantize, weight_bytes
from minillm.generation.step_timing import decode_step_times, kv_cache_formula_bytes, prefill_time

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
N = 8 if CI else 16              # new tokens per demonstration
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% [markdown]
# The answers open the model up (parameters, layers, projections), so we load the readable
# model (`fast=False`, the one chapter 02 draws), on the device printed above. Where an answer
# compares the tokens of two runs (a batch against one request, a cache against none), it
# compares exactly on a CPU and up to the first near tie of the top two logits on a GPU, whose
# kernels sum in shape-dependent orders (`minillm.generation.agreement`).

# %%
from minillm.generation.agreement import agree, rule

device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("tokens of two runs are compared", rule(model))
prompt = "The capital of France is"
ids = tokenizer.encode(prompt)
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
# The proof: a loop that appends one argmax at a time reproduces `minillm.generate`, and
# appending tokens never changes the logits of the positions before them (the causal mask).

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
assert all(int((logits / T).argmax()) == int(logits.argmax()) for T in temps)
assert entropy == sorted(entropy)  # hotter is flatter
assert cold[0] == cold[1] == greedy and refused

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
# reaches p sooner. The chart shows the nucleus's size along the paragraph: top-k's fixed k is too
# many at some positions and too few at others.

# %%
fig, ax = plt.subplots(figsize=(9, 3))
ax.semilogy(nucleus.tolist(), "o-", label="top-p 0.9: tokens kept")
ax.axhline(50, color="C1", label="top-k 50")
ax.set(xlabel="position in the paragraph", ylabel="tokens kept")
ax.legend()
plt.tight_layout()
plt.show()

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
# "repetition_penalty=1.8 is strong", measured: the penalty divides the logit of every token
# already seen, the prompt's included, so it also pushes away the tokens a good answer must
# repeat. A question whose answer is in the prompt, and a request to copy a sentence:

# %%
from minillm.decoding import RepetitionPenaltyProcessor

fact = tokenizer.encode("My friend Priya lives in Lisbon. Priya lives in the city of")
lisbon = tokenizer.encode(" Lisbon")[0]
with torch.inference_mode():
    last = model(torch.tensor([fact]))[0, -1:]
p_lisbon, answers = {}, {}
for penalty in (1.0, 1.3, 1.8):
    scores = RepetitionPenaltyProcessor(penalty)(torch.tensor([fact]), last.clone())
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
# | ① 权重在整个推理过程中常驻显存（n 十亿参数的 fp16 模型约 2n GB）；② KV 缓存随上下文长度和并发数线性增长，而且常常按最大长度提前分配；③ 中间激活、临时缓冲区；④ PyTorch 的缓存分配器释放张量后并不把显存还给系统（memory_reserved 不降），所以监控看到的占用一直很高。解决：量化、分页 KV 缓存（PagedAttention）、限制最大长度与批大小、GQA/MQA。 | (1) The weights stay resident for the whole run (about 2n GB for n billion parameters in fp16); (2) the KV cache grows linearly with context length and with concurrent sequences, and is often allocated up front for the maximum length; (3) activations and scratch buffers; (4) PyTorch's caching allocator keeps freed memory reserved instead of returning it, so a monitor shows it as used. Remedies: quantization, a paged KV cache (PagedAttention), limits on length and batch, GQA/MQA. |

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
# # Part 2 · From every chapter

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
# | 从 256 个字节开始。统计训练文本中所有相邻词元对的出现次数，把最频繁的一对合并成一个新词元，记下这条合并规则；重复，直到词表达到目标大小。编码时按学到的顺序应用合并规则。与 WordPiece 的区别：WordPiece 按似然增益（频率比值）选合并，并用 "##" 标记词内片段；BPE 按频率，字节级 BPE 没有未知词。 | Start from the 256 bytes. Count every adjacent pair of tokens in the training text, merge the most frequent pair into a new token, record that merge; repeat until the vocabulary has the target size. Encoding applies the merges in the order learned. Against WordPiece: WordPiece picks merges by likelihood gain (a frequency ratio) and marks word-inner pieces with "##"; BPE picks by frequency, and byte-level BPE has no unknown token. |

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
# | 每个参数在 fp32 中占 4 字节，fp16/bf16 占 2 字节，int8 占 1 字节，int4 半个字节，所以 n 十亿参数的 fp16 模型约需 2n GB 来放权重。⚠️ 这只是权重：KV 缓存、激活和框架开销另算；"GB" 按 10⁹ 字节算，按 GiB（2³⁰）算要小 7%。GPT-3 的 175B 可以从结构算出：每层约 12·d² 个参数（注意力 4d²，前馈 8d²），96 层、d = 12288 时约 1740 亿。 | Each parameter takes 4 bytes in fp32, 2 in fp16/bf16, 1 in int8, half a byte in int4, so an fp16 model of n billion parameters needs about 2n GB for its weights. ⚠️ Only the weights: the KV cache, activations and framework overhead come on top; "GB" means 10⁹ bytes, 7% less in GiB (2³⁰). GPT-3's 175B follows from its shape: about 12·d² parameters a layer (4d² attention, 8d² feed-forward), 174 billion for 96 layers at d = 12,288. |

# %%
n_params = sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())
print(f"SmolLM2: {n_params / 1e6:.1f} M parameters: {4 * n_params / 1e9:.3f} GB in fp32, "
      f"{2 * n_params / 1e9:.3f} GB in fp16 (2n GB with n = {n_params / 1e9:.4f})")
gpt3 = 12 * 96 * 12288 ** 2
print(f"GPT-3 estimate 12·L·d²: {gpt3 / 1e9:.1f} B parameters")
assert weight_bytes(model) == 4 * n_params
assert abs(gpt3 / 175e9 - 1) < 0.01

# %% [markdown]
# ---
# # Part 3 · Prefill, decode and the KV cache

# %% [markdown]
# ## Q11 · 为什么没有 KV 缓存时生成是 O(n²)？缓存改变了什么？ Why is generation O(n²) without a KV cache, and what does the cache change?
#
# | 中文 | English |
# |---|---|
# | 没有缓存时，第 i 步要把整个序列（i 个词元）重新过一遍模型，n 步共处理 1+2+…+n ≈ n²/2 个位置。由于因果掩码，旧位置的键和值不会改变，KV 缓存把它们存下来，每步只处理一个新词元：总计 O(n) 个位置（注意力本身每步仍读 i 个键，但不再重算）。结果完全相同，只是更快；代价是显存。 | Without a cache, step i runs the whole sequence (i tokens) through the model again: n steps process 1+2+…+n ≈ n²/2 positions. Because of the causal mask the old positions' keys and values never change, so the KV cache stores them and each step processes only the new token: O(n) positions in all (attention still reads i keys a step, but nothing is recomputed). The result is identical, only faster; the price is memory. |

# %%
cached = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
uncached = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True,
                            use_cache=False)
p = len(ids)
print(f"positions processed: {sum(p + i for i in range(N))} without a cache, "
      f"{p + N - 1} with one")
print(f"decode time per token: {1e3 * uncached.metrics.tpot:.1f} ms without, "
      f"{1e3 * cached.metrics.tpot:.1f} ms with the cache")
assert agree(model, ids, cached.token_ids, uncached.token_ids)

# %% [markdown]
# ## Q12 · 预填充和解码有什么不同？ How does prefill differ from decode?
#
# | 中文 | English |
# |---|---|
# | 预填充一次前向传播处理整个提示词，所有位置并行，矩阵乘法大、计算受限（compute-bound），决定首个词元生成时间 TTFT。解码每步只处理一个新词元，每读一遍全部权重只做很少的计算，是带宽受限（bandwidth-bound），决定 TPOT。所以按每个词元算，预填充远比解码便宜。 | Prefill runs the whole prompt in one forward pass, all positions in parallel: large matrix multiplies, compute-bound; it sets the time to first token (TTFT). Decode processes one new token a step, reading all weights for very little arithmetic: memory-bound; it sets TPOT. Per token, prefill is far cheaper than decode. |

# %%
P = 64
prefill_s = prefill_time(model, P, repeats=2)
steps, _ = decode_step_times(model, tokenizer, ids, N)
decode_s = statistics.median(steps[1:])
print(f"prefill of {P} tokens: {1e3 * prefill_s:.0f} ms, {1e3 * prefill_s / P:.2f} ms per token")
print(f"one decode step: {1e3 * decode_s:.1f} ms per token "
      f"({decode_s / (prefill_s / P):.0f}x a prefill token)")
assert prefill_s / P < decode_s

# %% [markdown]
# ## Q13 · KV 缓存有多大？GQA 怎样减小它？ How large is the KV cache, and how does GQA shrink it?
#
# | 中文 | English |
# |---|---|
# | 每个序列：2（K 和 V）× 层数 × KV 头数 × 头维度 × 词元数 × 每个数的字节数；批处理再乘批大小。分组查询注意力（GQA）让一组查询头共享一个 KV 头：SmolLM2 有 9 个查询头、3 个 KV 头，缓存是多头注意力的 1/3；MQA 只有 1 个 KV 头。例：Llama-2-7B（32 层、32 个 KV 头、维度 128）fp16 下 4096 个词元约 2.1 GB。 | Per sequence: 2 (K and V) × layers × KV heads × head dim × tokens × bytes per value; times the batch size for a batch. Grouped-query attention (GQA) lets a group of query heads share one KV head: SmolLM2 has 9 query heads and 3 KV heads, a third of multi-head attention's cache; MQA has a single KV head. Example: Llama-2-7B (32 layers, 32 KV heads of width 128) in fp16 holds about 2.1 GB for 4,096 tokens. |

# %%
kv = KVCache.for_model(model, batch_size=2, max_tokens=64)
with torch.inference_mode():
    model(torch.tensor([ids, ids]), cache=kv)
per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
print(f"{kv.length} tokens x batch 2: {kv.nbytes} bytes = {per_token} bytes a token a sequence")
mha = 2 * c.n_layers * c.n_heads * c.head_dim * 2 * c.max_seq_len
gqa = kv_cache_formula_bytes(c, c.max_seq_len, 2)
print(f"full context in fp16: {gqa / 1e6:.0f} MB with GQA, {mha / 1e6:.0f} MB without")
llama7b = checks.kv_cache_gb_reference(32, 32, 128, 4096, 1, 2)
print(f"Llama-2-7B, 4096 tokens, fp16: {llama7b:.2f} GB")
assert kv.nbytes == per_token * len(ids) * 2 == kv_cache_formula_bytes(c, len(ids), 4, 2)
assert mha == gqa * c.n_heads // c.n_kv_heads

# %% [markdown]
# ## Q14 · 生成什么时候停止？ When does generation stop?
#
# | 中文 | English |
# |---|---|
# | 三种条件：① 模型生成了结束词元（EOS，对话模型里是 `<\|im_end\|>`）；② 达到 max_new_tokens 或上下文窗口；③ 用户条件，例如停止字符串（出现后截断，不返回它）。停止后这个序列的 KV 缓存就可以释放。 | Three conditions: (1) the model produces an end token (EOS; `<\|im_end\|>` for a chat model); (2) max_new_tokens or the context window is reached; (3) a user condition such as a stop string (the text is cut before it). Once stopped, the sequence's KV cache can be freed. |

# %%
first = out.token_ids  # Q1's greedy tokens
by_length = minillm.generate(model, tokenizer, ids, max_new_tokens=3)
by_eos = minillm.generate(model, tokenizer, ids, max_new_tokens=N, eos_token_id=first[2])
by_stop = minillm.generate(model, tokenizer, ids, max_new_tokens=N, stop=["."])
for name, r in [("length", by_length), ("eos", by_eos), ("stop", by_stop)]:
    print(f"{name:>6}: finish_reason={r.finish_reason!r}, {len(r.token_ids)} tokens, "
          f"{r.text!r}")
assert by_length.finish_reason == "length" and len(by_length.token_ids) == 3
assert by_eos.finish_reason == "eos" and by_eos.token_ids == first[:3]
assert by_stop.finish_reason == "stop" and "." not in by_stop.text

# %% [markdown]
# ---
# # Part 4 · Decoding and measuring

# %% [markdown]
# ## Q15 · 贪心和束搜索各有什么缺点？ What are the weaknesses of greedy decoding and beam search?
#
# | 中文 | English |
# |---|---|
# | 贪心解码：每步只取最大概率，快，但短视，会错过整体概率更高的序列（局部最优），且容易重复。束搜索：同时保留 num_beams 个候选，找到的序列整体概率通常更高（但不保证：束太窄时它也会丢掉最优序列的前缀），但计算和 KV 缓存是贪心的 num_beams 倍，仍然重复，输出平淡，不适合开放式对话；它适合翻译、摘要这类有"正确答案"的任务。 | Greedy takes the single most likely token each step: fast, but short-sighted; it misses sequences that are likelier as a whole (a local optimum) and repeats easily. Beam search keeps num_beams candidates: the sequence it finds is usually likelier overall (not always: with too few beams it too can drop the best sequence's prefix), but it costs num_beams times the compute and KV memory, still repeats, and reads bland, so it suits tasks with a right answer (translation, summaries) rather than open conversation. |

# %%
from itertools import product

from minillm.decoding import GenerationConfig, beam_search
from minillm.course.table_model import TableModel

paper = TableModel(["A", "B", "C"], {  # chapter 04's model on paper
    (): {"A": 0.5, "B": 0.4, "C": 0.1}, ("A",): {"A": 0.3, "B": 0.4, "C": 0.3},
    ("B",): {"A": 0.9, "B": 0.05, "C": 0.05}, ("A", "B"): {"A": 0.3, "B": 0.3, "C": 0.4},
    ("B", "A"): {"A": 0.2, "B": 0.2, "C": 0.6}})
found = {n: [paper.vocab[i] for i in beam_search(
    paper, [0], GenerationConfig(num_beams=n, max_new_tokens=3), eos_token_ids=[])[0].token_ids]
         for n in (1, 2)}
best = list(max(product(paper.vocab, repeat=3), key=paper.probability))
print(f"on paper: greedy {found[1]} P = {paper.probability(found[1]):.3f}; 2 beams {found[2]} "
      f"P = {paper.probability(found[2]):.3f}; the best of all {best}")
assert paper.probability(found[1]) < paper.probability(found[2]) == paper.probability(best)

prompts = ["Once upon a time, in a small village,", "The best way to learn a new language is",
           "The capital of France is", "In 1969, the first humans", "My favourite food is",
           "The printing press was invented"]
wins = losses = 0
timing = {"greedy": 0.0, "beam 4": 0.0}
for text in prompts:
    p_ids = tokenizer.encode(text)
    with Timer(device) as stopwatch:
        g = minillm.generate(model, tokenizer, p_ids, max_new_tokens=N, ignore_eos=True)
    timing["greedy"] += stopwatch.seconds
    with Timer(device) as stopwatch:
        b = minillm.generate(model, tokenizer, p_ids, max_new_tokens=N, ignore_eos=True,
                             num_beams=4)
    timing["beam 4"] += stopwatch.seconds
    lp_g, lp_b = mean_logprob(model, p_ids, g.token_ids), mean_logprob(model, p_ids, b.token_ids)
    wins, losses = wins + (lp_b > lp_g + 1e-6), losses + (lp_b < lp_g - 1e-6)
    print(f"{text[:28]:<28} mean log-prob: greedy {lp_g:6.3f}, beam {lp_b:6.3f}")
print(f"beam search found the likelier sequence {wins} times, greedy {losses} times, "
      f"{len(prompts) - wins - losses} ties; beam took {timing['beam 4'] / timing['greedy']:.1f}x "
      f"greedy's time")
assert wins > losses  # usually likelier, not always: the paper model shows how greedy loses

# %% [markdown]
# ## Q16 · TTFT、TPOT、延迟和吞吐量是什么关系？ How do TTFT, TPOT, latency and throughput relate?
#
# | 中文 | English |
# |---|---|
# | TTFT（首个词元生成时间）：从请求开始到第一个词元，含分词和预填充。TPOT（每个输出词元的时间）：之后相邻词元的平均间隔。端到端延迟 = TTFT + TPOT × (输出词元数 − 1)。吞吐量：所有请求的总输出词元数 / 总时间。⚠️ 原文说 TPOT 100 ms 即每秒 10 个词元、约每分钟 450 个英文单词：这假设每个词元约 0.75 个单词，取决于分词器和文本，下面用本模型实测。 | TTFT (time to first token): from the request's start to its first token, tokenizing and prefill included. TPOT (time per output token): the mean gap between later tokens. End-to-end latency = TTFT + TPOT × (output tokens − 1). Throughput: all requests' output tokens / the total time. ⚠️ The source says a TPOT of 100 ms is 10 tokens/s, about 450 English words a minute: that assumes about 0.75 words a token, which depends on the tokenizer and the text; measured below with this model's. |

# %%
with Timer(device) as stopwatch:  # our own stopwatch, around the whole call
    timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
wall = stopwatch.seconds
m = timed.metrics
predicted = m.ttft + m.tpot * (m.n_tokens - 1)
print(m)
print(f"TTFT + TPOT x (n - 1) = {1e3 * predicted:.1f} ms; the stopwatch: {1e3 * wall:.1f} ms")
with Timer(device) as stopwatch:
    pair = minillm.generate(model, tokenizer, [ids, ids], max_new_tokens=N, ignore_eos=True)
pair_wall = stopwatch.seconds
pair_rate = minillm.throughput([r.metrics for r in pair]).tokens_per_second
print(f"two requests at once: throughput {pair_rate:.1f} tokens/s; their {2 * N} tokens over "
      f"the stopwatch: {2 * N / pair_wall:.1f} tokens/s")
words_per_token = len(paragraph.split()) / len(text_ids)
print(f"{words_per_token:.2f} English words per token here: 10 tokens/s is "
      f"{600 * words_per_token:.0f} words a minute (the source: 450)")
assert abs(wall - predicted) < 0.05 * wall + 0.02
assert abs(pair_rate - 2 * N / pair_wall) < 0.1 * pair_rate
assert 0.5 < words_per_token < 1.0

# %% [markdown]
# ## Q17 · 为什么说解码受限于显存带宽？ Why is decode bound by memory bandwidth?
#
# | 中文 | English |
# |---|---|
# | 批大小为 1 时，每个解码步要把所有权重从内存读一遍，而每个权重只做 2 次浮点运算（一次乘加）：fp32 下算术强度只有 0.5 FLOP/字节，远低于硬件的计算/带宽比。所以速度上限约为 带宽 ÷ 权重字节数。提高批大小（一次读权重服务多个序列）或减少字节（量化、bf16）才能突破。 | At batch size 1 every decode step reads all the weights from memory and does 2 floating-point operations (one multiply-add) per weight: in fp32 an arithmetic intensity of 0.5 FLOP per byte, far below the hardware's compute-to-bandwidth ratio. So the speed limit is about bandwidth ÷ weight bytes. Only a larger batch (one read of the weights serves many sequences) or fewer bytes (quantization, bf16) moves it. |

# %%
from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.measure.roofline import peak_matmul_flops, step_cost

bandwidth = read_bandwidth("cpu", megabytes=128 if CI else 512, repeats=3)
bound = decode_bound(weights, bandwidth)
measured = m.decode_tokens_per_second  # Q16's run
step_flops, step_bytes = step_cost(c, rows=1, context=len(ids) + N)
balance = peak_matmul_flops("cpu", n=1024) / bandwidth
print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s, weights {weights / 1e6:.0f} MB: at most "
      f"{bound:.1f} tokens/s; measured {measured:.1f} tokens/s ({measured / bound:.0%} of it)")
print(f"a batch-1 step in fp32: {step_flops / step_bytes:.2f} FLOP per byte read; this machine "
      f"does {balance:.1f} FLOP in the time it reads a byte")
assert measured < bound  # the bound is a ceiling: decode stays under it
assert step_flops / step_bytes < balance  # the arithmetic waits for memory, not the reverse

# %% [markdown]
# ---
# # Part 5 · Batching, paged attention, prefix caching

# %% [markdown]
# ## Q18 · 静态批处理和连续批处理有什么区别？ Static batching against continuous batching?
#
# | 中文 | English |
# |---|---|
# | 静态批处理：一批请求一起开始，必须等最长的那个结束，整批才结束；早结束的请求空占位置（"幽灵行"），新请求只能等下一批。连续批处理（迭代级调度，Orca/vLLM）：每一步都重新组批，结束的请求立刻离开，等待的请求立刻加入，GPU 不空转，吞吐量更高、排队延迟更低。 | Static batching: a batch starts together and ends only when its longest request ends; requests that finish early still hold their rows ("ghost" rows), and new requests wait for the next batch. Continuous batching (iteration-level scheduling, Orca/vLLM): the batch is rebuilt every step, a finished request leaves at once and a waiting one joins at once, so nothing idles: higher throughput, less queueing. |

# %%
from minillm.tools.bench.batching import memory_use

lengths = [8, 2, 2, 8] if CI else [16, 4, 4, 16]
requests = [f"Request {i}: tell me about rivers." for i in range(len(lengths))]
configs = [{"max_new_tokens": n, "ignore_eos": True} for n in lengths]
engines, results = {}, {}
for kind in ("static", "continuous"):
    engines[kind] = minillm.Engine(model, tokenizer, scheduler=kind, num_blocks=64,
                                   block_size=4, max_num_seqs=2, record=True)
    results[kind] = engines[kind].generate(requests, configs)
    rows = [item[2] for s in engines[kind].steps for item in s.items]
    print(f"{kind:>10}: {len(engines[kind].steps)} steps, {rows.count('ghost')} ghost rows")
ghosts = {k: sum(i[2] == "ghost" for s in e.steps for i in s.items) for k, e in engines.items()}
assert all(agree(model, s.prompt_token_ids, s.token_ids, r.token_ids)
           for s, r in zip(results["static"], results["continuous"]))
assert ghosts["continuous"] == 0 < ghosts["static"]
assert len(engines["continuous"].steps) < len(engines["static"].steps)

# %% [markdown]
# ## Q19 · PagedAttention 解决了什么问题？ What problem does PagedAttention solve?
#
# | 中文 | English |
# |---|---|
# | 连续的 KV 缓存必须按"提示词 + 最大生成长度"提前预留，序列实际多长事先不知道，于是大量显存被预留却不用（内部碎片），长短不一的序列还造成外部碎片。PagedAttention 像操作系统的虚拟内存一样，把 KV 缓存切成固定大小的块，按需分配，用块表把逻辑位置映射到物理块；每个序列最多浪费不到一个块，还能在序列之间共享块（前缀缓存、并行采样）。 | A contiguous KV cache must be reserved up front for prompt + maximum new tokens, since how long a sequence will run is unknown: much memory is reserved and never used (internal fragmentation), and sequences of different lengths fragment the rest (external fragmentation). PagedAttention, like an operating system's virtual memory, cuts the KV cache into fixed-size blocks allocated on demand, with a block table mapping logical positions to physical blocks: each sequence wastes less than one block, and blocks can be shared between sequences (prefix caching, parallel sampling). |

# %%
steps = engines["continuous"].steps
use = memory_use(steps, max_len=c.max_seq_len)
for name, share in use.items():
    print(f"{name:>24}: {share:.1%} of the reserved KV memory holds real tokens "
          f"(blocks of {engines['continuous'].blocks.block_size} tokens)")
block = engines["continuous"].blocks.block_size
assert all(s.paged_slots - s.used_tokens < block * max(1, s.running) for s in steps)
assert use["paged"] > use["contiguous_per_request"] > use["contiguous_max_length"]

# %% [markdown]
# ## Q20 · 什么是前缀缓存？ What is prefix caching?
#
# | 中文 | English |
# |---|---|
# | 很多请求共享同样的开头（系统提示词、少样本示例、多轮对话的历史）。前缀缓存按内容（对块内词元及其前缀做哈希）记住已经算好的 KV 块，新请求的前缀命中时直接复用，跳过这部分预填充，TTFT 和计算都下降，结果不变。只有完整的块才能共享。 | Many requests share the same start (a system prompt, few-shot examples, a conversation's history). Prefix caching remembers computed KV blocks by content (a hash of the block's tokens and its prefix); when a new request's prefix matches, the blocks are reused and that part of the prefill is skipped: lower TTFT and compute, the same result. Only full blocks can be shared. |

# %%
system = ("You are a helpful assistant for the city museum. The museum has three floors: "
          "paintings on the first, sculpture on the second and a café with a view on the "
          "third. Answer briefly and politely, and say so when you do not know. Question: ")
questions = [system + "When does the museum open?", system + "Where is the café?"]
engine = minillm.Engine(model, tokenizer, num_blocks=64, block_size=16)
answers = [engine.generate([q], max_new_tokens=4)[0] for q in questions]  # one after the other
stats = engine.stats()
first_ids, second_ids = (tokenizer.encode(q) for q in questions)
shared = len(os.path.commonprefix([first_ids, second_ids]))
print(f"shared prefix: {shared} tokens, {shared // 16} full blocks of 16; reused from the "
      f"cache: {stats['prefix_cache_hit_tokens']} tokens")
plain = [minillm.generate(model, tokenizer, q, max_new_tokens=4).token_ids for q in questions]
assert all(agree(model, a.prompt_token_ids, a.token_ids, p) for a, p in zip(answers, plain))
assert stats["prefix_cache_hit_tokens"] == 16 * (shared // 16) > 0

# %% [markdown]
# ---
# # Part 6 · Quantization, speculative decoding, scaling out

# %% [markdown]
# ## Q21 · 量化的收益和代价是什么？ What does quantization buy, and what does it cost?
#
# | 中文 | English |
# |---|---|
# | 把权重从 fp32/fp16 存成 int8 或 int4：显存减到 1/4 或 1/8（相对 fp32），解码读的字节更少，带宽受限时更快。代价：精度损失（困惑度上升，int4 比 int8 明显），需要反量化或专用算子——每次调用都反量化、或像 transformers 的 LLM.int8()（bitsandbytes）那样把激活也量化并把离群特征拆出来单独用 fp16 计算，多出的步骤会让 int8 反而比 fp16 慢。常见做法：逐通道 int8、分组 int4（GPTQ、AWQ、GGUF Q4）。 | Storing the weights as int8 or int4 instead of fp32/fp16 cuts memory to 1/4 or 1/8 (of fp32), and decode reads fewer bytes, so it runs faster when bandwidth-bound. The costs: accuracy (perplexity rises, clearly more for int4 than int8), and the need to dequantize or a special kernel: a path that dequantizes on every call, or transformers' LLM.int8() (bitsandbytes), which also quantizes the activations and splits the outlier features off into an fp16 product, runs extra steps that can make int8 slower than fp16. Common schemes: per-channel int8, group-wise int4 (GPTQ, AWQ, GGUF Q4). |

# %%
eval_ids = text_ids * 2
fp32_bytes = weight_bytes(model, linear_only=True)
ppl = {"fp32": perplexity(model, eval_ids)}
ratios = {}
for scheme in ("int8", "int4"):
    q = quantize(model, scheme)
    ratios[scheme] = weight_bytes(q, linear_only=True) / fp32_bytes
    ppl[scheme] = perplexity(q, eval_ids)
    del q
for name in ppl:
    print(f"{name}: linear weights {ratios.get(name, 1.0):.3f}x fp32, perplexity {ppl[name]:.3f}")
assert 0.24 < ratios["int8"] < 0.27 and 0.12 < ratios["int4"] < 0.16
assert abs(ppl["int8"] / ppl["fp32"] - 1) < 0.05

# %% [markdown]
# Compare the int4 perplexity with fp32's above. The course model ships as GGUF Q4_1: its
# "fp32" weights are already 4-bit values (groups of 32 with a scale and a minimum) widened to
# floats, and minillm's int4 is the same scheme, so requantizing can give those values back
# almost unchanged. On a model trained and shipped in bf16, int4 costs clearly more than int8
# (chapter 07 measures it).

# %% [markdown]
# ## Q22 · 推测解码为什么能加速，又不改变结果？ Why does speculative decoding speed things up without changing the result?
#
# | 中文 | English |
# |---|---|
# | 解码受带宽限制：目标模型验证 k 个词元的一次前向传播，和生成 1 个词元花的时间差不多。让便宜的草稿（小模型、或从上下文里查找 n-gram）先猜 k 个词元，目标模型一次并行验证，接受与自己选择一致的前缀，再加上自己的一个词元。贪心时，只保留目标模型自己的 argmax，所以输出与普通贪心完全一样；加速取决于接受率。 | Decode is bandwidth-bound: one target forward pass over k tokens costs about as much as one over a single token. A cheap draft (a small model, or an n-gram looked up in the context) guesses k tokens, the target checks them all in one pass, keeps the prefix that matches its own choices and adds one token of its own. Greedy: only the target's own argmax is ever kept, so the output equals plain greedy exactly; the speed-up depends on the acceptance rate. |

# %%
from minillm.speculative import PromptLookupDraft, speculative_generate

code = tokenizer.encode("Fruits: apple, banana, cherry, date, fig, grape, kiwi, lemon, mango. "
                        "The same fruits again: apple, banana,")
spec = speculative_generate(model, tokenizer, code, PromptLookupDraft(), k=4,
                            max_new_tokens=2 * N, ignore_eos=True)
plain = minillm.generate(model, tokenizer, code, max_new_tokens=2 * N, ignore_eos=True)
print(repr(spec.text))
print(spec.stats.summary())
assert agree(model, code, spec.token_ids, plain.token_ids)

# %% [markdown]
# ## Q23 · 采样时，推测解码怎么保证分布不变？ With sampling, how does speculative decoding keep the distribution?
#
# | 中文 | English |
# |---|---|
# | 草稿按 q 抽出词元 x，以概率 min(1, p(x)/q(x)) 接受；拒绝时从 norm(max(0, p − q)) 重新抽。于是 x 最终出现的概率 = q(x)·min(1, p/q) + P(拒绝)·残差(x) = min(p, q) + max(0, p − q) = p(x)：正好是目标模型的分布，与草稿好坏无关；草稿越像目标，接受率 Σ min(p, q) 越高。 | The draft draws x from q; x is accepted with probability min(1, p(x)/q(x)); on a rejection a token is drawn from norm(max(0, p − q)). So x comes out with probability q(x)·min(1, p/q) + P(reject)·residual(x) = min(p, q) + max(0, p − q) = p(x): exactly the target's distribution, whatever the draft; the closer the draft to the target, the higher the acceptance rate Σ min(p, q). |
#
# Shown with the real target and a real draft (SmolLM2's first 24 of its 30 layers) on the same context:

# %%
from minillm.speculative import accept_probability, first_layers, residual_distribution

with torch.inference_mode():
    p_t = torch.softmax(model(torch.tensor([ids]))[0, -1].cpu().double(), -1)
    q_d = torch.softmax(first_layers(model, 24)(torch.tensor([ids]))[0, -1].cpu().double(), -1)
accept = torch.clamp(p_t / q_d, max=1.0)  # min(1, p/q) for every token at once
likely = q_d.topk(5).indices  # the package's rule agrees on the draft's favourite tokens
assert all(float(accept_probability(p_t, q_d, int(t))) == float(accept[t]) for t in likely)
accepted = q_d * accept  # drawn by the draft and accepted
rejected = 1 - accepted.sum()
result = accepted + rejected * residual_distribution(p_t, q_d)
print(f"acceptance rate {accepted.sum():.3f}; largest |result - target| "
      f"{(result - p_t).abs().max():.2e}")
assert torch.allclose(result, p_t, atol=1e-9)

# %% [markdown]
# ## Q24 · 张量并行怎么切分模型？通信量多大？ How does tensor parallelism split a model, and what does it communicate?
#
# | 中文 | English |
# |---|---|
# | 张量并行（Megatron-LM）把每层的权重矩阵切到多张卡上：前馈层的 gate/up 按输出列切（列并行），down 按输入行切（行并行），中间激活不用传，各卡的部分结果做一次 all-reduce 求和；注意力按头切，同理。每层两次 all-reduce，每次传 (词元数 × 隐藏维度) 个数，所以需要 NVLink 这样的高速互联，通常在一台机器内。流水线并行则按层切，只在阶段之间传隐藏状态。 | Tensor parallelism (Megatron-LM) splits every layer's weight matrices across devices: the feed-forward gate/up by output columns (column-parallel), down by input rows (row-parallel), so the activation in between never travels and one all-reduce sums the ranks' partial outputs; attention splits by heads likewise. Two all-reduces a layer, each of (tokens × hidden) values: it needs a fast link such as NVLink, usually inside one machine. Pipeline parallelism splits by layers and sends only hidden states between stages. |

# %%
from minillm.distributed import all_reduce_cost, split_evenly

mlp = model.layers[0].mlp
with torch.inference_mode():
    x = model.layers[0].mlp_norm(model.embed(torch.tensor([ids])))
    full = mlp(x)
    parts = []
    for rows in split_evenly(c.intermediate_size, 2):  # two ranks, half the hidden units
        r = slice(rows.start, rows.stop)
        h = torch.nn.functional.silu(x @ mlp.gate_proj.weight[r].T) * (x @ mlp.up_proj.weight[r].T)
        parts.append(h @ mlp.down_proj.weight[:, r].T)  # a partial sum of the output
calls, n_bytes = all_reduce_cost(c, tokens=1)
print(f"largest difference after the all-reduce: {(sum(parts) - full).abs().max():.2e}")
print(f"per decoded token: {calls} all-reduces, {n_bytes / 1e3:.0f} kB per rank in fp32")
assert torch.allclose(sum(parts), full, atol=1e-5)
assert calls == 2 * c.n_layers and n_bytes == calls * c.hidden_size * 4

# %% [markdown]
# ---
# # Self-check quiz (自测)
#
# One question at a time: choose or type your answer, press **Check** to see the answer and
# why, then **Next question**. Numeric answers count when within 5% (10% for the speed bound).
# The numbers come from this model's config, not from a table. (Built with ipywidgets; it needs a
# live kernel.)

# %%
quiz = checks.quiz_widget(checks.build_quiz(c))
display(quiz)

# %% [markdown]
# The quiz grades with `checks.grade`; here it is checked against the formulas the chapter used:

# %%
questions = checks.build_quiz(c)
kv_q = questions[1]
right = kv_cache_formula_bytes(c, 8192, 2) / 1e9
assert checks.grade(kv_q, f"{right * 1.02:.4f}")[0] and not checks.grade(kv_q, right * 2)[0]
assert checks.grade(questions[0], "greedy decoding")[0]
print(f"{len(questions)} questions; the 8k-token fp16 KV cache is {right:.3f} GB")

# %% [markdown]
# ## What to take away
#
# - Every answer above is a claim you can check on a real model in a few lines: in an interview,
#   the formula (KV bytes, weight bytes, bandwidth bound) is the answer, and the measurement is
#   the proof.
# - Places the source text needs care: temperature 0 is a special case, not a division; top-k
#   and top-p do not commute; "lower the temperature" and "beam search" make repetition worse,
#   and a repetition penalty of 1.8 also pushes away the prompt's words an answer needs;
#   "450 words a minute" depends on the tokenizer.
# - The exercise `exercises/10_interview_qa.ipynb` answers three of these questions in code:
#   the sampling filters in `generate()`'s order (Q3), the parameter count from a config (Q10)
#   and the KV cache's bytes from a config and a dtype (Q13).
