# 中文版 · 10c_interview_serving.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=8229938a
# # 10c · 面试题（interview questions），第三部分：大规模服务
#
# 这是第 10 章的 Q25–Q32，讲的是如今每个大规模部署都在用的技术，最后是自测（self-check quiz）。和 `10_interview_qa`、`10b_interview_engine` 一样，每道题先给出中文答案，再用一个以 `assert` 结尾的单元格证明它。答案要比较两组计时的，两边都交替测量、重复几次；结论会给出波动范围，几次重复结果不一致时就说“噪声太大，无法判断”。

# %% en=a8b8fb5e
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

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时少生成几个词元
N = 8 if CI else 16              # 每个演示生成的新词元数
REPEATS = 3                      # 每个计时结论背后交替重复的次数
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")
print(load_average())

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
print("两次运行的词元这样比较：", rule(model))
prompt = "The capital of France is"
ids = tokenizer.encode(prompt)
text_ids = tokenizer.encode("The printing press was invented in the fifteenth century. It "
                            "made books cheaper, and ideas spread faster across Europe.")

# %% [markdown] en=3e69b116
# ---
# # 第 7 部分 · 大规模服务：2026 年的面试会问什么
#
# 这些答案用到的东西，第 03b、06、07、07b、08 章里都亲手搭过。某道题要试的变体比引擎提供的多时（Q27 里 4 位的键和值），就在单元格里当场模拟，和引擎自己的实现放在一起比。

# %% [markdown] en=07bcb375
# ## Q25 · FlashAttention 为什么快？它改变计算结果吗？
#
# 标准注意力先算出完整的分数矩阵 QKᵀ（每个头 n × n 个数），写进显存再读回来做 softmax：序列一长，它占的显存和搬运它的时间都按 n² 增长。FlashAttention 把 Q、K、V 切成能放进片上 SRAM 的小块，用在线 softmax 逐块累加：每行只保存当前最大值 m、指数和 l 和加权和 o，遇到更大的分数就按 exp(m − m') 重新缩放。分数矩阵从不完整写出，额外显存从 O(n²) 降到 O(n)。它是精确算法：结果与标准注意力相同，只差浮点求和的顺序。运算量没有减少，省的是访存，所以收益主要在预填充和长上下文上。
#
# 在真实模型的第一层上证明：取它对一段长文本算出的查询、键和值（在旋转之前，旋转不影响注意力的运算），用两种方式各做一次注意力，并记下每种方式分配内存的峰值（`flash_attention` 在第 03b 章里搭过）：

# %% en=f23f0e5d
from minillm.course.tokenizer_samples import corpus
from minillm.layers import attention_explicit
from minillm.measure.memory_peak import peak_bytes
from minillm.model.flash_attention import flash_attention

book = tokenizer.encode(corpus("english")[:20_000])  # 莎士比亚的文字，下面的长输入都取自这里
long_ids = book[:256 if CI else 512]
first = model.layers[0]
with torch.inference_mode():
    hidden = first.attn_norm(model.embed(torch.tensor([long_ids], device=device)))
    q, k, v = (t.float().cpu() for t in first.attn.project(hidden))
    plain, plain_peak = peak_bytes(attention_explicit, q, k, v)
    tiled, tiled_peak = peak_bytes(flash_attention, q, k, v, block_size=64)
difference = (plain - tiled).abs().max().item()
print(f"{len(long_ids)} 个词元，{c.n_heads} 个头：仅分数矩阵在 fp32 下就有 "
      f"{c.n_heads * len(long_ids) ** 2 * 4 / 1e6:.1f} MB")
print(f"内存峰值：标准注意力 {plain_peak / 1e6:.1f} MB，64 一块的分块算法 {tiled_peak / 1e6:.1f} MB"
      f"（少 {plain_peak / tiled_peak:.1f} 倍）；最大差值 {difference:.1e}")
assert difference < 1e-4 and tiled_peak < plain_peak / 2

# %% [markdown] en=d9c44b6e
# ## Q26 · 什么是预填充/解码分离？它解决什么问题？
#
# 预填充是计算受限的，解码是带宽受限的。两者在同一个引擎里时，长提示词的预填充和正在解码的请求挤在同一步里，所有正在生成的用户都要等这一步（TPOT 的尾部变长），新请求也可能排在解码步后面（TTFT 变长）。预填充/解码分离（业内常简称 PD 分离，英文面试里叫 PD disaggregation）把两个阶段放到不同的机器上：预填充机器算出提示词的 KV 缓存和第一个词元，再把 KV 块通过 NVLink 或 RDMA 传给解码机器，解码机器的每一步只有解码行。DistServe 和 Mooncake 是这样设计的，vLLM 和 SGLang 也都支持。两个阶段还能各自选择硬件和批大小，分别满足 TTFT 和 TPOT 的目标。代价是每个请求传一次 KV 缓存，并要调好两类机器的比例。
#
# 用第 06 章的两个引擎在同一个进程里证明，每个引擎有自己的时钟：得到的词元与普通生成的相同（说明交接过去的 KV 块是对的），而且解码引擎的每一步从不处理超过提示词最后一个词元的提示词片段。

# %% en=896ce99f
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
for name, served in (("单个引擎", together), ("预填充 + 解码", split)):
    print(f"{name:>16}：" + "，".join(f"{k} {1e3 * v:.0f} ms" for k, v in
                                      served.summary().items()))
print(f"交接：{len(pd_prompts)} 个提示词共 {split.handoff_bytes / 1e6:.2f} MB 的 KV 块，"
      f"复制用了 {1e3 * split.handoff_seconds:.1f} ms")
widest = max(n for step in decoder.steps for _, n, _ in step.items)
print(f"解码引擎一步里最多只处理一个请求的 {widest} 个词元")
plain = [minillm.generate(model, tokenizer, p, max_new_tokens=N, ignore_eos=True).token_ids
         for p in pd_prompts]
assert all(agree(model, p, o.token_ids, t) for p, o, t in zip(pd_prompts, split.outputs, plain))
assert widest == 1  # 只有解码行：先是提示词的最后一个词元，之后每步一个词元

# %% [markdown] en=6f628cda
# 上面的计时各只跑了一次，所以不下结论：第 06 章第 11 节把这个比较交替重复了多次，看的是 TPOT 的尾部和最长的间隔，干扰正体现在那里。

# %% [markdown] en=be6d4974
# ## Q27 · KV 缓存可以量化吗？能省多少，代价是什么？
#
# 可以。上下文长、批量大时，KV 缓存常常比权重还大，而且解码每一步都要把它读一遍。把键和值从 fp16 存成 int8 或 fp8（E4M3），显存和每步读的字节都减半，同样的显存能放下约两倍的词元。做法是每个词元的每个头（或每个通道）配一个缩放因子，写入缓存时量化，做注意力之前反量化。键里常有离群通道，所以键按通道、值按词元量化效果更好（KIVI）；降到 4 位时误差明显变大。vLLM 的 kv_cache_dtype="fp8" 就是这个思路。
#
# 先模拟证明，这样 4 位也能和 8 位放在一起试：把 128 个词元的文本预填充进一个真实的缓存，把其中的键和值替换成量化再反量化后的值（每个词元、每个头一个缩放因子），然后用这个缓存给接下来的 64 个词元打分。字节数按一个存编码加一个 fp16 缩放因子的缓存来算。然后看引擎自己的 8 位池子（第 07b 章）：`Engine(..., kv_cache_format="int8")` 存编码，每个词元的每个头另存一个 float32 缩放因子。

# %% en=0a8c9e20
kv_text = book[1000:1192]
context, scored = kv_text[:128], kv_text[128:]


def absmax_roundtrip(bits):
    qmax = 2 ** (bits - 1) - 1

    def roundtrip(x):  # 每个词元、每个头一个缩放因子，覆盖它的 head_dim 个值
        scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-8) / qmax
        return (x / scale).round().clamp(-qmax, qmax) * scale
    return roundtrip


def fp8_roundtrip(x):  # e4m3：4 位指数，3 位尾数，最大值 448
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


formats = {"fp16（参考）": (None, 16), "fp8 e4m3": (fp8_roundtrip, 8),
           "int8": (absmax_roundtrip(8), 8), "int4": (absmax_roundtrip(4), 4)}
exact_ppl, exact_logits = score_with_cache()
kv_error, kv_ppl = {}, {}
for name, (roundtrip, bits) in formats.items():
    ppl, logits = score_with_cache(roundtrip) if roundtrip else (exact_ppl, exact_logits)
    kv_error[name], kv_ppl[name] = (logits - exact_logits).abs().max().item(), ppl
    per_head = c.head_dim * bits / 8 + (2 if roundtrip else 0)  # 编码 + 一个 fp16 缩放因子
    per_token = 2 * c.n_layers * c.n_kv_heads * per_head
    print(f"{name:>16}：每个词元 {per_token / 1e3:5.1f} kB（同样的显存能放 fp16 的 {2 * c.head_dim / per_head:.2f} 倍"
          f"词元）；困惑度 {ppl:.3f}，logit 的最大误差 "
          f"{kv_error[name]:.3f}")
assert all(abs(kv_ppl[f] / exact_ppl - 1) < 0.01 for f in ("int8", "fp8 e4m3"))  # 8 位：几乎没有代价
assert kv_error["int8"] < kv_error["int4"] / 4 and kv_error["fp8 e4m3"] < kv_error["int4"] / 2

pool_bytes = {fmt: minillm.Engine(model, tokenizer, num_blocks=4, block_size=16,
                                  kv_cache_format=fmt).pool.bytes_per_block / 16
              for fmt in (None, "int8", "fp8_e4m3")}
for fmt, per_token in pool_bytes.items():
    print(f"引擎的池子，kv_cache_format={fmt!r}：每个词元 {per_token / 1e3:5.1f} kB"
          f"（float32 池子的 {per_token / pool_bytes[None]:.2f} 倍）")
assert pool_bytes["int8"] < 0.3 * pool_bytes[None] and pool_bytes["fp8_e4m3"] == pool_bytes["int8"]

# %% [markdown] en=825dd6ff
# 只有 64 个词元打分时，困惑度会因偶然因素上下浮动一个百分点甚至更多（int4 的困惑度甚至可能更低）；logit 的最大误差是更稳定的指标，从 8 位降到 4 位时它会增大好几倍。

# %% [markdown] en=9183c1e1
# ## Q28 · 什么是分块预填充？它解决什么问题？
#
# 连续批处理让预填充和解码在同一步里进行。长提示词一次预填充完，这一步就很长，所有正在解码的请求都要等它，出现一次卡顿（TPOT 的尾部变大）。分块预填充给每一步定一个词元预算（vLLM 的 max_num_batched_tokens），把长提示词切成几块，每步只算一块，和解码行一起跑：每一步都不长，正在生成的用户节奏平稳。代价是长提示词自己的 TTFT 变长：要多跑几步，每一块都要再读前面各块的键。预算的大小就是 TTFT 和 TPOT 之间的权衡。
#
# 用第 06 章的测量来证明：三个请求正在解码时，一个长提示词到来；一次给的词元预算（token budget）比提示词还大，一次给的预算很小：

# %% en=f4020711
from minillm.engine.interference import long_prompt_arrival

LONG, CHUNK = 192, 32
long_prompt = book[2000:2000 + LONG]
decoding = [tokenizer.encode(f"Request {i}: tell me about rivers.") for i in range(3)]
arrivals = {"整块": [], "分块": []}
for _ in range(REPEATS):  # 交替进行
    for mode, budget in (("整块", LONG + len(decoding)), ("分块", CHUNK)):
        engine = minillm.Engine(model, tokenizer, num_blocks=64, block_size=16, max_num_seqs=4,
                                max_num_batched_tokens=budget, enable_prefix_caching=False)
        arrivals[mode].append(long_prompt_arrival(engine, decoding, long_prompt))
for mode, runs in arrivals.items():
    print(f"{mode:>8}（预算 {runs[-1].budget}）：{runs[-1].steps} 步完成预填充；"
          f"正在运行的请求最长的间隔 {1e3 * runs[-1].stall:.0f} ms，长提示词的 "
          f"TTFT {1e3 * runs[-1].ttft:.0f} ms")
stall = Comparison(tuple(r.stall for r in arrivals["整块"]),
                   tuple(r.stall for r in arrivals["分块"]))
wait = Comparison(tuple(r.ttft for r in arrivals["整块"]),
                  tuple(r.ttft for r in arrivals["分块"]))
print(f"分块 / 整块：最长间隔 {stall.spread_text()}；长提示词的 TTFT "
      f"{wait.spread_text()}")
print({True: "每次重复中分块都没有缩短停顿", None: TOO_NOISY,
       False: "每次重复中分块都缩短了正在运行的请求的最长等待"}
      [stall.above(1.0)], f"({load_average()})")
assert all(r.steps >= LONG // CHUNK for r in arrivals["分块"])  # 提示词被切开了
assert all(r.steps == 1 for r in arrivals["整块"])

# %% [markdown] en=1e7b765c
# ## Q29 · 动态批处理和连续批处理有什么区别？
#
# 动态批处理（Triton、TF Serving 等通用推理服务器的做法）决定一批什么时候开始：请求先等一小段时间或等凑够批大小，再一起送进模型；一批开始后就像静态批处理一样跑到最长的请求结束，中途不能加入。这适合一次前向传播就出结果的模型；对要生成几百个词元的大模型，新请求可能要等整批跑完。连续批处理（迭代级调度）每一步都重新组批，新请求下一步就能加入。⚠️ 有些资料把两个名字混用：区别在调度的粒度，是整个请求还是每次迭代。
#
# 证明：一个批次已经生成了长回答的两步，这时来了一个新请求。静态调度器会把已经开始的批次一直跑到结束，就像动态批处理在时间窗口关闭后那样；连续调度器则在下一步就把新请求接进来。

# %% en=e01bf1c8
def steps_until_first_token(kind, busy_tokens=24):
    engine = minillm.Engine(model, tokenizer, scheduler=kind, num_blocks=64, block_size=16,
                            max_num_seqs=4)
    engine.add_request(ids, max_new_tokens=busy_tokens, ignore_eos=True)
    engine.step()
    engine.step()  # 批次已经开始：一个预填充步，然后一个解码步
    late = engine.add_request(text_ids, max_new_tokens=4, ignore_eos=True)
    for steps in range(1, 4 * busy_tokens):
        if any(o.request_id == late and o.token_ids for o in engine.step()):
            break
    engine.run()
    return steps


waits = {kind: steps_until_first_token(kind) for kind in ("static", "continuous")}
for kind, steps in waits.items():
    print(f"{kind:>10}：晚到的请求到达后，过了 {steps} 步{'' * (steps != 1)}才得到"
          "第一个词元")
assert waits["continuous"] == 1 < waits["static"]

# %% [markdown] en=3d24f011
# ## Q30 · MHA、GQA、MQA 和 MLA 有什么区别？
#
# 区别在于 KV 缓存里每个词元存什么。多头注意力（MHA）的每个查询头都有自己的键头和值头；多查询注意力（MQA）让所有查询头共用一个键值头，缓存最小但质量有损失；分组查询注意力（GQA，Llama 3、SmolLM2 都用它）让每组查询头共用一个键值头，缓存是 MHA 的 kv_heads/heads。多头潜在注意力（MLA，DeepSeek-V2/V3）每层每个词元只存一个压缩的潜在向量（外加一小段携带 RoPE 的键），计算时用上投影还原各头的键和值。解码是带宽受限的：每个词元的缓存越小，能放下的上下文和批越大，每步读的字节越少。
#
# 证明：用 SmolLM2 自己的键投影和缓存，对照第 03b 章为每种设计使用的公式；然后把两种已发布模型结构下的各种设计并排列出（算式）。

# %% en=d64ff173
from minillm.generation.kv_designs import DESIGNS, PUBLISHED, bytes_per_token

key_rows = first.attn.k_proj.weight.shape[0]
probe = KVCache.for_model(model, batch_size=1, max_tokens=16)
with torch.inference_mode():
    model(torch.tensor([ids], device=device), cache=probe)
measured_per_token = probe.nbytes // probe.length
print(f"SmolLM2 的 k_proj 有 {key_rows} 个输出行：{key_rows // c.head_dim} 个键头对应 "
      f"{c.n_heads} 个查询头；fp32 下它的缓存每个词元占 {measured_per_token:,} 字节")
for name in ("Llama-3-8B", "DeepSeek-V3"):
    per_design = {d: bytes_per_token(PUBLISHED[name], d) for d in DESIGNS}
    print(f"{name:>12}，fp16，每个词元的 kB 数：" + "，".join(
        f"{d} {b / 1e3:.0f}" if b else f"{d}（不适用）" for d, b in per_design.items()))
assert key_rows == c.n_kv_heads * c.head_dim < c.n_heads * c.head_dim
assert measured_per_token == bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA",
                                             bytes_per_value=4)

# %% [markdown] en=9f627aeb
# ## Q31 · GPTQ、AWQ 和 SmoothQuant 分别解决什么问题？
#
# 三者都用少量校准数据，让量化后这一层的输出接近原来的输出，而不只是让权重接近。GPTQ（仅权重量化，常用 3–4 位）逐列量化，并用校准激活的二阶信息（H = XᵀX 的逆）把每列的舍入误差补偿到还没量化的列上。AWQ（仅权重量化）认为激活大的输入通道对应的权重最重要：把这些通道的权重乘以 s = mean|x|^α、激活除以 s，数学上等价，却让重要权重的相对误差变小；α 在校准数据上搜索。SmoothQuant（W8A8，权重和激活都是 int8）把激活离群通道的尺度迁移到权重上：s = max|X|^α / max|W|^(1−α)，两边都容易量化，于是可以用 int8 矩阵乘法。W4A16（GPTQ、AWQ）省显存和带宽，适合小批量解码；W8A8 和 FP8 还能用上低精度计算单元，适合计算受限的大批量。
#
# 在一个真实的层上证明：第 20 层前馈网络的 gate 投影（576 个输入，1,536 个输出）。先截取它对 1,024 个词元文本的输入（校准数据，calibration data），再另取 256 个词元作测试；下面每种方法都按这一层在测试词元上的输出误差来评判。先看离群值：

# %% en=572f829d
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
w = gate.weight.detach().float().cpu()  # （输出，输入）
channel_max = x_cal.abs().amax(0)
print(f"第 {LAYER} 层 gate_proj 的输入，{x_cal.shape[1]} 个通道：最大的达到 "
      f"{channel_max.max():.1f}，通道的中位数是 {channel_max.median():.2f}")
assert channel_max.max() > 5 * channel_max.median()  # 离群通道：是中位数的好几倍

# %% [markdown] en=33c80e49
# 第 07 章亲手实现了这三种方法（`minillm/quant/gptq.py`、`awq.py`、`smoothquant.py`）。GPTQ 的核心是：把每一列舍入产生的误差，分摊到后面还没处理的各列上：

# %% en=968bf00d
from minillm.course.show import show_source
from minillm.quant.awq import awq
from minillm.quant.gptq import gptq, hessian
from minillm.quant.grid import rtn
from minillm.quant.smoothquant import smooth_scales, w8a8

show_source(gptq)

# %% en=cba21c26
def output_error(product, x):
    """这一层在输入 x 上的相对输出误差：‖product − x wᵀ‖ / ‖x wᵀ‖。"""
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
    what = f"{BITS} 位权重，每组 {GROUP} 个" if "W8A8" not in name else "int8 x int8"
    print(f"{name:>18}（{what}）：测试词元上的输出误差 {error:.2%}")
print(f"AWQ 在校准词元上选了 alpha = {awq_alpha}")
assert errors["GPTQ"] < errors["RTN"] and errors["AWQ"] < errors["RTN"]
assert errors["W8A8 + SmoothQuant"] < errors["W8A8"]

# %% [markdown] en=83653194
# 在同一个 3 位网格上，GPTQ 和 AWQ 都胜过就近舍入（round-to-nearest，RTN），而它们只用了 1,024 个词元的校准数据；SmoothQuant 把离群值的尺度挪进权重里，让 int8 × int8 的乘积更准确。这只是一层：第 07 章比较的是整个模型的困惑度。

# %% [markdown] en=5e78eda3
# ## Q32 · EAGLE、MTP 和独立的草稿模型有什么不同？
#
# 推测解码的加速取决于接受率 α 和起草的代价 c（草稿一步与目标模型一步的耗时之比）：每轮起草 k 个词元，平均得到 (1 − α^(k+1)) / (1 − α) 个词元，花费约 1 + k·c 个目标步。独立的草稿模型要另外部署、分词器必须相同，α 通常不高，c 也不小。
#
# Medusa 在目标模型最后的隐藏状态上加几个解码头，一次猜后面几个位置；论文在采样时用的是“典型接受”（typical acceptance）：目标模型给候选词元的概率超过一个随熵增大而变小的阈值，就接受它。这比拒绝采样接受得多，但输出不再严格服从目标模型的分布（贪心验证时，输出与普通贪心相同）。EAGLE 训练一个约一层的小网络，根据目标模型顶层的特征自回归地起草，所以 α 高、c 小；EAGLE-2/3 还按置信度展开草稿树，用推广到多个草稿的拒绝采样验证整棵树，所以保持目标模型的分布。MTP（多词元预测，DeepSeek-V3）在预训练时就学会预测再下一个词元，推理时直接当草稿用，报告的接受率为 85%–90%。贪心验证和 Q23 的拒绝采样规则都不改变输出的分布；典型接受拿分布上的一点偏差换更高的接受率。
#
# 用两个从 SmolLM2 自身切出来、未经训练的草稿来证明（前 16 层和前 28 层，即第 08 章的 `first_layers`）：与目标模型共享更多计算的草稿（正如 EAGLE 复用目标模型的特征）被接受得更频繁；两种情况下目标模型的词元都一样。每种草稿应有的加速由公式得出，其中 c = 草稿层数 / 30；然后把推测解码和普通解码交替计时，实测加速比：

# %% en=c180ea0d
from minillm.measure import compare
from minillm.speculative import (ModelDraft, expected_tokens_per_pass, first_layers,
                                 speculative_generate)

K = 4
# 提示词的意思是“从前，在海边的一个小村庄里，住着……”
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
    speedup[depth] = compare(  # 普通解码的耗时 / 推测解码的耗时
        lambda: speculative_generate(model, tokenizer, story, draft, k=K, max_new_tokens=16,
                                     ignore_eos=True),
        lambda: minillm.generate(model, tokenizer, story, max_new_tokens=16, ignore_eos=True),
        repeats=2 if CI else REPEATS, device=device, warmup=0)
    print(f"{depth:>2} 层的草稿：接受率 {alpha[depth]:.0%}，"
          f"目标模型每次前向传播得到 {run.stats.tokens_per_pass:.2f} 个词元（公式：{expected:.2f}）；"
          f"c = {cost:.2f} 时预期加速 {expected / (1 + K * cost):.2f}x；"
          f"实测 {speedup[depth].spread_text()}")
    print("   ", {True: "每一轮都比普通解码快", None: TOO_NOISY,
                  False: "每一轮都比普通解码慢：不划算"}
          [speedup[depth].above(1.0)])
head = expected_tokens_per_pass(alpha[28], K) / (1 + K / c.n_layers)
print(f"算一算：一个一层的头（c = 1/{c.n_layers}），如果有 28 层草稿的接受率，"
      f"能带来 {head:.2f}x")
assert alpha[28] > alpha[16]
assert all(m.above(1.0) is not True for m in speedup.values())  # 未经训练切出的草稿不划算

# %% [markdown] en=e2cacf17
# 不经训练、直接从目标模型切出来的草稿：浅的很少猜对，深的又几乎要花一整个目标模型步，两者都不划算，计时的结果和公式一致。这正是 EAGLE 和 MTP 填补的空白：一个大约一层的头，经过训练，用目标模型自己的特征来预测，接受率高而代价很小。
#
# **用数字看典型接受。** Medusa 的规则是：目标模型给草稿词元 x 的概率 p(x) 达到 min(ε, δ·e^(−H(p))) 时接受 x，H 是 p 的熵（这里取 ε = 0.09、δ = 0.3）；否则从只保留阈值以上词元的 p 里重新抽。在一个真实位置上看这条规则：取目标模型的 p 和 28 层草稿的 q，位置在“... there lived a”之后（上面的故事开头加上贪心生成的第一个词元），在整个词表上精确计算它输出的分布，再和 Q23 的拒绝采样规则比：

# %% en=77dadb5d
import math

from minillm.speculative import residual_distribution

with torch.inference_mode():
    story_ids = torch.tensor([story + plain.token_ids[:1]], device=device)  # “... there lived a”
    p_t = torch.softmax(model(story_ids)[0, -1].double().cpu(), -1)
    q_d = torch.softmax(first_layers(model, 28)(story_ids)[0, -1].double().cpu(), -1)
entropy = float(-(p_t * p_t.clamp_min(1e-30).log()).sum())
threshold = min(0.09, 0.3 * math.exp(-entropy))
above = p_t >= threshold
kept = q_d * above  # 草稿抽中并被接受
typical = kept + (1 - kept.sum()) * p_t * above / p_t[above].sum()  # 否则：从截断后的 p 里抽
both = torch.minimum(p_t, q_d)
rejection = both + (1 - both.sum()) * residual_distribution(p_t, q_d)
gap = lambda a, b: 0.5 * float((a - b).abs().sum())  # 全变差距离  # noqa: E731
print(f"p 的熵 {entropy:.2f} nat，阈值 {threshold:.4f}：只有 {int(above.sum())} 个词元可能被输出，"
      f"它们占目标模型概率的 {float(p_t[above].sum()):.0%}")
print(f"输出与目标分布的距离：典型接受 {gap(typical, p_t):.3f}，"
      f"拒绝采样规则 {gap(rejection, p_t):.1e}")
assert gap(rejection, p_t) < 1e-9 and gap(typical, p_t) > 0.05

# %% [markdown] en=9663896e
# ---
# # 自测（self-check quiz）
#
# 一次一道题：选出或填入你的答案，点 **检查** 查看答案和解释，再点 **下一题**。数值题的答案在 5% 以内就算对（速度上限那道题是 10%）。这些数字来自本模型的配置，而不是查表。（测验用 ipywidgets 做成，需要一个运行中的内核。）

# %% en=330dc619
quiz = checks.quiz_widget(checks.build_quiz(c))
display(quiz)

# %% [markdown] en=d3289f46
# 测验用 `checks.grade` 评分；这里用本章用过的公式来检验它：

# %% en=a7d4e70e
questions = checks.build_quiz(c)
kv_q = questions[1]
right = kv_cache_formula_bytes(c, 8192, 2) / 1e9
assert checks.grade(kv_q, f"{right * 1.02:.4f}")[0] and not checks.grade(kv_q, right * 2)[0]
assert checks.grade(questions[0], "贪心解码")[0]
print(f"共 {len(questions)} 道题；8k 个词元的 fp16 KV 缓存是 {right:.3f} GB")

# %% [markdown] en=7890c6fd
# ## 要点
#
# - 面试时，公式就是答案，测量就是证明：权重字节数和 KV 字节数决定放得下什么，带宽除以字节数决定解码的上限，接受率加上草稿的代价决定推测解码能换来多少。
# - 大多数服务技术是在挪动计算或字节，而不是消除它们：FlashAttention 把分数留在片上，分块预填充和预填充/解码分离让预填充不再拖住解码，KV 缓存量化和 MLA 缩小每一步要读的数据。
# - 原始资料需要小心的地方：“动态批处理”不是连续批处理；Medusa 的典型接受不精确，贪心验证和拒绝采样规则才精确。
# - 练习 `exercises/zh/10_interview_qa.ipynb` 要你在白板上做三个估算：70B fp8 模型在 4 块 GPU 上的解码上限，80 GB 的 KV 缓存池最多能放多大的批，以及 α = 0.7、4 个草稿词元时推测解码能带来的加速。
