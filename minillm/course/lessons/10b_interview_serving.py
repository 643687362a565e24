# %% [markdown]
# # 10b · Interview questions (面试题), part two: serving at scale
#
# The second half of chapter 10: Q17–Q32, then the self-check quiz (自测). As in
# `10_interview_qa`, each question is answered in Chinese and English side by side, 中英对照, and
# followed by a cell that shows the answer on SmolLM2-135M-Instruct and ends in an `assert` that
# fails if the answer is wrong on this run. Numbers that follow from a formula alone are printed
# as arithmetic.
#
# | part | questions |
# |---|---|
# | the bandwidth bound | Q17 |
# | batching, paging, prefixes | Q18–Q20 |
# | quantization, speculation, scaling out | Q21–Q24 |
# | serving at scale, as 2026 interviews ask it | Q25–Q32 |
#
# Timings on a busy machine move from run to run. Where an answer compares two timings, both
# sides are measured interleaved, several times; the verdict names the spread and says "too
# noisy to call" when the repetitions disagree.

# %%
import os

import torch
from IPython.display import display

import minillm
from minillm.course.checks import ch10_interview as checks
from minillm.generation.agreement import agree, rule
from minillm.generation.kv_cache import KVCache
from minillm.generation.step_timing import kv_cache_formula_bytes
from minillm.measure import TOO_NOISY, Comparison, load_average
from minillm.quant import perplexity, quantize, weight_bytes
from minillm.utils.devices import describe

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
N = 8 if CI else 16              # new tokens per demonstration
REPEATS = 3                      # interleaved repetitions behind each timing verdict
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")
print(load_average())

device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("tokens of two runs are compared", rule(model))
prompt = "The capital of France is"
ids = tokenizer.encode(prompt)
paragraph = ("The printing press was invented in the fifteenth century. It made books cheaper, "
             "and ideas spread faster across Europe than ever before. Within fifty years, "
             "millions of copies had been printed in hundreds of cities.")
text_ids = tokenizer.encode(paragraph)
weights = weight_bytes(model)

# %% [markdown]
# ---
# # Part 4 (continued) · The bandwidth bound

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
timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
measured = timed.metrics.decode_tokens_per_second
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
# Compare the int4 perplexity with fp32's above. The course model ships as GGUF Q4_1: its
# "fp32" weights are already 4-bit values (groups of 32 with a scale and a minimum) widened to
# floats, and minillm's int4 is the same scheme, so requantizing can give those values back
# almost unchanged. The course's baseline is that Q4_1 file itself: there is no 16-bit SmolLM2
# on this disk, so what int4 costs a model trained and shipped in bf16 (usually clearly more
# than int8) is not measured here, only explained.

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
print(f"that is 2 x {c.n_layers} layers, each {c.hidden_size} values x 4 bytes")
assert torch.allclose(sum(parts), full, atol=1e-5)

# %% [markdown]
# %% [markdown]
# ---
# # Part 7 · Serving at scale: what 2026 interviews ask
#
# Eight questions about the techniques every large deployment now uses. Chapters 03b, 06, 07
# and 08 build most of them; where the course has no engine part for one yet (KV-cache
# quantization, GPTQ, AWQ, SmoothQuant), the cell defines a small version in front of you.

# %% [markdown]
# ## Q25 · FlashAttention 为什么快？它改变计算结果吗？ What does FlashAttention change, and does it change the result?
#
# | 中文 | English |
# |---|---|
# | 标准注意力先算出完整的分数矩阵 QKᵀ（每个头 n × n 个数），写进显存，再读回来做 softmax，再乘 V：序列一长，这个矩阵占的显存和搬运它的时间都按 n² 增长。FlashAttention 把 Q、K、V 切成能放进片上 SRAM 的小块，用在线 softmax 逐块累加：每一行只保存当前的最大值 m、指数和 l 和加权和 o，遇到更大的分数时按 exp(m − m') 重新缩放。分数矩阵从不完整地写回显存，额外显存从 O(n²) 降到 O(n)，访存大大减少。它是精确算法而不是近似：结果与标准注意力相同，只差浮点求和的顺序。浮点运算量并没有减少，省下的是访存；解码时每步只有一个查询，所以收益主要在预填充和长上下文上（解码另有按键切分的 FlashDecoding）。 | Standard attention computes the whole score matrix QKᵀ (n × n numbers per head), writes it to GPU memory, reads it back for the softmax, and again to multiply by V: as sequences grow, the memory it takes and the time spent moving it grow as n². FlashAttention cuts Q, K and V into tiles that fit in on-chip SRAM and accumulates tile by tile with the online softmax: each row keeps only its running maximum m, the running sum of exponentials l and the weighted sum o, rescaled by exp(m − m') when a larger score arrives. The score matrix is never written out whole: extra memory drops from O(n²) to O(n), and memory traffic falls sharply. It is exact, not an approximation: the result equals standard attention up to the order of floating-point sums. The arithmetic is not reduced; memory traffic is. In decode each step has one query, so the gain is mainly in prefill and long contexts (decode has its own split-by-keys variant, FlashDecoding). |
#
# The proof on the real model's first layer: its queries, keys and values for a long text
# (before the rotation, which does not change the attention arithmetic), attended both ways,
# with the memory each way allocates at its peak (chapter 03b builds `flash_attention`):

# %%
from minillm.course.tokenizer_samples import corpus
from minillm.layers import attention_explicit
from minillm.measure.memory_peak import peak_bytes
from minillm.model.flash_attention import flash_attention

book = tokenizer.encode(corpus("english")[:20_000])  # Shakespeare, for the long inputs below
long_ids = book[:256 if CI else 512]
first = model.layers[0]
with torch.inference_mode():
    hidden = first.attn_norm(model.embed(torch.tensor([long_ids], device=device)))
    q, k, v = (t.float().cpu() for t in first.attn.project(hidden))
    plain, plain_peak = peak_bytes(attention_explicit, q, k, v)
    tiled, tiled_peak = peak_bytes(flash_attention, q, k, v, block_size=64)
difference = (plain - tiled).abs().max().item()
print(f"{len(long_ids)} tokens, {c.n_heads} heads: the score matrices alone are "
      f"{c.n_heads * len(long_ids) ** 2 * 4 / 1e6:.1f} MB in fp32")
print(f"peak memory: plain {plain_peak / 1e6:.1f} MB, tiles of 64 {tiled_peak / 1e6:.1f} MB "
      f"({plain_peak / tiled_peak:.1f}x less); largest difference {difference:.1e}")
assert difference < 1e-4 and tiled_peak < plain_peak / 2

# %% [markdown]
# ## Q26 · 什么是预填充/解码分离？它解决什么问题？ What is prefill/decode disaggregation, and what does it fix?
#
# | 中文 | English |
# |---|---|
# | 预填充是计算受限的，解码是带宽受限的。两者在同一个引擎里时，一个长提示词的预填充会和正在解码的请求挤在同一步里，所有正在生成的用户都要等这一步做完（TPOT 的尾部变长）；新请求也可能排在解码步后面（TTFT 变长）。预填充/解码分离（DistServe、Mooncake，vLLM 和 SGLang 的 PD 模式）把两个阶段放到不同的机器上：预填充机器算出提示词的 KV 缓存和第一个词元，再把 KV 块通过 NVLink 或 RDMA 传给解码机器，解码机器的每一步只有解码行。这样两种干扰都消失了，两个阶段还可以各自选择硬件、批大小和并行方式，分别满足 TTFT 和 TPOT 的目标。代价是每个请求都要传一次 KV 缓存，而且要调好两类机器的数量比例。 | Prefill is compute-bound, decode bandwidth-bound. In one engine, a long prompt's prefill shares a step with the requests that are decoding, and every user waits for that step (the TPOT tail grows); a new prompt may also queue behind decode steps (TTFT grows). Prefill/decode disaggregation (DistServe, Mooncake; vLLM's and SGLang's PD modes) puts the two phases on different machines: a prefill machine computes the prompt's KV cache and first token and sends the KV blocks over NVLink or RDMA to a decode machine, whose steps carry decode rows only. Both kinds of interference go, and each phase gets its own hardware, batch size and parallelism, sized to a TTFT target and a TPOT target separately. The price is one KV-cache transfer per request, and a ratio of prefill to decode machines to tune. |
#
# The proof with chapter 06's two engines in one process, each on a clock of its own: the
# tokens are the ones plain generation gives (the handed-over KV blocks are the right ones),
# and the decode engine's steps never carry a piece of a prompt longer than its last token.

# %%
from minillm.engine.disaggregation import (DecodeScheduler, PrefillScheduler,
                                           serve_colocated, serve_disaggregated)


def serving_engine(kind, **options):
    return minillm.Engine(model, tokenizer, scheduler=kind, num_blocks=64, block_size=16,
                          max_num_seqs=4, enable_prefix_caching=False, record=True, **options)


pd_prompts = [book[40 * i:40 * i + (48 if i % 2 else 144)] for i in range(4)]
pd_arrivals = [(0.05 * i, p, {"max_new_tokens": N, "ignore_eos": True})
               for i, p in enumerate(pd_prompts)]
decoder = serving_engine(DecodeScheduler)
split = serve_disaggregated(serving_engine(PrefillScheduler), decoder, pd_arrivals)
together = serve_colocated(serving_engine("continuous"), pd_arrivals)
for name, served in (("one engine", together), ("prefill + decode", split)):
    print(f"{name:>16}: " + ", ".join(f"{k} {1e3 * v:.0f} ms" for k, v in
                                      served.summary().items()))
print(f"hand-over: {split.handoff_bytes / 1e6:.2f} MB of KV blocks for {len(pd_prompts)} "
      f"prompts, copied in {1e3 * split.handoff_seconds:.1f} ms")
widest = max(n for step in decoder.steps for _, n, _ in step.items)
print(f"the decode engine ran at most {widest} token of a request in one step")
plain = [minillm.generate(model, tokenizer, p, max_new_tokens=N, ignore_eos=True).token_ids
         for p in pd_prompts]
assert all(agree(model, p, o.token_ids, t) for p, o, t in zip(pd_prompts, split.outputs, plain))
assert widest == 1  # decode rows only: the last prompt token, then one token a step

# %% [markdown]
# The timings above are one run each, so they carry no verdict: chapter 06 §11 repeats the
# comparison interleaved and reads the TPOT tail and the longest gap, where the interference
# shows.

# %% [markdown]
# ## Q27 · KV 缓存可以量化吗？能省多少，代价是什么？ Can the KV cache be quantized, what does it save, and what does it cost?
#
# | 中文 | English |
# |---|---|
# | 可以。上下文长、批量大时，KV 缓存常常比权重还大，而解码每一步都要把它整个读一遍。把键和值从 fp16 存成 int8 或 fp8（E4M3），显存和每步读的字节都减半，同样的显存能放下约两倍的词元（更长的上下文或更大的批）。做法是每个词元的每个头（或每个通道）配一个缩放因子，写入缓存时量化，做注意力之前反量化（或者用直接读低精度数的算子）。键里常有少数离群通道，所以键按通道量化、值按词元量化效果更好（KIVI 的做法）；降到 4 位、2 位时误差明显变大。vLLM 的 kv_cache_dtype="fp8" 和 TensorRT-LLM 的 INT8/FP8 KV 缓存都是这个思路。 | Yes. With long contexts and large batches the KV cache is often larger than the weights, and every decode step reads all of it. Storing keys and values as int8 or fp8 (E4M3) instead of fp16 halves the memory and the bytes each step reads: the same memory holds about twice the tokens (a longer context or a larger batch). The recipe: a scale for each head of each token (or for each channel), quantize when writing into the cache, dequantize before attention (or use a kernel that reads the low-precision values). Keys carry a few outlier channels, so per-channel scales for keys and per-token scales for values work better (KIVI's choice); at 4 or 2 bits the error grows clearly. vLLM's kv_cache_dtype="fp8" and TensorRT-LLM's INT8/FP8 KV caches follow this idea. |
#
# The proof, emulated: prefill 128 tokens of text into a real cache, replace its keys and values
# by their quantized-and-dequantized values (one scale per token and head), then score the next
# 64 tokens against that cache. The bytes are what a cache storing the codes and an fp16 scale
# would hold.

# %%
kv_text = book[1000:1192]
context, scored = kv_text[:128], kv_text[128:]


def absmax_roundtrip(bits):
    qmax = 2 ** (bits - 1) - 1

    def roundtrip(x):  # one scale per token and head, over its head_dim values
        scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-8) / qmax
        return (x / scale).round().clamp(-qmax, qmax) * scale
    return roundtrip


def fp8_roundtrip(x):  # e4m3: 4 exponent bits, 3 mantissa bits, largest value 448
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-8) / 448
    return (x / scale).to(torch.float8_e4m3fn).to(x.dtype) * scale


def score_with_cache(roundtrip=None):
    cache = KVCache.for_model(model, batch_size=1, max_tokens=len(kv_text))
    with torch.inference_mode():
        model(torch.tensor([context], device=device), cache=cache)
        if roundtrip is not None:
            for store in (cache.keys, cache.values):
                for held in store:
                    held[:, :, :cache.length] = roundtrip(held[:, :, :cache.length])
        logits = model(torch.tensor([scored], device=device), cache=cache)[0, :-1].float().cpu()
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(scored[1:]))
    return float(nll.exp()), logits


formats = {"fp16 (reference)": (None, 16), "fp8 e4m3": (fp8_roundtrip, 8),
           "int8": (absmax_roundtrip(8), 8), "int4": (absmax_roundtrip(4), 4)}
exact_ppl, exact_logits = score_with_cache()
kv_error, kv_ppl = {}, {}
for name, (roundtrip, bits) in formats.items():
    ppl, logits = score_with_cache(roundtrip) if roundtrip else (exact_ppl, exact_logits)
    kv_error[name], kv_ppl[name] = (logits - exact_logits).abs().max().item(), ppl
    per_head = c.head_dim * bits / 8 + (2 if roundtrip else 0)  # codes + an fp16 scale
    per_token = 2 * c.n_layers * c.n_kv_heads * per_head
    print(f"{name:>16}: {per_token / 1e3:5.1f} kB a token ({2 * c.head_dim / per_head:.2f}x "
          f"the tokens of fp16 in the same memory); perplexity {ppl:.3f}, largest logit error "
          f"{kv_error[name]:.3f}")
assert all(abs(kv_ppl[f] / exact_ppl - 1) < 0.01 for f in ("int8", "fp8 e4m3"))  # 8 bits: ~free
assert kv_error["int8"] < kv_error["int4"] / 4 and kv_error["fp8 e4m3"] < kv_error["int4"] / 2

# %% [markdown]
# Over 64 scored tokens a perplexity moves by chance by a percent or more, in either direction
# (int4's may even come out lower); the largest logit error is the steadier measure, and it
# grows several times from 8 bits to 4.

# %% [markdown]
# ## Q28 · 什么是分块预填充？它解决什么问题？ What is chunked prefill, and what does it fix?
#
# | 中文 | English |
# |---|---|
# | 连续批处理让预填充和解码在同一步里进行。一个很长的提示词一次预填充完，这一步就很长，所有正在解码的请求都要等它，出现一次明显的卡顿（TPOT 的尾部和词元之间的间隔变大）。分块预填充给每一步定一个词元预算（vLLM 的 max_num_batched_tokens），把长提示词切成若干块，每步只算一块，和解码行一起跑：每一步都不长，正在生成的用户节奏平稳。代价是长提示词自己的 TTFT 变长：要多跑几步，每一块都要再读一遍前面各块的键，每一步还有固定开销。预算的大小就是 TTFT 和 TPOT 之间的权衡；同一步里计算受限的预填充和带宽受限的解码也正好互补。 | Continuous batching runs prefill and decode in the same step. A long prompt prefilled at once makes that step long, and every decoding request waits for it: one visible stall (the TPOT tail and the gaps between tokens grow). Chunked prefill gives each step a token budget (vLLM's max_num_batched_tokens) and cuts a long prompt into chunks, one per step, run beside the decode rows: every step stays short and the running users keep their pace. The price is the long prompt's own TTFT: more steps, each chunk reads the earlier chunks' keys again, and every step pays its fixed cost. The budget sets the trade between TTFT and TPOT; and a step that mixes compute-bound prefill with bandwidth-bound decode uses the hardware better. |
#
# The proof with chapter 06's measurement: three requests are decoding when a long prompt
# arrives, once with a budget larger than the prompt and once with a small one:

# %%
from minillm.engine.interference import long_prompt_arrival

LONG, CHUNK = (192, 32) if CI else (384, 64)
long_prompt = book[2000:2000 + LONG]
decoding = [tokenizer.encode(f"Request {i}: tell me about rivers.") for i in range(3)]
arrivals = {"whole": [], "chunked": []}
for _ in range(REPEATS):  # interleaved
    for mode, budget in (("whole", LONG + len(decoding)), ("chunked", CHUNK)):
        engine = minillm.Engine(model, tokenizer, num_blocks=64, block_size=16, max_num_seqs=4,
                                max_num_batched_tokens=budget, enable_prefix_caching=False)
        arrivals[mode].append(long_prompt_arrival(engine, decoding, long_prompt))
for mode, runs in arrivals.items():
    print(f"{mode:>8} (budget {runs[-1].budget}): prefilled in {runs[-1].steps} steps; the "
          f"running requests' longest gap {1e3 * runs[-1].stall:.0f} ms, the long prompt's "
          f"TTFT {1e3 * runs[-1].ttft:.0f} ms")
stall = Comparison(tuple(r.stall for r in arrivals["whole"]),
                   tuple(r.stall for r in arrivals["chunked"]))
wait = Comparison(tuple(r.ttft for r in arrivals["whole"]),
                  tuple(r.ttft for r in arrivals["chunked"]))
print(f"chunked / whole: longest gap {stall.spread_text()}; the long prompt's TTFT "
      f"{wait.spread_text()}")
print({True: "chunking did not shorten the stall in any repetition", None: TOO_NOISY,
       False: "chunking shortened the running requests' longest wait in every repetition"}
      [stall.above(1.0)], f"({load_average()})")
assert all(r.steps >= LONG // CHUNK for r in arrivals["chunked"])  # the prompt was cut
assert all(r.steps == 1 for r in arrivals["whole"])

# %% [markdown]
# ## Q29 · 动态批处理和连续批处理有什么区别？ Dynamic batching against continuous batching?
#
# | 中文 | English |
# |---|---|
# | 动态批处理（Triton、TF Serving 这类通用推理服务器的做法）决定的是一批什么时候开始：请求到达后先等一小段时间，或者等凑够批大小，再一起送进模型；一批开始后就像静态批处理一样，一直跑到最长的请求结束，中途不能加入新请求。对分类这类一次前向传播就得到结果的模型，这很合适；对要生成几百个词元的大模型，新请求可能要等整批跑完。连续批处理（迭代级调度）每一步都重新组批：结束的请求立刻离开，新请求下一步就能加入。⚠️ 有些资料把两个名字混用，面试时要讲清楚区别在哪里：调度的粒度是整个请求，还是每一次迭代。 | Dynamic batching (what general inference servers such as Triton and TF Serving do) decides when a batch starts: arriving requests wait for a short window, or until the batch is full, then go into the model together; once started, the batch runs like a static batch until its longest request ends, and nobody joins midway. That suits models whose answer is one forward pass, such as classifiers; for an LLM generating hundreds of tokens, a new request may wait for the whole batch. Continuous batching (iteration-level scheduling) rebuilds the batch every step: a finished request leaves at once and a new one joins at the next step. ⚠️ Some texts use the two names for one thing; in an interview, say where the difference lies: scheduling per request or per iteration. |
#
# The proof: a request arrives while a batch is two steps into a long answer. The static
# scheduler runs a started batch to its end, as dynamic batching does once its window closed;
# the continuous scheduler takes the newcomer in at the next step.

# %%
def steps_until_first_token(kind, busy_tokens=3 * N):
    engine = minillm.Engine(model, tokenizer, scheduler=kind, num_blocks=64, block_size=16,
                            max_num_seqs=4)
    engine.add_request(ids, max_new_tokens=busy_tokens, ignore_eos=True)
    engine.step()
    engine.step()  # the batch has started: a prefill step, then a decode step
    late = engine.add_request(text_ids, max_new_tokens=4, ignore_eos=True)
    for steps in range(1, 4 * busy_tokens):
        if any(o.request_id == late and o.token_ids for o in engine.step()):
            break
    engine.run()
    return steps


waits = {kind: steps_until_first_token(kind) for kind in ("static", "continuous")}
for kind, steps in waits.items():
    print(f"{kind:>10}: the late request's first token came {steps} steps after it arrived")
assert waits["continuous"] == 1 < waits["static"]

# %% [markdown]
# ## Q30 · MHA、GQA、MQA 和 MLA 有什么区别？ MHA, GQA, MQA and MLA: what is the difference?
#
# | 中文 | English |
# |---|---|
# | 四者的区别在于 KV 缓存里每个词元存什么。多头注意力（MHA）的每个查询头都有自己的键头和值头。多查询注意力（MQA）让所有查询头共用一个键值头，缓存最小，但质量有所下降。分组查询注意力（GQA，Llama 2/3、SmolLM2 都用它）取两者之间：每组查询头共用一个键值头，缓存是 MHA 的 kv_heads/heads。多头潜在注意力（MLA，DeepSeek-V2/V3）不存各个头的键和值，而是每层每个词元存一个压缩的潜在向量（外加一小段携带 RoPE 的键），计算时用上投影矩阵还原出各头的键和值（上投影可以并入查询投影和输出投影）。解码是带宽受限的：每个词元的缓存越小，同样的显存能放下的上下文和批就越大，每步要读的字节也越少。 | The four differ in what the KV cache stores per token. Multi-head attention (MHA) gives every query head its own key and value head. Multi-query attention (MQA) shares one key/value head among all query heads: the smallest cache, at some cost in quality. Grouped-query attention (GQA; Llama 2/3 and SmolLM2 use it) sits between: each group of query heads shares a key/value head, a cache kv_heads/heads the size of MHA's. Multi-head latent attention (MLA; DeepSeek-V2/V3) stores no per-head keys and values but one compressed latent vector per token and layer (plus a small key part that carries RoPE), and rebuilds the heads' keys and values by up-projections (which can be folded into the query and output projections). Decode is bandwidth-bound: the smaller each token's cache, the longer the context and the larger the batch a memory holds, and the fewer bytes each step reads. |
#
# The proof: SmolLM2's own key projection and cache, against the formula chapter 03b uses for
# every design; then the designs side by side for two published shapes (arithmetic).

# %%
from minillm.generation.kv_designs import DESIGNS, PUBLISHED, bytes_per_token

key_rows = first.attn.k_proj.weight.shape[0]
probe = KVCache.for_model(model, batch_size=1, max_tokens=16)
with torch.inference_mode():
    model(torch.tensor([ids], device=device), cache=probe)
measured_per_token = probe.nbytes // probe.length
print(f"SmolLM2's k_proj has {key_rows} output rows: {key_rows // c.head_dim} key heads for "
      f"{c.n_heads} query heads; its cache holds {measured_per_token:,} bytes a token in fp32")
for name in ("Llama-3-8B", "DeepSeek-V3"):
    per_design = {d: bytes_per_token(PUBLISHED[name], d) for d in DESIGNS}
    print(f"{name:>12}, fp16, kB a token: " + ", ".join(
        f"{d} {b / 1e3:.0f}" if b else f"{d} (not defined)" for d, b in per_design.items()))
assert key_rows == c.n_kv_heads * c.head_dim < c.n_heads * c.head_dim
assert measured_per_token == bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA",
                                             bytes_per_value=4)

# %% [markdown]
# ## Q31 · GPTQ、AWQ 和 SmoothQuant 分别解决什么问题？ GPTQ, AWQ and SmoothQuant: what does each fix?
#
# | 中文 | English |
# |---|---|
# | 三者都用少量校准数据，目标是让量化后这一层的输出接近原来的输出，而不只是让权重接近原来的权重。GPTQ（仅权重量化，常用 3 位或 4 位）逐列量化权重，并利用校准激活的二阶信息（H = XᵀX 的逆），把每一列的舍入误差补偿到还没有量化的列上，层输出的误差比直接四舍五入（RTN）小得多。AWQ（也是仅权重量化）看到：激活大的输入通道对应的权重最重要。量化前把这些通道的权重乘以 s = mean\|x\|^α、激活除以同样的 s，数学上完全等价，却让重要权重的相对舍入误差变小；α 在校准数据上搜索，不需要反向传播，也不需要二阶信息。SmoothQuant（W8A8，权重和激活都是 int8）针对激活里的离群通道：它们让激活量化的误差很大。它把激活的尺度按 s = max\|X\|^α / max\|W\|^(1−α) 迁移到权重上（X/s，W·s），两边都变得容易量化，于是可以用 int8 矩阵乘法。W4A16（GPTQ、AWQ）省显存和带宽，适合小批量解码；W8A8（SmoothQuant）和 FP8 还能用上低精度计算单元，适合计算受限的大批量。 | All three use a little calibration data, and aim to keep the quantized layer's outputs close to the original outputs, not merely its weights close to the original weights. GPTQ (weight-only, often 3 or 4 bits) quantizes the weight one column at a time and pushes each column's rounding error onto the columns not yet quantized, using second-order information from the calibration activations (the inverse of H = XᵀX): the layer's output error falls well below round-to-nearest (RTN). AWQ (also weight-only) notes that the weights of input channels with large activations matter most. Before quantizing, it multiplies those channels' weights by s = mean\|x\|^α and divides the activations by the same s, which changes nothing mathematically but shrinks the important weights' relative rounding error; α is searched on the calibration data, with no backpropagation and no second-order information. SmoothQuant (W8A8: int8 weights and activations) targets the activations' outlier channels, which make activation quantization inaccurate. It migrates the activations' scale into the weights, s = max\|X\|^α / max\|W\|^(1−α) (X/s, W·s), so both sides quantize well and int8 matrix multiplies can be used. W4A16 (GPTQ, AWQ) saves memory and bandwidth, which suits small-batch decode; W8A8 (SmoothQuant) and FP8 also use low-precision arithmetic units, which suits large, compute-bound batches. |
#
# The proof on one real layer: the feed-forward gate projection of layer 20 (576 inputs, 1,536
# outputs). Its inputs are captured for 1,024 tokens of text (calibration) and 256 more (the
# test); every method below is judged by the layer's output error on the test tokens. First,
# the outliers:

# %%
from minillm.quant.basics import roundtrip

LAYER, BITS, GROUP = 20, 3, 64
gate = model.layers[LAYER].mlp.gate_proj
captured = []
hook = gate.register_forward_hook(
    lambda module, args, out: captured.append(args[0][0].float().cpu()))
with torch.inference_mode():
    for start in range(3000, 3000 + 5 * 256, 256):
        model(torch.tensor([book[start:start + 256]], device=device))
hook.remove()
x_cal, x_test = torch.cat(captured[:4]), captured[4]
w = gate.weight.detach().float().cpu()  # (outputs, inputs)
channel_max = x_cal.abs().amax(0)
print(f"layer {LAYER}'s gate_proj inputs, {x_cal.shape[1]} channels: the largest reaches "
      f"{channel_max.max():.1f}, the median channel {channel_max.median():.2f}")
assert channel_max.max() > 5 * channel_max.median()  # outlier channels: several times the median

# %% [markdown]
# Each method in a few lines, written here in front of you:

# %%
def output_error(w_hat, x, x_hat=None):
    """The layer's relative output error: ‖x̂ ŵᵀ − x wᵀ‖ / ‖x wᵀ‖."""
    exact = x @ w.T
    return float(((x if x_hat is None else x_hat) @ w_hat.T - exact).norm() / exact.norm())


def rtn(weight):  # round to nearest: one scale per group of 64 inputs
    return roundtrip(weight, "absmax", BITS, "group", GROUP)


def gptq(weight, x, damp=0.01):
    weight = weight.double().clone()
    h = x.double().T @ x.double()
    h += damp * h.diagonal().mean() * torch.eye(len(h), dtype=h.dtype)
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    qmax = 2 ** (BITS - 1) - 1
    for j in range(weight.shape[1]):
        if j % GROUP == 0:  # the group's scale, from its columns as they are now
            scale = weight[:, j:j + GROUP].abs().amax(1).clamp_min(1e-12) / qmax
        q = (weight[:, j] / scale).round().clamp(-qmax, qmax) * scale
        # this column's rounding error, spread over the columns still to come
        weight[:, j + 1:] -= torch.outer((weight[:, j] - q) / u[j, j], u[j, j + 1:])
        weight[:, j] = q
    return weight.float()


def awq(weight, x):
    importance = x.abs().mean(0).clamp_min(1e-6)  # each input channel's mean activation
    tries = {}
    for alpha in [i / 10 for i in range(11)]:  # alpha = 0 is plain RTN
        s = importance ** alpha
        tries[alpha] = rtn(weight * s) / s
    alpha = min(tries, key=lambda a: output_error(tries[a], x))
    return tries[alpha], alpha


def smooth_scales(x, weight, alpha=0.5):  # SmoothQuant: from the calibration activations
    return x.abs().amax(0).clamp_min(1e-5) ** alpha / weight.abs().amax(0).clamp_min(1e-5) ** (1 - alpha)


def w8a8_error(weight, x, s=None):
    """int8 weights (a scale per output row) and int8 activations (a scale per token); with
    SmoothQuant's scales `s`, x / s and weight * s are quantized instead (same product)."""
    s = torch.ones(x.shape[1]) if s is None else s
    x_hat = roundtrip(x / s, "absmax", 8, "channel")
    w_hat = roundtrip(weight * s, "absmax", 8, "channel")
    return output_error(w_hat, x, x_hat)

# %%
awq_w, awq_alpha = awq(w, x_cal)
errors = {"RTN": output_error(rtn(w), x_test), "GPTQ": output_error(gptq(w, x_cal), x_test),
          "AWQ": output_error(awq_w, x_test), "W8A8": w8a8_error(w, x_test),
          "W8A8 + SmoothQuant": w8a8_error(w, x_test, smooth_scales(x_cal, w))}
for name, error in errors.items():
    what = f"{BITS}-bit weights, groups of {GROUP}" if "W8A8" not in name else "int8 x int8"
    print(f"{name:>18} ({what}): output error {error:.2%} on the test tokens")
print(f"AWQ chose alpha = {awq_alpha} on the calibration tokens")
assert errors["GPTQ"] < errors["RTN"] and errors["AWQ"] < errors["RTN"]
assert errors["W8A8 + SmoothQuant"] < errors["W8A8"]

# %% [markdown]
# GPTQ and AWQ both beat round-to-nearest on the same 3-bit grid, using only 1,024 tokens of
# calibration; SmoothQuant makes the int8 × int8 product more accurate by moving the outliers'
# scale into the weights. This is one layer: chapter 07 compares whole-model perplexity.

# %% [markdown]
# ## Q32 · EAGLE、MTP 和独立的草稿模型有什么不同？ EAGLE and MTP against a separate draft model?
#
# | 中文 | English |
# |---|---|
# | 推测解码的加速取决于两件事：接受率 α，以及起草的代价 c（草稿走一步的时间与目标模型走一步的时间之比）。每轮起草 k 个词元，平均得到 (1 − α^(k+1)) / (1 − α) 个词元，花费约 1 + k·c 个目标步的时间。独立的草稿模型（同系列的小模型）要另外部署，分词器必须相同，α 通常不高，c 也不小。Medusa 在目标模型最后的隐藏状态上加几个解码头，一次猜出后面几个位置。EAGLE 训练一个只有一层的小网络，根据目标模型顶层的特征（而不是词元）自回归地起草：它看到的是目标模型自己的表示，所以 α 高，c 很小（约一层的开销）；EAGLE-2/3 还按置信度动态展开一棵草稿树。MTP（多词元预测，DeepSeek-V3）在预训练时就加入预测再下一个词元的模块，推理时直接把它当作草稿，DeepSeek-V3 报告的接受率为 85%–90%。它们都不改变输出的分布：验证用的是同一条接受规则。 | Speculative decoding's speed-up rests on two things: the acceptance rate α, and the draft's cost c (one draft step's time over one target step's). Drafting k tokens a round yields (1 − α^(k+1)) / (1 − α) tokens on average, for about 1 + k·c target steps of time. A separate draft model (a small model of the same family) must be deployed alongside, must share the tokenizer, and usually brings a modest α at a real c. Medusa adds a few decoding heads on the target's last hidden state, each guessing a later position at once. EAGLE trains a one-layer network that drafts autoregressively from the target's top-layer features rather than from tokens: it sees the target's own representation, so α is high and c small (about one layer); EAGLE-2/3 also grow a draft tree by confidence. MTP (multi-token prediction, DeepSeek-V3) trains modules that predict the token after next during pre-training, and serving uses them as the draft: DeepSeek-V3 reports acceptance rates of 85–90%. None of them changes the output distribution: verification uses the same acceptance rule. |
#
# The proof with two drafts cut from SmolLM2 itself, untrained (its first 16 and first 28
# layers, chapter 08's `first_layers`): the draft that shares more of the target's
# computation, as EAGLE's features do, is accepted more often; the target's tokens are the same
# either way. The speed-up each would give follows from the formula, with c = draft layers / 30:

# %%
from minillm.speculative import (ModelDraft, expected_tokens_per_pass, first_layers,
                                 speculative_generate)

K = 4
story = tokenizer.encode("Once upon a time, in a small village by the sea, there lived")
plain = minillm.generate(model, tokenizer, story, max_new_tokens=2 * N, ignore_eos=True)
alpha = {}
for depth in (16, 28):
    run = speculative_generate(model, tokenizer, story, ModelDraft(first_layers(model, depth)),
                               k=K, max_new_tokens=2 * N, ignore_eos=True)
    alpha[depth] = run.stats.acceptance_rate
    cost = depth / c.n_layers
    expected = expected_tokens_per_pass(alpha[depth], K)
    print(f"draft of {depth:>2} layers: acceptance {alpha[depth]:.0%}, "
          f"{run.stats.tokens_per_pass:.2f} tokens per target pass (the formula: {expected:.2f}); "
          f"expected speed-up at c = {cost:.2f}: {expected / (1 + K * cost):.2f}x")
    assert agree(model, story, run.token_ids, plain.token_ids)
head = expected_tokens_per_pass(alpha[28], K) / (1 + K / c.n_layers)
print(f"arithmetic: a one-layer head (c = 1/{c.n_layers}) with the 28-layer draft's acceptance "
      f"would give {head:.2f}x")
assert alpha[28] > alpha[16]

# %% [markdown]
# Cut from the target without training, a shallow draft is rarely right and a deep one costs
# almost a whole target step: neither pays. That is the gap EAGLE and MTP close: a head of
# about one layer, trained to predict from the target's own features, is accepted often at
# little cost.

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
# - In an interview, the formula is the answer and the measurement is the proof: weight bytes
#   and KV bytes set what fits, bandwidth over bytes sets the decode bound, and the acceptance
#   rate with the draft's cost sets what speculation buys.
# - Most serving techniques move work or bytes rather than remove them: FlashAttention keeps the
#   scores on chip, chunked prefill and disaggregation keep prefill from stalling decode, KV-cache
#   quantization and MLA shrink what each step reads.
# - Places the source text needs care: int4 here costs 5 bits a weight, not 4; "dynamic
#   batching" is not continuous batching.
# - The exercise `exercises/10_interview_qa.ipynb` asks three whiteboard estimates: the decode
#   bound of a 70B fp8 model on 4 GPUs, the largest batch an 80 GB KV pool holds, and the
#   speed-up speculative decoding gives at α = 0.7 with 4 drafted tokens.
