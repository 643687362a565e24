# 中文版 · 08_speculative_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=54217d1d
# # 练习 08：推测解码（speculative decoding）
#
# 这里要写 minillm 推测解码器的三个部件：一种不需要第二个模型的草稿（draft），即提示词查找
# （prompt lookup）；对草稿词元的贪心检查；以及推测采样中针对单个草稿词元的接受规则（acceptance
# rule）。在各自的单元格里写好函数并运行，再运行它下面的检查单元格。每个检查器都把你的函数和
# `minillm.speculative` 作对比；最后一个会在玩具目标分布 `p` 和草稿分布 `q` 上调用你的函数几千次，
# 并用卡方检验（chi-square test）确认它输出的词元服从 `p`，而不是 `q`。
#
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/08_speculative.ipynb`。

# %% en=c61a7637
import torch

import minillm
from minillm.course import show_source
from minillm.course.checks import ch08_speculative as checks

torch.manual_seed(0)

# %% [markdown] en=a3339781
# ## 1 · 提示词查找：从上下文里抄来的草稿
#
# 文本常常重复自己（代码、名字、引用的段落）。提示词查找猜的是：最后几个词元接下来会像它们上一次
# 出现时那样延续下去。写出 `prompt_lookup(ids, k, max_ngram)`：
#
# - 让 n = `max_ngram`、`max_ngram - 1`、……、1（但不超过 `len(ids) - 1`）：取最后 n 个 id，即
#   `ids[-n:]`，寻找它们在**更早**处最近的一次出现，起点从 `len(ids) - n - 1` 往下找到 0；
# - 一旦找到匹配，就返回跟在它后面的（至多）`k` 个 id；
# - 如果所有的 n 都没有匹配（或者 `k` 为 0），返回 `[]`。
#
# ```
# prompt_lookup([1, 2, 3, 4, 1, 2], k=3, max_ngram=3)  ->  [3, 4, 1]
# ```

# %% [task] en=27e2d54d
def prompt_lookup(ids, k, max_ngram):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def prompt_lookup(ids, k, max_ngram):
    if k < 1:
        return []
    for n in range(min(max_ngram, len(ids) - 1), 0, -1):
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start:start + n] == suffix:
                return list(ids[start + n:start + n + k])
    return []

# %% [check] en=7a482c8f
checks.check_prompt_lookup(prompt_lookup)

# %% [markdown] en=639c788b
# ## 2 · 贪心验证
#
# 目标模型在上下文和 n 个草稿词元上跑一次，给出它在每个草稿位置上以及最后一个词元之后的分数：
# 形状为 (n + 1, vocab) 的 `target_scores`。写出 `verify_greedy(target_scores, draft_tokens)`，
# 返回 `(new_tokens, n_accepted)`：
#
# - 依次检查草稿词元；只要它是目标模型在该位置的 argmax，就保留；
# - 遇到第一个不是的，就在那里输出目标模型的 argmax 代替它，然后停下；
# - 如果 n 个全部通过，再加上**额外词元（bonus token）**：目标模型在最后一个词元之后的 argmax
#   （`target_scores[n]`），它由同一次前向传播白送。
#
# `n_accepted` 数的是保留下来的草稿词元。这些词元与对目标模型做普通贪心解码给出的完全相同，
# 一次传播产出其中的 1 到 n + 1 个。

# %% [task] en=1e50c1f0
def verify_greedy(target_scores, draft_tokens):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def verify_greedy(target_scores, draft_tokens):
    best = target_scores.argmax(dim=-1).tolist()
    new_tokens = []
    for i, token in enumerate(draft_tokens):
        new_tokens.append(best[i])
        if best[i] != token:
            return new_tokens, i
    return new_tokens + [best[len(draft_tokens)]], len(draft_tokens)

# %% [check] en=88abb473
checks.check_verify_greedy(verify_greedy)

# %% [markdown] en=879f566c
# ## 3 · 接受，或者重新抽样
#
# 采样时，草稿从它的分布 `q` 中抽出了词元 `draft_token`；目标模型在同一位置的分布是 `p`（两者都是
# 词表上的一维浮点张量，各自的和为 1）。写出 `accept_step(p, q, draft_token, generator)`，返回
# `(token, accepted)`：
#
# - 抽取 `u = torch.rand((), generator=generator)`；当 `u < min(1, p[x] / q[x])` 时**接受**：
#   返回 `(draft_token, True)`；
# - 否则**重新抽样**：残差 `r = max(0, p - q)`（`torch.clamp(p - q, min=0)`）除以它的和，返回
#   `(从 r 中抽出的一个词元, False)`；用 `torch.multinomial(r, 1, generator=generator)` 来抽。
#
# 只用 `generator` 抽取，这样设了种子的生成才能复现。词元以 Python 的 `int` 返回，`accepted`
# 以 `bool` 返回。

# %% [task] en=801549c4
def accept_step(p, q, draft_token, generator):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def accept_step(p, q, draft_token, generator):
    x = int(draft_token)
    u = torch.rand((), generator=generator, dtype=p.dtype)
    if u < torch.clamp(p[x] / q[x], max=1.0):
        return x, True
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum()
    return int(torch.multinomial(residual, 1, generator=generator)), False

# %% [check] en=5155c156
checks.check_accept_step(accept_step)

# %% [markdown] en=b2a02355
# minillm 包里的版本 `minillm.speculative.accept_or_resample` 一次对一整批行做同样的事。拿你的
# 版本和它比一比：

# %% en=8529c671
from minillm.speculative import accept_or_resample

show_source(accept_or_resample)
