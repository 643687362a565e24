# 中文版 · 04_decoding_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=228aa950
# # 练习 04：解码策略（decoding strategies）
#
# 这里要写解码器的五个小部件，每个都是作用在一批 logits `(batch, vocab)` 上的函数。每写完
# 一个，就运行它下面的检查单元格：检查器在随机生成的 logits 上，把你的函数和 minillm 自己的
# 处理器（`minillm/decoding/processors.py`）作对比，并直接告诉你哪里不一样。被去掉的词元，
# 分数记为 `-inf`。
#
# 运行 `pytest --nbval-lax exercises/zh/04_decoding.ipynb` 可以检查整个 notebook。

# %% en=c13b787f
import torch

from minillm.course.checks import ch04_decoding as checks
from minillm.course import show_source

# %% [markdown] en=536bad17
# ## 1. 温度（temperature）
#
# $P_i = e^{z_i/T} / \sum_j e^{z_j/T}$：返回按温度 $T$ 缩放后的 logits。

# %% [task] en=3ec83d7d
def apply_temperature(logits, temperature):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def apply_temperature(logits, temperature):
    return logits / temperature

# %% [check] en=bf3d1153
checks.check_apply_temperature(apply_temperature)

# %% [markdown] en=eed3f7dd
# ## 2. top-k
#
# 每一行保留分数最高的 `k` 个，其余分数一律设为 `-inf`。与第 k 名分数相同的词元也保留。
# `k` 比词表还大时，全部保留。提示：`torch.topk` 和 `masked_fill`。

# %% [task] en=bf7c7aaf
def top_k_filter(logits, k):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def top_k_filter(logits, k):
    k = min(k, logits.shape[-1])
    kth_best = torch.topk(logits, k).values[..., -1:]
    return logits.masked_fill(logits < kth_best, float("-inf"))

# %% [check] en=00e82bc5
checks.check_top_k(top_k_filter)

# %% [markdown] en=486d36fd
# ## 3. 核采样（top-p）
#
# 保留最可能的那些词元组成的最小集合，使它们的概率之和至少达到 `p`。让累计概率越过 `p` 的那个
# 词元也要保留：概率为 0.5、0.3、0.15、0.05，p = 0.7 时，保留前两个。提示：降序排序，
# `softmax`，`cumsum`；只要某个词元*之前*的累计概率仍小于 `p`，它就保留。

# %% [task] en=da7cf073
def top_p_filter(logits, p):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def top_p_filter(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # 比它更可能的那些词元的概率之和
    remove_sorted = before >= p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))

# %% [check] en=3dee5bca
checks.check_top_p(top_p_filter)

# %% [markdown] en=9b1100f6
# ## 4. 重复惩罚（repetition penalty）
#
# 凡是在 `input_ids` 里出现过的词元（提示词也算），分数为正时除以 `penalty`，为负时乘以
# `penalty`；不管出现了多少次，都只处理一次。提示：`torch.gather`、`torch.where`、`scatter`。

# %% [task] en=56c96ce8
def repetition_penalty(input_ids, logits, penalty):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def repetition_penalty(input_ids, logits, penalty):
    seen = torch.gather(logits, 1, input_ids)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(1, input_ids, seen)

# %% [check] en=512e1821
checks.check_repetition_penalty(repetition_penalty)

# %% [markdown] en=c2d3f69a
# ## 5. 束搜索（beam search）的一步
#
# `log_probs` 的形状是 `(num_beams, vocab)`，`beam_scores` 的形状是 `(num_beams,)`：每条正在
# 生成的束的对数概率之和。返回 `(scores, parents, tokens)`：在所有束的全部续写中挑出最好的
# `num_beams` 个，按从好到差排列；一个续写的得分是 `beam_scores[parent] + log_probs[parent, token]`。
# 提示：展平成 `num_beams * vocab` 个候选，用 `torch.topk`，再对词表大小做 `//` 和 `%`。

# %% [task] en=0aa54cdb
def beam_step(log_probs, beam_scores, num_beams):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def beam_step(log_probs, beam_scores, num_beams):
    vocab = log_probs.shape[-1]
    totals = (beam_scores[:, None] + log_probs).reshape(-1)
    scores, flat = torch.topk(totals, num_beams)
    return scores, flat // vocab, flat % vocab

# %% [check] en=befddb0b
checks.check_beam_step(beam_step)

# %% [markdown] en=3789cf44
# 完成了：用 `show_source(minillm.decoding.TopPProcessor)` 等看看 minillm 的实现，和你写的比一比。
# minillm 的 top-p 与 transformers 一样，是从不太可能的那一端做起的（升序排序）；两者保留的词元
# 完全相同。
