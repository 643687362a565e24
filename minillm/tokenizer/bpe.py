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
