# %% [markdown]
# # 10c · Interview questions (面试题), part three: serving at scale
#
# Q25–Q32 of chapter 10, the techniques every large deployment now uses, then the self-check
# quiz (自测). As in `10_interview_qa` and `10b_interview_engine`, each answer is given in Chinese
# and English and proved by a cell that ends in an `assert`. Where an answer compares two
# timings, both sides are measured interleaved, several times; the verdict names the spread and
# says "too noisy to call" when the repetitions disagree.

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
from minillm.utils.devices import describe

CI = bool(os.environ.get("CI"))  # fewer tokens when the notebook runs in the test suite
N = 8 if CI else 16              # new tokens per demonstration
REPEATS = 3                      # interleaved repetitions behind each timing verdict
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")
print(load_average())

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("tokens of two runs are compared", rule(model))
prompt = "The capital of France is"
ids = tokenizer.encode(prompt)
text_ids = tokenizer.encode("The printing press was invented in the fifteenth century. It "
                            "made books cheaper, and ideas spread faster across Europe.")

# %% [markdown]
# ---
# # Part 7 · Serving at scale: what 2026 interviews ask
#
# Chapters 03b, 06, 07, 07b and 08 build what these answers run. Where an answer tries more
# variants than the engine offers (Q27's 4-bit keys and values), the cell emulates them in
# front of you, beside the engine's own part.

# %% [markdown]
# ## Q25 · FlashAttention 为什么快？它改变计算结果吗？ What does FlashAttention change, and does it change the result?
#
# | 中文 | English |
# |---|---|
# | 标准注意力先算出完整的分数矩阵 QKᵀ（每个头 n × n 个数），写进显存再读回来做 softmax：序列一长，它占的显存和搬运它的时间都按 n² 增长。FlashAttention 把 Q、K、V 切成能放进片上 SRAM 的小块，用在线 softmax 逐块累加：每行只保存当前最大值 m、指数和 l 和加权和 o，遇到更大的分数就按 exp(m − m') 重新缩放。分数矩阵从不完整写出，额外显存从 O(n²) 降到 O(n)。它是精确算法：结果与标准注意力相同，只差浮点求和的顺序。运算量没有减少，省的是访存，所以收益主要在预填充和长上下文上。 | Standard attention computes the whole score matrix QKᵀ (n × n numbers per head), writes it to GPU memory and reads it back for the softmax: as sequences grow, its memory and the time spent moving it grow as n². FlashAttention cuts Q, K and V into tiles that fit in on-chip SRAM and accumulates tile by tile with the online softmax: each row keeps only its running maximum m, sum of exponentials l and weighted sum o, rescaled by exp(m − m') when a larger score arrives. The score matrix is never written out whole: extra memory drops from O(n²) to O(n). It is exact: the result equals standard attention up to the order of floating-point sums. The arithmetic is not reduced, the memory traffic is, so the gain is mainly in prefill and long contexts. |
#
# The proof on the real model's first layer: its queries, keys and values for a long text
# (before the rotation, which does not change the attention arithmetic), attended both ways,
# with the memory each way allocates at its peak (chapter 03b builds `flash_attention`):

# %%
from minillm.tokenizer.samples import corpus
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
# | 预填充是计算受限的，解码是带宽受限的。两者在同一个引擎里时，长提示词的预填充和正在解码的请求挤在同一步里，所有正在生成的用户都要等这一步（TPOT 的尾部变长），新请求也可能排在解码步后面（TTFT 变长）。预填充/解码分离（业内和面试里常简称 PD 分离；DistServe 和 Mooncake 是这样设计的，vLLM 和 SGLang 也都支持）把两个阶段放到不同的机器上：预填充机器算出提示词的 KV 缓存和第一个词元，再把 KV 块通过 NVLink 或 RDMA 传给解码机器，解码机器的每一步只有解码行。两个阶段还能各自选择硬件和批大小，分别满足 TTFT 和 TPOT 的目标。代价是每个请求传一次 KV 缓存，并要调好两类机器的比例。 | Prefill is compute-bound, decode bandwidth-bound. In one engine, a long prompt's prefill shares a step with the requests that are decoding, and every user waits for that step (the TPOT tail grows); a new prompt may queue behind decode steps (TTFT grows). Prefill/decode disaggregation ("PD disaggregation" for short, as interviewers say it; DistServe and Mooncake are built so, and vLLM and SGLang support it) puts the two phases on different machines: a prefill machine computes the prompt's KV cache and first token and sends the KV blocks over NVLink or RDMA to a decode machine, whose steps carry decode rows only. Each phase also gets its own hardware and batch size, sized to a TTFT target and a TPOT target. The price: one KV-cache transfer per request, and a ratio of the two kinds of machine to tune. |
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
# | 可以。上下文长、批量大时，KV 缓存常常比权重还大，而且解码每一步都要把它读一遍。把键和值从 fp16 存成 int8 或 fp8（E4M3），显存和每步读的字节都减半，同样的显存能放下约两倍的词元。做法是每个词元的每个头（或每个通道）配一个缩放因子，写入缓存时量化，做注意力之前反量化。键里常有离群通道，所以键按通道、值按词元量化效果更好（KIVI）；降到 4 位时误差明显变大。vLLM 的 kv_cache_dtype="fp8" 就是这个思路。 | Yes. With long contexts and large batches the KV cache is often larger than the weights, and every decode step reads all of it. Storing keys and values as int8 or fp8 (E4M3) instead of fp16 halves the memory and the bytes each step reads: the same memory holds about twice the tokens. The recipe: a scale for each head of each token (or for each channel), quantize when writing into the cache, dequantize before attention. Keys carry outlier channels, so per-channel scales for keys and per-token scales for values work better (KIVI); at 4 bits the error grows clearly. vLLM's kv_cache_dtype="fp8" follows this idea. |
#
# The proof, emulated first, so that 4 bits can be tried beside 8: prefill 128 tokens of text
# into a real cache, replace its keys and values by their quantized-and-dequantized values (one
# scale per token and head), then score the next 64 tokens against that cache. The bytes are
# what a cache storing the codes and an fp16 scale would hold. Then the engine's own 8-bit pool
# (chapter 07b): `Engine(..., kv_cache_format="int8")` stores the codes and a float32 scale per
# token and head.

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

pool_bytes = {fmt: minillm.Engine(model, tokenizer, num_blocks=4, block_size=16,
                                  kv_cache_format=fmt).pool.bytes_per_block / 16
              for fmt in (None, "int8", "fp8_e4m3")}
for fmt, per_token in pool_bytes.items():
    print(f"the engine's pool, kv_cache_format={fmt!r}: {per_token / 1e3:5.1f} kB a token "
          f"({per_token / pool_bytes[None]:.2f}x the float32 pool's)")
assert pool_bytes["int8"] < 0.3 * pool_bytes[None] and pool_bytes["fp8_e4m3"] == pool_bytes["int8"]

# %% [markdown]
# Over 64 scored tokens a perplexity moves by chance by a percent or more, in either direction
# (int4's may even come out lower); the largest logit error is the steadier measure, and it
# grows several times from 8 bits to 4.

# %% [markdown]
# ## Q28 · 什么是分块预填充？它解决什么问题？ What is chunked prefill, and what does it fix?
#
# | 中文 | English |
# |---|---|
# | 连续批处理让预填充和解码在同一步里进行。长提示词一次预填充完，这一步就很长，所有正在解码的请求都要等它，出现一次卡顿（TPOT 的尾部变大）。分块预填充给每一步定一个词元预算（vLLM 的 max_num_batched_tokens），把长提示词切成几块，每步只算一块，和解码行一起跑：每一步都不长，正在生成的用户节奏平稳。代价是长提示词自己的 TTFT 变长：要多跑几步，每一块都要再读前面各块的键。预算的大小就是 TTFT 和 TPOT 之间的权衡。 | Continuous batching runs prefill and decode in the same step. A long prompt prefilled at once makes that step long, and every decoding request waits for it: one stall (the TPOT tail grows). Chunked prefill gives each step a token budget (vLLM's max_num_batched_tokens) and cuts a long prompt into chunks, one per step, run beside the decode rows: every step stays short and the running users keep their pace. The price is the long prompt's own TTFT: more steps, and each chunk reads the earlier chunks' keys again. The budget sets the trade between TTFT and TPOT. |
#
# The proof with chapter 06's measurement: three requests are decoding when a long prompt
# arrives, once with a budget larger than the prompt and once with a small one:

# %%
from minillm.engine.interference import long_prompt_arrival

LONG, CHUNK = 192, 32
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
# | 动态批处理（Triton、TF Serving 等通用推理服务器的做法）决定一批什么时候开始：请求先等一小段时间或等凑够批大小，再一起送进模型；一批开始后就像静态批处理一样跑到最长的请求结束，中途不能加入。这适合一次前向传播就出结果的模型；对要生成几百个词元的大模型，新请求可能要等整批跑完。连续批处理（迭代级调度）每一步都重新组批，新请求下一步就能加入。⚠️ 有些资料把两个名字混用：区别在调度的粒度，是整个请求还是每次迭代。 | Dynamic batching (what general inference servers such as Triton and TF Serving do) decides when a batch starts: requests wait for a short window, or until the batch is full, then go in together; once started, the batch runs like a static batch until its longest request ends, and nobody joins. That suits models that answer in one forward pass; for an LLM generating hundreds of tokens, a new request may wait for the whole batch. Continuous batching (iteration-level scheduling) rebuilds the batch every step, so a new request joins at the next one. ⚠️ Some texts use the two names for one thing: the difference is the scheduling unit, a whole request or one iteration. |
#
# The proof: a request arrives while a batch is two steps into a long answer. The static
# scheduler runs a started batch to its end, as dynamic batching does once its window closed;
# the continuous scheduler takes the newcomer in at the next step.

# %%
def steps_until_first_token(kind, busy_tokens=24):
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
    print(f"{kind:>10}: the late request's first token came {steps} step{'s' * (steps != 1)} "
          "after it arrived")
assert waits["continuous"] == 1 < waits["static"]

# %% [markdown]
# ## Q30 · MHA、GQA、MQA 和 MLA 有什么区别？ MHA, GQA, MQA and MLA: what is the difference?
#
# | 中文 | English |
# |---|---|
# | 区别在于 KV 缓存里每个词元存什么。多头注意力（MHA）的每个查询头都有自己的键头和值头；多查询注意力（MQA）让所有查询头共用一个键值头，缓存最小但质量有损失；分组查询注意力（GQA，Llama 3、SmolLM2 都用它）让每组查询头共用一个键值头，缓存是 MHA 的 kv_heads/heads。多头潜在注意力（MLA，DeepSeek-V2/V3）每层每个词元只存一个压缩的潜在向量（外加一小段携带 RoPE 的键），计算时用上投影还原各头的键和值。解码是带宽受限的：每个词元的缓存越小，能放下的上下文和批越大，每步读的字节越少。 | They differ in what the KV cache stores per token. Multi-head attention (MHA) gives every query head its own key and value head; multi-query attention (MQA) shares one key/value head among all query heads, the smallest cache at some cost in quality; grouped-query attention (GQA; Llama 3 and SmolLM2 use it) shares a key/value head within each group of query heads, a cache kv_heads/heads the size of MHA's. Multi-head latent attention (MLA; DeepSeek-V2/V3) stores one compressed latent vector per token and layer (plus a small key part that carries RoPE) and rebuilds the heads' keys and values by up-projections. Decode is bandwidth-bound: the smaller each token's cache, the longer the context and the larger the batch that fit, and the fewer bytes each step reads. |
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
# | 三者都用少量校准数据，让量化后这一层的输出接近原来的输出，而不只是让权重接近。GPTQ（仅权重量化，常用 3–4 位）逐列量化，并用校准激活的二阶信息（H = XᵀX 的逆）把每列的舍入误差补偿到还没量化的列上。AWQ（仅权重量化）认为激活大的输入通道对应的权重最重要：把这些通道的权重乘以 s = mean\|x\|^α、激活除以 s，数学上等价，却让重要权重的相对误差变小；α 在校准数据上搜索。SmoothQuant（W8A8，权重和激活都是 int8）把激活离群通道的尺度迁移到权重上：s = max\|X\|^α / max\|W\|^(1−α)，两边都容易量化，于是可以用 int8 矩阵乘法。W4A16（GPTQ、AWQ）省显存和带宽，适合小批量解码；W8A8 和 FP8 还能用上低精度计算单元，适合计算受限的大批量。 | All three use a little calibration data to keep the quantized layer's outputs close to the original outputs, not merely its weights. GPTQ (weight-only, often 3–4 bits) quantizes one column at a time and pushes each column's rounding error onto the columns not yet quantized, using second-order information from the calibration activations (the inverse of H = XᵀX). AWQ (weight-only) notes that weights on input channels with large activations matter most: it multiplies those weights by s = mean\|x\|^α and divides the activations by s, which changes nothing mathematically but shrinks the important weights' relative error; α is searched on the calibration data. SmoothQuant (W8A8: int8 weights and activations) moves the scale of the activations' outlier channels into the weights, s = max\|X\|^α / max\|W\|^(1−α), so both sides quantize well and int8 matrix multiplies can be used. W4A16 (GPTQ, AWQ) saves memory and bandwidth, which suits small-batch decode; W8A8 and FP8 also use low-precision arithmetic units, which suits large, compute-bound batches. |
#
# The proof on one real layer: the feed-forward gate projection of layer 20 (576 inputs, 1,536
# outputs). Its inputs are captured for 1,024 tokens of text (calibration) and 256 more (the
# test); every method below is judged by the layer's output error on the test tokens. First,
# the outliers:

# %%
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
# Chapter 07 builds the three methods (`minillm/quant/gptq.py`, `awq.py`, `smoothquant.py`).
# GPTQ's core, the error of each rounded column spread over the columns still to come:

# %%
from minillm.course.show import show_source
from minillm.quant.awq import awq
from minillm.quant.gptq import gptq, hessian
from minillm.quant.grid import rtn
from minillm.quant.smoothquant import smooth_scales, w8a8

show_source(gptq)

# %%
def output_error(product, x):
    """The layer's relative output error on inputs x: ‖product − x wᵀ‖ / ‖x wᵀ‖."""
    exact = x @ w.T
    return float((product - exact).norm() / exact.norm())


h = hessian(x_cal)
awq_w, awq_alpha = awq(w, h, x_cal.abs().mean(0), BITS, GROUP)
errors = {"RTN": output_error(x_test @ rtn(w, BITS, GROUP).T, x_test),
          "GPTQ": output_error(x_test @ gptq(w, h, BITS, GROUP).T, x_test),
          "AWQ": output_error(x_test @ awq_w.T, x_test),
          "W8A8": output_error(w8a8(x_test, w), x_test),
          "W8A8 + SmoothQuant": output_error(
              w8a8(x_test, w, smooth_scales(x_cal.abs().amax(0), w)), x_test)}
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
# | 推测解码的加速取决于接受率 α 和起草的代价 c（草稿一步与目标模型一步的耗时之比）：每轮起草 k 个词元，平均得到 (1 − α^(k+1)) / (1 − α) 个词元，花费约 1 + k·c 个目标步。独立的草稿模型要另外部署、分词器必须相同，α 通常不高，c 也不小。Medusa 在目标模型最后的隐藏状态上加几个解码头，一次猜后面几个位置；论文在采样时用“典型接受”：目标模型给候选词元的概率超过一个随熵变小的阈值就接受。它比拒绝采样接受得多，但输出不再严格服从目标模型的分布（贪心验证时，输出与普通贪心相同）。EAGLE 训练一个约一层的小网络，根据目标模型顶层的特征自回归地起草，所以 α 高、c 小；EAGLE-2/3 还按置信度展开草稿树，用推广到多个草稿的拒绝采样验证整棵树，所以保持目标模型的分布。MTP（多词元预测，DeepSeek-V3）在预训练时就学会预测再下一个词元，推理时直接当草稿用，报告的接受率为 85%–90%。贪心验证和 Q23 的拒绝采样规则都不改变输出的分布；典型接受用分布上的一点偏差换更高的接受率。 | The speed-up rests on the acceptance rate α and the draft's cost c (one draft step's time over one target step's): drafting k tokens a round yields (1 − α^(k+1)) / (1 − α) tokens on average, for about 1 + k·c target steps. A separate draft model must be deployed alongside and share the tokenizer, and usually brings a modest α at a real c. Medusa adds a few decoding heads on the target's last hidden state, each guessing a later position at once; when sampling, Medusa as published uses typical acceptance: a candidate is kept when the target gives it a probability above a threshold that falls as the distribution's entropy rises. That accepts more than the rejection rule, but the output no longer follows the target's distribution exactly (with greedy verification it is plain greedy's output). EAGLE trains a network of about one layer that drafts autoregressively from the target's top-layer features, so α is high and c small; EAGLE-2/3 also grow a draft tree by confidence and verify it with rejection sampling extended to several drafts, so they keep the target's distribution. MTP (multi-token prediction, DeepSeek-V3) learns to predict the token after next in pre-training, and serving uses it as the draft, with reported acceptance rates of 85–90%. Greedy verification and Q23's rejection rule keep the output distribution; typical acceptance trades a little of it for a higher acceptance rate. |
#
# The proof with two drafts cut from SmolLM2 itself, untrained (its first 16 and first 28
# layers, chapter 08's `first_layers`): the draft that shares more of the target's
# computation, as EAGLE's features do, is accepted more often; the target's tokens are the same
# either way. The speed-up each should give follows from the formula, with c = draft layers /
# 30; each is then measured, speculative decoding against plain decoding, interleaved:

# %%
from minillm.measure import compare
from minillm.speculative import (ModelDraft, expected_tokens_per_pass, first_layers,
                                 speculative_generate)

K = 4
story = tokenizer.encode("Once upon a time, in a small village by the sea, there lived")
plain = minillm.generate(model, tokenizer, story, max_new_tokens=16, ignore_eos=True)
alpha, speedup = {}, {}
for depth in (16, 28):
    draft = ModelDraft(first_layers(model, depth))
    run = speculative_generate(model, tokenizer, story, draft, k=K, max_new_tokens=16,
                               ignore_eos=True)
    assert agree(model, story, run.token_ids, plain.token_ids)
    alpha[depth] = run.stats.acceptance_rate
    cost = depth / c.n_layers
    expected = expected_tokens_per_pass(alpha[depth], K)
    speedup[depth] = compare(  # plain decoding's time over speculative decoding's
        lambda: speculative_generate(model, tokenizer, story, draft, k=K, max_new_tokens=16,
                                     ignore_eos=True),
        lambda: minillm.generate(model, tokenizer, story, max_new_tokens=16, ignore_eos=True),
        repeats=2 if CI else REPEATS, device=device, warmup=0)
    print(f"draft of {depth:>2} layers: acceptance {alpha[depth]:.0%}, "
          f"{run.stats.tokens_per_pass:.2f} tokens per target pass (the formula: {expected:.2f}); "
          f"expected speed-up at c = {cost:.2f}: {expected / (1 + K * cost):.2f}x; "
          f"measured {speedup[depth].spread_text()}")
    print("   ", {True: "faster than plain decoding in every repetition", None: TOO_NOISY,
                  False: "slower than plain decoding in every repetition: it does not pay"}
          [speedup[depth].above(1.0)])
head = expected_tokens_per_pass(alpha[28], K) / (1 + K / c.n_layers)
print(f"arithmetic: a one-layer head (c = 1/{c.n_layers}) with the 28-layer draft's acceptance "
      f"would give {head:.2f}x")
assert alpha[28] > alpha[16]
assert all(m.above(1.0) is not True for m in speedup.values())  # untrained cuts do not pay

# %% [markdown]
# Cut from the target without training, a shallow draft is rarely right and a deep one costs
# almost a whole target step: neither pays, and the clock agrees with the formula. That is the
# gap EAGLE and MTP close: a head of about one layer, trained to predict from the target's own
# features, is accepted often at little cost.
#
# **Typical acceptance, in numbers.** Medusa's rule keeps a drafted token x when the target's
# p(x) reaches min(ε, δ·e^(−H(p))), H the entropy of p (ε = 0.09 and δ = 0.3 here); otherwise
# it samples from p cut down to the tokens above that threshold. The rule on one real position,
# the target p and the 28-layer draft q after "... there lived a" (the story above and its first
# greedy token), computed exactly over the whole vocabulary: what it emits, against what Q23's
# rejection rule emits.

# %%
import math

from minillm.speculative import residual_distribution

with torch.inference_mode():
    story_ids = torch.tensor([story + plain.token_ids[:1]], device=device)  # "... there lived a"
    p_t = torch.softmax(model(story_ids)[0, -1].cpu().double(), -1)
    q_d = torch.softmax(first_layers(model, 28)(story_ids)[0, -1].cpu().double(), -1)
entropy = float(-(p_t * p_t.clamp_min(1e-30).log()).sum())
threshold = min(0.09, 0.3 * math.exp(-entropy))
above = p_t >= threshold
kept = q_d * above  # drafted and kept
typical = kept + (1 - kept.sum()) * p_t * above / p_t[above].sum()  # else: p, cut
both = torch.minimum(p_t, q_d)
rejection = both + (1 - both.sum()) * residual_distribution(p_t, q_d)
gap = lambda a, b: 0.5 * float((a - b).abs().sum())  # total variation distance  # noqa: E731
print(f"entropy of p {entropy:.2f} nats, threshold {threshold:.4f}: "
      f"only {int(above.sum())} tokens can come out, holding {float(p_t[above].sum()):.0%} of the "
      "target's probability")
print(f"distance of what comes out to the target: typical acceptance {gap(typical, p_t):.3f}, "
      f"the rejection rule {gap(rejection, p_t):.1e}")
assert gap(rejection, p_t) < 1e-9 and gap(typical, p_t) > 0.05

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
# - Places the source text needs care: "dynamic batching" is not continuous batching; Medusa's
#   typical acceptance is not exact, while greedy verification and the rejection rule are.
# - The exercise `exercises/10_interview_qa.ipynb` asks three whiteboard estimates: the decode
#   bound of a 70B fp8 model on 4 GPUs, the largest batch an 80 GB KV pool holds, and the
#   speed-up speculative decoding gives at α = 0.7 with 4 drafted tokens.
