"""The three operations byte-pair encoding (字节对编码, BPE) is made of, on lists of token ids.

    pair_counts([1, 2, 3, 1, 2])           -> {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    merge_pair([1, 2, 3, 1, 2], (1, 2), 9) -> [9, 3, 9]
    encode_with_merges("aaab", [(97, 97)]) -> [256, 97, 98]

Training repeats "count the pairs, merge the most frequent one" and records each merge; encoding
replays the recorded merges, earliest first. These are the readable reference versions (the
chapter's exercise checks the learner's code against them); `Tokenizer` uses the same rule with
a rank table and a cache.
"""

from __future__ import annotations

from collections.abc import Sequence
import heapq
from itertools import repeat


def pair_counts(ids: Sequence[int], counts: dict | None = None) -> dict[tuple[int, int], int]:
    """How often each adjacent pair occurs in `ids` (added to `counts` when given)."""
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of `pair` in `ids` by `new_id`, scanning left to right.

    Occurrences never overlap: in [a, a, a] the pair (a, a) is merged once, at the left."""
    out, i, n = [], 0, len(ids)
    first, second = pair
    while i < n:
        if i < n - 1 and ids[i] == first and ids[i + 1] == second:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def encode_with_merges(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
    """Encode `text` with merges learned by training: `merges[i]` made the token 256 + i.

    Start from the UTF-8 bytes; while some adjacent pair has a merge, apply the merge that was
    learned earliest (the lowest index), everywhere it occurs."""
    rank = {tuple(pair): i for i, pair in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pairs = set(zip(ids, ids[1:]))
        best = min(pairs, key=lambda p: rank.get(p, float("inf")))
        if best not in rank:
            break
        ids = merge_pair(ids, best, 256 + rank[best])
    return ids


def bpe_word(ids: list[int], ranks: dict[tuple[int, int], int],
             table: Sequence[tuple[int, int, int]]) -> list[int]:
    """Apply merges to one pre-tokenized word: the same rule as `encode_with_merges`, written
    for speed. `ranks` maps a pair of ids to its rank (its index in the merge list) and
    `table[rank]` is (left id, right id, merged id). The lowest rank present is merged first,
    everywhere in the word, until no pair has a rank. `min` and `map` search in C."""
    if len(ids) > LONG_WORD:
        return bpe_word_heap(ids, ranks, table)
    get = ranks.get
    while len(ids) > 1:
        rank = min(map(get, zip(ids, ids[1:]), _NO_RANKS))
        if rank == _NO_RANK:
            break
        first, second, new_id = table[rank]
        i, n = ids.index(first), len(ids)
        out = ids[:i]
        while i < n:
            if ids[i] == first and i + 1 < n and ids[i + 1] == second:
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return ids


_NO_RANK = 1 << 62  # what `ranks.get` gives a pair that has no merge
_NO_RANKS = repeat(_NO_RANK)

LONG_WORD = 64  # words longer than this (in bytes) use the heap version


def bpe_word_heap(ids: list[int], ranks: dict[tuple[int, int], int],
                  table: Sequence[tuple[int, int, int]]) -> list[int]:
    """`bpe_word` for long words: the same result in O(n log n) instead of O(n^2).

    Every mergeable neighbour pair sits in a heap as (rank, position); the smallest pops first
    (the lowest rank, then the leftmost place, which is the left-to-right rule). The tokens form a
    linked list, so a merge only touches its two neighbours; heap entries made stale by a merge
    are recognised by the tokens at their position no longer being that pair."""
    n = len(ids)
    tokens = list(ids)
    after = list(range(1, n + 1))
    after[-1] = -1
    before = list(range(-1, n - 1))
    alive = [True] * n
    get = ranks.get
    heap = [(rank, i) for i, pair in enumerate(zip(ids, ids[1:]))
            if (rank := get(pair)) is not None]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = after[i]
        if not alive[i] or j < 0:
            continue
        first, second, new_id = table[rank]
        if tokens[i] != first or tokens[j] != second:
            continue  # stale: this place no longer holds the pair
        tokens[i] = new_id
        alive[j] = False
        k = after[j]
        after[i] = k
        if k >= 0:
            before[k] = i
            found = get((new_id, tokens[k]))
            if found is not None:
                heapq.heappush(heap, (found, i))
        h = before[i]
        if h >= 0:
            found = get((tokens[h], new_id))
            if found is not None:
                heapq.heappush(heap, (found, h))
    out, i = [], 0
    while i >= 0:
        out.append(tokens[i])
        i = after[i]
    return out
