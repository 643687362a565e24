# %% [markdown]
# # Exercises 01 · Byte-pair encoding by hand
#
# BPE (字节对编码) is three small operations on lists of token ids. Write each one, run its cell,
# then run the check cell below it. The checker compares your function with minillm's own on
# fixed and random inputs and says in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/01_tokenization.ipynb`.

# %%
from minillm.checks import ch01_tokenization as checks

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
# ## 3 · Encode with a list of merges
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
# minillm's versions are in `minillm/tokenizer/bpe.py`; compare yours with
# `minillm.show_source(minillm.tokenizer.bpe)`. The tokenizer itself runs the same rule with a rank
# table and a word cache, which is what makes it fast enough for real text.
