# 中文版 · 10b_interview_engine.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=338f5707
# # 10b · 面试题（interview questions），第二部分：推理引擎
#
# 这是第 10 章的 Q12–Q24，接在 `10_interview_qa`（Q1–Q11）之后、`10c_interview_serving`（Q25–Q32 和自测）之前。和前面一样，每道题先给出答案，再用一个以 `assert` 收尾的代码单元格证明它。

# %% en=420c0b56
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

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时少生成几个词元
N = 8 if CI else 16              # 每个演示生成的新词元数
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("两次运行的词元这样比较：", rule(model))
ids = tokenizer.encode("The capital of France is")
paragraph = ("The printing press was invented in the fifteenth century. It made books cheaper, "
             "and ideas spread faster across Europe than ever before. Within fifty years, "
             "millions of copies had been printed in hundreds of cities.")
text_ids = tokenizer.encode(paragraph)
weights = weight_bytes(model)

# %% [markdown] en=00281797
# ---
# # 第 3 部分 · 预填充、解码与 KV 缓存

# %% [markdown] en=f920dfab
# ## Q12 · 预填充和解码有什么不同？
#
# 预填充（prefill）用一次前向传播处理整个提示词，所有位置并行，矩阵乘法规模大，是计算受限（compute-bound）的，它决定首个词元生成时间（time to first token，TTFT）。解码（decode）每步只处理一个新词元，每读一遍全部权重只做很少的计算，是带宽受限（bandwidth-bound）的，它决定每个输出词元的时间（time per output token，TPOT）。所以按每个词元算，预填充远比解码便宜。

# %% en=dc9e8d81
P = 64
prefill_s = prefill_time(model, P, repeats=2)
steps, _ = decode_step_times(model, tokenizer, ids, N)
decode_s = statistics.median(steps[1:])
print(f"预填充 {P} 个词元：{1e3 * prefill_s:.0f} ms，每个词元 {1e3 * prefill_s / P:.2f} ms")
print(f"一个解码步：每个词元 {1e3 * decode_s:.1f} ms"
      f"（是预填充中一个词元的 {decode_s / (prefill_s / P):.0f} 倍）")
assert prefill_s / P < decode_s

# %% [markdown] en=1e12e85a
# ## Q13 · KV 缓存有多大？GQA 怎样减小它？
#
# 每个序列的 KV 缓存（KV cache）= 2（K 和 V）× 层数 × KV 头数 × 头维度 × 词元数 × 每个数的字节数；一个批次再乘以批大小。分组查询注意力（grouped-query attention，GQA）让一组查询头共用一个 KV 头：SmolLM2 有 9 个查询头、3 个 KV 头，缓存只有多头注意力（multi-head attention，MHA）的 1/3；多查询注意力（multi-query attention，MQA）只有 1 个 KV 头。例：Llama-2-7B（32 层、32 个 KV 头、头维度 128）用 fp16 存 4096 个词元，约 2.1 GB。

# %% en=c45d5ec5
kv = KVCache.for_model(model, batch_size=2, max_tokens=64)
with torch.inference_mode():
    model(torch.tensor([ids, ids]), cache=kv)
per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
print(f"{kv.length} 个词元 x 批大小 2：{kv.nbytes} 字节 = 每个序列每个词元 {per_token} 字节")
mha = 2 * c.n_layers * c.n_heads * c.head_dim * 2 * c.max_seq_len
gqa = kv_cache_formula_bytes(c, c.max_seq_len, 2)
print(f"fp16 下上下文占满：用 GQA {gqa / 1e6:.0f} MB，不用 {mha / 1e6:.0f} MB"
      f"（{mha / gqa:.0f} 倍：{c.n_heads} 个查询头对 {c.n_kv_heads} 个 KV 头）")
llama7b = checks.kv_cache_gb_reference(32, 32, 128, 4096, 1, 2)
print(f"Llama-2-7B，4096 个词元，fp16：{llama7b:.2f} GB")
assert kv.nbytes == per_token * len(ids) * 2 == kv_cache_formula_bytes(c, len(ids), 4, 2)

# %% [markdown] en=0ef557a2
# ## Q14 · 生成什么时候停止？
#
# 有三种条件：
#
# 1. 模型生成了结束词元（EOS，对话模型里是 `<|im_end|>`）；
# 2. 达到 `max_new_tokens` 或上下文窗口的长度；
# 3. 用户给的条件，例如停止字符串（文本在它出现之前截断，不返回它）。
#
# 停止之后，这个序列的 KV 缓存就可以释放了。

# %% en=8d4890b5
first = minillm.generate(model, tokenizer, ids, max_new_tokens=N).token_ids  # 贪心解码
by_length = minillm.generate(model, tokenizer, ids, max_new_tokens=3)
by_eos = minillm.generate(model, tokenizer, ids, max_new_tokens=N, eos_token_id=first[2])
by_stop = minillm.generate(model, tokenizer, ids, max_new_tokens=N, stop=["."])
for name, r in [("length", by_length), ("eos", by_eos), ("stop", by_stop)]:
    print(f"{name:>6}：finish_reason={r.finish_reason!r}，{len(r.token_ids)} 个词元，"
          f"{r.text!r}")
assert by_length.finish_reason == "length" and len(by_length.token_ids) == 3
assert by_eos.finish_reason == "eos" and by_eos.token_ids == first[:3]
assert by_stop.finish_reason == "stop" and "." not in by_stop.text

# %% [markdown] en=d5a6acac
# ---
# # 第 4 部分 · 解码策略与性能测量

# %% [markdown] en=d5b5390e
# ## Q15 · 贪心解码和束搜索各有什么缺点？
#
# 贪心解码（greedy decoding，也常说贪心搜索）每步只取概率最大的词元：快，但短视，会错过整体概率更高的序列（陷入局部最优），而且容易重复。束搜索（beam search）同时保留 `num_beams` 个候选，找到的序列整体概率通常更高（但不保证：束太窄时，它也会丢掉最优序列的前缀）；代价是计算量和 KV 缓存都是贪心解码的 `num_beams` 倍，仍然会重复，输出也平淡，不适合开放式对话。它适合翻译、摘要这类有“正确答案”的任务。

# %% en=bde34a44
from itertools import product

from minillm.decoding import GenerationConfig, beam_search
from minillm.course.table_model import TableModel

paper = TableModel(["A", "B", "C"], {  # 第 04 章那个写在纸上的模型
    (): {"A": 0.5, "B": 0.4, "C": 0.1}, ("A",): {"A": 0.3, "B": 0.4, "C": 0.3},
    ("B",): {"A": 0.9, "B": 0.05, "C": 0.05}, ("A", "B"): {"A": 0.3, "B": 0.3, "C": 0.4},
    ("B", "A"): {"A": 0.2, "B": 0.2, "C": 0.6}})
found = {n: [paper.vocab[i] for i in beam_search(
    paper, [0], GenerationConfig(num_beams=n, max_new_tokens=3), eos_token_ids=[])[0].token_ids]
         for n in (1, 2)}
best = list(max(product(paper.vocab, repeat=3), key=paper.probability))
print(f"纸上的模型：贪心解码 {found[1]} P = {paper.probability(found[1]):.3f}；2 束 {found[2]} "
      f"P = {paper.probability(found[2]):.3f}；全局最优 {best}")
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
print(f"束搜索找到概率更高的序列 {wins} 次，贪心解码 {losses} 次，"
      f"打平 {len(prompts) - wins - losses} 次")
assert wins > losses  # 通常概率更高，但不总是：纸上的模型说明了贪心解码怎样输掉

# %% [markdown] en=597c827f
# ## Q16 · TTFT、TPOT、延迟和吞吐量是什么关系？
#
# - **TTFT**（首个词元生成时间）：从请求开始到第一个词元，包括分词和预填充。
# - **TPOT**（每个输出词元的时间）：之后相邻两个词元的平均间隔。
# - **端到端延迟（end-to-end latency）** = TTFT + TPOT × (输出词元数 − 1)：第一个词元在 TTFT 时刻到达，之后只有 n − 1 个间隔，所以对单个请求，这个等式按定义成立。原始资料写的 TTFT + TPOT × n 多算了一个 TPOT，回答短时差别很明显。
# - **吞吐量（throughput）**：所有请求的输出词元总数 / 总时间。
#
# ⚠️ 原始资料说 TPOT 为 100 ms 即每秒 10 个词元，约合每分钟 450 个英文单词：这假设每个词元约 0.75 个单词，而这个比例取决于分词器和文本。下面用本模型的分词器实测。

# %% en=e11d430c
with Timer(device) as stopwatch:  # 我们自己的秒表，包住整个调用
    timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
wall = stopwatch.seconds
m = timed.metrics
print(m)
arrived = [t - m.start for t in m.token_times]  # 第 k 个词元到达的时刻，k = 1..n
ours = [m.ttft + m.tpot * (k - 1) for k in range(1, m.n_tokens + 1)]
source = [m.ttft + m.tpot * k for k in range(1, m.n_tokens + 1)]
nearer = sum(abs(a - o) < abs(a - s) for a, o, s in zip(arrived, ours, source))
print(f"这 {m.n_tokens} 个词元的延迟：TTFT + TPOT x (n - 1) = {1e3 * ours[-1]:.1f} ms，"
      f"TTFT + TPOT x n = {1e3 * source[-1]:.1f} ms（相差一个 TPOT，{1e3 * m.tpot:.1f} ms）")
print(f"{m.n_tokens} 个词元中，有 {nearer} 个的时间戳更接近 TTFT + TPOT x (k - 1)，"
      f"{m.n_tokens - nearer} 个更接近 TTFT + TPOT x k")
print(f"包住整个调用的秒表：{1e3 * wall:.1f} ms，最后一个词元之后还有 {1e3 * (wall - arrived[-1]):.1f} ms"
      "（把词元解码成文本、组装结果）")
with Timer(device) as stopwatch:
    pair = minillm.generate(model, tokenizer, [ids, ids], max_new_tokens=N, ignore_eos=True)
pair_wall = stopwatch.seconds
pair_rate = minillm.throughput([r.metrics for r in pair]).tokens_per_second
print(f"同时两个请求：吞吐量 {pair_rate:.1f} 词元/秒；它们的 {2 * N} 个词元除以"
      f"秒表读数：{2 * N / pair_wall:.1f} 词元/秒")
words_per_token = len(paragraph.split()) / len(text_ids)
print(f"这里每个词元约 {words_per_token:.2f} 个英文单词：每秒 10 个词元相当于"
      f"每分钟 {600 * words_per_token:.0f} 个单词（原始资料：450）")
assert wall >= arrived[-1]  # 词元的时间戳都落在秒表计时的调用之内
assert abs(pair_rate - 2 * N / pair_wall) < 0.1 * pair_rate
assert 0.5 < words_per_token < 1.0

# %% [markdown] en=7998ef77
# ## Q17 · 为什么说解码受限于显存带宽？
#
# 批大小为 1 时，每个解码步都要把所有权重从内存读一遍，而每个权重只参与 2 次浮点运算（一次乘加）：fp32 下算术强度（arithmetic intensity）只有 0.5 FLOP/字节，远低于硬件的计算/带宽比。所以速度上限约为 带宽 ÷ 权重字节数，这就是内存带宽瓶颈（memory-bandwidth bound）。只有增大批（读一次权重服务多个序列）或减少字节数（量化、bf16）才能突破它。
#
# 推测解码靠的也是提高一步的算术强度：验证 k 个草稿词元的一步把 k + 1 行送进模型，权重只读一遍，每字节的运算量约是解码一步的 k + 1 倍；只要这一步仍低于硬件的计算/带宽比，多出来的几行几乎不多花时间。

# %% en=e982150a
from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.measure.roofline import peak_matmul_flops, step_cost

before = read_bandwidth(device, repeats=10)
timed = minillm.generate(model, tokenizer, ids, max_new_tokens=N, ignore_eos=True)
# 取解码前后两次测量中快的一次，每次又取 10 次读取中最快的：机器忙时只会让读取变慢
bandwidth = max(before, read_bandwidth(device, repeats=10))
bound = decode_bound(weights, bandwidth)
measured = timed.metrics.decode_tokens_per_second
step_flops, step_bytes = step_cost(c, rows=1, context=len(ids) + N)
balance = peak_matmul_flops(device, n=1024) / bandwidth
print(f"读带宽 {bandwidth / 1e9:.1f} GB/s，权重 {weights / 1e6:.0f} MB：最多 "
      f"{bound:.1f} 词元/秒；实测 {measured:.1f} 词元/秒（上限的 {measured / bound:.0%}）")
print(f"fp32 下批大小为 1 的一步：每读一个字节做 {step_flops / step_bytes:.2f} FLOP；这台机器"
      f"读一个字节的时间里能做 {balance:.1f} FLOP")
assert measured < bound  # 上限是天花板：解码速度总在它之下
assert step_flops / step_bytes < balance  # 是计算在等内存，而不是反过来

# %% [markdown] en=3d3f784e
# 推测解码里验证的一步：先数出它每字节的运算量，再拿它和缓存里同样有 16 个词元时的单词元一步比耗时，交替计时三轮：

# %% en=31d84796
from minillm.measure import TOO_NOISY, compare

K = 4
verify_flops, verify_bytes = step_cost(c, rows=K + 1, context=16)
one_flops, one_bytes = step_cost(c, rows=1, context=16)
gain = (verify_flops / verify_bytes) / (one_flops / one_bytes)


def step_of(rows, context=16):
    """一次前向传播：把 `rows` 个词元喂给已经存着 `context` 个词元的缓存。"""
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
print(f"验证 {K + 1} 个词元的一步：每字节 {verify_flops / verify_bytes:.2f} FLOP，"
      f"是单词元一步的 {gain:.2f} 倍（这台机器的计算/带宽比：{balance:.1f}）")
print(f"它与单词元一步的耗时之比：{verify.spread_text()}")
print({False: f"每一轮都不到 {K + 1} 个单词元步的一半时间",
       None: TOO_NOISY, True: f"超过了 {K + 1} 个单词元步的一半时间：在这台设备上，"
                              "这一步是计算受限的"}[verify.above((K + 1) / 2)])
assert K < gain <= K + 1  # k + 1 行，读的字节（几乎）不变
assert verify.above((K + 1) / 2) is not True  # 多出的几行搭了同一次读权重的便车

# %% [markdown] en=c68ab917
# ---
# # 第 5 部分 · 批处理、分页注意力与前缀缓存

# %% [markdown] en=7db9959c
# ## Q18 · 静态批处理和连续批处理有什么区别？
#
# 静态批处理（static batching）：一批请求一起开始，必须等最长的那个结束，整批才结束；提前结束的请求仍空占着位置（“幽灵行”），新请求只能等下一批。连续批处理（continuous batching，即迭代级调度，见 Orca/vLLM）：每一步都重新组批，结束的请求立刻离开，等待的请求立刻加入，没有空转，吞吐量更高，排队时间更短。

# %% en=a1b059c2
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
    print(f"{kind:>10}：{len(engines[kind].steps)} 步，{ghosts[kind]} 个幽灵行")
assert all(agree(model, s.prompt_token_ids, s.token_ids, r.token_ids)
           for s, r in zip(results["static"], results["continuous"]))
assert ghosts["continuous"] == 0 < ghosts["static"]
assert len(engines["continuous"].steps) < len(engines["static"].steps)

# %% [markdown] en=3332a3bd
# ## Q19 · PagedAttention 解决了什么问题？
#
# 连续存放的 KV 缓存必须按“提示词 + 最大生成长度”提前预留，因为序列实际会跑多长事先不知道：于是大量显存被预留却用不上（内部碎片），长短不一的序列还会把剩下的空间切碎（外部碎片），这些都是内存碎片（memory fragmentation）。PagedAttention 像操作系统的虚拟内存一样，把 KV 缓存切成固定大小的块（block），按需分配，用块表（block table）把逻辑位置映射到物理块：每个序列浪费的空间不到一个块，块还能在序列之间共享（前缀缓存、并行采样）。这就是分页 KV 缓存（paged KV cache）。

# %% en=7d42b3d2
steps = engines["continuous"].steps
use = memory_use(steps, max_len=c.max_seq_len)
for name, share in use.items():
    print(f"{name:>24}：预留的 KV 显存中有 {share:.1%} 存着真实的词元"
          f"（每块 {engines['continuous'].blocks.block_size} 个词元）")
block = engines["continuous"].blocks.block_size
assert all(s.paged_slots - s.used_tokens < block * max(1, s.running) for s in steps)
assert use["paged"] > use["contiguous_per_request"] > use["contiguous_max_length"]

# %% [markdown] en=c8683d39
# ## Q20 · 什么是前缀缓存？
#
# 很多请求有相同的开头（系统提示词、少样本示例、多轮对话的历史）。前缀缓存（prefix caching）记住已经算好的键和值；新请求的前缀命中时直接复用，跳过这部分预填充：TTFT 和计算量都下降，结果不变。
#
# 命中的部分有两种找法。vLLM 给每个完整的块算一个哈希（块内的词元加上前一个块的哈希），按哈希查找，所以只有完整的块能共享，末尾不满一块的部分要重算。SGLang 的 RadixAttention 把缓存的词元序列存成一棵基数树（radix tree），一直匹配到最后一个相同的词元（第 06 章第 6 节）。“只有完整的块才能共享”是块哈希的性质，不是前缀缓存本身的限制。
#
# 下面的系统提示词说的是：“你是市博物馆的助手。博物馆有三层：一层是绘画，二层是雕塑，三层是能看风景的咖啡馆。回答要简短礼貌，不知道时就说不知道。问题：”，两个问题分别问开馆时间和咖啡馆在哪里。

# %% en=75fdb1b2
system = ("You are a helpful assistant for the city museum. The museum has three floors: "
          "paintings on the first, sculpture on the second and a café with a view on the "
          "third. Answer briefly and politely, and say so when you do not know. Question: ")
questions = [system + "When does the museum open?", system + "Where is the café?"]
engine = minillm.Engine(model, tokenizer, num_blocks=64, block_size=16)
answers = [engine.generate([q], max_new_tokens=4)[0] for q in questions]  # 一个接一个地处理
stats = engine.stats()
first_ids, second_ids = (tokenizer.encode(q) for q in questions)
shared = len(os.path.commonprefix([first_ids, second_ids]))
print(f"共同前缀：{shared} 个词元，即 {shared // 16} 个 16 词元的完整块；从缓存里"
      f"复用了 {stats['prefix_cache_hit_tokens']} 个词元")
plain = [minillm.generate(model, tokenizer, q, max_new_tokens=4).token_ids for q in questions]
assert all(agree(model, a.prompt_token_ids, a.token_ids, p) for a, p in zip(answers, plain))
assert stats["prefix_cache_hit_tokens"] == 16 * (shared // 16) > 0

from minillm.engine.radix_cache import RadixCache

tree = RadixCache()  # SGLang 的做法（第 06 章第 6 节）：把第一个请求的词元放进基数树
tree.insert(first_ids + answers[0].token_ids)
matched = tree.match(second_ids)
print(f"存着第一个请求的基数树能匹配第二个请求的 {matched} 个词元：精确到词元，"
      f"而块哈希只能匹配到 {stats['prefix_cache_hit_tokens']} 个")
assert matched == shared > stats["prefix_cache_hit_tokens"]

# %% [markdown] en=a60e4f6c
# ---
# # 第 6 部分 · 量化、推测解码与横向扩展

# %% [markdown] en=e8969a77
# ## Q21 · 量化的收益和代价是什么？
#
# 把权重从 fp32/fp16 改存成 int8 或 int4，解码要读的字节就更少，在带宽受限时更快。逐通道 int8 每个权重 8 位，每行另加一个缩放因子，约为 fp32 的 1/4；这里的 int4 每 32 个权重共用一个 fp16 缩放因子和一个 fp16 最小值，平均每个权重 4 + 32/32 = 5 位，约为 fp32 的 1/6.4（fp16 的 5/16），而不是 1/8。
#
# 代价有两方面。一是精度损失：困惑度（perplexity）上升，int4 比 int8 明显。二是需要反量化（dequantize）或专用算子：每次调用都反量化的实现，或者像 transformers 的 LLM.int8()（bitsandbytes）那样把激活也量化、再把离群特征（outlier feature）拆出来单独用 fp16 计算，多出来的这些步骤会让 int8 反而比 fp16 慢。常见做法：逐通道 int8、分组 int4（GPTQ、AWQ、GGUF Q4）。

# %% en=44a7af3f
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
    print(f"{name}：线性层权重是 fp32 的 {ratios.get(name, 1.0):.3f} 倍，困惑度 {ppl[name]:.3f}")
print(f"int4：每个权重 {32 * ratios['int4']:.2f} 位，是 fp32 的 1/{1 / ratios['int4']:.1f}")
assert 0.24 < ratios["int8"] < 0.27 and 0.15 < ratios["int4"] < 0.16  # 5 位，而不是 4 位
assert abs(ppl["int8"] / ppl["fp32"] - 1) < 0.05

# %% [markdown] en=e4412ef5
# 看 int4 的困惑度时要小心：课程用的模型以 GGUF Q4_1 格式发布，它的“fp32”权重本来就是按 minillm 的 int4 方案存的 4 比特值展开成的浮点数，再量化一次几乎能原样得回这些值。这台机器上没有 16 位的 SmolLM2，所以 int4 对一个 bf16 模型的代价（通常明显多于 int8）这里只做解释，没有测。

# %% [markdown] en=bd4744f6
# ## Q22 · 推测解码为什么能加速，又不改变结果？
#
# 解码受带宽限制：目标模型（target model）对 k 个词元做一次前向传播来验证它们，比一个一个生成这 k 个词元的 k 步便宜得多（Q17 测过）。让便宜的草稿（draft，一个小模型，或者从上下文里查找 n-gram）先猜 k 个词元，目标模型一次并行验证，接受与它自己的选择一致的前缀，再加上一个它自己的词元。贪心解码时，留下的永远只是目标模型自己的 argmax，所以输出与普通贪心解码完全一样；加速多少取决于接受率（acceptance rate）和草稿的代价。这就是推测解码（speculative decoding，也常译作投机解码）。
#
# 下面的提示词是一串水果名，再让模型把它们重复一遍，这正是提示词查找（prompt lookup）草稿最擅长的情形。先数目标模型前向传播的次数（不受机器负载影响），再交替计时三轮，量出加速比。

# %% en=00671136
from minillm.speculative import PromptLookupDraft, speculative_generate

# 提示词的意思是“水果：苹果、香蕉、樱桃……同样的水果再来一遍：苹果、香蕉，”
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
passes = {"speculative": 1 + spec.stats.passes, "plain": len(plain.token_ids)}  # 预填充 + 各步
speedup = compare(with_draft, plain_greedy, repeats=3, device=device)  # 普通解码的耗时 / 推测解码的耗时
print(f"生成 {2 * N} 个词元，目标模型的前向传播：用草稿 {passes['speculative']} 次，"
      f"不用草稿 {passes['plain']} 次；加速比 {speedup.spread_text()}")
print({True: "每一轮都比普通贪心解码快", None: TOO_NOISY,
       False: "没有一轮比普通贪心解码快"}[speedup.above(1.0)])
assert agree(model, fruits, spec.token_ids, plain.token_ids)
assert passes["speculative"] < passes["plain"] and speedup.above(1.0) is not False

# %% [markdown] en=8cb34cda
# ## Q23 · 采样时，推测解码怎么保证分布不变？
#
# 草稿按 q 抽出词元 x，以概率 min(1, p(x)/q(x)) 接受；被拒绝时，从 norm(max(0, p − q)) 里重新抽一个。于是 x 最终出现的概率 = q(x)·min(1, p/q) + P(拒绝)·残差(x) = min(p, q) + max(0, p − q) = p(x)：正好是目标模型的分布，与草稿的好坏无关。草稿越像目标模型，接受率 Σ min(p, q) 就越高。这条规则就是接受规则（acceptance rule）。
#
# 下面用真实的目标模型和真实的草稿（SmolLM2 30 层中的前 24 层），在同一个上下文上演示：

# %% en=7fa68f3f
from minillm.speculative import accept_probability, first_layers, residual_distribution

with torch.inference_mode():
    p_t = torch.softmax(model(torch.tensor([ids]))[0, -1].cpu().double(), -1)
    q_d = torch.softmax(first_layers(model, 24)(torch.tensor([ids]))[0, -1].cpu().double(), -1)
accept = torch.clamp(p_t / q_d, max=1.0)  # 一次算出每个词元的 min(1, p/q)
likely = q_d.topk(5).indices  # 在草稿最看好的几个词元上，库里的规则与之一致
assert all(float(accept_probability(p_t, q_d, int(t))) == float(accept[t]) for t in likely)
accepted = q_d * accept  # 被草稿抽中且被接受
rejected = 1 - accepted.sum()
result = accepted + rejected * residual_distribution(p_t, q_d)
print(f"接受率 {accepted.sum():.3f}；把上面的恒等式算一遍：|结果 - 目标| 的最大值 "
      f"{(result - p_t).abs().max():.2e}")

# 运行库里的规则：在最可能的 40 个词元上抽 20,000 次（p 和 q 在这些词元上重新归一化）
from minillm.speculative import accept_or_resample

top = torch.cat([p_t.topk(20).indices, q_d.topk(20).indices]).unique()
p_top, q_top = p_t[top] / p_t[top].sum(), q_d[top] / q_d[top].sum()
draws = 20_000
gen = torch.Generator().manual_seed(0)
drafted = torch.multinomial(q_top.float(), draws, replacement=True, generator=gen)
tokens, kept = accept_or_resample(p_top.expand(draws, -1).float(), q_top.expand(draws, -1).float(),
                                  drafted, generator=gen)
seen = torch.bincount(tokens, minlength=len(top)).double() / draws
gap = lambda a, b: 0.5 * float((a - b).abs().sum())  # 全变差距离  # noqa: E731
print(f"抽 {draws:,} 次，接受了 {kept.float().mean():.1%}：输出与目标分布的距离 "
      f"{gap(seen, p_top):.4f}，草稿与目标分布的距离 {gap(q_top, p_top):.4f}")
assert gap(seen, p_top) < min(0.02, gap(q_top, p_top) / 3)

# %% [markdown] en=516826a5
# ## Q24 · 张量并行怎么切分模型？通信量有多大？
#
# 张量并行（tensor parallelism，Megatron-LM）把每层的权重矩阵切到多张卡上。按 Megatron 的写法 Y = XA，A 的每一列是一个输出特征：前馈网络的 gate/up 按输出特征切（列并行，column-parallel），down 按输入特征切（行并行，row-parallel），这样中间的激活不用传输，各卡的部分结果做一次全归约（all-reduce）求和即可；注意力按头切，道理相同。PyTorch 的权重 W 形状是（输出，输入），即 A 的转置：列并行取的是 W 的行，行并行取的是 W 的列，与第 09 章的图一致。
#
# 每层两次全归约，每次的数据是 (词元数 × 隐藏维度) 个数。环形全归约（先 reduce-scatter，再 all-gather）让 N 张卡中的每一张发送 2(N − 1)/N 倍的数据，几乎不随卡数变化，但每层都要做两次，所以需要 NVLink 这样的高速互联，通常限于一台机器之内。卡数超过 KV 头数时（例如 8 个 KV 头、TP = 16），KV 头要复制：每张卡至少存一个完整的 KV 头，每张卡的 KV 缓存不再随卡数增加而减少。流水线并行（pipeline parallelism）则按层切，只在阶段之间传隐藏状态。

# %% en=2c5da37a
from minillm.distributed import all_reduce_cost, split_evenly

mlp = model.layers[0].mlp
with torch.inference_mode():
    x = model.layers[0].mlp_norm(model.embed(torch.tensor([ids], device=device)))
    full = mlp(x)
    parts = []
    for rows in split_evenly(c.intermediate_size, 2):  # 两个进程，各拿一半隐藏单元
        r = slice(rows.start, rows.stop)  # 列并行：取 W =（输出，输入）的行，与第 09 章一致
        h = torch.nn.functional.silu(x @ mlp.gate_proj.weight[r].T) * (x @ mlp.up_proj.weight[r].T)
        parts.append(h @ mlp.down_proj.weight[:, r].T)  # 行并行：取 W 的列
calls, n_bytes = all_reduce_cost(c, tokens=1)
print(f"全归约之后的最大差值：{(sum(parts) - full).abs().max():.2e}")
print(f"每解码一个词元：{calls} 次全归约（2 x {c.n_layers} 层），fp32 下每个进程"
      f"要求和 {n_bytes / 1e3:.0f} kB（每次 {c.hidden_size} 个数 x 4 字节）")
assert torch.allclose(sum(parts), full, atol=1e-5)

# %% [markdown] en=3b5afc47
# 全归约要发送多少数据。环形全归约把每个进程的张量切成 N 块：先走 N − 1 步，每个进程把一块传给下一个进程，下一个进程把它加到自己的那块上（reduce-scatter）；再走 N − 1 步，把加好的块沿环传一圈（all-gather）。下面在这一层真实的部分输出上运行：

# %% en=61538e06
def ring_all_reduce(tensors):
    """像环一样对 `tensors`（每个进程一个）求和；返回每个进程的结果，以及每个进程发送了
    多少个数。"""
    n = len(tensors)
    chunks = [list(t.flatten().clone().chunk(n)) for t in tensors]
    sent = [0] * n
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            first = -step if phase == "reduce-scatter" else 1 - step  # 进程 0 发送的那一块
            moving = [(r, (r + first) % n, chunks[r][(r + first) % n].clone()) for r in range(n)]
            for r, i, chunk in moving:  # 所有进程同时发送，各自发给下一个进程
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
        print(f"{ranks} 个进程：张量有 {size:,} 个数，每个进程发送了 {sent[0]:,} 个，"
              f"即 {sent[0] / size:.2f} 倍；2(N - 1)/N = {2 * (ranks - 1) / ranks:.2f}")
        assert all(torch.allclose(r, full, atol=1e-5) for r in results)
        assert sent == [2 * (ranks - 1) * size // ranks] * ranks

# %% [markdown] en=4df3d722
# KV 头的复制：TP = 9 时，每个进程分到 SmolLM2 的 9 个查询头之一，外加它所在组的 KV 头的一份副本（3 个 KV 头各复制 3 份）。把第 0 层的注意力这样切开：

# %% en=093761cd
from minillm.layers import attention_explicit

attn, tp = model.layers[0].attn, c.n_heads
group = c.n_heads // c.n_kv_heads
with torch.inference_mode():
    hidden = model.layers[0].attn_norm(model.embed(torch.tensor([ids], device=device)))
    q, k, v = attn.project(hidden)  # 旋转之前取；旋转与这种切分无关
    whole = attn.o_proj(attention_explicit(q, k, v).transpose(1, 2).flatten(2))
    pieces = []
    for rank in range(tp):
        copy = rank // group  # 这个进程的查询头要读的 KV 头，复制一份放在这个进程上
        heads = attention_explicit(q[:, rank:rank + 1], k[:, copy:copy + 1], v[:, copy:copy + 1])
        cols = slice(rank * c.head_dim, (rank + 1) * c.head_dim)  # 行并行的 o_proj
        pieces.append(heads.transpose(1, 2).flatten(2) @ attn.o_proj.weight[:, cols].T)
print(f"TP = {tp}：全归约之后的最大差值 {(sum(pieces) - whole).abs().max():.2e}")
for ranks in (1, 3, 9):
    per_rank = max(1, c.n_kv_heads // ranks)
    print(f"TP = {ranks}：每个进程 {per_rank} 个 KV 头，一共存了 {ranks * per_rank} 个"
          f"（模型本身 {c.n_kv_heads} 个的 {ranks * per_rank // c.n_kv_heads} 倍）；fp16 下每个进程的"
          f"缓存每个词元 {kv_cache_formula_bytes(c, 1, 2) * per_rank // c.n_kv_heads:,} 字节")
assert torch.allclose(sum(pieces), whole, atol=1e-5)

# %% [markdown] en=c78cf2b0
# ## Q12–Q24 的要点
#
# - 公式就是答案，测量就是证明。
# - 原始资料标了 ⚠️ 的地方：延迟是 TTFT + TPOT × (n − 1)，不是 × n；“每分钟 450 个单词”取决于分词器；这里的 int4 每个权重要 5 位，不是 4 位。
# - 接着看 `10c_interview_serving`。
