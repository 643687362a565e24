# 中文版 · 10d_interview_frontier.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=a0b5186e
# # 10d · 面试题（interview questions），第四部分：2026 年的面试新增了什么
#
# 这是第 10 章的 Q33–Q40，接在 `10c_interview_serving` 之后：混合专家（mixture of experts，MoE）、FP8 与 FP4、长上下文、调度器的取舍、多 LoRA 服务，以及两道经典题。和前面一样，每道题先给出答案，再用一个以 `assert` 结尾的单元格证明：能在真实模型上演示的，就在 SmolLM2 上演示；本身就是算术的，就用精确的算术。

# %% en=d65279ec
import math
import os

import torch
import torch.nn.functional as F

import minillm
from minillm.course.tokenizer_samples import corpus
from minillm.generation.kv_cache import KVCache
from minillm.measure import TOO_NOISY, compare, load_average
from minillm.utils.columns import Label  # 按屏幕列数补齐：中文标签也能对齐
from minillm.utils.devices import describe

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时少用几个词元
REPEATS = 3                      # 每个计时结论背后交替重复的次数
torch.manual_seed(0)
for key, value in describe().items():
    print(f"{key:>12}: {value}")
print(load_average())

device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device, fast=False)
c = model.config
book = tokenizer.encode(corpus("english")[:20_000])  # 莎士比亚的文字，下面所有的输入都取自这里

# %% [markdown] en=d9c82368
# ---
# # 第 8 部分 · 2026 年的面试新增了什么
#
# 引擎里还没有的部件（路由器、FP4、LoRA），就在单元格里当场搭一个小的。

# %% [markdown] en=dbc1d847
# ## Q33 · MoE 的总参数和激活参数有什么区别？专家并行怎么通信？
#
# MoE 把前馈网络换成很多个专家，路由器为每个词元选 top-k 个。总参数决定显存，激活参数决定每个词元的计算量：DeepSeek-V3 共 6710 亿参数，每个词元激活 370 亿（256 个路由专家选 8 个，外加 1 个共享专家）。批大小为 1 的解码只读选中的专家，字节数接近 37B 的稠密模型；B 个词元在均匀路由下平均覆盖 E(1 − (1 − k/E)^B) 个专家，几百个词元就几乎全覆盖，一步读的字节与 671B 的稠密模型相同，省下的只是计算量。专家并行（expert parallelism）把整个专家放在不同的 GPU 上：每个 MoE 层用一次 all-to-all 把词元分发（dispatch）到专家所在的卡，再用一次 all-to-all 合并（combine）结果；注意力通常做数据并行（DP attention）。DeepEP 是 DeepSeek 开源的 all-to-all 通信库（预填充用高吞吐内核，解码用低延迟内核，分发用 FP8）；EPLB 按统计的负载复制热门专家，并把专家分到各卡，使负载均衡。
#
# 先做算术，用 DeepSeek-V3 公布的配置：

# %% en=c61a1974
V3 = dict(hidden=7168, layers=61, dense_layers=3, dense_ffn=18432, expert_ffn=2048, experts=256,
          top_k=8, vocab=129280, heads=128, q_rank=1536, kv_rank=512, nope=128, rope=64,
          v_dim=128)  # DeepSeek-V3 的 config.json；每个 MoE 层还有 1 个共享专家
d, E, k, heads = V3["hidden"], V3["experts"], V3["top_k"], V3["heads"]
mla = (d * V3["q_rank"] + V3["q_rank"] * heads * (V3["nope"] + V3["rope"])
       + d * (V3["kv_rank"] + V3["rope"]) + V3["kv_rank"] * heads * (V3["nope"] + V3["v_dim"])
       + heads * V3["v_dim"] * d)  # 注意力的各个投影
expert, moe_layers = 3 * d * V3["expert_ffn"], V3["layers"] - V3["dense_layers"]
always = (V3["layers"] * mla + V3["dense_layers"] * 3 * d * V3["dense_ffn"]
          + moe_layers * (expert + E * d) + 2 * V3["vocab"] * d)  # 共享专家和路由器
total, active = always + moe_layers * E * expert, always + moe_layers * k * expert
print(f"DeepSeek-V3：共 {total / 1e9:.1f} B 参数，每个词元激活 {active / 1e9:.1f} B")
for batch in (1, 8, 64, 256):
    touched = E * (1 - (1 - k / E) ** batch)  # 均匀路由时每层读到的不同专家数
    read = always + moe_layers * touched * expert  # fp8：每个参数一个字节
    print(f"批大小 {batch:>3}：每层 {E} 个专家中读 {touched:5.1f} 个；一步解码读 "
          f"{read / 1e9:3.0f} GB，每个词元 {read / batch / 1e9:5.2f} GB")
print(f"每个词元在每个 MoE 层的 all-to-all：分发 {k * d / 1e3:.0f} kB（fp8），合并 "
      f"{2 * k * d / 1e3:.0f} kB（bf16）；每次前向传播共 {moe_layers * 3 * k * d / 1e6:.1f} MB")
assert abs(total / 671e9 - 1) < 0.01 and abs(active / 37e9 - 1) < 0.03
assert E * (1 - (1 - k / E) ** 256) > 0.99 * E  # 256 个词元的批几乎读遍所有专家

# %% [markdown] en=363cafce
# 再看真实的一层：把第 5 层前馈网络的 1,536 个神经元切成 16 个专家，每个 96 个，再在 1,024 个词元上用最小二乘拟合一个线性路由器，预测每个专家给输出加上多少。每个词元选 4 个专家；在另外 256 个词元上看负载，以及每种批大小要读的专家数：

# %% en=d08db29f
LAYER, EXPERTS, TOP = 5, 16, 4
mlp = model.layers[LAYER].mlp
captured = []
hook = mlp.register_forward_pre_hook(lambda m, args: captured.append(args[0][0].float().cpu()))
with torch.inference_mode():
    for start in range(0, 1280, 256):  # 跑到第 LAYER 层就能看到它的输入
        ids = torch.tensor([book[start:start + 256]], device=device)
        positions = torch.arange(256, device=device)[None]
        model.run_layers(model.embed_tokens(ids, positions), positions,
                         layers=model.layers[:LAYER + 1])
hook.remove()
x_fit, x_test = torch.cat(captured[:4]), captured[4]
gate, up, down = (p.weight.detach().float().cpu()
                  for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
h = (F.silu(x_fit @ gate.T) * (x_fit @ up.T)).unflatten(-1, (EXPERTS, -1))  # 16 个专家 × 96 个神经元
adds = torch.einsum("ten,den->ted", h, down.unflatten(1, (EXPERTS, -1))).norm(dim=-1)
router = torch.linalg.lstsq(F.pad(x_fit, (0, 1), value=1.0), adds.log(),
                            driver="gelsd").solution  # SVD：每次运行结果都相同
chosen = (F.pad(x_test, (0, 1), value=1.0) @ router).topk(TOP, -1).indices
load = torch.bincount(chosen.flatten(), minlength=EXPERTS)
print(f"每个专家分到的词元数：{load.tolist()}；最忙的专家是平均的 "
      f"{load.max() / load.float().mean():.2f} 倍")
touched = {}
for batch in (1, 4, 16, 64):
    seen = [len(set(chosen[s:s + batch].flatten().tolist())) for s in range(0, 256, batch)]
    touched[batch] = sum(seen) / len(seen)
    print(f"批大小 {batch:>2}：读 {EXPERTS} 个专家中的 {touched[batch]:4.1f} 个（均匀路由："
          f"{EXPERTS * (1 - (1 - TOP / EXPERTS) ** batch):4.1f}）")
assert touched[1] == TOP and touched[64] > 0.9 * EXPERTS
assert load.max() > 1.2 * load.float().mean()  # 不均衡：EPLB 的冗余副本要抹平的正是它

# %% [markdown] en=ed9e64f9
# 一个词元读 4 个专家，64 个词元的批几乎读遍全部 16 个：MoE 只在小批量时节省带宽。而且即使是同一类文本，负载也不均衡：每张 GPU 放一个专家时，分到最忙专家的那张卡会拖慢所有人。

# %% [markdown] en=7ee20688
# ## Q34 · FP8 的 E4M3 和 E5M2 有什么区别？MXFP4 和 NVFP4 又是什么？
#
# 两种 FP8 都是 8 位浮点数，只是指数位和尾数位分法不同。E4M3：4 位指数、3 位尾数，最大 448，1 附近的间隔是 1/8；E5M2：5 位指数、2 位尾数，最大 57344，范围大得多，精度差一倍。推理时权重和激活先用缩放因子放进范围，更需要精度，用 E4M3；训练时梯度的数量级跨度大，更需要范围，经典做法是前向 E4M3、梯度 E5M2（DeepSeek-V3 靠细粒度缩放全用 E4M3）。缩放粒度指多少个数共用一个缩放因子：每个张量、每个通道，或每个 128×128 的块（DeepSeek-V3 的权重）。FP4（E2M1）只有 8 个非负值（0 与 0.5 到 6 之间的 7 个），必须用小块：MXFP4（OCP 标准）每 32 个数共用一个 E8M0 缩放因子（2 的整数次幂）；NVFP4（Blackwell）每 16 个数共用一个 E4M3 缩放因子，外加整个张量的 FP32 缩放因子，误差更小，每个权重多 0.25 位。
#
# 在第 5 层的门控投影（1,536 × 576）上证明，每种格式都在 PyTorch 里模拟：

# %% en=ae912ec1
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # fp4 能表示的绝对值
LARGEST = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
for name, dtype in FP8.items():
    print(f"{name}：最大 {torch.finfo(dtype).max:g}，1 附近的间隔 {torch.finfo(dtype).eps}")


def fake_quantize(w, fmt, tile, scale="fp32"):
    """把 `w` 舍入到 `fmt`，每个 (行, 列) 的块一个缩放因子（fp32、E8M0 或 E4M3）。"""
    rows, cols = w.shape
    r, k = tile[0] or rows, tile[1] or cols
    x = F.pad(w, (0, -cols % k, 0, -rows % r)).unflatten(1, (-1, k)).unflatten(0, (-1, r))
    amax = x.abs().amax((1, 3), keepdim=True).clamp_min(1e-12)
    s = amax / LARGEST[fmt]
    if scale == "e8m0":  # OCP MX 标准的规则：2^(floor(log2 amax) - 2)，因为 6 = 1.5 × 2^2
        s = 2.0 ** (torch.floor(torch.log2(amax)) - 2)
    elif scale == "e4m3":
        per_tensor = w.abs().max() / (448 * 6)
        s = (s / per_tensor).to(torch.float8_e4m3fn).float() * per_tensor
    if fmt == "e2m1":  # 八个绝对值里最近的那个（更大的一律取 6），保留符号
        q = (x / s).sign() * E2M1[torch.bucketize((x / s).abs(), (E2M1[1:] + E2M1[:-1]) / 2)]
    else:
        q = (x / s).to(FP8[fmt]).float()
    return (q * s).flatten(2, 3).flatten(0, 1)[:rows, :cols]


SCHEMES = {"fp8 e4m3，一个缩放因子": ("e4m3", (None, None), "fp32"),
           "fp8 e5m2，一个缩放因子": ("e5m2", (None, None), "fp32"),
           "fp8 e4m3，128x128 的块": ("e4m3", (128, 128), "fp32"),
           "fp4，一个缩放因子": ("e2m1", (None, None), "fp32"),
           "fp4，每行一个缩放因子": ("e2m1", (1, None), "fp32"),
           "MXFP4": ("e2m1", (1, 32), "e8m0"), "NVFP4": ("e2m1", (1, 16), "e4m3")}
error = {}
for name, (fmt, tile, scale) in SCHEMES.items():
    shared = (tile[0] or gate.shape[0]) * (tile[1] or gate.shape[1])  # 每个缩放因子管多少个数
    bits = (4 if fmt == "e2m1" else 8) + (32 if scale == "fp32" else 8) / shared
    error[name] = float((fake_quantize(gate, fmt, tile, scale) - gate).norm() / gate.norm())
    print(f"{Label(name):>25}：每个权重 {bits:5.2f} 位，误差 {error[name]:6.2%}")
fp8_ratio = error["fp8 e5m2，一个缩放因子"] / error["fp8 e4m3，一个缩放因子"]
assert 1.5 < fp8_ratio < 2.5  # 少一位尾数：步长翻倍
assert abs(error["fp8 e4m3，128x128 的块"] / error["fp8 e4m3，一个缩放因子"] - 1) < 0.1
assert error["NVFP4"] < error["MXFP4"] < error["fp4，一个缩放因子"] / 2

# %% [markdown] en=b125b186
# 对 fp8 来说，缩放粒度对这些权重几乎没有影响：浮点数在整个范围内保持同样的相对步长。对 fp4 来说，缩放粒度决定一切：整个张量只有一个缩放因子时，小于最大值 1/24 的权重都被舍入成零；分块让误差降到一半以下，NVFP4 的 e4m3 缩放因子又胜过 MXFP4 的 2 的整数次幂。（模型文件把这些权重存成 Q4_1，即 32 个一组、带缩放因子和最小值的 int4，int4 量化会原样得回它们，所以表里没有列出。）

# %% [markdown] en=39bb6703
# ## Q35 · 怎样让模型处理比训练时更长的上下文？什么是注意力汇聚点？
#
# 旋转位置编码（RoPE）的第 i 对维度每个位置转 θ_i = base^(−2i/d) 弧度；超过训练长度 L，低频的几对会转到训练时没见过的角度。位置插值（PI）把所有频率除以 s：角度不越界，但高频维度也被压缩，需要微调。NTK-aware 缩放改为放大 base（base·s^(d/(d−2))）：最高频的一对几乎不变，最低频的一对正好缩小 s 倍，不微调也能用一些。YaRN 按每对维度在 L 内转的圈数分段：波长小于 L/32 的不动，大于 L 的按 s 插值，中间线性过渡，再给注意力的 logits 乘一个温度系数（√(1/t) = 0.1·ln s + 1），少量微调即可把上下文扩展数倍。注意力汇聚点（StreamingLLM）：模型把大量注意力放在开头几个词元上，不论内容，因为 softmax 的权重之和必须为 1，总得有个去处。滑动窗口一旦把它们挤出去，困惑度就暴涨；保留前 4 个词元再加滑动窗口，缓存大小固定，质量接近完整注意力。
#
# 先做算术：上下文扩展到 SmolLM2 的 8,192 个词元的四倍时，每种缩放对它的 32 个旋转频率做了什么。

# %% en=f814156c
s, trained = 4, c.max_seq_len
exponent = torch.arange(c.head_dim // 2, dtype=torch.float64) * 2 / c.head_dim
freq = c.rope_theta ** -exponent  # 每对维度每个位置转过的弧度
wavelength = 2 * math.pi / freq  # 转满一圈要多少个词元
ramp = ((trained / wavelength - 1) / (32 - 1)).clamp(0, 1)  # YaRN，alpha 取 1，beta 取 32
scaled = {"PI": freq / s,
          "NTK-aware": (c.rope_theta * s ** (c.head_dim / (c.head_dim - 2))) ** -exponent,
          "YaRN": freq / s * (1 - ramp) + freq * ramp}
print("维度对      波长   " + "  ".join(f"{name:>9}" for name in scaled)
      + "   （新频率 / 原频率）")
for i in (0, 8, 16, 20, 24, 31):
    print(f"{i:>4} {wavelength[i]:>10,.0f}   "
          + "  ".join(f"{float(f[i] / freq[i]):>9.3f}" for f in scaled.values()))
print(f"YaRN 给注意力乘的温度系数：sqrt(1/t) = {0.1 * math.log(s) + 1:.3f}")
ntk, yarn, fast, slow = scaled["NTK-aware"], scaled["YaRN"], wavelength < trained / 32, \
    wavelength > trained
assert torch.isclose(ntk[0], freq[0]) and torch.isclose(ntk[-1], freq[-1] / s)
assert torch.equal(yarn[fast], freq[fast]) and torch.allclose(yarn[slow], freq[slow] / s)

# %% [markdown] en=f9716b49
# 再实测汇聚点：SmolLM2 把同一段文字读三遍，一遍用完整注意力，一遍每层都用 32 个词元的滑动窗口，一遍在这个窗口之外再保留前 4 个词元（困惑度只统计前 32 个之后的词元，窗口从那里开始真正截掉东西）。

# %% en=a1c868fa
from minillm.generation.sliding_window import sliding_window_mask
from minillm.layers.attention import causal_mask

WINDOW, SINKS = 32, 4
text = book[5000:5000 + (256 if CI else 512)]
n = len(text)


def windowed_perplexity(mask=None):
    ids = torch.tensor([text], device=device)
    positions = torch.arange(n, device=device)[None]
    with torch.inference_mode():
        hidden = model.run_layers(model.embed_tokens(ids, positions), positions,
                                  None if mask is None else mask[None, None])
        logits = model.logits(hidden)[0, WINDOW:-1].float()
    return math.exp(F.cross_entropy(logits, ids[0, WINDOW + 1:]).item())


window = sliding_window_mask(n, n, WINDOW, device)
sinks = causal_mask(n, n, device) & (torch.arange(n, device=device) < SINKS)
ppl = {"完整注意力": windowed_perplexity(),
       f"窗口 {WINDOW}": windowed_perplexity(window),
       f"窗口 {WINDOW} + 汇聚点 {SINKS}": windowed_perplexity(window | sinks)}
for name, value in ppl.items():
    print(f"{Label(name):>22}：在 {n - WINDOW - 1} 个词元上的困惑度 {value:8.1f}")
full, windowed, kept = ppl.values()
assert kept < windowed / 4 and kept < 2 * full

# %% [markdown] en=0f944e1f
# 几百个词元里的 4 个，决定了模型能不能正常工作：开头的词元本身没什么特别的含义，只是注意力无处可去时的落脚点。

# %% [markdown] en=0a9c140d
# ## Q36 · 抢占时，重算和换出到 CPU 内存各有什么代价？
#
# KV 缓存满了，调度器（scheduler）要抢占（preemption）一个正在运行的请求，把它的块让给别人。重算（recompute）丢掉它的 KV 缓存，等它回来时把提示词和已生成的词元重新预填充：约 2 × 参数量 × 词元数 次浮点运算，外加注意力，不占额外存储。换出（swap）把它的 KV 块复制到 CPU 内存，回来时再复制回 GPU：搬运 KV 字节数的两倍，走 PCIe 这类慢得多的链路，还占 CPU 内存。比较的是：每个词元重算的浮点运算数除以换出的字节数，对 GPU 算力除以链路带宽。GQA、MLA 让每个词元的 KV 很小，大模型每个词元的计算量大，换出划算；小模型，或者链路正忙时，重算更便宜。vLLM V1 只用重算：实现简单，被抢占的请求回来时，它的块还可能留在前缀缓存里；V0 还支持换出。
#
# 在 SmolLM2 上证明：把一个请求的 KV 缓存用两种方式找回来（把清空的缓存重新预填充一遍；把每一层的键和值复制到 CPU 内存再复制回来），交替计时。

# %% en=34187e64
from minillm.generation.kv_designs import PUBLISHED, bytes_per_token

kv_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # fp32 的键和值
params = sum(p.numel() for p in model.parameters())
print(f"SmolLM2（fp32）每个词元：重算 {2 * params / 1e6:.0f} MFLOP，换出再换回 "
      f"{2 * kv_token / 1e3:.0f} kB：每字节 {params / kv_token:,.0f} FLOP")
verdicts, sizes = {}, {}
for length in (32, 128) if CI else (32, 128, 256):
    prompt = torch.tensor([book[:length]], device=device)
    cache = KVCache.for_model(model, batch_size=1, max_tokens=length)
    host = [torch.empty(t.shape) for t in cache.keys + cache.values]  # CPU 内存
    if device.type == "cuda":
        host = [h.pin_memory() for h in host]

    def recompute():
        cache.reset()
        with torch.inference_mode():
            model(prompt, cache=cache)

    def swap():
        for t, h in zip(cache.keys + cache.values, host):
            h.copy_(t)  # 换出
            t.copy_(h)  # 再换回

    recompute()
    sizes[length] = cache.nbytes
    timing = compare(swap, recompute, REPEATS, device=device)
    verdicts[length] = timing.above(1.0)
    said = {True: "每次都是换出更快", None: TOO_NOISY,
            False: "每次都是重算更快"}[verdicts[length]]
    print(f"{length:>4} 个词元：换出搬运 {2 * cache.nbytes / 1e6:5.2f} MB，重算要做 "
          f"{2 * params * length / 1e9:5.1f} GFLOP；重算 / 换出的耗时 "
          f"{timing.spread_text()}：{said}")
h100 = 989e12 / 64e9  # H100：bf16 稠密算力（FLOP/s）除以 PCIe 5 x16 的单向带宽（字节/s）
for design in ("GQA", "MHA"):  # 公布的 Llama-3-8B，以及假如它用完整的多头注意力
    per_byte = 8.0e9 / bytes_per_token(PUBLISHED["Llama-3-8B"], design)
    print(f"Llama-3-8B 用 {design}：每字节 {per_byte:,.0f} FLOP；H100 峰值下为 {h100:,.0f}")
assert all(sizes[length] == kv_token * length for length in sizes)  # 公式算出的正是缓存的大小
assert device.type != "cpu" or all(v is not False for v in verdicts.values())  # 同一块内存

# %% [markdown] en=a338e6ee
# 在 CPU 上，“链路”只是同一块内存里的一次复制，比任何预填充都快得多：每种长度都是换出胜出（最后一个 assert 在 CPU 上检查这一点）。在 GPU 上，复制要经过 PCIe，预填充却跑在张量核心上：上面的结论说明在你的机器上谁更快。对峰值算力下更大的模型，每字节的浮点运算数超过 H100 的那个数，就是换出划算：用 GQA 的 Llama-3-8B 远高于它，同一个模型若用完整的多头注意力，则与它大致持平。

# %% [markdown] en=0e9defac
# ## Q37 · 什么是 goodput？QPS、并发数和延迟是什么关系？
#
# 吞吐量（throughput）数完成了多少请求；有效吞吐量（goodput）只数满足服务等级目标（SLO）的请求，比如 TTFT 不超过 1 秒、TPOT 不超过 50 毫秒。负载越高，吞吐量还在涨，排队却拉长 TTFT、大批量拉长 TPOT，超出 SLO 的请求越来越多，有效吞吐量反而下降（DistServe 等优化的正是它）。Little 定律：系统里的平均请求数（并发数）= 吞吐量 × 平均延迟，对任何稳定的系统都成立。QPS 是每秒到达的请求数（开环压测固定它），并发数（concurrency）是同时在处理的请求数（闭环压测固定它）：每秒 10 个请求、每个 2 秒，平均有 20 个在处理；固定 8 个并发、每个 2 秒，QPS 最多是 4。压测报告要写明固定的是哪个，并给出 SLO 下的有效吞吐量。
#
# 用第 06 章的引擎证明，它的时钟只按实测的每一步前进：先让一个请求单独运行，用它定出 SLO（TTFT 和 TPOT 都不超过它自己的 3 倍）；再让请求以三种速率到达，从一次只服务一个请求时能承受的一半，到它的八倍。

# %% en=f6825e5c
from minillm.engine.disaggregation import serve_colocated

REQUESTS, NEW = (6, 6) if CI else (8, 12)
prompts = [book[100 * i:100 * i + 48] for i in range(REQUESTS)]
settings = {"max_new_tokens": NEW, "ignore_eos": True}


def serve(arrivals):
    engine = minillm.Engine(model, tokenizer, num_blocks=128, block_size=16, max_num_seqs=4,
                            enable_prefix_caching=False)
    return serve_colocated(engine, arrivals).metrics


serve([(0.0, prompts[0], settings)])  # 先跑一次，让引擎的代码路径热起来
alone = serve([(0.0, prompts[0], settings)])[0]
print(f"单独运行：TTFT {1e3 * alone.ttft:.0f} ms，TPOT {1e3 * alone.tpot:.0f} ms，延迟 "
      f"{alone.latency:.2f} s")
runs = {}
for load in (0.5, 2, 8):
    qps = load / alone.latency
    done = serve([(i / qps, p, settings) for i, p in enumerate(prompts)])
    start, span = done[0].start, max(r.start + r.latency for r in done) - done[0].start
    met = sum(r.ttft <= 3 * alone.ttft and r.tpot <= 3 * alone.tpot for r in done)
    latency = sum(r.latency for r in done) / len(done)
    instants = [start + span * (j + 0.5) / 1000 for j in range(1000)]
    in_flight = sum(r.start <= t < r.start + r.latency for t in instants for r in done) / 1000
    # 吞吐量、有效吞吐量、满足 SLO 的请求数、平均延迟、平均同时在处理的请求数
    runs[load] = (len(done) / span, met / span, met, latency, in_flight)
    print(f"QPS {qps:4.2f}：吞吐量 {len(done) / span:.2f}/s，有效吞吐量 {met / span:.2f}/s"
          f"（{len(done)} 个中 {met} 个满足 SLO）；延迟 {latency:.2f} s；同时在处理的请求 "
          f"{in_flight:.2f} 个，吞吐量 × 延迟 = {len(done) / span * latency:.2f}")
(low, _, low_met, _, _), (high, high_good, high_met, _, _) = runs[0.5], runs[8]
assert all(abs(flight / (rate * wait) - 1) < 0.05 for rate, _, _, wait, flight in runs.values())
assert high > low and high_good < high and high_met < low_met

# %% [markdown] en=4ce8f2dc
# ## Q38 · 多个 LoRA 适配器怎样在同一个批里服务？
#
# LoRA 只训练每个投影旁边的两个小矩阵：W 不变，输出变成 xWᵀ + x Aᵀ Bᵀ，A 是 r × d_in，B 是 d_out × r，r 通常是 8 到 64，一个适配器只占基座模型的千分之几。把适配器合并进权重（W + BA）最快，但每个适配器要一份完整权重，请求也只能按适配器分批。多 LoRA 服务共用一份基座权重：基座的矩阵乘法整个批只做一次，每行再按自己的适配器编号收集（gather）A 和 B，做两个很小的矩阵乘法。Punica 的 SGMV/BGMV 内核按段或按行做这种收集；S-LoRA 把适配器放在 CPU 内存里，用统一分页把用到的适配器和 KV 缓存一起放进显存，一台机器能服务上千个适配器。vLLM 的 --enable-lora 和 SGLang 也这样做。
#
# 在第 5 层的门控投影和 Q33 截获的输入上证明：两个秩为 8 的随机适配器，一个批里放三个请求（适配器 0、适配器 1、不用适配器），每一行都和把对应适配器合并进权重的结果比较。

# %% en=3fbe9b3b
RANK = 8
seed = torch.Generator().manual_seed(0)
A = torch.randn(2, RANK, gate.shape[1], generator=seed) / gate.shape[1] ** 0.5  # (秩, 输入)
B = 0.05 * torch.randn(2, gate.shape[0], RANK, generator=seed)  # (输出, 秩)


def multi_lora(x, rows):
    """整个批只乘一次基座权重，再加上每行按编号收集来的适配器（-1：不用）。"""
    pick = rows.clamp(min=0)
    delta = x @ A[pick].transpose(1, 2) @ B[pick].transpose(1, 2)
    return x @ gate.T + delta * (rows >= 0)[:, None, None]


x = x_test[:96].reshape(3, 32, -1)  # 三个请求，各 32 个词元
rows = torch.tensor([0, 1, -1])
together = multi_lora(x, rows)
alone = [x[j] @ (gate + B[a] @ A[a]).T if a >= 0 else x[j] @ gate.T
         for j, a in enumerate(rows.tolist())]  # 各自合并适配器：W + B A
gap = max((together[j] - alone[j]).abs().max().item() for j in range(3))
effect = (alone[0] - x[0] @ gate.T).abs().max().item()
print(f"这里一个适配器有 {A[0].numel() + B[0].numel():,} 个参数，基座权重有 {gate.numel():,} 个")
print(f"同一个批与每行单独计算相比：最大差值 {gap:.1e}；适配器让输出"
      f"最多改变 {effect:.2f}")
assert gap < 1e-4 < effect

# %% [markdown] en=e7ad8694
# ## Q39 · 为什么缓存 K 和 V，而不缓存 Q？
#
# 解码时，新词元在每一层的输出是 softmax(q_new · Kᵀ / √d) · V：只需要新词元自己的查询，以及所有位置（含它自己）的键和值。过去位置的查询只用来算过去位置自己的输出，那些输出已经算完、不会再变（因果掩码让前面的位置看不到后面）。所以键和值以后每一步都要再读，值得缓存；查询只用一次，缓存它只会白占显存（SmolLM2 的查询比键加值还宽：9 个查询头对 3 个键值头）。这也是为什么每步解码只处理一个新词元，而每步的注意力开销随上下文线性增长。
#
# 证明：带缓存的一步解码与重新算一遍全部词元得到的 logits 相同；在第一层里，把之前所有的查询置零，最后一个位置的输出不变，移动之前的一个键，它就变了。

# %% en=1c8e0d7e
from minillm.layers.attention import attention_explicit

tokens = torch.tensor([book[3000:3065]], device=device)  # 64 个词元，再加上新的一个
first = model.layers[0]
with torch.inference_mode():
    cache = KVCache.for_model(model, batch_size=1, max_tokens=65)
    model(tokens[:, :-1], cache=cache)  # 预填充：保存每个 k 和 v
    step = model(tokens[:, -1:], cache=cache)[0, -1].float().cpu()  # 只有一个新查询
    full = model(tokens)[0, -1].float().cpu()
    q, k, v = first.attn.project(first.attn_norm(model.embed(tokens)))
    last = attention_explicit(q, k, v)[:, :, -1]
    no_past_q, moved_k = q.clone(), k.clone()
    no_past_q[:, :, :-1] = 0
    moved_k[:, :, 10] += 1.0
    q_effect = (attention_explicit(no_past_q, k, v)[:, :, -1] - last).abs().max().item()
    k_effect = (attention_explicit(q, moved_k, v)[:, :, -1] - last).abs().max().item()
print(f"带缓存的一步解码与重算全部词元相比：logits 的最大差值 "
      f"{(step - full).abs().max().item():.1e}")
print(f"最后一个位置的注意力输出：之前的查询全部置零，变化 {q_effect:.1e}；"
      f"移动之前的一个键，变化 {k_effect:.1e}")
assert (step - full).abs().max() < 1e-3 and q_effect < 1e-6 and k_effect > 1e-4

# %% [markdown] en=f7753af6
# ## Q40 · FlashAttention v1、v2、v3 和 Flash-Decoding 各改进了什么？
#
# v1（2022）：把 Q、K、V 切成放得进片上 SRAM 的块，用在线 softmax（online softmax）逐块累加，分数矩阵从不写回显存，额外显存从 O(n²) 降到 O(n)，结果精确（Q25）。v2（2023）：减少矩阵乘法以外的运算（归一化的除法最后只做一次），除批和头外还沿序列长度并行，重新划分 warp 的工作，在 A100 上达到峰值算力的 50%–73%，约为 v1 的两倍。v3（2024，Hopper）：用 TMA 和 WGMMA 异步流水、warp 分工（warp specialization），让 softmax 与矩阵乘法重叠，并支持 FP8，H100 上 FP16 约 740 TFLOPS。Flash-Decoding（2023）针对解码：批为 1 时只有一个查询，按批和头并行的块太少，大部分 SM 空闲；它把 KV 的长度切成多段并行计算，每段给出局部的最大值、指数和与未归一化的输出，再按 exp(m_i − m) 缩放合并，结果与一次算完相同，长上下文解码最多快 8 倍。
#
# 在第一层上证明：一步解码的查询对一段长文本的键和值，一次算完，以及切成 2、4、16 段再合并，结果相同。

# %% en=5f13915f
from minillm.layers.attention import repeat_kv

long_ids = torch.tensor([book[:256 if CI else 1024]], device=device)
with torch.inference_mode():
    q, k, v = (t.float().cpu() for t in first.attn.project(first.attn_norm(model.embed(long_ids))))
q = q[:, :, -1:]  # 这一步解码的查询：最后一个词元的查询


def split_kv_decode(q, k, v, splits):
    """每段算出最大值 m、指数和 l 和输出 o（在 GPU 上并行），再合并。"""
    k, v = (repeat_kv(t, q.shape[1] // t.shape[1]) for t in (k, v))
    partial = []
    for k_part, v_part in zip(k.chunk(splits, 2), v.chunk(splits, 2)):
        scores = q @ k_part.transpose(-2, -1) / math.sqrt(q.shape[-1])
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m)
        partial.append((m, p.sum(-1, keepdim=True), p @ v_part))
    m = torch.stack([m_i for m_i, _, _ in partial]).amax(0)
    l = sum(l_i * torch.exp(m_i - m) for m_i, l_i, _ in partial)
    return sum(o_i * torch.exp(m_i - m) for m_i, _, o_i in partial) / l


one_pass = attention_explicit(q, k, v)  # 查询在最后一个位置：能看到所有的键
gaps = {splits: (split_kv_decode(q, k, v, splits) - one_pass).abs().max().item()
        for splits in (2, 4, 16)}
print(f"{long_ids.shape[1]} 个键；与一次算完相比的最大差值："
      + "，".join(f"{gap:.1e}（切成 {splits} 段）" for splits, gap in gaps.items()))
print(f"批大小为 1 时的并行工作块：只按头分 {c.n_heads} 个，切成 16 段则有 {16 * c.n_heads} 个；"
      "H100 有 132 个 SM")
assert all(gap < 1e-5 for gap in gaps.values())

# %% [markdown] en=5576b225
# ## 要点
#
# - MoE 省下的是每个词元的计算量；只有小批量时才省字节。
# - 低位宽格式把位数分给数值和缩放因子：fp8 在任何缩放下都保持精度，fp4 需要每 16 或 32 个数一个缩放因子。
# - 长上下文：拉伸 RoPE 的低频维度，并保留注意力汇聚点。
# - 调度都是算术：抢占看浮点运算数对字节数，并发数看 Little 定律，有效吞吐量看 SLO。
# - 缓存键和值，是因为以后每一步都要读它们；在线 softmax 的合并规则，让注意力可以分块、切段。
