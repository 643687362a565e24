# %% [markdown]
# # 10b · Interview questions (面试题), part two: the engine
#
# Q12–Q24 of chapter 10, after `10_interview_qa` (Q1–Q11) and before `10c_interview_serving`
# (Q25–Q32 and the self-check quiz). As before, each answer is given in Chinese and English,
# 中英对照, and proved by a cell that ends in an `assert`.

# %%
import os
import statistics

import torch

import minillm
from minillm.course.checks import ch10_interview as checks
from minillm.course.text_quality import mean_logprob
from minillm.generation.agreement import agree, rule
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import decode_step_times, kv_cache_formula_bytes, prefill_time
from minillm.quant import perplexity, quantize, weight_bytes
from minillm.utils.devices import Timer, describe

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
N = 8 if CI else 16              # new tokens per demonstration
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("tokens of two runs are compared", rule(model))
ids = tokenizer.encode("The capital of France is")
paragraph = ("The printing press was invented in the fifteenth century. It made books cheaper, "
             "and ideas spread faster across Europe than ever before. Within fifty years, "
             "millions of copies had been printed in hundreds of cities.")
text_ids = tokenizer.encode(paragraph)
weights = weight_bytes(model)

# %% [markdown]
# ---
# # Part 3 · Prefill, decode and the KV cache

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
print(f"full context in fp16: {gqa / 1e6:.0f} MB with GQA, {mha / 1e6:.0f} MB without "
      f"({mha / gqa:.0f}x: {c.n_heads} query heads over {c.n_kv_heads} KV heads)")
llama7b = checks.kv_cache_gb_reference(32, 32, 128, 4096, 1, 2)
print(f"Llama-2-7B, 4096 tokens, fp16: {llama7b:.2f} GB")
assert kv.nbytes == per_token * len(ids) * 2 == kv_cache_formula_bytes(c, len(ids), 4, 2)

# %% [markdown]
# ## Q14 · 生成什么时候停止？ When does generation stop?
#
# | 中文 | English |
# |---|---|
# | 三种条件：① 模型生成了结束词元（EOS，对话模型里是 `<\|im_end\|>`）；② 达到 max_new_tokens 或上下文窗口；③ 用户条件，例如停止字符串（出现后截断，不返回它）。停止后这个序列的 KV 缓存就可以释放。 | Three conditions: (1) the model produces an end token (EOS; `<\|im_end\|>` for a chat model); (2) max_new_tokens or the context window is reached; (3) a user condition such as a stop string (the text is cut before it). Once stopped, the sequence's KV cache can be freed. |

# %%
first = minillm.generate(model, tokenizer, ids, max_new_tokens=N).token_ids  # greedy
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
for text in prompts:
    p_ids = tokenizer.encode(text)
    g = minillm.generate(model, tokenizer, p_ids, max_new_tokens=N, ignore_eos=True)
    b = minillm.generate(model, tokenizer, p_ids, max_new_tokens=N, ignore_eos=True, num_beams=4)
    lp_g, lp_b = mean_logprob(model, p_ids, g.token_ids), mean_logprob(model, p_ids, b.token_ids)
    wins, losses = wins + (lp_b > lp_g + 1e-6), losses + (lp_b < lp_g - 1e-6)
print(f"beam search found the likelier sequence {wins} times, greedy {losses} times, "
      f"{len(prompts) - wins - losses} ties")
assert wins > losses  # usually likelier, not always: the paper model shows how greedy loses

# %% [markdown]
# ## Q16 · TTFT、TPOT、延迟和吞吐量是什么关系？ How do TTFT, TPOT, latency and throughput relate?
#
# | 中文 | English |
# |---|---|
# | TTFT（首个词元生成时间）：从请求开始到第一个词元，含分词和预填充。TPOT（每个输出词元的时间）：之后相邻词元的平均间隔。端到端延迟 = TTFT + TPOT × (输出词元数 − 1)：第一个词元在 TTFT 时到达，之后只有 n − 1 个间隔，所以对单个请求这个等式按定义成立；原文的 TTFT + TPOT × n 多算了一个 TPOT，短回答里差别明显。吞吐量：所有请求的总输出词元数 / 总时间。⚠️ 原文说 TPOT 100 ms 即每秒 10 个词元、约每分钟 450 个英文单词：这假设每个词元约 0.75 个单词，取决于分词器和文本，下面用本模型实测。 | TTFT (time to first token): from the request's start to its first token, tokenizing and prefill included. TPOT (time per output token): the mean gap between later tokens. End-to-end latency = TTFT + TPOT × (output tokens − 1): the first token arrives at the TTFT and only n − 1 gaps follow, so for one request this holds by definition; the source's TTFT + TPOT × n counts one TPOT too many, which shows on short answers. Throughput: all requests' output tokens / the total time. ⚠️ The source says a TPOT of 100 ms is 10 tokens/s, about 450 English words a minute: that assumes about 0.75 words a token, which depends on the tokenizer and the text; measured below with this model's. |

# %%
with Timer(device) as stopwatch:  # our own stopwatch, around the whole call
    timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
wall = stopwatch.seconds
m = timed.metrics
print(m)
arrived = [t - m.start for t in m.token_times]  # when token k arrived, k = 1..n
ours = [m.ttft + m.tpot * (k - 1) for k in range(1, m.n_tokens + 1)]
source = [m.ttft + m.tpot * k for k in range(1, m.n_tokens + 1)]
nearer = sum(abs(a - o) < abs(a - s) for a, o, s in zip(arrived, ours, source))
print(f"latency of these {m.n_tokens} tokens: TTFT + TPOT x (n - 1) = {1e3 * ours[-1]:.1f} ms, "
      f"TTFT + TPOT x n = {1e3 * source[-1]:.1f} ms (one TPOT, {1e3 * m.tpot:.1f} ms, apart)")
print(f"each token's stamp is nearer TTFT + TPOT x (k - 1) for {nearer} of {m.n_tokens} tokens, "
      f"nearer TTFT + TPOT x k for {m.n_tokens - nearer}")
print(f"the stopwatch around the call: {1e3 * wall:.1f} ms, {1e3 * (wall - arrived[-1]):.1f} ms "
      "after the last token (decoding the text, building the result)")
with Timer(device) as stopwatch:
    pair = minillm.generate(model, tokenizer, [ids, ids], max_new_tokens=N, ignore_eos=True)
pair_wall = stopwatch.seconds
pair_rate = minillm.throughput([r.metrics for r in pair]).tokens_per_second
print(f"two requests at once: throughput {pair_rate:.1f} tokens/s; their {2 * N} tokens over "
      f"the stopwatch: {2 * N / pair_wall:.1f} tokens/s")
words_per_token = len(paragraph.split()) / len(text_ids)
print(f"{words_per_token:.2f} English words per token here: 10 tokens/s is "
      f"{600 * words_per_token:.0f} words a minute (the source: 450)")
assert wall >= arrived[-1]  # the token stamps lie inside the call the stopwatch timed
assert abs(pair_rate - 2 * N / pair_wall) < 0.1 * pair_rate
assert 0.5 < words_per_token < 1.0


# %% [markdown]
# ## Q17 · 为什么说解码受限于显存带宽？ Why is decode bound by memory bandwidth?
#
# | 中文 | English |
# |---|---|
# | 批大小为 1 时，每个解码步要把所有权重从内存读一遍，而每个权重只做 2 次浮点运算（一次乘加）：fp32 下算术强度只有 0.5 FLOP/字节，远低于硬件的计算/带宽比。所以速度上限约为 带宽 ÷ 权重字节数。提高批大小（一次读权重服务多个序列）或减少字节（量化、bf16）才能突破。推测解码靠的也是提高一步的算术强度：验证 k 个草稿词元的一步把 k + 1 行送进模型，权重只读一遍，算术强度约是解码一步的 k + 1 倍；只要这一步仍低于硬件的计算/带宽比，多出的几行几乎不多花时间。 | At batch size 1 every decode step reads all the weights from memory and does 2 floating-point operations (one multiply-add) per weight: in fp32 an arithmetic intensity of 0.5 FLOP per byte, far below the hardware's compute-to-bandwidth ratio. So the speed limit is about bandwidth ÷ weight bytes. Only a larger batch (one read of the weights serves many sequences) or fewer bytes (quantization, bf16) moves it. Speculative decoding works by raising a step's arithmetic intensity too: a verify step runs k + 1 rows through one read of the weights, about k + 1 times a decode step's FLOPs per byte, and while that stays below the hardware's ratio the extra rows cost little time. |

# %%
from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.measure.roofline import peak_matmul_flops, step_cost

before = read_bandwidth(device, repeats=10)
timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
# the faster of a probe before and one after, each the best of 10 reads: a busy moment only
# slows a read
bandwidth = max(before, read_bandwidth(device, repeats=10))
bound = decode_bound(weights, bandwidth)
measured = timed.metrics.decode_tokens_per_second
step_flops, step_bytes = step_cost(c, rows=1, context=len(ids) + N)
balance = peak_matmul_flops(device, n=1024) / bandwidth
print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s, weights {weights / 1e6:.0f} MB: at most "
      f"{bound:.1f} tokens/s; measured {measured:.1f} tokens/s ({measured / bound:.0%} of it)")
print(f"a batch-1 step in fp32: {step_flops / step_bytes:.2f} FLOP per byte read; this machine "
      f"does {balance:.1f} FLOP in the time it reads a byte")
assert measured < bound  # the bound is a ceiling: decode stays under it
assert step_flops / step_bytes < balance  # the arithmetic waits for memory, not the reverse

# %% [markdown]
# The verify step of speculation: its FLOPs per byte, then its time against a one-token step over
# the same 16 cached tokens, timed interleaved three times:

# %%
from minillm.measure import TOO_NOISY, compare

K = 4
verify_flops, verify_bytes = step_cost(c, rows=K + 1, context=16)
one_flops, one_bytes = step_cost(c, rows=1, context=16)
gain = (verify_flops / verify_bytes) / (one_flops / one_bytes)


def step_of(rows, context=16):
    """One forward pass feeding `rows` tokens to a cache that holds `context` of them."""
    seq = torch.tensor([text_ids[:context + rows]], device=device)
    kv = KVCache.for_model(model, 1, context + rows)
    with torch.inference_mode():
        model(seq[:, :context], cache=kv)

    @torch.inference_mode()
    def run():
        kv.crop(context)
        model(seq[:, context:], cache=kv, logits_to_keep=rows)
    return run


verify = compare(step_of(1), step_of(K + 1), repeats=3, device=device)
print(f"a verify step of {K + 1} tokens: {verify_flops / verify_bytes:.2f} FLOP per byte, "
      f"{gain:.2f}x a one-token step's (this machine's balance: {balance:.1f})")
print(f"its time over a one-token step's: {verify.spread_text()}")
print({False: f"under half the time of {K + 1} one-token steps in every repetition",
       None: TOO_NOISY, True: f"more than half the time of {K + 1} one-token steps here: the "
                              "step is compute-bound on this device"}[verify.above((K + 1) / 2)])
assert K < gain <= K + 1  # k + 1 rows for (almost) the same bytes
assert verify.above((K + 1) / 2) is not True  # the extra rows rode on the same weight read

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
engines, results, ghosts = {}, {}, {}
for kind in ("static", "continuous"):
    engines[kind] = minillm.Engine(model, tokenizer, scheduler=kind, num_blocks=64,
                                   block_size=4, max_num_seqs=2, record=True)
    results[kind] = engines[kind].generate(requests, configs)
    ghosts[kind] = sum(item[2] == "ghost" for s in engines[kind].steps for item in s.items)
    print(f"{kind:>10}: {len(engines[kind].steps)} steps, {ghosts[kind]} ghost rows")
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
# | 很多请求共享同样的开头（系统提示词、少样本示例、多轮对话的历史）。前缀缓存记住已经算好的键和值，新请求的前缀命中时直接复用，跳过这部分预填充，TTFT 和计算都下降，结果不变。命中的部分有两种找法：vLLM 给每个完整的块算一个哈希（块内的词元加上前一个块的哈希），按哈希查找，所以只有完整的块能共享，末尾不满一块的部分要重算；SGLang 的 RadixAttention 把缓存的词元序列存成一棵基数树，一直匹配到最后一个相同的词元。“只有完整的块才能共享”是块哈希的性质，不是前缀缓存本身的限制。 | Many requests share the same start (a system prompt, few-shot examples, a conversation's history). Prefix caching remembers the keys and values already computed; when a new request's prefix matches, they are reused and that part of the prefill is skipped: lower TTFT and compute, the same result. There are two ways to find the match: vLLM names each full block by a hash (of the block's tokens and the previous block's hash) and looks blocks up by it, so only full blocks are shared and the partial block at the end is recomputed; SGLang's RadixAttention keeps the cached token sequences in a radix tree and matches them to the last equal token. "Only full blocks can be shared" is a property of the block hash, not of prefix caching. |

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

from minillm.engine.radix_cache import RadixCache

tree = RadixCache()  # SGLang's way (chapter 06 §6): the first request's tokens in a radix tree
tree.insert(first_ids + answers[0].token_ids)
matched = tree.match(second_ids)
print(f"a radix tree holding the first request matches {matched} tokens of the second: to the "
      f"token, where the block hashes stop at {stats['prefix_cache_hit_tokens']}")
assert matched == shared > stats["prefix_cache_hit_tokens"]

# %% [markdown]
# ---
# # Part 6 · Quantization, speculative decoding, scaling out

# %% [markdown]
# ## Q21 · 量化的收益和代价是什么？ What does quantization buy, and what does it cost?
#
# | 中文 | English |
# |---|---|
# | 把权重从 fp32/fp16 存成 int8 或 int4，解码读的字节更少，带宽受限时更快。逐通道 int8 每个权重 8 位，另加每行一个缩放因子，约为 fp32 的 1/4；这里的 int4 每 32 个权重共用一个 fp16 缩放因子和一个 fp16 最小值，平均每个权重 4 + 32/32 = 5 位，约为 fp32 的 1/6.4（fp16 的 5/16），而不是 1/8。代价：精度损失（困惑度上升，int4 比 int8 明显），需要反量化或专用算子——每次调用都反量化、或像 transformers 的 LLM.int8()（bitsandbytes）那样把激活也量化并把离群特征拆出来单独用 fp16 计算，多出的步骤会让 int8 反而比 fp16 慢。常见做法：逐通道 int8、分组 int4（GPTQ、AWQ、GGUF Q4）。 | Storing the weights as int8 or int4 instead of fp32/fp16 means decode reads fewer bytes, so it runs faster when bandwidth-bound. Per-channel int8 takes 8 bits a weight plus a scale per row, about 1/4 of fp32; the int4 here stores, for each group of 32 weights, an fp16 scale and an fp16 minimum, 4 + 32/32 = 5 bits a weight on average: about 1/6.4 of fp32 (5/16 of fp16), not 1/8. The costs: accuracy (perplexity rises, clearly more for int4 than int8), and the need to dequantize or a special kernel: a path that dequantizes on every call, or transformers' LLM.int8() (bitsandbytes), which also quantizes the activations and splits the outlier features off into an fp16 product, runs extra steps that can make int8 slower than fp16. Common schemes: per-channel int8, group-wise int4 (GPTQ, AWQ, GGUF Q4). |

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
print(f"int4: {32 * ratios['int4']:.2f} bits a weight, 1/{1 / ratios['int4']:.1f} of fp32")
assert 0.24 < ratios["int8"] < 0.27 and 0.15 < ratios["int4"] < 0.16  # 5 bits, not 4
assert abs(ppl["int8"] / ppl["fp32"] - 1) < 0.05

# %% [markdown]
# Read int4's perplexity with care: the course model ships as GGUF Q4_1, so its "fp32" weights
# are already 4-bit values in minillm's int4 scheme, widened to floats, and requantizing can give
# them back almost unchanged. There is
# no 16-bit SmolLM2 on this disk, so what int4 costs a bf16 model (usually clearly more than
# int8) is explained here, not measured.

# %% [markdown]
# ## Q22 · 推测解码为什么能加速，又不改变结果？ Why does speculative decoding speed things up without changing the result?
#
# | 中文 | English |
# |---|---|
# | 解码受带宽限制：目标模型验证 k 个词元的一次前向传播，比生成 k 个词元的 k 步便宜得多（Q17 测过）。让便宜的草稿（小模型、或从上下文里查找 n-gram）先猜 k 个词元，目标模型一次并行验证，接受与自己选择一致的前缀，再加上自己的一个词元。贪心时，只保留目标模型自己的 argmax，所以输出与普通贪心完全一样；加速取决于接受率和草稿的代价。 | Decode is bandwidth-bound: one target forward pass over k tokens costs far less than k decode steps (Q17 measured it). A cheap draft (a small model, or an n-gram looked up in the context) guesses k tokens, the target checks them all in one pass, keeps the prefix that matches its own choices and adds one token of its own. Greedy: only the target's own argmax is ever kept, so the output equals plain greedy exactly; the speed-up depends on the acceptance rate and the draft's cost. |

# %%
from minillm.speculative import PromptLookupDraft, speculative_generate

fruits = tokenizer.encode("Fruits: apple, banana, cherry, date, fig, grape, kiwi, lemon, mango, "
                          "melon, orange, papaya, peach, pear, plum, quince. The same fruits "
                          "again: apple, banana,")


def with_draft():
    return speculative_generate(model, tokenizer, fruits, PromptLookupDraft(), k=4,
                                max_new_tokens=2 * N, ignore_eos=True)


def plain_greedy():
    return minillm.generate(model, tokenizer, fruits, max_new_tokens=2 * N, ignore_eos=True)


spec, plain = with_draft(), plain_greedy()
print(spec.stats.summary())
passes = {"speculative": 1 + spec.stats.passes, "plain": len(plain.token_ids)}  # prefill + steps
speedup = compare(with_draft, plain_greedy, repeats=3, device=device)  # plain's time over spec's
print(f"target forward passes for {2 * N} tokens: {passes['speculative']} with the draft, "
      f"{passes['plain']} without; speed-up {speedup.spread_text()}")
print({True: "faster than plain greedy in every repetition", None: TOO_NOISY,
       False: "not faster than plain greedy in any repetition"}[speedup.above(1.0)])
assert agree(model, fruits, spec.token_ids, plain.token_ids)
assert passes["speculative"] < passes["plain"] and speedup.above(1.0) is not False

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
print(f"acceptance rate {accepted.sum():.3f}; the identity above, computed: largest "
      f"|result - target| {(result - p_t).abs().max():.2e}")

# The package's rule, run: 20,000 draws on the 40 likeliest tokens (p and q renormalised there)
from minillm.speculative import accept_or_resample

top = torch.cat([p_t.topk(20).indices, q_d.topk(20).indices]).unique()
p_top, q_top = p_t[top] / p_t[top].sum(), q_d[top] / q_d[top].sum()
draws = 20_000
gen = torch.Generator().manual_seed(0)
drafted = torch.multinomial(q_top.float(), draws, replacement=True, generator=gen)
tokens, kept = accept_or_resample(p_top.expand(draws, -1).float(), q_top.expand(draws, -1).float(),
                                  drafted, generator=gen)
seen = torch.bincount(tokens, minlength=len(top)).double() / draws
gap = lambda a, b: 0.5 * float((a - b).abs().sum())  # total variation distance  # noqa: E731
print(f"{draws:,} draws, {kept.float().mean():.1%} accepted: distance of what came out to the "
      f"target {gap(seen, p_top):.4f}, the draft's distance to the target {gap(q_top, p_top):.4f}")
assert gap(seen, p_top) < min(0.02, gap(q_top, p_top) / 3)

# %% [markdown]
# ## Q24 · 张量并行怎么切分模型？通信量多大？ How does tensor parallelism split a model, and what does it communicate?
#
# | 中文 | English |
# |---|---|
# | 张量并行（Megatron-LM）把每层的权重矩阵切到多张卡上。按 Megatron 的写法 Y = XA，A 的每一列是一个输出特征：前馈层的 gate/up 按输出特征切（列并行），down 按输入特征切（行并行），中间激活不用传，各卡的部分结果做一次 all-reduce 求和；注意力按头切，同理。PyTorch 的权重 W 形状是（输出，输入），即 A 的转置：列并行取的是 W 的行，行并行取的是 W 的列，与第 09 章的图一致。每层两次 all-reduce，每次的数据是 (词元数 × 隐藏维度) 个数；环形 all-reduce（先 reduce-scatter，再 all-gather）让 N 张卡中的每一张发送 2(N − 1)/N 倍的数据，几乎不随卡数变化，但每层都要做两次，所以需要 NVLink 这样的高速互联，通常在一台机器内。卡数超过 KV 头数时（例如 8 个 KV 头、TP = 16），KV 头要复制：每张卡至少存一个完整的 KV 头，每张卡的 KV 缓存不再随卡数减少。流水线并行则按层切，只在阶段之间传隐藏状态。 | Tensor parallelism (Megatron-LM) splits every layer's weight matrices across devices. In Megatron's notation Y = XA each column of A is an output feature: the feed-forward gate/up are split by output features (column-parallel), down by input features (row-parallel), so the activation in between never travels and one all-reduce sums the ranks' partial outputs; attention splits by heads likewise. A PyTorch weight W has shape (out, in), A transposed: column-parallel keeps rows of W and row-parallel keeps columns of W, as chapter 09 draws them. Two all-reduces a layer, each of (tokens × hidden) values; a ring all-reduce (a reduce-scatter, then an all-gather) has each of N ranks send 2(N − 1)/N times that data, nearly the same whatever N, but twice a layer: it needs a fast link such as NVLink, usually inside one machine. When TP exceeds the number of KV heads (8 KV heads, TP = 16), the KV heads are replicated: each rank holds at least one whole KV head, and its KV cache stops shrinking as ranks are added. Pipeline parallelism splits by layers and sends only hidden states between stages. |

# %%
from minillm.distributed import all_reduce_cost, split_evenly

mlp = model.layers[0].mlp
with torch.inference_mode():
    x = model.layers[0].mlp_norm(model.embed(torch.tensor([ids], device=device)))
    full = mlp(x)
    parts = []
    for rows in split_evenly(c.intermediate_size, 2):  # two ranks, half the hidden units
        r = slice(rows.start, rows.stop)  # column-parallel: rows of W = (out, in), as in 09
        h = torch.nn.functional.silu(x @ mlp.gate_proj.weight[r].T) * (x @ mlp.up_proj.weight[r].T)
        parts.append(h @ mlp.down_proj.weight[:, r].T)  # row-parallel: columns of W
calls, n_bytes = all_reduce_cost(c, tokens=1)
print(f"largest difference after the all-reduce: {(sum(parts) - full).abs().max():.2e}")
print(f"per decoded token: {calls} all-reduces (2 x {c.n_layers} layers), {n_bytes / 1e3:.0f} kB "
      f"summed per rank in fp32 ({c.hidden_size} values x 4 bytes each)")
assert torch.allclose(sum(parts), full, atol=1e-5)

# %% [markdown]
# What the all-reduce sends. A ring cuts each rank's tensor into N chunks; in N − 1 steps each
# rank passes one chunk to its neighbour, which adds it to its own (reduce-scatter), then N − 1
# more steps pass the summed chunks round (all-gather). Run on the layer's real partial outputs:

# %%
def ring_all_reduce(tensors):
    """Sum `tensors` (one per rank) as a ring does; returns every rank's result and how many
    values each rank sent."""
    n = len(tensors)
    chunks = [list(t.flatten().clone().chunk(n)) for t in tensors]
    sent = [0] * n
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            first = -step if phase == "reduce-scatter" else 1 - step  # the chunk rank 0 sends
            moving = [(r, (r + first) % n, chunks[r][(r + first) % n].clone()) for r in range(n)]
            for r, i, chunk in moving:  # every rank sends at once, to the next one
                if phase == "reduce-scatter":
                    chunks[(r + 1) % n][i] += chunk
                else:
                    chunks[(r + 1) % n][i] = chunk
                sent[r] += chunk.numel()
    return [torch.cat(c).view_as(tensors[0]) for c in chunks], sent


with torch.inference_mode():
    for ranks in (2, 4, 8):
        partial = [torch.nn.functional.silu(x @ mlp.gate_proj.weight[r.start:r.stop].T)
                   * (x @ mlp.up_proj.weight[r.start:r.stop].T)
                   @ mlp.down_proj.weight[:, r.start:r.stop].T
                   for r in split_evenly(c.intermediate_size, ranks)]
        results, sent = ring_all_reduce(partial)
        size = full.numel()
        print(f"{ranks} ranks: each sent {sent[0]:,} values for a tensor of {size:,}: "
              f"{sent[0] / size:.2f}x, 2(N - 1)/N = {2 * (ranks - 1) / ranks:.2f}")
        assert all(torch.allclose(r, full, atol=1e-5) for r in results)
        assert sent == [2 * (ranks - 1) * size // ranks] * ranks

# %% [markdown]
# Replicated KV heads: with TP = 9 each rank takes one of SmolLM2's 9 query heads and a copy of
# its group's KV head (3 copies of each of the 3). Layer 0's attention split so:

# %%
from minillm.layers import attention_explicit

attn, tp = model.layers[0].attn, c.n_heads
group = c.n_heads // c.n_kv_heads
with torch.inference_mode():
    hidden = model.layers[0].attn_norm(model.embed(torch.tensor([ids], device=device)))
    q, k, v = attn.project(hidden)  # before the rotation, which the split does not touch
    whole = attn.o_proj(attention_explicit(q, k, v).transpose(1, 2).flatten(2))
    pieces = []
    for rank in range(tp):
        copy = rank // group  # the KV head this rank's query head reads, copied to this rank
        heads = attention_explicit(q[:, rank:rank + 1], k[:, copy:copy + 1], v[:, copy:copy + 1])
        cols = slice(rank * c.head_dim, (rank + 1) * c.head_dim)  # row-parallel o_proj
        pieces.append(heads.transpose(1, 2).flatten(2) @ attn.o_proj.weight[:, cols].T)
print(f"TP = {tp}: largest difference after the all-reduce {(sum(pieces) - whole).abs().max():.2e}")
for ranks in (1, 3, 9):
    per_rank = max(1, c.n_kv_heads // ranks)
    print(f"TP = {ranks}: {per_rank} KV head(s) per rank, {ranks * per_rank} held in all "
          f"({ranks * per_rank // c.n_kv_heads}x the model's {c.n_kv_heads}); each rank's cache "
          f"{kv_cache_formula_bytes(c, 1, 2) * per_rank // c.n_kv_heads:,} bytes a token in fp16")
assert torch.allclose(sum(pieces), whole, atol=1e-5)

# %% [markdown]
# ## What to take away from Q12–Q24
#
# - The formula is the answer and the measurement is the proof.
# - The source's ⚠️ places: latency is TTFT + TPOT × (n − 1), not × n; "450 words a minute"
#   depends on the tokenizer; the int4 here costs 5 bits a weight, not 4.
# - Continue with `10c_interview_serving`.
