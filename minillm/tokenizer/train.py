"""Training a byte-level BPE on a text: learn merges until the vocabulary has `vocab_size` tokens.

The rule, one merge at a time:
  count every adjacent pair of tokens inside the words of the training text (weighted by how
  often each word occurs); merge the most frequent pair into a new token.
Tie-breaking (pinned in the tests): among pairs with the same count, the pair with the smallest
ids wins, compared as (left id, right id). Token ids: 0-255 are the bytes, merge i makes token
256 + i, the special tokens come last.

`train_simple` is the rule written plainly (it recounts every pair for every merge); `train`
gives the same merges fast: a merge updates only the counts next to each place it merged, and
the counts are kept in a heap.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict

import regex

from .bpe import merge_pair, pair_counts
from .bytes_unicode import bytes_to_token
from .chat import CHATML_TEMPLATE
from .pretokenize import PreTokenizer
from ..utils import wording

DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _words(text: str, pre: PreTokenizer, special: tuple[str, ...]) -> Counter:
    """How often each pre-tokenized word occurs; special tokens in the text are left out."""
    if not isinstance(text, str):
        raise TypeError(f"train takes the training text as a str, not {type(text).__name__}")
    pieces = [text]
    if special:
        cut = regex.compile("|".join(regex.escape(s) for s in sorted(special, key=len, reverse=True)))
        pieces = cut.split(text)
    counts: Counter = Counter()
    for piece in pieces:
        counts.update(pre(piece))
    return counts


def _check(vocab_size, special_tokens):
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TypeError(f"vocab_size must be an int, not {type(vocab_size).__name__}")
    special = tuple(special_tokens)
    for s in special:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
    if len(set(special)) != len(special):
        raise ValueError(f"special tokens repeat: {special}")
    if vocab_size < 256 + len(special):
        raise ValueError(f"vocab_size {vocab_size} is too small: the 256 bytes and "
                         f"{len(special)} special tokens need at least {256 + len(special)}")
    return vocab_size - 256 - len(special), special


def train_simple(text: str, vocab_size: int, special_tokens=DEFAULT_SPECIAL_TOKENS,
                 pre_tokenizer: PreTokenizer | None = None) -> list[tuple[int, int]]:
    """The merges, found by recounting every pair before each merge (slow; for reading)."""
    n_merges, special = _check(vocab_size, special_tokens)
    words = _words(text, pre_tokenizer or PreTokenizer(), special)
    pieces = [(list(w.encode("utf-8")), n) for w, n in words.items()]
    merges = []
    for new_id in range(256, 256 + n_merges):
        counts: dict = {}
        for ids, n in pieces:
            for pair, c in pair_counts(ids).items():
                counts[pair] = counts.get(pair, 0) + c * n
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))  # most frequent, then smallest ids
        merges.append(best)
        pieces = [(merge_pair(ids, best, new_id), n) for ids, n in pieces]
    return merges


def learn_merges(text: str, vocab_size: int, special_tokens=DEFAULT_SPECIAL_TOKENS,
                 pre_tokenizer: PreTokenizer | None = None, progress: bool = False):
    """The merges `train` learns, as pairs of ids: merges[i] made token 256 + i."""
    n_merges, special = _check(vocab_size, special_tokens)
    counted = _words(text, pre_tokenizer or PreTokenizer(), special)
    words = [list(w.encode("utf-8")) for w in counted]
    freq = list(counted.values())
    stats: dict = defaultdict(int)      # pair -> count over the whole text
    where: dict = defaultdict(set)      # pair -> indices of the words that contain it
    for wi, ids in enumerate(words):
        for pair in zip(ids, ids[1:]):
            stats[pair] += freq[wi]
            where[pair].add(wi)
    heap = [(-c, pair) for pair, c in stats.items()]
    heapq.heapify(heap)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=n_merges, desc=wording.text("BPE merges", "BPE 合并"), unit="merge")
    merges: list[tuple[int, int]] = []
    while len(merges) < n_merges and heap:
        negative, pair = heapq.heappop(heap)
        if stats.get(pair, 0) != -negative or negative == 0:
            continue  # an out-of-date entry: the pair's count changed since it was pushed
        new_id = 256 + len(merges)
        merges.append(pair)
        changed = _merge_everywhere(pair, new_id, where.pop(pair), words, freq, stats, where)
        del stats[pair]
        changed.discard(pair)
        for p in changed:
            if stats[p] > 0:
                heapq.heappush(heap, (-stats[p], p))
            else:
                del stats[p]
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return merges


def _merge_everywhere(pair, new_id, word_indices, words, freq, stats, where) -> set:
    """Merge `pair` in the given words, updating the pair counts only around each occurrence:
    (prev, a) and (b, next) lose the word's count, (prev, new) and (new, next) gain it."""
    first, second = pair
    changed = set()
    for wi in word_indices:
        ids, n = words[wi], freq[wi]
        out, i, end = [], 0, len(ids)
        while i < end:
            if ids[i] == first and i + 1 < end and ids[i + 1] == second:
                if out:
                    before = out[-1]
                    for p, delta in (((before, first), -n), ((before, new_id), n)):
                        stats[p] += delta
                        changed.add(p)
                    where[(before, new_id)].add(wi)
                if i + 2 < end:
                    after = ids[i + 2]
                    for p, delta in (((second, after), -n), ((new_id, after), n)):
                        stats[p] += delta
                        changed.add(p)
                    where[(new_id, after)].add(wi)
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        words[wi] = out
    return changed


def train(text: str, vocab_size: int, special_tokens=DEFAULT_SPECIAL_TOKENS,
          pre_tokenizer: PreTokenizer | None = None, progress: bool = False, name: str = "trained"):
    """A Tokenizer trained on `text`, with `vocab_size` tokens in all: 256 bytes, the learned
    merges, then `special_tokens`. With ChatML's tokens it gets a ChatML chat template."""
    from .tokenizer import Tokenizer

    pre = pre_tokenizer or PreTokenizer()
    merges = learn_merges(text, vocab_size, special_tokens, pre, progress)
    spelled = [bytes([b]) for b in range(256)]
    for left, right in merges:
        spelled.append(spelled[left] + spelled[right])
    tokens = [bytes_to_token(b) for b in spelled]
    special = {s: len(tokens) + k for k, s in enumerate(special_tokens)}
    tokens += list(special)
    pairs = [(tokens[a], tokens[b]) for a, b in merges]
    chatml = "<|im_start|>" in special and "<|im_end|>" in special
    return Tokenizer(tokens, pairs, special, pre_tokenizer=pre,
                     eos_token_id=special.get("<|im_end|>", special.get("<|endoftext|>")),
                     chat_template=CHATML_TEMPLATE if chatml else None, name=name)
