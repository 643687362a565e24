# %% [markdown]
# # Exercises 01 · Byte-pair encoding by hand
#
# BPE (字节对编码) is a few small operations on lists of token ids: counting pairs, merging one,
# training (learning which pairs to merge) and encoding (replaying the merges). Write each one,
# run its cell, then run the check cell below it. The checker compares your function with
# minillm's own on fixed and random inputs and says in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/01_tokenization.ipynb`.

# %%
from minillm.course.checks import ch01_tokenization as checks
from minillm.course import show_source

# %% [markdown]
# ## 1 · Count adjacent pairs
#
# Write `pair_counts(ids)`: a dict mapping each pair of neighbouring ids `(ids[i], ids[i + 1])`
# to how often it occurs. Overlapping occurrences all count.
#
# ```
# pair_counts([1, 2, 3, 1, 2])  ->  {(1, 2): 2, (2, 3): 1, (3, 1): 1}
# pair_counts([5, 5, 5])        ->  {(5, 5): 2}
# ```

# %% [task]
def pair_counts(ids):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def pair_counts(ids):
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts

# %% [check]
checks.check_pair_counts(pair_counts)

# %% [markdown]
# ## 2 · Merge one pair
#
# Write `merge_pair(ids, pair, new_id)`: a **new** list in which every occurrence of `pair`
# becomes `new_id`. Scan from the left; occurrences do not overlap, so after a merge at position
# `i` carry on at `i + 2`.
#
# ```
# merge_pair([1, 2, 3, 1, 2], (1, 2), 9)  ->  [9, 3, 9]
# merge_pair([5, 5, 5], (5, 5), 9)        ->  [9, 5]
# ```

# %% [task]
def merge_pair(ids, pair, new_id):
    # YOUR CODE HERE
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

# %% [check]
checks.check_merge_pair(merge_pair)

# %% [markdown]
# ## 3 · Train: learn the merges
#
# Training starts from the words of a text (after pre-tokenization) and how often each occurs,
# `word_counts = {"low": 5, "lower": 2, ...}`. Each word is a list of its UTF-8 bytes. Then, for
# step = 0, 1, 2, ...:
#
# 1. count the adjacent pairs inside every word, each word's pairs counted as many times as the
#    word occurs (pairs never cross from one word into the next);
# 2. take the most frequent pair; among pairs with the same count, the one with the smallest ids,
#    compared as (left id, right id): `min(counts, key=lambda p: (-counts[p], p))`;
# 3. merge it into the new id `256 + step` in every word, and record it.
#
# Write `train_merges(word_counts, num_merges)`: the list of recorded pairs, in order. Stop after
# `num_merges` merges, or earlier when no word has a pair left.
#
# ```
# train_merges({"aaab": 1}, 2)  ->  [(97, 97), (97, 98)]   (a tie: (97, 98) < (256, 97))
# ```

# %% [task]
def train_merges(word_counts, num_merges):
    # YOUR CODE HERE
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

# %% [check]
checks.check_train_merges(train_merges)

# %% [markdown]
# ## 4 · Encode with a list of merges
#
# Training recorded its merges in order: `merges[i]` is the pair of ids it merged into the new
# id `256 + i`. Write `encode_with_merges(text, merges)`:
#
# 1. start from the UTF-8 bytes of `text` (`list(text.encode("utf-8"))`),
# 2. while some adjacent pair has a merge, apply the merge learned **earliest** (smallest `i`)
#    among the pairs present, everywhere it occurs,
# 3. return the ids.
#
# ```
# encode_with_merges("aaab", [(97, 97), (256, 98)])  ->  [256, 97, 98]
# ```
#
# You may use your `pair_counts` and `merge_pair`.

# %% [task]
def encode_with_merges(text, merges):
    # YOUR CODE HERE
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

# %% [check]
checks.check_encode_with_merges(encode_with_merges)

# %% [markdown]
# ## Done?
#
# minillm's versions are in `minillm/tokenizer/bpe.py` and `minillm/tokenizer/train.py`; compare
# yours with `show_source(minillm.tokenizer.bpe)` and
# `show_source(minillm.tokenizer.train.train_simple)`. The real trainer gives the same
# merges but updates only the counts next to each merge, and the tokenizer runs the encoding
# rule with a rank table and a word cache: that is what makes both fast enough for real text.
