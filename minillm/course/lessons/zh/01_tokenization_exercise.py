# 中文版 · 01_tokenization_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=36731e62
# # 练习 01 · 亲手实现字节对编码
#
# 字节对编码（byte pair encoding，BPE）就是作用在词元 id 列表上的几个小操作：统计相邻对、合并
# 一对、训练（学出该合并哪些对）和编码（把合并规则重放一遍）。逐个写出这些函数，运行它所在的
# 单元格，再运行它下面的检查单元格。检查会在固定的和随机的输入上，把你的函数和 minillm 自己的
# 实现作对比，并直接告诉你错在哪里。
#
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/01_tokenization.ipynb`。

# %% en=e8e15841
from minillm.course.checks import ch01_tokenization as checks
from minillm.course import show_source

# %% [markdown] en=2f8b74d0
# ## 1 · 统计相邻对
#
# 请写出 `pair_counts(ids)`：返回一个字典，把每一对相邻的 id `(ids[i], ids[i + 1])` 映射到它出现
# 的次数。相互重叠的出现也都要计数。
#
# ```
# pair_counts([1, 2, 3, 1, 2])  ->  {(1, 2): 2, (2, 3): 1, (3, 1): 1}
# pair_counts([5, 5, 5])        ->  {(5, 5): 2}
# ```

# %% [task] en=2fb3b5f0
def pair_counts(ids):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def pair_counts(ids):
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts

# %% [check] en=ffaebc73
checks.check_pair_counts(pair_counts)

# %% [markdown] en=ee4907cb
# ## 2 · 合并一对
#
# 请写出 `merge_pair(ids, pair, new_id)`：返回一个**新**列表，其中 `pair` 的每一次出现都换成
# `new_id`。从左往右扫描；出现之间不重叠，所以在位置 `i` 合并之后，从 `i + 2` 接着往下扫。
#
# ```
# merge_pair([1, 2, 3, 1, 2], (1, 2), 9)  ->  [9, 3, 9]
# merge_pair([5, 5, 5], (5, 5), 9)        ->  [9, 5]
# ```

# %% [task] en=877f9c42
def merge_pair(ids, pair, new_id):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def merge_pair(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out

# %% [check] en=7b9bf721
checks.check_merge_pair(merge_pair)

# %% [markdown] en=bd898bb7
# ## 3 · 训练：学出合并规则
#
# 训练从文本里的词（预分词之后的结果）以及每个词出现的次数开始：
# `word_counts = {"low": 5, "lower": 2, ...}`。每个词表示成它的 UTF-8 字节列表。然后对
# step = 0, 1, 2, ……：
#
# 1. 统计每个词内部的相邻对，每个词的相邻对按这个词出现的次数计数（相邻对永远不跨越两个词）；
# 2. 取出现次数最多的一对；次数相同的几对中，取 id 最小的那一对，按（左 id，右 id）比较：
#    `min(counts, key=lambda p: (-counts[p], p))`；
# 3. 在每个词里把它合并成新 id `256 + step`，并记下这一对。
#
# 请写出 `train_merges(word_counts, num_merges)`：按顺序返回记下的各对。做完 `num_merges` 次合并
# 就停下；如果没有哪个词里还剩相邻对，也提前停下。
#
# ```
# train_merges({"aaab": 1}, 2)  ->  [(97, 97), (97, 98)]   （次数相同：(97, 98) < (256, 97)）
# ```

# %% [task] en=bf8f2ff2
def train_merges(word_counts, num_merges):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def train_merges(word_counts, num_merges):
    words = {word: list(word.encode("utf-8")) for word in word_counts}
    merges = []
    for step in range(num_merges):
        counts = {}
        for word, ids in words.items():
            for pair, n in pair_counts(ids).items():
                counts[pair] = counts.get(pair, 0) + n * word_counts[word]
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {word: merge_pair(ids, best, 256 + step) for word, ids in words.items()}
    return merges

# %% [check] en=a3cb733d
checks.check_train_merges(train_merges)

# %% [markdown] en=9e29d695
# ## 4 · 用一组合并规则编码
#
# 训练按顺序记下了它的合并：`merges[i]` 是它合并成新 id `256 + i` 的那一对 id。请写出
# `encode_with_merges(text, merges)`：
#
# 1. 从 `text` 的 UTF-8 字节开始（`list(text.encode("utf-8"))`），
# 2. 只要还有某个相邻对有对应的合并规则，就在当前出现的各对中，取**最早**学到的那条规则
#    （`i` 最小），把它出现的每一处都合并掉，
# 3. 返回最终的 id。
#
# ```
# encode_with_merges("aaab", [(97, 97), (256, 98)])  ->  [256, 97, 98]
# ```
#
# 可以直接用你写的 `pair_counts` 和 `merge_pair`。

# %% [task] en=3d51238a
def encode_with_merges(text, merges):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def encode_with_merges(text, merges):
    rank = {tuple(pair): i for i, pair in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        present = [pair for pair in pair_counts(ids) if pair in rank]
        if not present:
            break
        best = min(present, key=rank.get)
        ids = merge_pair(ids, best, 256 + rank[best])
    return ids

# %% [check] en=6e2ae287
checks.check_encode_with_merges(encode_with_merges)

# %% [markdown] en=b09c4512
# ## 做完了？
#
# minillm 的实现在 `minillm/tokenizer/bpe.py` 和 `minillm/tokenizer/train.py` 里；可以用
# `show_source(minillm.tokenizer.bpe)` 和 `show_source(minillm.tokenizer.train.train_simple)`
# 把它们和你的版本对照。真正的训练器学到的合并规则一模一样，只是每次合并后只更新这次合并旁边的
# 计数；分词器则用一张排名表和一个词缓存来执行编码规则。正是这两点，让它们快到足以处理真实的文本。
