# 中文版 · 08_speculative.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=9eedb012
# # 08 · 推测解码：便宜地猜，一次前向传播来验
#
# 解码阶段每做一次整个模型的前向传播，只产出一个词元；而（第 05 章）每一次传播都受内存带宽限制：
# 把全部权重读一遍，却只做很少的算术。**推测解码（speculative decoding，也常译作投机解码）**
# 就是把这些闲着的算力用起来。一个便宜的**草稿（draft）**先猜出接下来的 k 个词元；真正的模型，
# 即**目标模型（target）**，在*一次*前向传播里给这 k 个词元全部打分；再由**接受规则（acceptance
# rule）**留下目标模型认可的那些猜测。输出与目标模型单独生成的结果完全相同（贪心时逐个词元相同，
# 采样时分布相同），只是前向传播的次数更少。
#
# 这个 notebook 在这台机器上、用 SmolLM2-135M 把每一步都测一遍：
#
# 1. 为什么验证 k 个词元的代价远小于 k 个解码步；
# 2. 接受规则：推导出来，再用数值验证；
# 3. 两种草稿：提示词查找（prompt lookup）和目标模型自己的前几层；
# 4. 带 KV 缓存回滚（rollback）的“起草—验证”循环；
# 5. 三个任务上的接受率（acceptance rate）与加速比；
# 6. 什么时候它帮不上忙；
# 7. 长在目标模型身上的草稿（Medusa、EAGLE、多词元预测）：在怎样的起草代价下，一个接受率能换来
#    多少加速。

# %% en=f56e2ab4
import os

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.columns import Label, columns
from minillm.utils.devices import Timer
from minillm.generation.kv_cache import KVCache
from minillm.speculative import (ModelDraft, PromptLookupDraft, accept_or_resample,
                                 expected_tokens_per_pass, first_layers, speculative_generate)

CI = bool(os.environ.get("CI"))  # 在 CI 中跑 `make test` 时规模更小
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"设备 {device}，{torch.get_num_threads()} 个线程，"
      f"{model.config.n_layers} 层，词表大小 {model.config.vocab_size:,}")

# %% [markdown] en=64a00e08
# ## 1 · 验证 k 个词元，代价远小于 k 个解码步
#
# 先用 64 个词元的上下文填满 KV 缓存（KV cache），再给一次前向传播同时喂 n 个新词元并计时，
# n 从 1（即一个解码步）取到 16。每次传播把同一份权重读一遍，随 n 增长的只有算术量。

# %% en=87d5a254
def pass_seconds(n_new, context=64, repeats=5):
    ids = torch.randint(100, 20_000, (1, context + n_new), generator=torch.Generator()
                        .manual_seed(0)).to(device)
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            cache = KVCache.for_model(model, 1, context + n_new)
            model(ids[:, :context], cache=cache)
            with Timer(device) as stopwatch:
                model(ids[:, context:], cache=cache)
            times.append(stopwatch.seconds)
    return min(times)


sizes = [1, 2, 4, 8, 16]
pass_times = {n: pass_seconds(n, repeats=3 if CI else 5) for n in tqdm(sizes)}
for n, t in pass_times.items():
    print(f"{n:>2} 个新词元：每次传播 {1000 * t:6.1f} ms"
          f"（单词元步的 {t / pass_times[1]:.2f} 倍，每个词元合 {t / pass_times[1] / n:.2f} 步）")
per_token_8 = pass_times[8] / pass_times[1] / 8
print(f"一次传播喂 8 个词元：每个词元合 {per_token_8:.2f} 个解码步，"
      + ("远少于分开走 8 步" if per_token_8 < 0.5 else
         "在这台设备上并不比分开走 8 步少多少：这次传播受算力限制"))

# %% en=591112f4
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sizes, [1000 * pass_times[n] for n in sizes], "o-", label="实测")
ax.plot(sizes, [1000 * pass_times[1] * n for n in sizes], ":", label="分成 n 个单独的步")
ax.set_xlabel("一次传播喂入的词元数")
ax.set_ylabel("毫秒")
ax.legend()
plt.show()

# %% [markdown] en=7cd28e28
# 虚线是分成 n 个单独解码步的代价。两条线之间的差距，就是推测解码施展的空间：只要草稿够便宜、
# 又常常猜对，一次传播就能用远低于同样多个解码步的价钱产出好几个词元。低多少，取决于走的路径和
# 设备。在装了 minillm 算子的 CPU 上，单词元的解码步是最精简的路径（所有层在一次 C 调用里跑完），
# 而一次喂多个词元的传播走的是提示词那条路径，一个 CPU 核心的算力又很快用尽：k 个词元要花上几个
# 解码步的时间，而不是一个。在 GPU 上，曲线平坦的那一段要长得多（每读一次权重，背后能藏下多得多
# 的算术），k 个词元只比一个解码步贵一点。

# %% [markdown] en=9fb96c8e
# ## 2 · 接受规则
#
# 在某个位置上，草稿从它的分布 q 中抽出了词元 x；目标模型在这里的分布是 p。规则如下：
#
# - 以概率 min(1, p(x) / q(x)) 接受 x；
# - 若被拒绝，就从**残差分布**（residual）r = max(0, p − q) / Σ max(0, p − q) 中抽一个词元替换它。
#
# 为什么输出的词元恰好服从 p？记 β = Σ_x min(p(x), q(x))，即接受的概率。输出 y 的概率是
#
# P(y) = q(y) · min(1, p(y)/q(y)) + (1 − β) · r(y) = min(p(y), q(y)) + (1 − β) · r(y).
#
# 由于 p 和 q 的和都是 1，Σ max(0, p − q) = 1 − Σ min(p, q) = 1 − β：残差分布的归一化因子正好
# 抵消 (1 − β)，剩下 min(p(y), q(y)) + max(0, p(y) − q(y)) = p(y)。
#
# 先在一对六个词元上的玩具分布上精确地验证一下：

# %% en=3d98ffef
from minillm.course.checks.ch08_speculative import P, Q, chi_square_p_value
from minillm.speculative import residual_distribution

beta = torch.minimum(P, Q).sum()
emitted = torch.minimum(P, Q) + (1 - beta) * residual_distribution(P, Q)
print("p       ", [round(v, 3) for v in P.tolist()])
print("q       ", [round(v, 3) for v in Q.tolist()])
print("P(输出) ", [round(v, 3) for v in emitted.tolist()])
print(f"接受概率 beta = {beta:.2f}；把上面的代数换成数字，P(输出) "
      f"等于 p：{torch.allclose(emitted, P)}")

# %% [markdown] en=f719a60e
# 再实际抽样：把规则跑很多次，数一数输出的是哪些词元。要判断一组计数是否服从某个分布，我们用
# **皮尔逊卡方检验（chi-square test）**。它对每个词元比较观测到的计数与期望的计数，算出
# (观测 − 期望)² / 期望，再全部加起来。它的 **p 值**（p-value）是：如果这些样本真是从那个分布抽出
# 来的，计数偏离它至少这么远的概率。
#
# - p 值明显大于 0（比如 0.01 以上）：这些计数正是那个分布会给出的；
# - p 值接近 0（1e-6 及以下）：这些计数几乎肯定不是从它来的。
#
# minillm 的 `accept_or_resample` 一次对一批行执行这条规则：

# %% en=fa068689
show_source(accept_or_resample)

# %% en=730c36f8
draws = 20_000 if CI else 100_000
g = torch.Generator().manual_seed(0)
drafted = torch.multinomial(Q, draws, replacement=True, generator=g)
tokens, accepted = accept_or_resample(P.expand(draws, -1), Q.expand(draws, -1), drafted, g)
counts = torch.bincount(tokens, minlength=len(P)).double()
print(f"抽取 {draws:,} 次：接受比例 {accepted.double().mean():.3f}（理论值 {beta:.3f}）")
p_target, p_draft = chi_square_p_value(counts, P), chi_square_p_value(counts, Q)
print(f"对目标分布 p 的卡方检验 p 值：{p_target:.3f}")
print(f"对草稿分布 q 的卡方检验 p 值：{p_draft:.1e}")
assert p_target > 1e-3 and p_draft < 1e-6  # 输出的词元服从 p，而不是 q

# %% en=32e077bf
fig, ax = plt.subplots(figsize=(6, 3))
x = torch.arange(len(P))
ax.bar(x - 0.27, Q, 0.27, label="草稿 q")
ax.bar(x, P, 0.27, label="目标 p")
ax.bar(x + 0.27, counts / draws, 0.27, label="输出（实测）")
ax.set_xlabel("词元")
ax.set_ylabel("概率")
ax.legend()
plt.show()

# %% [markdown] en=55238996
# 草稿过多地提议了词元 2、4、5；规则恰好拒绝掉多出来的那部分，残差分布再把概率质量补回到 0、1、3
# 上。更好的草稿（q 更接近 p）会提高 β，也就是接受率；但它永远不会改变输出的结果。
#
# 有 k 个草稿词元时，规则从左到右依次执行，遇到第一次拒绝就停下。如果 k 个全部通过，目标模型在
# 同一次传播里已经算好了最后一个词元之后的分布，于是又白得一个词元：**额外词元（bonus token）**。
# 一次传播产出 1 到 k + 1 个词元；如果每个草稿词元独立地以概率 α 通过，期望的词元数是
# (1 − α^(k+1)) / (1 − α)。
#
# **贪心解码**（greedy decoding，也叫贪心搜索）是 p 和 q 都把全部概率放在 argmax 上的特例：草稿
# 词元恰好是目标模型的 argmax 时就接受，否则输出目标模型的 argmax。所以贪心的推测解码给出的，
# 与普通贪心解码的词元一一相同。

# %% en=2654ce75
from minillm.speculative import verify_greedy

show_source(verify_greedy)

# %% [markdown] en=7be371d6
# ## 3 · 两种草稿
#
# **提示词查找。** 完全不用模型：取上下文最后几个词元，找到它们在前文中最近的一次出现，把当时
# 跟在后面的词元作为提议。当回答要照抄提示词时（修改一段文字、引用文档、改写代码），这样的猜测
# 会连续猜对一长串。

# %% en=b6522a49
lookup = PromptLookupDraft(max_ngram=3)
show_source(PromptLookupDraft.lookup)
words = "the cat sat on the mat . the cat sat on".split()
ids = [{w: i for i, w in enumerate(dict.fromkeys(words))}[w] for w in words]
proposal = lookup.lookup(ids, 4)
print(" ".join(words), "->", [list(dict.fromkeys(words))[i] for i in proposal])

# %% [markdown] en=2e73010c
# 上面的句子意思是“猫坐在垫子上。猫坐在……”，提示词查找顺着前文猜出了后面的词。
#
# **一个更小的模型。** 任何词表相同的模型都可以当草稿。手头没有第二个模型，我们就把 SmolLM2
# 自己截短：`first_layers(model, n)` 只跑 30 层中的前 n 层，然后接上最终的归一化层和语言模型头
# （LM head），权重共享（这叫“提前退出”，early exit）。在一段模型没见过的文字上，它的首选词元有多少次
# 与完整模型一致？

# %% en=fbf5a6a7
text = ("Speculative decoding lets a small draft model propose several tokens, which the large "
        "model then checks in a single forward pass. When the guesses are right, the large "
        "model produces several tokens for the cost of one step; when they are wrong, it "
        "simply keeps its own choice and the draft tries again.")
ids_t = torch.tensor([tokenizer.encode(text)], device=device)
with torch.inference_mode():
    full = model(ids_t)[0].argmax(-1)
    agreement = {n: (first_layers(model, n)(ids_t)[0].argmax(-1) == full).float().mean().item()
                 for n in tqdm([2, 4, 8, 12, 16, 20, 24, 28])}
for n, a in agreement.items():
    print(f"前 {n:>2} 层：首选词元一致的比例 {100 * a:5.1f}%")

# %% [markdown] en=9c427fef
# （这段英文讲的正是推测解码：小草稿模型提议几个词元，大模型在一次前向传播里检查；猜对时一步的
# 代价换来好几个词元，猜错时大模型保留自己的选择，草稿重来。）
#
# 这些层从没被训练成可以提前读出，所以前缀短了猜得很差，前缀长了代价又和目标模型差不多。下面我们
# 老老实实地对待这一点：把前几层草稿和提示词查找放在一起测。

# %% [markdown] en=4d432a65
# ## 4 · 循环：起草、验证、回滚
#
# 目标模型的 KV 缓存里存着除最后一个以外的所有词元。每一轮把 [last, d1, ..., dn] 在一次传播中
# 喂进去，得到 n + 1 个分布，执行接受规则，然后**裁剪**（crop）缓存（`KVCache.crop`），把被拒绝的
# 草稿词元的键和值忘掉。

# %% en=8e2ac941
from minillm.speculative import SpeculativeDecoder

show_source(SpeculativeDecoder.run)

# %% [markdown] en=0fe1acba
# 从 *edit* 任务（修改一段文字并把它完整地重写一遍）里取一个请求，用贪心解码，分别跑普通解码和
# 提示词查找。两次运行喂给目标模型的形状不同（一步一个词元，对比一次 k + 1 个），所以它们以不同的
# 顺序做同样的加法。和第 03 课一样，由 `agree` 说明这里怎样比较两者的词元：

# %% en=01e9630c
from minillm.generation.agreement import agree, rule
from minillm.tools.bench.speculative import TASKS, compare, speedup_text, task_prompt

print(TASKS["edit"][:200], "...")
edit_ids = task_prompt(tokenizer, "edit")
new_tokens = 24 if CI else 48
plain = minillm.generate(model, tokenizer, edit_ids, max_new_tokens=new_tokens)
spec = speculative_generate(model, tokenizer, edit_ids, PromptLookupDraft(), k=4,
                            max_new_tokens=new_tokens)
print("比较方式：", rule(model))
print("词元相同：", agree(model, edit_ids, spec.token_ids, plain.token_ids))
print(spec.stats.summary())
print(repr(spec.text[:300]))

# %% [markdown] en=d69a0e71
# ## 5 · 三个任务上的接受率与加速比
#
# `compare` 在同一个提示词上、同一次运行里，为每种草稿和每个 k 分别给普通贪心解码和推测解码计时，
# 并用 `agree` 检查两者给出的词元相同。三个任务是：*edit*（回答重复提示词）、*summarise*（回答部分
# 照抄）和 *chat*（一个开放式问题：没有可抄的）。前几层草稿用的是 30 层中的前 8 层。

# %% en=e84f524b
ks = [2, 4] if CI else [2, 4, 8]
drafts = {"提示词查找": PromptLookupDraft(),
          "前 8 层": ModelDraft(first_layers(model, 8))}
results = {}
for task in tqdm(TASKS):
    ids_task = task_prompt(tokenizer, task)
    rows = compare(model, tokenizer, ids_task, {"提示词查找": drafts["提示词查找"]}, ks,
                   new_tokens)
    rows += compare(model, tokenizer, ids_task, {"前 8 层": drafts["前 8 层"]},
                    [2], new_tokens)[1:]
    results[task] = rows
    for r in rows:
        if r["draft"] == "plain":
            print(f"{task:>9} {Label('普通解码'):>19} {r['seconds']:6.2f} 秒")
            continue
        print(f"{task:>9} {Label(r['draft']):>15} k={r['k']} {r['seconds']:6.2f} 秒 "
              f"加速比 {speedup_text(r)} 接受 {100 * r['acceptance']:5.1f}% "
              f"每次传播词元数 {r['tokens_per_pass']:4.2f} 词元相同={r['same_tokens']}")

# %% en=a976ffa8
assert all(r["same_tokens"] for rows in results.values() for r in rows)
fig, ax = plt.subplots(figsize=(6, 3.5))
for task, rows in results.items():
    look = [r for r in rows if r["draft"] == "提示词查找" and not r["disturbed"]]
    ax.plot([r["k"] for r in look], [r["speedup"] for r in look], "o-", label=task)
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_xlabel("k（每轮起草的词元数）")
ax.set_ylabel("相对普通贪心解码的加速比")
ax.set_title("提示词查找，SmolLM2-135M，本机")
ax.legend()
plt.show()

# %% [markdown] en=e7096e30
# ## 6 · 什么时候它帮不上忙
#
# 一轮的代价是一次目标模型的传播（比一个解码步贵，比 k 个解码步便宜，见第 1 节）加上草稿的
# 工作，产出 1 + （被接受的草稿数）个词元。以下几种情况下，推测解码会亏：
#
# - **草稿多半猜错**：开放式对话没有东西可供提示词查找照抄，它几乎提不出什么，每次传播就成了普通
#   的解码步，还多了些额外的记账开销；
# - **草稿并不便宜**：30 层中的 8 层再加上完整的语言模型头，要花掉目标模型一步中可观的一部分，
#   每轮还要跑 k 次，而它的猜测只在部分时候与目标模型一致；
# - **k 太大**：一串草稿在前面就被拒绝，花在后面那些词元上的算术就白费了；
# - **硬件本来就忙**：批很大时，解码不再受带宽限制，每个序列多验证 k 个位置要花实打实的时间
#   （服务引擎在负载高时会调小 k，或者干脆关掉推测解码）；
# - **草稿很笃定而目标模型并不**，或者反过来：β = Σ min(p, q) 衡量两个分布重叠了多少。温度会改变
#   这种重叠，但并不是简单地把它压低：温度越高，p 和 q *都*变得越平，T 增大时两者都趋向均匀分布，
#   于是 β 升向 1。T → 0 时两者都变成 one-hot：首选词元一致的地方 β 为 1，不一致的地方为 0。
#   在两者之间，要看具体是哪一对分布。
#
# 用前 24 层作草稿，在第 3 节那段文字上测量，并对所有位置取平均：

# %% en=12ee2e44
with torch.inference_mode():
    target_logits = model(ids_t)[0].cpu().double()  # 在 CPU 上用 float64：Apple 的 GPU 不支持它
    draft_logits = first_layers(model, 24)(ids_t)[0].cpu().double()
temperatures = [0.05, 0.5, 1.0, 2.0, 4.0, 16.0]
beta_at = {}
for T in temperatures:
    p_T, q_T = (torch.softmax(z / T, -1) for z in (target_logits, draft_logits))
    beta_at[T] = torch.minimum(p_T, q_T).sum(-1).mean().item()
    print(f"T = {T:>5}：接受概率 beta = {beta_at[T]:.3f}")
print(f"同一个草稿的首选词元一致率（第 3 节）：{agreement[24]:.3f}；这里最低的 "
      f"beta 出现在 T = {min(beta_at, key=beta_at.get)}")
assert beta_at[16.0] > beta_at[1.0] and beta_at[16.0] > 0.8  # 两者都变平：beta -> 1
assert abs(beta_at[0.05] - agreement[24]) < 0.1  # 接近贪心：beta ≈ 首选词元一致率

# %% [markdown] en=d5f8405a
# 可见两端是确定的：接近贪心时，β 就是草稿首选词元与目标模型相同的位置所占的比例；温度很高时两者
# 都变平，β 趋近 1（均匀的草稿与均匀的目标完全吻合）。在两端之间，β 取决于两个分布形状的重叠
# 程度，常用的采样温度正落在这一段。高温付出的代价是文本质量，而不是接受率。
#
# 在测得的接受率下，每次传播的期望词元数 (1 − α^(k+1)) / (1 − α)，与实际运行给出的对比一下（公式
# 假设每次接受相互独立；真实文本却是成段出现的：一段照抄，一段自由发挥）：

# %% en=b01fdf6d
for task, rows in results.items():
    for r in rows:
        if r["draft"] != "plain" and r["acceptance"] == r["acceptance"]:
            model_says = expected_tokens_per_pass(r["acceptance"], r["k"])
            print(f"{task:>9} {Label(r['draft']):>15} k={r['k']}：实测每次传播 "
                  f"{r['tokens_per_pass']:4.2f} 个词元，公式给出 {model_says:4.2f}")

# %% [markdown] en=bc2cb7c3
# ## 7 · 长在目标模型身上的草稿：Medusa、EAGLE、MTP
#
# 单独的草稿模型是一种取舍：小到足够便宜，就小到猜不准；而且每起草一个词元，仍要跑一次它的前向
# 传播。从 2024 年起，最快的系统改为从**目标模型自己的隐藏状态**出发起草，只在上面加装一个训练
# 过的小部件：
#
# - **Medusa**（Cai 等，2024）在最后一层的隐藏状态上加几个**草稿头（draft head）**。第 i 个头预测
#   往后第 i + 1 个位置的词元，全都基于同一个隐藏状态，所以目标模型一次传播就把所有位置都起草好了：
#   不需要起草循环。每个头给出它最看好的几个词元，这些组合构成一棵树，目标模型用树形的注意力掩码
#   在一次传播里把整棵树验证完。
# - **EAGLE**（Li 等，2024）仍是一步一步地起草，但在特征上而不是在词元上起草。一个单层的头接收目标
#   模型最后的隐藏状态和刚选出的词元的嵌入，预测下一个隐藏状态，再用目标模型自己的语言模型头从中
#   读出一个词元。隐藏状态比词元更平滑、更容易外推，所以猜得更准。EAGLE-2 在头有把握的地方把草稿树
#   长得更深；EAGLE-3 给头喂的是低层、中层和高层三处的特征。
# - **多词元预测（multi-token prediction，MTP）**出现在 DeepSeek-V3（2024）中，是*和*模型一起训练的：
#   额外的模块（每个是一个 Transformer 块，与主模型共享嵌入和输出头）学着预测第二个、第三个……
#   下一个词元，让训练信号更密集。推理时，可以把第一个模块丢掉，也可以拿它当草稿。
#
# 目标模型都在一次传播里检查草稿，但并不是每种检查都保住它的输出。第 2 节的两种检查，贪心验证
# 和采样时用的规则，即**拒绝采样**（rejection sampling），都是精确的：逐个词元相同，或者分布相同。
# EAGLE 用拒绝采样检查它的草稿树，同一位置的候选一个接一个地试，所以也是精确的；vLLM 和 SGLang
# 也这样检查 MTP 的草稿。Medusa 论文采样时用的却是**典型接受**（typical acceptance）：只要目标
# 模型给某个草稿词元的概率超过一个阈值，就留下它，而目标分布越平，这个阈值越低。这样每次传播能
# 留下更多草稿词元，但采样出来的文字就不再服从目标模型的分布了（贪心解码时 Medusa 仍是精确的）。
# 三者都需要训练，而 SmolLM2 没有现成的。这台机器能展示的是取舍的另一半：每种草稿起草一个词元
# 要花多少，以及在这样的代价下，一个接受率能换来多少加速。

# %% [markdown] en=5ada2840
# **起草一个词元要花多少。** 下面每一项代价都以目标模型的一个解码步为基准（30 层加语言模型头，
# 一个词元，KV 缓存里是第 3 节那段文字）：两者交替计时、重复几次，单元格会打印出波动范围。一个
# Medusa 头是一个小模块加一个和语言模型头一样大的投影，所以就用语言模型头本身来代表它；EAGLE 的头
# 和一个 MTP 模块都是一个 Transformer 层加语言模型头，正好就是 `first_layers(model, 1)`；
# `first_layers(model, 8)` 是第 3 节的草稿。

# %% en=22d8dd2a
from minillm.measure import compare as interleaved, load_average

context = ids_t[:, :-1]


def decode_step(m, steps=4):
    """`m` 在第 3 节那段文字之后的 `steps` 个单词元解码步，合成一次调用。"""
    cache = KVCache.for_model(m, 1, ids_t.shape[1])
    with torch.inference_mode():
        m(context, cache=cache)

    def run():
        with torch.inference_mode():
            for _ in range(steps):
                cache.crop(context.shape[1])
                m(ids_t[:, -1:], cache=cache)
    return run


def head_step(steps=4):
    hidden = torch.randn(1, 1, model.config.hidden_size, device=device)

    def run():
        with torch.inference_mode():
            for _ in range(steps):
                model.logits(hidden)
    return run


edit_context = edit_ids + spec.token_ids
drafters = {
    "仅语言模型头（相当于一个 Medusa 头）": head_step(),
    "1 层 + 语言模型头（EAGLE、MTP）": decode_step(first_layers(model, 1)),
    "8 层 + 语言模型头（第 3 节）": decode_step(first_layers(model, 8)),
    "提示词查找": lambda: [PromptLookupDraft().lookup(edit_context, 4) for _ in range(4)],
}
target_step = decode_step(model)
print(load_average())
costs = {name: interleaved(target_step, run, repeats=3 if CI else 5, device=device)
         for name, run in tqdm(drafters.items())}
width = max(columns(name) for name in costs)
for name, c in costs.items():
    print(f"{Label(name):<{width}} 起草一个词元的代价，相对目标模型的一个解码步："
          f"{c.spread_text()}")

# %% [markdown] en=a5376616
# **接受率能换来多少。** 一轮起草 k 个词元，每个代价为 c，再用目标模型的一次传播验证 k + 1 个
# 词元，这次传播的代价是 v 个解码步（第 1 节测过 v）。若每个草稿词元以概率 α 被接受，一轮产出
# (1 − α^(k+1)) / (1 − α) 个词元，于是相对普通解码的加速比为
#
# speed-up = (1 − α^(k+1)) / (1 − α) / (k·c + v).
#
# `minillm.speculative.expected_speedup` 计算它，`break_even_acceptance` 找出草稿开始划算时的 α：

# %% en=f9ae7925
import numpy as np

from minillm.speculative import break_even_acceptance, expected_speedup

show_source(expected_speedup)


def verify_cost(k):
    """第 1 节测得的一次 k + 1 个词元的传播的代价，以单词元步为单位。"""
    return float(np.interp(k + 1, sizes, [pass_times[n] / pass_times[1] for n in sizes]))


k_chart = 4
alphas = np.linspace(0, 1, 101)
fig, ax = plt.subplots(figsize=(6.5, 4))
for name, c in costs.items():
    curve = [expected_speedup(a, k_chart, c.ratio, verify_cost(k_chart)) for a in alphas]
    ax.plot(alphas, curve, label=f"{name}：c = {c.ratio:.3f}")
    even = break_even_acceptance(k_chart, c.ratio, verify_cost(k_chart))
    print(f"{Label(name):<{width}} 开始划算的 alpha："
          + (f"{even:.2f}" if even is not None else "没有（k + 1 个词元的代价更高）"))
look = [(task, r) for task, rows in results.items() for r in rows
        if r["draft"] == "提示词查找" and r["k"] == k_chart]
ax.plot([r["acceptance"] for _, r in look], [r["speedup"] for _, r in look], "k*",
        markersize=10, label=f"提示词查找，实测（第 5 节，k = {k_chart}）")
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_xlabel("接受率 alpha")
ax.set_ylabel("相对普通解码的加速比")
ax.set_title(f"k = {k_chart}：代入在 {device} 上测得的代价的公式")
ax.legend(fontsize=7)
plt.show()

# %% [markdown] en=beb1f191
# 这些曲线形状相同：k = 4 时一次传播最多产出 5 个词元，草稿的代价决定了其中还能剩下多少。星号是
# 第 5 节的运行，按它们实测的接受率摆放。再把公式与第 5 节的每一次运行逐一对照，代入各自实测的
# α、c 和 v：

# %% en=d60d4bad
lookup_cost = costs["提示词查找"].ratio
layers_cost = costs["8 层 + 语言模型头（第 3 节）"].ratio
for task, rows in results.items():
    for r in rows:
        if r["draft"] == "plain" or r["acceptance"] != r["acceptance"]:  # NaN：什么也没起草
            continue
        c = lookup_cost if r["draft"] == "提示词查找" else layers_cost
        predicted = expected_speedup(r["acceptance"], r["k"], c, verify_cost(r["k"]))
        print(f"{task:>9} {Label(r['draft']):>15} k={r['k']}：alpha {r['acceptance']:.2f}，"
              f"实测 {speedup_text(r)}，公式 {predicted:4.2f}x")

# %% [markdown] en=56bb880a
# 这个公式只是参考，不是预言：它假设每一轮都起草 k 个词元，且每个词元被接受与否相互独立。提示词
# 查找两条都不满足。上下文里没有更早的匹配时，它什么也不起草；而一旦照抄起来，它能连着猜对一长段。
# 在 *edit* 运行中起草满 k 个词元的那些轮里，每轮各接受了几个？与同样的 α 下相互独立的接受相比又
# 如何？

# %% en=7a86879f
from minillm.speculative import accepted_per_round

edit_row = next(r for r in results["edit"]
                if r["draft"] == "提示词查找" and r["k"] == k_chart)
full = [a for a, p in zip(edit_row["accepted_per_pass"], edit_row["proposed_per_pass"])
        if p == k_chart]
alpha_full = sum(full) / (k_chart * len(full))
measured_share = [full.count(m) / len(full) for m in range(k_chart + 1)]
independent = accepted_per_round(alpha_full, k_chart)
print(f"{len(edit_row['proposed_per_pass'])} 轮中有 {len(full)} 轮起草了 {k_chart} 个词元；"
      f"其中被接受的比例 alpha = {alpha_full:.2f}")
for m in range(k_chart + 1):
    print(f"  接受 {m} 个：占 {100 * measured_share[m]:5.1f}% 的轮次"
          f"（若相互独立：{100 * independent[m]:5.1f}%）")
ends = measured_share[0] + measured_share[k_chart]
assert ends > independent[0] + independent[k_chart]  # 要么全中，要么全不中，比碰运气更常见

# %% [markdown] en=c194ea7d
# 照抄是全有或全无的：一轮要么顺着所抄的文字一直对到底，要么一上来就错，这比相互独立的猜测更常
# 出现。训练过的草稿头更接近公式描绘的情形，不过它的接受率会随着往前看的步数下降：猜往后第三个
# 词元，比猜下一个难。
#
# 用同一个公式来读已发表的数字（这些是论文在 GPU 上的测量，不是我们测的）：DeepSeek-V3 报告，
# 它那一个 MTP 模块的词元有 85–90% 被接受，每秒词元数是原来的 1.8 倍。取 k = 1、草稿几乎不花钱，
# 公式给出：

# %% en=50017131
for a in (0.85, 0.90):
    print(f"alpha = {a:.2f}，k = 1，c = 0，v = 1：{expected_speedup(a, 1, 0.0):.2f}x"
          "（打印出来的算术，不是测量）")

# %% [markdown] en=cca2c970
# 公式的 1.85–1.90 没算草稿的代价（c = 0），也没算更长的验证传播（v = 1）；而报告的 1.8 把两者都
# 包括了。Medusa 报告在 Vicuna 对话模型上快 2.2–3.6 倍，EAGLE 报告在 LLaMA2-Chat 70B 上快
# 2.7–3.5 倍，二者都用了草稿树：每个位置有好几个候选，其中有一个被接受的机会就更大。在 SmolLM2
# 这么小的模型上，语言模型头在每一步里占了很大的份额（上面的单元格测过），所以基于头的草稿在这里比在
# 70B 模型上贵；在 70B 模型上，80 层中的一层加上语言模型头只占一步中很小的一部分。

# %% [markdown] en=c5512ab1
# ## 结语
#
# 本次运行的数字（贪心解码，所以每个推测解码的输出都与普通解码的输出相同）：

# %% en=bce24adc
def line(task):
    rows = [r for r in results[task] if r["draft"] == "提示词查找" and not r["disturbed"]]
    best = max(rows, key=lambda r: r["speedup"], default=None)
    layer = [r for r in results[task] if r["draft"] == "前 8 层"][0]
    layer_text = (f"前 8 层草稿在 k=2 时接受了 {100 * layer['acceptance']:.0f}%，"
                  f"{speedup_text(layer).strip()}。")
    if best is None:  # 提示词查找的每一行都超出了上限：没有哪个加速比可以当作结论
        return f"- **{task}**：提示词查找的计时全部受到干扰；{layer_text}"
    return (f"- **{task}**：提示词查找在 k={best['k']} 时接受了 {100 * best['acceptance']:.0f}% "
            f"的草稿，目标模型每次传播产出 {best['tokens_per_pass']:.2f} 个词元，速度是普通解码的 "
            f"**{best['speedup']:.2f}x**；{layer_text}")


head_cost = costs["1 层 + 语言模型头（EAGLE、MTP）"].ratio
display(Markdown("\n".join(line(t) for t in results) + f"\n\n在 {device} 上，一次传播验证 "
                 f"8 个词元的代价是单词元步的 {pass_times[8] / pass_times[1]:.1f} 倍"
                 f"（每个请求 {new_tokens} 个新词元；计时来自单次运行，在共享的机器上有噪声）。"
                 f"起草一个词元，单层的头（EAGLE、MTP）花目标模型一步的 {head_cost:.2f}，"
                 f"前 8 层则花 {layers_cost:.2f}。"))

# %% [markdown] en=58087b8b
# 提示词查找不花钱、结果精确，而它恰恰在输出重复输入的地方划算；由未经训练的前几层构成的提前退出
# 草稿，在 CPU 上很少划算。真实的系统用同一系列里单独训练的小模型，或者在目标模型的隐藏状态上训练的草稿
# （Medusa、EAGLE、MTP），并按接受率调节 k：第 7 节的公式告诉我们每种草稿从哪里开始划算。
#
# `scripts/bench_speculative.py` 用更多词元、所有的 k 跑同样的比较，并保存图表；练习要你亲手写出
# 提示词查找、贪心验证和接受规则。
