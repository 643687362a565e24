# 中文版 · 04_decoding.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=167e1c65
# # 04 · 解码策略（decoding strategies）
#
# 对词表里的全部 49,152 个词元，模型各给出一个分数，即未归一化的对数概率（logit）。*解码*
# 要做的，就是把这些分数变成下一个词元。本章把每一种常用规则都写成 `minillm.decoding` 里的
# 一个小小的 **logits 处理器（logits processor）**，逐个与 transformers 对照检验，
# 再在 SmolLM2-135M 生成的真实文本上测出每种规则的效果。
#
# | 策略 | 怎么选 |
# |---|---|
# | 贪心解码（greedy decoding，也常称贪心搜索） | 每一步都取分数最高的词元 |
# | 束搜索（beam search） | 在 `num_beams` 条候选序列中取最好的一条 |
# | 采样（sampling） | 随机抽取，分布的形状由温度、top-k、top-p、min-p 决定 |
#
# 下面的每个数字都是在这次运行中测出来的。

# %% en=4205aa1e
import math
import os

import matplotlib.pyplot as plt
import torch
from IPython.display import HTML, display
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.decoding import GenerationConfig
from minillm.course.text_quality import distinct_n, mean_logprob, repeated_ngram_rate
from minillm.utils.columns import Label  # 按屏幕列宽补齐：一个汉字占两列
from minillm.utils.devices import Timer

CI = bool(os.environ.get("CI"))
N = 24 if CI else 60  # 每次对比生成的新词元个数
N_LOOP = 60  # 第 1 节的文本：要足够长，贪心解码才会陷入循环
torch.manual_seed(0)
model, tokenizer = minillm.load("smollm2-135m")  # 有 GPU 时就放在 GPU 上（device="auto"）
print(f"CI={CI}：每次生成 {N} 个新词元，设备 {model.device}，"
      f"{torch.get_num_threads()} 个 CPU 线程")

# %% [markdown] en=f4250ae7
# ## 1. 贪心解码、束搜索与采样的对比
#
# 同一个提示词，四种策略。对每一种，我们测量：
#
# - **distinct-2**：不同的 2-gram 数 / 全部 2-gram 数（1.0 表示没有任何重复）；
# - **3-gram 重复率**（repeat-3）：前面已经出现过的 3-gram 所占的比例（0.0 表示没有循环）；
# - 新词元在模型下的**平均对数概率**（mean logp，下面记作“平均 logp”，越高说明越“符合预期”）；
# - **用时**。

# %% en=54d7cfe0
PROMPT = "Once upon a time, there was a little robot who"  # 意思是“从前，有一个小机器人，它……”
prompt_ids = tokenizer.encode(PROMPT)
STRATEGIES = {
    "贪心解码": dict(),
    "束搜索（4 条束）": dict(num_beams=4),
    "采样 T=1.0": dict(do_sample=True, temperature=1.0, seed=0),
    "采样 T=0.7, top_p=0.9": dict(do_sample=True, temperature=0.7, top_p=0.9, seed=0),
}


def measure(fields, prompt_ids=prompt_ids, max_new_tokens=N):
    with Timer(model) as stopwatch:
        out = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=max_new_tokens,
                               **fields)
    seconds = stopwatch.seconds
    ids = out.token_ids
    return {"text": out.text, "ids": ids, "distinct-2": distinct_n(ids, 2),
            "repeat-3": repeated_ngram_rate(ids, 3),
            "mean logp": mean_logprob(model, prompt_ids, ids), "seconds": seconds}


results = {name: measure(f, max_new_tokens=N_LOOP)
           for name, f in tqdm(STRATEGIES.items(), desc="策略")}
print(f"{Label('策略'):28} {'distinct-2':>10} {'repeat-3':>9} {Label('平均 logp'):>10} "
      f"{Label('用时 s'):>7}")
for name, r in results.items():
    print(f"{Label(name):28} {r['distinct-2']:10.2f} {r['repeat-3']:9.2f} {r['mean logp']:10.2f} "
          f"{r['seconds']:7.2f}")

# %% en=83a09eaf
for name, r in results.items():
    print(f"--- {name}\n{PROMPT}{r['text']}\n")

# %% [markdown] en=6d6dc0cf
# 读一读这张表：贪心解码和束搜索挑的都是可能性大的词元（平均对数概率最高），但在这个提示词上，
# SmolLM2 很快就陷入了循环：它们的 3-gram 重复率远高于采样得到的文本。束搜索每一步要算
# `num_beams` 行。采样的文本更多样，但没那么“符合预期”。下面的单元格用这次运行的数字来检验这些
# 说法：“远高于”指至少 0.10，并且至少是采样文本中较大那个重复率的三倍。

# %% en=262aa3bc
g, b = results["贪心解码"], results["束搜索（4 条束）"]
s = results["采样 T=1.0"]
sampled = [r for name, r in results.items() if name.startswith("采样")]
loop_rate = min(g["repeat-3"], b["repeat-3"])
most_sampled = max(r["repeat-3"] for r in sampled)
print(f"repeat-3：贪心解码 {g['repeat-3']:.2f}，束搜索 {b['repeat-3']:.2f}；采样的文本最高 "
      f"{most_sampled:.2f}")
print(f"平均 logp：贪心解码 {g['mean logp']:.2f}，束搜索 {b['mean logp']:.2f}，"
      f"采样 {s['mean logp']:.2f}")
print(f"束搜索的用时是贪心解码的 {b['seconds'] / g['seconds']:.1f} 倍")
assert loop_rate >= 0.10 and loop_rate >= 3 * most_sampled, (loop_rate, most_sampled)
assert g["mean logp"] > s["mean logp"] and b["mean logp"] > s["mean logp"]

# %% [markdown] en=a7735d1e
# ### 贪心解码下，SmolLM2 会不断重复自己
#
# 落在已出现过的 3-gram 里的词元标成红色。

# %% en=b9391a53
from minillm.course.widgets import highlight_html, repetition_report  # noqa: E402

display(HTML(highlight_html(tokenizer, repetition_report("贪心解码", g["ids"], 3))))

# %% [markdown] en=916bd6f6
# ## 2. minillm 怎样解码：先过处理器，再做选择
#
# 每一步都是同样的两个动作：先由一串处理器修改分数，再由 `choose_next_token` 取 argmax
# （贪心解码）或者从 softmax 中抽样（采样）。`build_processors` 按 transformers 的顺序把它们
# 串起来：重复惩罚、禁止重复 n-gram、禁用词，以及（仅在采样时）温度、top-k、top-p、min-p。

# %% en=b0c6e342
show_source(minillm.decoding.build_processors)

# %% [markdown] en=1dbd4496
# ## 3. 温度（temperature）
#
# $$P_i = \frac{e^{z_i/T}}{\sum_j e^{z_j/T}}$$
#
# 把 logits 除以 $T < 1$，它们之间的差距被拉大（分布更尖锐）；除以 $T > 1$，差距被缩小（分布更平坦）。

# %% en=62ff346c
show_source(minillm.decoding.TemperatureProcessor)

# %% en=0d7add9e
from minillm.course.widgets import next_token_logits, temperature_table  # noqa: E402

logits = next_token_logits(model, tokenizer, "My favourite food is")  # “我最喜欢的食物是”
for t in [0.01, 0.5, 1.0, 2.0, 3.0]:
    row = temperature_table(logits, t)
    print(f"T={t:<5} 熵 {row['entropy_bits']:5.2f} 比特，最可能的词元 "
          f"{row['probs'][0]:.3f}，{row['tokens_for_90pct']:>6} 个词元覆盖 90%")

# %% [markdown] en=ef365f57
# 拖动滑块（0.01 到 3），看分布怎样变尖、变平。柱子用的是对数坐标，所以即使在 T = 3、最前面的
# 每个词元只占 0.1% 左右时，它们也依然看得见；灰色的柱子是词表中其余词元的总和。右边的曲线
# 数的是：要凑满 90% 的概率，需要多少个最可能的词元。

# %% en=76bb6e45
from minillm.course.widgets import temperature_explorer  # noqa: E402

temperature_explorer(model, tokenizer, "My favourite food is")

# %% [markdown] en=5585600e
# **温度趋于 0 就成了贪心解码。** 除以 T = 0.01，会把前两名词元之间的 logit 差距 d 放大成
# 100·d，于是第二名被抽中的概率约为 e^(−100·d)：在模型很有把握的地方，这几乎不可能；但在前两名
# logit 几乎打平（d ≈ 0.001）的地方，就跟抛硬币差不多。所以 T = 0.01 下的采样会沿着贪心解码的
# 文本走，直到遇上第一个“几乎打平”的位置（如果有的话）。下面的检查量出贪心文本沿途的这些差距，
# 并要求每个随机种子都符合这条规律：

# %% en=aebe08d9
with torch.no_grad():
    greedy_logits = model(torch.tensor([prompt_ids + g["ids"]]))[0, len(prompt_ids) - 1:-1]
best_two = greedy_logits.topk(2, dim=-1).values
gaps = (best_two[:, 0] - best_two[:, 1]).tolist()
print("贪心文本沿途最小的几个前两名 logit 差距：",
      "，".join(f"{d:.4f}" for d in sorted(gaps)[:4]))
NEAR_TIE = 0.1  # e^(-100 * 0.1) = 0.00005：差距更大时，T = 0.01 下实际上不会翻转
for seed in range(3):
    cold = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=len(g["ids"]),
                            do_sample=True, temperature=0.01, seed=seed).token_ids
    split = next((i for i, (a, b) in enumerate(zip(cold, g["ids"])) if a != b), None)
    if split is None:
        print(f"种子 {seed}：与贪心文本完全相同，共 {len(cold)} 个词元")
    else:
        print(f"种子 {seed}：前 {split} 个词元与贪心解码相同，随后一个几乎打平的位置"
              f"（差距 {gaps[split]:.4f}）选了第二名")
    assert split is None or gaps[split] < NEAR_TIE, (seed, split)

# %% [markdown] en=51f2dca4
# ## 4. top-k、核采样（top-p）与 min-p
#
# **top-k** 保留最可能的 k 个词元。**top-p** 保留概率之和至少达到 p 的最小词元集合——
# 让累计概率越过 p 的那个词元也保留下来。

# %% en=4d9f53ff
show_source(minillm.decoding.TopPProcessor)

# %% [markdown] en=d74a8c30
# 在真实的提示词上看 top-k 的两种失效方式：分布**平坦**时（合理的续写有很多），k 取小了会砍掉
# 有用的词元；分布**尖锐**时（只有一个正确答案），k 取大了又会放进噪声。top-p 则会根据分布
# 自己调整保留的个数。

# %% en=1c80bbf5
from minillm.course.widgets import filter_view  # noqa: E402

# “我最喜欢的食物是”（平坦），“法国的首都是”（尖锐）
FLAT, PEAKED = "平坦", "尖锐"  # 两个提示词打印出来的名字
PROMPTS = {FLAT: "My favourite food is", PEAKED: "The capital of France is"}
for kind, text in PROMPTS.items():
    lg = next_token_logits(model, tokenizer, text)
    k5, k50, p9 = (filter_view(lg, top_k=5), filter_view(lg, top_k=50),
                   filter_view(lg, top_p=0.9))
    print(f"{Label(kind):6} {text!r}")
    print(f"   top_k=5   保留 {k5.n_kept:5} 个词元，合计概率 {k5.kept_mass:6.1%}")
    print(f"   top_k=50  保留 {k50.n_kept:5} 个词元，合计概率 {k50.kept_mass:6.1%}")
    print(f"   top_p=0.9 保留 {p9.n_kept:4} 个词元，合计概率 {p9.kept_mass:6.1%}")

# %% [markdown] en=7c52e081
# 在平坦的提示词上，top-k=5 扔掉了大部分概率；在尖锐的提示词上，top-k=50 留下了几十个词元，
# 它们加起来几乎没有概率。top-p 则在模型拿不准时多留、有把握时少留。

# %% [markdown] en=ee825a2b
# **两者一起用，以及先后顺序。** transformers 先做 top-k，再在重新归一化后的幸存者上做 top-p；
# 也有资料说先做 top-p。顺序有影响吗？两种顺序各算一遍保留的集合，比一比：

# %% en=66883b25
from minillm.decoding import TopKProcessor, TopPProcessor  # noqa: E402

lg = next_token_logits(model, tokenizer, PROMPTS[FLAT])[None]
k_then_p = TopPProcessor(0.5)(None, TopKProcessor(10)(None, lg))
p_then_k = TopKProcessor(10)(None, TopPProcessor(0.5)(None, lg))
kept_kp, kept_pk = int(torch.isfinite(k_then_p).sum()), int(torch.isfinite(p_then_k).sum())
print(f"先 top_k=10 再 top_p=0.5，保留 {kept_kp} 个词元；先 top_p=0.5 再 top_k=10，保留 "
      f"{kept_pk} 个")

# %% [markdown] en=37c445e2
# 如果两种顺序保留的个数不同，原因在于：排在 top-k 之后的 top-p，量的是前 10 个词元
# *重新归一化*之后的概率的 0.5，这比整个分布的 0.5 对应的集合要小。

# %% [markdown] en=428dcc58
# ### min-p 采样（min-p）
#
# 第三种过滤方式 min-p，保留概率至少是最可能词元的 `min_p` 倍的所有词元。它和 top-p 一样会随
# 分布自适应：最可能的词元占 90% 时，`min_p=0.1` 只保留概率高于 9% 的词元；它只占 2% 时，
# 门槛降到 0.2%，留下的词元就多了。与 top-p 不同的是，它只看最可能的那一个词元，而不是对其余
# 词元累加求和：

# %% en=691e80b3
show_source(minillm.decoding.MinPProcessor)

# %% [markdown] en=3793b49e
# 两者的差别在高温时显现出来。升高 T 会让分布变平：排在前面的词元失去概率，而几万个不太可能的
# 词元合起来分到一大块。top-p 必须不断往里添词元，直到累计概率达到 p，所以长尾被它放进来的越来越多；
# min-p 的门槛则只随最可能的词元变化。下面是在两个提示词上、随着温度升高，`top_p=0.9` 和
# `min_p=0.1` 各保留多少个词元（下面的检查：T = 2 时，top-p 保留的个数至少是 min-p 的十倍）：

# %% en=fc6b8813
print(f"{Label('提示词'):>6} {'T':>4} {Label('top_p=0.9 保留'):>16} "
      f"{Label('min_p=0.1 保留'):>16}")
kept_at = {}
for kind, text in PROMPTS.items():
    lg = next_token_logits(model, tokenizer, text)
    for t in (1.0, 1.5, 2.0):
        by_p = filter_view(lg, top_p=0.9, temperature=t).n_kept
        by_min_p = filter_view(lg, min_p=0.1, temperature=t).n_kept
        kept_at[kind, t] = (by_p, by_min_p)
        print(f"{Label(kind):>6} {t:>4} {by_p:>16,} {by_min_p:>16,}")
assert all(kept_at[kind, 2.0][0] >= 10 * kept_at[kind, 2.0][1] for kind in PROMPTS)

# %% [markdown] en=ca93c630
# 这对生成的文本有什么影响？在 T = 1.5 下分别用两种过滤方式采样，各取三个随机种子，再像第 1 节
# 那样，用模型在 T = 1 下的平均对数概率给每段文本打分：

# %% en=0597adec
hot = {}
for name, fields in tqdm([("top_p=0.9", {"top_p": 0.9}), ("min_p=0.1", {"min_p": 0.1})],
                         desc="过滤方式"):
    outs = [minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=N, do_sample=True,
                             temperature=1.5, seed=seed, **fields) for seed in range(3)]
    hot[name] = sum(mean_logprob(model, prompt_ids, o.token_ids) for o in outs) / len(outs)
    print(f"T=1.5，{name}：平均 logp {hot[name]:.2f}\n  {PROMPT}{outs[0].text!r}")
assert hot["min_p=0.1"] > hot["top_p=0.9"] + 1.0, hot  # 每个词元的概率至少高 1 nat

# %% [markdown] en=6b3b23e2
# 在 T = 1.5 下，top-p 放进来的长尾太多，文本碎成了一堆词的残片；min-p 的文本依然可读，
# 模型也认为它的可能性大得多（上面的检查要求每个词元至少高 1 nat）。min-p 在 2024 年被提出，
# 正是为了这种场景：高温下的创意采样，同时避开长尾带来的胡言乱语。

# %% [markdown] en=1c427aaa
# ### 动手试试这些过滤方式
#
# 柱子是经过温度处理后的概率：蓝色为保留，灰色被 top-k 去掉，橙色被 top-p 去掉，淡紫色被 min-p
# 去掉。橙色折线是 top-p 累加的累计概率（与 transformers 一样，是在 top-k 留下的词元上重新归一化
# 之后累加的），红色虚线是截断的位置。截断位置落在柱子范围之外时，会有一个箭头标出它在哪里；
# 右边的面板则在整个词表上画出截断位置。先在 top_p 为 0.9 时调高温度，再把 top_p 关掉（设为 1），
# 并把 min_p 设为 0.1。如果换成中文提示词，很多标签会是字节（`\xe4\xbd`）：它们是某个汉字的
# 片段，SmolLM2 的词表里没有这个字对应的单个词元（第 01 章）。

# %% en=1b963a7c
from minillm.course.widgets import top_k_top_p_explorer  # noqa: E402

top_k_top_p_explorer(model, tokenizer, "My favourite food is", top_k=0, top_p=0.9)

# %% [markdown] en=a9bc6486
# ## 5. 重复：`repetition_penalty` 与 `no_repeat_ngram_size`
#
# 重复惩罚（repetition penalty）对序列中已经出现过的每个词元——**包括提示词里的**，每个词元只算
# 一次——把它的正分数除以惩罚系数（负分数则乘以惩罚系数）。`no_repeat_ngram_size=n` 禁止任何
# n-gram 出现第二次。

# %% en=87b34a35
show_source(minillm.decoding.RepetitionPenaltyProcessor)

# %% [markdown] en=0bec5a48
# 调参规则：**文本出现重复 → 把 `repetition_penalty` 稍微调高一点**（各种指南都把它控制在
# 1.0 到 1.3 之间；第 6 节会展示更强的惩罚会带来什么）。下面在贪心解码上测量：

# %% en=34afd434
for penalty in tqdm([1.0, 1.3, 1.8], desc="惩罚系数"):
    r = measure(dict(repetition_penalty=penalty))
    print(f"repetition_penalty={penalty}：repeat-3 {r['repeat-3']:.2f}，"
          f"distinct-2 {r['distinct-2']:.2f}")
r6 = measure(dict(no_repeat_ngram_size=3))
print(f"no_repeat_ngram_size=3：repeat-3 {r6['repeat-3']:.2f}（任何 3-gram 都不可能重复）")
assert r6["repeat-3"] == 0.0

# %% [markdown] en=86969f52
# ### OpenAI 的存在惩罚与频率惩罚
#
# OpenAI 的 API（以及 vLLM 和 `minillm serve`）还有两条同类规则：存在惩罚（presence penalty）
# 和频率惩罚（frequency penalty）。它们从 logits 中*减去*一个值，而不是做除法；并且只统计
# **生成出来的**词元，不算提示词。记 c_j 为词元 j 到目前为止被生成的次数：
#
# - 存在惩罚：z_j − α · [c_j > 0]（只减一次，不管 j 出现了多少次）；
# - 频率惩罚：z_j − β · c_j（j 出现得越多，减得越多）。
#
# 先手算一遍：五个 logits，提示词是 [4]，已生成的词元是 [1, 1, 2]：

# %% en=b0706d61
from minillm.decoding import (FrequencyPenaltyProcessor, PresencePenaltyProcessor,  # noqa: E402
                              RepetitionPenaltyProcessor)

scores = torch.tensor([[2.0, 1.5, -1.0, 0.5, 3.0]])
ids = torch.tensor([[4, 1, 1, 2]])  # 提示词是 [4]：prompt_length=1
rules = {"repetition_penalty 1.5": RepetitionPenaltyProcessor(1.5),
         "presence_penalty 0.5": PresencePenaltyProcessor(0.5, prompt_length=1),
         "frequency_penalty 0.5": FrequencyPenaltyProcessor(0.5, prompt_length=1)}
by_hand = {"repetition_penalty 1.5": [2.0, 1.5 / 1.5, -1.0 * 1.5, 0.5, 3.0 / 1.5],
           "presence_penalty 0.5": [2.0, 1.5 - 0.5, -1.0 - 0.5, 0.5, 3.0],
           "frequency_penalty 0.5": [2.0, 1.5 - 2 * 0.5, -1.0 - 0.5, 0.5, 3.0]}
for name, rule in rules.items():
    got = rule(ids, scores.clone())[0].tolist()
    print(f"{name:>22}: {[round(v, 2) for v in got]}")
    assert got == by_hand[name]

# %% [markdown] en=30798f08
# 只有重复惩罚动了提示词里的词元 4；只有频率惩罚对词元 1 的惩罚是词元 2 的两倍。再到模型上看，
# 用一个简直在求着模型重复的提示词：

# %% en=854602b0
fruits = "List of fruits: apple, apple, apple,"  # 意思是“水果清单：苹果，苹果，苹果，”
for fields in [{}, {"presence_penalty": 1.5}, {"frequency_penalty": 1.0},
               {"repetition_penalty": 1.3}]:
    out = minillm.generate(model, tokenizer, fruits, max_new_tokens=12, **fields)
    print(f"{Label(str(fields) if fields else '不加惩罚'):<28} {out.text!r}")

# %% [markdown] en=0b659473
# 自己比一比这三种规则。每个滑块只重新生成它自己那一行的文本（贪心解码那一行保持不变）；
# 生成时，进度条会数已经生成的词元。

# %% en=377070a2
from minillm.course.widgets import repetition_explorer  # noqa: E402

repetition_explorer(model, tokenizer, max_new_tokens=N)

# %% [markdown] en=fd2af439
# ## 6. 典型设置与调参规则
#
# 原始资料给出的典型设置是：`do_sample=True, temperature=1.0, top_p=0.9,
# repetition_penalty=1.8, no_repeat_ngram_size=6, max_new_tokens=200`。除了一项以外，它们都是
# 常见的默认值。例外的是重复惩罚：各种指南和库用的是 1.0 到 1.3（提出这种惩罚的 CTRL 论文最后
# 选了 1.2），1.8 要强得多。下面比较三种惩罚系数，其余设置都同上，只是把 200 个新词元换成 80 个
# （跑得短一些，效果已经能看出来），每种各用三个随机种子：

# %% en=e11d0b25
PENALTIES, SEEDS = [1.0, 1.2, 1.8], range(3)
typical_length = 40 if CI else 80
typical = {}  # 惩罚系数 -> 每个种子一个 Generation
for penalty, seed in tqdm([(p, s) for p in PENALTIES for s in SEEDS], desc="惩罚系数 × 种子"):
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=0.9,
                              repetition_penalty=penalty, no_repeat_ngram_size=6,
                              max_new_tokens=typical_length, seed=seed)
    typical.setdefault(penalty, []).append(minillm.generate(model, tokenizer, prompt_ids, config))


def averaged(penalty, measure_ids):
    return sum(measure_ids(out.token_ids) for out in typical[penalty]) / len(SEEDS)


scores = {penalty: {"repeat-3": averaged(penalty, lambda ids: repeated_ngram_rate(ids, 3)),
                    "distinct-2": averaged(penalty, lambda ids: distinct_n(ids, 2)),
                    "mean logp": averaged(penalty,
                                          lambda ids: mean_logprob(model, prompt_ids, ids))}
          for penalty in PENALTIES}
print(f"{'repetition_penalty':>18} {'repeat-3':>9} {'distinct-2':>10} "
      f"{Label('平均 logp'):>10}")
for penalty, row in scores.items():
    print(f"{penalty:>18} {row['repeat-3']:9.2f} {row['distinct-2']:10.2f} "
          f"{row['mean logp']:10.2f}")

# %% en=dedf4916
for penalty in (1.2, 1.8):
    print(f"--- repetition_penalty={penalty}，种子 0\n{PROMPT}{typical[penalty][0].text}\n")

# %% [markdown] en=ff0a203f
# 按 repeat-3 和 distinct-2 来看，1.8 是最好的设置：几乎没有重复。现在读一读它生成的文本。
# 这两个指标只数重复，别的一概不管，所以它们看不出**流畅度**：文本读起来还像不像人话。惩罚
# 会压低每一个已经用过的词元，提示词里的也算在内：“the”“a”、逗号、故事里自己的人名。文本越长，
# 模型就得避开越多英语里最常用的词。
#
# 衡量流畅度的一种办法，是看模型自己认为这段文本有多大可能，打分时不加任何惩罚：也就是第 1 节
# 里每个词元的平均对数概率。下面的检查让这次运行来验证这个说法：1.8 的重复不比不加惩罚时多，
# 但它的文本每个词元的可能性至少低 1 nat（每个词元的可能性低到 1/e¹ ≈ 1/2.7），而 1.2 也会让
# 分数下降。

# %% en=a1756f25
fluency_drop = scores[1.0]["mean logp"] - scores[1.8]["mean logp"]
print(f"repetition_penalty=1.8 时平均 logp 每个词元下降 {fluency_drop:.2f} nat；1.2 时下降 "
      f"{scores[1.0]['mean logp'] - scores[1.2]['mean logp']:.2f}")
assert scores[1.8]["repeat-3"] <= scores[1.0]["repeat-3"]
assert fluency_drop >= 1.0, fluency_drop
assert scores[1.2]["mean logp"] < scores[1.0]["mean logp"]

# %% [markdown] en=401b597c
# 为什么连各种指南推荐范围之内的 1.2，在这里的代价也这么大？惩罚是*除以*一个正的 logit，所以它
# 拿走多少，取决于模型的 logits 有多大：logit 为 z 的词元，相对于没有受罚的对手会损失 z − z/penalty。
# 而 SmolLM2 的 logits 很大：

# %% en=644794e9
with torch.no_grad():
    plain = prompt_ids + typical[1.0][0].token_ids
    top_logits = model(torch.tensor([plain], device=model.device))[0, len(prompt_ids) - 1:-1]
z = float(top_logits.float().amax(-1).mean())
print(f"沿着不加惩罚的文本，最可能词元的 logit 的平均值：{z:.1f}")
for penalty in (1.05, 1.1, 1.2, 1.3, 1.8):
    lost = z - z / penalty
    print(f"repetition_penalty={penalty}：logit 为该值的已用词元损失 {lost:4.1f} nat，"
          f"可能性降为原来的 1/{math.exp(lost):,.0f}")

# %% [markdown] en=b8f24365
# 只要损失几个 nat，一个用过的词元就基本出局了。所以在这个模型上，1.2 和 1.8 都会把文本从它最可能
# 的那些词上推开，1.8 只是推得更彻底。同样的设置放到 logits 较小的模型上就温和得多，这正是没有哪个
# 数字适合所有模型的原因。从 `repetition_penalty=1.0` 开始，只在文本出现重复时才调高它，并且既要
# 看重复计数，也要读文本本身。`no_repeat_ngram_size` 是更粗暴的替代办法：它只禁止 n 个词元一模一样的重复。
#
# 平均对数概率也不能说明全部问题：贪心文本的平均对数概率最高，却照样陷入循环（第 1 节）。
# 两个条件都满足时，文本才读着顺：重复少，并且平均对数概率接近普通采样的水平。

# %% [markdown] en=03b0e2e1
# **太单调（每次运行都说同样的话）→ 调高温度和 top_p。** 每种设置抽 4 个样本，数一数得到了
# 多少段不同的文本，再把所有样本合在一起算 distinct-2：

# %% en=ecf710be
for t, p in tqdm([(0.3, 0.5), (0.7, 0.9), (1.2, 0.95)], desc="设置"):
    texts = [minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=N // 2,
                              do_sample=True, temperature=t, top_p=p, seed=s).token_ids
             for s in range(4)]
    pooled = [tok for ids in texts for tok in ids]
    print(f"T={t}，top_p={p}：4 段里有 {len({tuple(x) for x in texts})} 段不同的文本，"
          f"distinct-2 {distinct_n(pooled, 2):.2f}")

# %% [markdown] en=73813db8
# **要可复现 → 温度接近 0，或者固定随机种子。** 原始资料说，温度取 0.01 可以“复现训练集效果”。
# 第 3 节已经展示了 T = 0.01 给出的是什么：贪心解码的文本，也就是模型认为最可能的那一种续写。
# 只有在模型背下了原文的地方，它才是训练文本。我们在最可能被背下来的地方来检验：流传极广、被
# 印刷过无数次的名句，它们肯定在 SmolLM2 的训练数据里。每个提示词是一段名句的开头；我们数一数
# T = 0.01 的续写在出现第一处不同之前，有多少个词与原文一致。

# %% en=ab17cbf3
import re  # noqa: E402

# 《哈姆雷特》“生存还是毁灭”，《麦克白》“明天，明天，明天”，美国《独立宣言》“人人生而平等”
PASSAGES = {
    "哈姆雷特": ("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to "
               "suffer\n", "The slings and arrows of outrageous fortune, Or to take arms "
               "against a sea of troubles"),
    "麦克白": ("Tomorrow, and tomorrow, and tomorrow,\nCreeps in this petty pace from day to "
                "day,\n", "To the last syllable of recorded time; And all our yesterdays have "
                "lighted fools"),
    "独立宣言": ("We hold these truths to be self-evident, that all men are created "
                       "equal,", "that they are endowed by their Creator with certain "
                       "unalienable Rights"),
}


def words(text):
    return re.findall(r"[a-z']+", text.lower())


recited = {}
for name, (start, real) in PASSAGES.items():
    cold = minillm.generate(model, tokenizer, start, max_new_tokens=24, do_sample=True,
                            temperature=0.01, seed=0)
    said, truth = words(cold.text), words(real)
    matched = next((i for i, (a, b) in enumerate(zip(said, truth)) if a != b),
                   min(len(said), len(truth)))
    recited[name] = (matched, len(truth))
    print(f"{Label(name):>14}：{len(truth)} 个词中有 {matched} 个与原文一致；它写的是 "
          f"{' '.join(said[:12])!r}")
assert all(matched < total for matched, total in recited.values())

# %% [markdown] en=f50f6d1a
# 三段都没有完整地复现出来：一个 1.35 亿参数的模型背下的东西很少，至多是名句开头的几个词。
# T = 0.01 还给我们的是模型认为最可能的内容；只有那些见得太多、已经成了最可能续写的段落，它才是
# 训练文本。更大的模型能背出更多。要得到可复现的输出，更可靠的工具其实更简单：固定 `seed`，
# 任何设置每次都会给出同样的文本：

# %% en=c68b1dcf
a = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=N // 2, do_sample=True,
                     seed=7)
b = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=N // 2, do_sample=True,
                     seed=7)
print("同一个种子，同样的文本：", a.text == b.text)
assert a.text == b.text

# %% [markdown] en=042ff220
# 没有放之四海而皆准的设置：对话助手、代码补全和写故事，各自需要不同的设置。在下面的演练场
# 里把它们都试一遍：它一边生成一边流式显示文本，说明每次运行为什么结束，并把最近两次运行并排
# 摆出来（不同的设置加粗显示），这样就能在同一个提示词上比较两种设置：

# %% en=82fc7e34
from minillm.course.widgets import playground  # noqa: E402

playground(model, tokenizer, max_new_tokens=N if CI else 60)

# %% [markdown] en=f1bbe188
# ## 7. 禁用词：最简单的内容过滤
#
# `bad_words_ids` 在做选择之前，把被禁止的词元序列的分数设为 -inf，于是模型永远写不出它们。
# `minillm.decoding.bad_words_ids` 负责把词转换成 id（带前导空格和不带前导空格的都算上，
# 因为 BPE 对两者的切分不同）。

# %% en=430397c0
from minillm.decoding import bad_words_ids  # noqa: E402

question = "The capital of France is"  # “法国的首都是”
banned = bad_words_ids(tokenizer, ["Paris"])
free = minillm.generate(model, tokenizer, question, max_new_tokens=12)
filtered = minillm.generate(model, tokenizer, question, max_new_tokens=12,
                            bad_words_ids=banned)
print(f"禁用的 id {banned}\n不加限制：{free.text!r}\n加了过滤：{filtered.text!r}")
assert "Paris" not in filtered.text

# %% [markdown] en=fe359a7e
# 它的局限在于：它禁的是词元序列，而不是意思。换个说法、换种拼写就能绕过去。禁掉“cat”和
# “cats”（猫），看看模型会换成什么说法：

# %% en=8fad87a6
# 意思是“写一句话，描述一只会打呼噜、会喵喵叫的毛茸茸小宠物。”
story = "Write one sentence about a small furry pet that purrs and says meow."
chat = tokenizer.apply_chat_template([{"role": "user", "content": story}])
ban = bad_words_ids(tokenizer, ["cat", "cats", "Cat", "Cats"])
kept = minillm.generate(model, tokenizer, chat, max_new_tokens=30, bad_words_ids=ban)
print(kept.text)
words = ["kitten", "kitty", "feline", "CAT", "cat"]
print("漏过去的其他说法：", [w for w in words if w in kept.text.lower()])

# %% [markdown] en=0bfe5343
# 真正的内容审核针对的是意思（用一个分类器来判断文本），而不是词元列表。

# %% [markdown] en=c71dd0aa
# ## 8. 结构化输出（structured output）：词表上的一个掩码
#
# 禁用词是一种掩码；同样的思路在每一步都用上，就能让模型只写出某种格式的文本。在选出每个词元
# 之前，对词表中的每个词元都问一句：已经写出的文本再接上这个词元，还能不能是某个合法答案的
# *开头*？凡是不能的，分数都设为 −inf，任何采样器都选不中它；而模型在允许的词元之间的偏好保持
# 不变。约束解码（constrained decoding）就是这样工作的，无论约束是正则表达式还是 JSON：规则是
# 一套文法，每生成一个词元，就根据文法的状态重新计算掩码。
#
# 先看一个玩具例子：只允许数字。SmolLM2 的 49,152 个词元里，哪些可以出现在下一个位置？

# %% en=6de57777
vocab_bytes = [tokenizer.decode([i]) for i in range(len(tokenizer))]
digits_only = torch.tensor([bool(t) and t.strip("0123456789") == "" for t in vocab_bytes])
print(f"{len(vocab_bytes)} 个词元中有 {int(digits_only.sum())} 个只由数字组成，例如",
      [t for t, ok in zip(vocab_bytes, digits_only) if ok][:8])


def only_digits(input_ids, scores):
    """一个 logits 处理器：不全是数字的词元，分数一律设为 -inf。"""
    return scores.masked_fill(~digits_only.to(scores.device), float("-inf"))


# 意思是“印刷机发明的年份：”
out = minillm.generate(model, tokenizer, "The year the printing press was invented:",
                       max_new_tokens=3, logits_processor=only_digits)
print(repr(out.text))
assert out.text.strip().isdigit()

# %% [markdown] en=bea0692b
# JSON 需要一套带状态的文法（是否在字符串里？是否刚写完一个键？还欠着哪些键？）。
# `minillm.decoding.JSONConstraint` 维护这样一个状态（`json_grammar.py`：一个逐字节的识别器，
# 支持 JSON Schema 的一个子集：object、array、string、number、integer、boolean、enum、
# required），并在每一步据此给词表加掩码；JSON 一旦完整，就只允许序列结束词元。
# `minillm serve` 用它来支持 OpenAI 的 `response_format`。
#
# 掩码能保证每个*写完了的*答案都合法，却不能保证模型会写完：在温度 1 下采样，一个字符串可能一直
# 写下去，直到被 `max_new_tokens` 从中间截断。所以 schema 给每个字符串设了上限（`maxLength`，
# 按字符计），文法给数字（小数点两边各 16 位，指数 3 位）和空白（JSON 允许空白的地方只允许一个
# 空格）设了上限。这样就能把最长的合法答案写出来，并让文法确认它可以被接受：每个词元至少写一个
# 字节，所以这么多个词元一定能写到结尾。检查的内容是：在温度 1 下采样，对每个随机种子，答案都
# 能写完、能解析、并且符合 schema：

# %% en=7d87ae81
import json  # noqa: E402

import jsonschema  # noqa: E402

from minillm.decoding import JSONConstraint  # noqa: E402
from minillm.decoding.json_grammar import JSONGrammar  # noqa: E402

schema = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 30},
                         "country": {"type": "string", "maxLength": 30},
                         "capital": {"type": "boolean"},
                         "population_millions": {"type": "number"}},
          "required": ["city", "country", "capital", "population_millions"]}
escaped = "\\u00e9" * 30  # 最长的 30 个字符：写成转义形式，每个 6 字节
longest = ('{ "city" : "' + escaped + '" , "country" : "' + escaped + '" , "capital" : false , '
           '"population_millions" : -' + "9" * 16 + "." + "9" * 16 + "e+999 }")
grammar = JSONGrammar(schema)
assert grammar.is_complete(grammar.feed(grammar.start, longest.encode()))
print(f"最长的合法答案：{len(longest.encode())} 字节，所以至多这么多个词元")

# 意思是“用 JSON 描述巴黎，包含 city、country、capital 和 population_millions。”
ask = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Describe Paris as JSON with city, country, capital and "
                                 "population_millions."}], add_generation_prompt=True)
answers = tqdm(range(3 if CI else 5), desc="JSON 答案", unit="个")
for seed in answers:
    writing = minillm.generation.loop.stream(
        model, tokenizer, ask, max_new_tokens=len(longest.encode()), do_sample=True,
        temperature=1.0, seed=seed, logits_processor=JSONConstraint(tokenizer, schema),
        on_token=lambda event: answers.set_postfix_str(f"{event.index + 1} 个词元"))
    "".join(writing)  # 一直运行到结束，进度条数着这个答案的词元
    out = writing.result
    assert out.finish_reason == "eos", out.finish_reason  # 它是自己写完的，不是被截断的
    answer = json.loads(out.text)  # 能解析……
    jsonschema.validate(answer, schema)  # ……并且每个字段都在，类型也对
    print(f"种子 {seed}：{out.text}")

# %% [markdown] en=7a1835bb
# schema 保证的是*格式*，而不是内容的真假：在温度 1 下，模型仍可能编造一个城市或一个人口数
# （读一读上面的答案）。贪心解码加上 schema，得到的是格式正确的答案里模型认为最可能的那一个。
#
# ## 9. 束搜索，以及与 transformers 的现场对照
#
# 束搜索同时保留 `num_beams` 条正在生成的序列；每一步把它们的所有续写按对数概率之和排序，
# 而写完的序列的得分是 $\sum \log p / \text{length}^{\text{length\_penalty}}$。

# %% [markdown] en=9e3c54bf
# ### 贪心解码在哪里吃亏：纸上推演
#
# 贪心解码每一步都押在最可能的词元上；可是一条可能性更大的*序列*，开头的词元未必最可能。一个
# 小到能用手算的模型（就像 d2l 束搜索一节里那样）就能说明这一点：词表只有 A、B、C 三个词元，
# 再给每种已生成的序列配一张下一个词元的概率表（`minillm.course.table_model.TableModel`；
# 表里没有列出的序列，三个词元各得 1/3）。我们解码三个词元。

# %% en=40166993
from minillm.decoding import beam_search  # noqa: E402
from minillm.generation.agreement import agree, beams_agree  # noqa: E402
from minillm.course.table_model import TableModel  # noqa: E402

paper = TableModel(["A", "B", "C"], {
    (): {"A": 0.5, "B": 0.4, "C": 0.1},
    ("A",): {"A": 0.3, "B": 0.4, "C": 0.3},
    ("B",): {"A": 0.9, "B": 0.05, "C": 0.05},
    ("A", "B"): {"A": 0.3, "B": 0.3, "C": 0.4},
    ("B", "A"): {"A": 0.2, "B": 0.2, "C": 0.6},
})
for prefix, row in paper.table.items():
    print(f"在 {Label(' '.join(prefix) or '（开头）'):<8} 之后", dict(zip(paper.vocab, row)))

# %% [markdown] en=5216565a
# 手算一遍：
#
# - **贪心解码**：A（0.5 胜过 B 的 0.4），然后 B（0.4），然后 C（0.4）：P = 0.5 × 0.4 × 0.4 = 0.08。
# - **2 条束的束搜索**：第 1 步保留 A（0.5）和 B（0.4）。第 2 步给全部六种扩展打分：A A 0.15、
#   A B 0.20、A C 0.15、**B A 0.36**、B B 0.02、B C 0.02，保留 B A 和 A B。第 3 步：
#   B A C = 0.36 × 0.6 = **0.216**，是六种里最好的；A B 最好也只有 0.08。
#
# 贪心解码输在选了 A：它是更可能的第一个词元，但它后面的续写个个都拿不准；而 B 后面以 0.9 的
# 概率跟着 A。现在在同一个模型上运行本包的 `beam_search`（下面会拿它和 transformers 对照），
# 并与贪心循环、以及全部 27 种可能的序列相比较：

# %% en=6c2fe127
from itertools import product  # noqa: E402

paper_prompt = [0]  # 只有一个词元的提示词；概率表只看它之后的词元
names = lambda ids: [paper.vocab[i] for i in ids]  # noqa: E731

greedy_ids = list(paper_prompt)
for _ in range(3):
    greedy_ids.append(int(paper(torch.tensor([greedy_ids]))[0, -1].argmax()))
greedy_seq = names(greedy_ids[1:])
beams = {n: names(beam_search(paper, paper_prompt, GenerationConfig(num_beams=n, max_new_tokens=3),
                              eos_token_ids=[])[0].token_ids) for n in (1, 2)}
every = max(product(paper.vocab, repeat=3), key=paper.probability)
for name, seq in [("贪心循环", greedy_seq), ("beam_search，1 条束", beams[1]),
                  ("beam_search，2 条束", beams[2]), ("27 种里最好的", list(every))]:
    print(f"{Label(name):<21} {' '.join(seq)}  P = {paper.probability(seq):.3f}")
assert greedy_seq == beams[1] == ["A", "B", "C"] and beams[2] == ["B", "A", "C"]
assert paper.probability(beams[2]) == paper.probability(every) > paper.probability(greedy_seq)

# %% [markdown] en=dfac690a
# 束搜索也不保证能找到最好的序列：束太少时，它也会像贪心解码那样丢掉最优序列的前缀；而在真实
# 模型上，最可能的序列往往恰恰是那些重复的序列（第 1 节）。它搜得更宽，代价是 num_beams 倍的
# 计算量。
#
# 本包的 `beam_search` 一步一步照着 transformers 的 `_beam_search` 写。搜索本身就是它循环的
# 开头：把每个词元的对数概率加到它那条束的总分上，在所有束上一起挑出最好的候选，再留下没有结束
# 的最好的 `num_beams` 个。其余部分保留已结束的束，打分为 sum(log p) / new_tokens **
# length_penalty，并在没有哪条运行中的束还能胜过其中最差的一条时停止
# （`show_source(beam_search)` 会打印全部代码）。

# %% en=dc3dfd49
show_source(beam_search, start="while True:", stop="# 3. Ended")  # 它循环的开头

# %% en=cc16a4b5
ref_model, ref_tokenizer = minillm.load_reference()
eos = minillm.generation.request.eos_ids(model, tokenizer, GenerationConfig())
for beams in [1, 3]:
    ours = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=12, num_beams=beams)
    theirs = ref_model.generate(torch.tensor([prompt_ids]), max_new_tokens=12, do_sample=False,
                                num_beams=beams, top_k=None, eos_token_id=eos,
                                pad_token_id=eos[0])
    # CPU 上要求完全相同；GPU 上比到第一个近似并列为止（束搜索：或两条得分近似并列的束）
    same = (agree if beams == 1 else beams_agree)(model, prompt_ids, ours.token_ids,
                                                   theirs[0, len(prompt_ids):].tolist())
    print(f"num_beams={beams}：与 transformers 的词元相同：{same}  {ours.text!r}")
    assert same

# %% [markdown] en=edb0c856
# 测试套件在 5 个提示词 × num_beams 1–4 × length_penalty 0.5 / 1.0 / 2.0 上做这项检查，并加上
# repetition_penalty 和 no_repeat_ngram_size（`tests/test_decoding_smollm2.py`）；每个处理器
# 还各自在 120 组随机用例上与 transformers 中对应的处理器对照（`tests/test_decoding_processors.py`）。
#
# **下一步：**练习 `exercises/zh/04_decoding.ipynb`——亲手写出温度、top-k、top-p、重复惩罚和
# 束搜索的一步。
