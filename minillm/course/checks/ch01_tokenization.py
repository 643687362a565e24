"""Checkers for the chapter 01 exercise: the four operations of byte-level BPE.

Each checker calls the learner's function on fixed cases and on random ones (seeded), with ids of
one, two and three digits and ids above 255, compares with minillm's reference
(`minillm.tokenizer.bpe`, `minillm.tokenizer.train.learn_merges`) and says in plain words what is
wrong. A hint names a mistake only when the learner's answers equal that mistake's answers on
every case.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ...tokenizer.bpe import encode_with_merges, merge_pair, pair_counts
from ...tokenizer.train import learn_merges
from ._base import CheckFailed, as_int, call, checker, expect, matching_mistake, passed, short

# --- 1. counting adjacent pairs ------------------------------------------------------------


def _pair_cases(rng: random.Random):
    cases = [[1, 2, 3, 1, 2], [], [7], [5, 5, 5], [1, 2, 1, 2, 1, 2], [104, 105, 33],
             [11, 1, 11, 1], [256, 300, 256, 300, 256], [1000, 1000, 1000, 1000]]
    for _ in range(30):
        alphabet = rng.choice([[0, 1, 2, 3, 4], [7, 12, 120, 255], [256, 257, 1000, 49151]])
        cases.append([rng.choice(alphabet) for _ in range(rng.randint(0, 20))])
    return cases


def _count_without_overlap(ids):
    out, i = {}, 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        out[pair] = out.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return out


def _pair_mistakes(cases):
    return [
        ("The last pair was not counted: a list of n ids has n - 1 adjacent pairs, the last "
         "starts at n - 2.", [pair_counts(ids[:-1]) for ids in cases]),
        ("Overlapping occurrences all count: [5, 5, 5] holds the pair (5, 5) twice (at "
         "positions 0 and 1).", [_count_without_overlap(ids) for ids in cases]),
        ("Each pair counts once per occurrence, not once in all: add 1 every time it occurs.",
         [dict.fromkeys(pair_counts(ids), 1) for ids in cases]),
        ("Count the pairs side by side, ids[i] and ids[i + 1], not every pair of ids in the list.",
         [_all_pairs(ids) for ids in cases]),
    ]


def _all_pairs(ids):
    out = {}
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            out[(ids[i], ids[j])] = out.get((ids[i], ids[j]), 0) + 1
    return out


def _plain_counts(got, what) -> dict:
    if not isinstance(got, Mapping):
        raise CheckFailed(f"{what} should return a dict {{(a, b): count}}, but returned "
                          f"{type(got).__name__}: {short(got)}")
    out = {}
    for key, count in got.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise CheckFailed(f"{what}: each key must be a pair of ids as a tuple, like (1, 2); "
                              f"found the key {key!r}")
        out[key] = as_int(count, f"{what}[{key!r}]")
    return out


@checker
def check_pair_counts(fn) -> None:
    """`fn(ids)` must return {(a, b): count} for every adjacent pair in the list `ids`."""
    cases = _pair_cases(random.Random(1))
    answers = []
    for ids in cases:
        what = f"{fn.__name__}({short(ids, 80)})"
        answers.append(_plain_counts(call(fn, ids, what=what), what))
    wants = [pair_counts(ids) for ids in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("pair counts", len(cases))
        return
    i = wrong[0]
    hint = matching_mistake(answers, _pair_mistakes(cases), dict.__eq__)
    if hint is None:
        got, want = answers[i], wants[i]
        extra, missing = set(got) - set(want), set(want) - set(got)
        if extra:
            hint = f"The pair {sorted(extra)[0]} is not side by side anywhere in the list."
        elif missing:
            hint = f"The pair {sorted(missing)[0]} is missing."
        else:
            bad = next(k for k in want if got[k] != want[k])
            hint = f"The pair {bad} occurs {want[bad]} times, you counted {got[bad]}."
    raise CheckFailed(f"For ids={cases[i]}, expected {wants[i]} but got {short(answers[i])}. "
                      + hint)


# --- 2. merging one pair -------------------------------------------------------------------


def _merge_cases(rng: random.Random):
    cases = [([1, 2, 3, 1, 2], (1, 2), 9), ([5, 5, 5], (5, 5), 9), ([5, 5, 5, 5], (5, 5), 9),
             ([1, 2], (2, 1), 9), ([], (1, 2), 9), ([1, 2], (1, 2), 256),
             ([11, 2, 1, 2, 1, 22], (1, 2), 256), ([12, 1, 2, 3], (2, 3), 300),
             ([256, 257, 256, 257, 258], (256, 257), 259), ([1, 21, 2, 1], (1, 2), 7),
             ([3, 1, 2], (1, 2), 9)]
    for _ in range(30):
        alphabet = rng.choice([[0, 1, 2, 3], [1, 11, 12, 21], [255, 256, 1024, 49151]])
        ids = [rng.choice(alphabet) for _ in range(rng.randint(0, 16))]
        pair = (rng.choice(alphabet), rng.choice(alphabet))
        cases.append((ids, pair, 256 + rng.randint(0, 1000)))
    return cases


def _merge_variant(ids, pair, new_id, *, step=2, keep_second=False, first_only=False,
                   keep_last=True):
    out, i, done = [], 0, False
    end = len(ids) if keep_last else len(ids) - 1
    while i < end:
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair) and not done:
            out.append(new_id)
            if keep_second:
                out.append(ids[i + 1])
            i += step
            done = first_only
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_from_the_right(ids, pair, new_id):
    reversed_pair = (pair[1], pair[0])
    return _merge_variant(ids[::-1], reversed_pair, new_id)[::-1]


def _merge_mistakes(cases):
    def model(**kind):
        return [_merge_variant(ids, pair, new_id, **kind) for ids, pair, new_id in cases]

    return [
        ("Both ids of an occurrence become the one new_id: after a merge at position i, carry "
         "on at i + 2, so the pair's second id is skipped and occurrences never overlap "
         "([5, 5, 5] with the pair (5, 5) gives [new_id, 5]).", model(step=1)),
        ("The pair's second id was kept: an occurrence (two ids side by side) becomes one "
         "new_id.", model(keep_second=True)),
        ("Replace every occurrence, not only the first one.", model(first_only=True)),
        ("The last id is missing: keep it when it is not merged.", model(keep_last=False)),
        ("Scan from the left: [5, 5, 5] with the pair (5, 5) gives [new_id, 5], not "
         "[5, new_id].", [_merge_from_the_right(ids, p, n) for ids, p, n in cases]),
    ]


@checker
def check_merge_pair(fn) -> None:
    """`fn(ids, pair, new_id)` must return a new list where every occurrence of `pair`, found
    left to right without overlapping, is replaced by `new_id`."""
    cases = _merge_cases(random.Random(2))
    answers = []
    for ids, pair, new_id in cases:
        what = f"{fn.__name__}({short(ids, 80)}, {pair}, {new_id})"
        got = call(fn, ids, pair, new_id, what=what)
        if not isinstance(got, list):
            raise CheckFailed(f"{what} should return a list, but returned "
                              f"{type(got).__name__}: {short(got)}")
        answers.append([as_int(x, f"an id in the list {what} returned") for x in got])
    wants = [merge_pair(ids, pair, new_id) for ids, pair, new_id in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("merge pair", len(cases))
        return
    i = wrong[0]
    ids, pair, new_id = cases[i]
    hint = matching_mistake(answers, _merge_mistakes(cases), list.__eq__)
    if hint is None:
        hint = ("Compare ids, not their text: walk the list with an index i, and where "
                "(ids[i], ids[i + 1]) == pair append new_id and jump to i + 2, else append "
                "ids[i] and go to i + 1.")
    raise CheckFailed(f"For ids={ids}, pair={pair}, new_id={new_id}, expected {wants[i]} but got "
                      f"{short(answers[i])}. {hint}")


# --- 3. training: learning the merges ------------------------------------------------------


def _train_cases(rng: random.Random):
    cases = [({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10),
             ({"aaaa": 1}, 3),
             ({"ab": 1, "ba": 1}, 4),  # a tie: (97, 98) before (98, 97)
             ({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 8),
             ({"你好": 3, "好的": 2}, 5),
             ({"a": 7}, 2),  # no pair at all: no merge
             ({"xy": 1}, 5)]  # one merge, then nothing left
    for _ in range(12):
        words = {}
        for _ in range(rng.randint(1, 8)):
            word = "".join(rng.choice("abcé") for _ in range(rng.randint(1, 7)))
            words[word] = rng.randint(1, 9)
        cases.append((words, rng.randint(1, 15)))
    return cases


def _training_text(words: dict) -> str:
    return " ".join(w for w, n in words.items() for _ in range(n))


def _reference_merges(words: dict, num_merges: int):
    return learn_merges(_training_text(words), 256 + num_merges, special_tokens=(),
                        pre_tokenizer=str.split)


def _train_variant(words, num_merges, *, tie=min, weighted=True, across_words=False):
    pieces = [(list(w.encode("utf-8")), n if weighted else 1) for w, n in words.items()]
    if across_words:
        pieces = [([b for w, n in words.items() for _ in range(n) for b in w.encode("utf-8")], 1)]
    merges = []
    for new_id in range(256, 256 + num_merges):
        counts = {}
        for ids, n in pieces:
            for pair, c in pair_counts(ids).items():
                counts[pair] = counts.get(pair, 0) + c * n
        if not counts:
            break
        top = max(counts.values())
        best = tie(p for p in counts if counts[p] == top)
        merges.append(best)
        pieces = [(merge_pair(ids, best, new_id), n) for ids, n in pieces]
    return merges


def _first_seen(pairs):
    return next(iter(pairs))


def _train_mistakes(cases):
    def model(**kind):
        return [_train_variant(w, k, **kind) for w, k in cases]

    return [
        ("Among pairs with the same count, take the one with the smallest ids, compared as "
         "(left id, right id): min(counts, key=lambda p: (-counts[p], p)).", model(tie=max)),
        ("Among pairs with the same count, take the one with the smallest ids (not the first "
         "one counted): min(counts, key=lambda p: (-counts[p], p)).", model(tie=_first_seen)),
        ("Each word counts as often as it occurs: add a pair's count times the word's count.",
         model(weighted=False)),
        ("Count pairs inside each word only: merges never cross from one word into the next.",
         model(across_words=True)),
    ]


@checker
def check_train_merges(fn) -> None:
    """`fn(word_counts, num_merges)` must return the merges BPE training learns: the most frequent
    adjacent pair inside the words (weighted by each word's count) each time, ties to the
    smallest ids, until num_merges merges or no pair is left."""
    cases = _train_cases(random.Random(4))
    answers = []
    for words, k in cases:
        what = f"{fn.__name__}({short(words, 70)}, {k})"
        got = call(fn, words, k, what=what)
        if not isinstance(got, (list, tuple)):
            raise CheckFailed(f"{what} should return a list of merges, but returned "
                              f"{type(got).__name__}: {short(got)}")
        merges = []
        for pair in got:
            expect(isinstance(pair, (tuple, list)) and len(pair) == 2,
                   f"{what}: each merge must be a pair of ids like (101, 115), found {pair!r}")
            merges.append(tuple(as_int(x, f"an id in a merge {what} returned") for x in pair))
        answers.append(merges)
    wants = [_reference_merges(w, k) for w, k in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("train merges", len(cases))
        return
    i = wrong[0]
    words, k = cases[i]
    got, want = answers[i], wants[i]
    hint = matching_mistake(answers, _train_mistakes(cases), list.__eq__)
    if hint is None and len(got) > len(want) and got[:len(want)] == want:
        hint = "Stop when no adjacent pair is left, even before num_merges merges."
    if hint is None:
        j = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got),
                                                                                len(want)))
        hint = (f"The first {j} merges agree; merge {j} should be "
                f"{want[j] if j < len(want) else 'none (stop)'}. Each step: count the pairs of "
                "every word (times its count), take the most frequent, merge it into id "
                "256 + step in every word.")
    raise CheckFailed(f"For word_counts={short(words, 80)} and num_merges={k}, expected {want} "
                      f"but got {short(got)}. {hint}")


# --- 4. encoding with a list of merges -----------------------------------------------------


def _encode_cases(rng: random.Random):
    fixed_merges = [(97, 97), (256, 98)]
    cases = [("aaab", fixed_merges), ("aab", fixed_merges), ("", fixed_merges),
             ("hello", []), ("aab", [(97, 98), (97, 97)]), ("你好", [(228, 189), (256, 160)]),
             ("abab", [(98, 97), (97, 98)]), ("aaaa", [(97, 97), (256, 256)]),
             ("🙂 ok", [(111, 107), (32, 256)])]
    alphabet = "ab c你🙂"
    for _ in range(20):
        train_text = "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 120)))
        merges = learn_merges(train_text, 256 + rng.randint(1, 40), special_tokens=())
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cases.append((text, merges))
    return cases


def _encode_by(text, merges, choose):
    """Encoding that merges, while a pair has a merge, the pair `choose` picks among them."""
    rank = {tuple(p): i for i, p in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        present = [p for p in pair_counts(ids) if p in rank]
        if not present:
            break
        best = choose(present, rank, ids)
        ids = merge_pair(ids, best, 256 + rank[best])
    return ids


def _each_merge_once(text, merges, order, start):
    ids = start(text)
    for i in order(range(len(merges))):
        ids = merge_pair(ids, tuple(merges[i]), 256 + i)
    return ids


def _encode_mistakes(cases):
    utf8 = lambda text: list(text.encode("utf-8"))  # noqa: E731
    code_points = lambda text: [ord(c) for c in text]  # noqa: E731
    return [
        ("You returned the UTF-8 bytes without merging: apply the merges, the earliest learned "
         "first, while some adjacent pair has one.", [utf8(t) for t, _ in cases]),
        ("Start from the UTF-8 bytes, not the characters' code points: "
         "list(text.encode('utf-8')); '你' is three bytes.",
         [_each_merge_once(t, m, list, code_points) for t, m in cases]),
        ("The merges were applied latest first: the earliest merge (the smallest index) goes "
         "first.", [_each_merge_once(t, m, reversed, utf8) for t, m in cases]),
        ("Among the pairs present you took the one learned latest: take the one learned "
         "earliest (the smallest index i).",
         [_encode_by(t, m, lambda present, rank, ids: max(present, key=rank.get))
          for t, m in cases]),
        ("You merged the most frequent pair in the text; encoding goes by the order the merges "
         "were learned: the smallest index among the pairs present.",
         [_encode_by(t, m, lambda present, rank, ids: min(
             present, key=lambda p: (-pair_counts(ids)[p], rank[p]))) for t, m in cases]),
        ("merges[i] makes the id 256 + i, not i.",
         [_offset_ids(t, m) for t, m in cases]),
    ]


def _offset_ids(text, merges):
    ids = list(text.encode("utf-8"))
    for i, pair in enumerate(merges):
        pair = tuple(p - 256 if p >= 256 else p for p in pair)
        ids = merge_pair(ids, pair, i)
    return ids


@checker
def check_encode_with_merges(fn) -> None:
    """`fn(text, merges)` must return the token ids of `text`, where `merges[i]` is the pair of
    ids that training merged into the new id 256 + i."""
    cases = _encode_cases(random.Random(3))
    answers = []
    for text, merges in cases:
        what = f"{fn.__name__}({text!r}, {short(merges, 60)})"
        got = call(fn, text, merges, what=what)
        if not isinstance(got, list):
            raise CheckFailed(f"{what} should return a list of ids, but returned "
                              f"{type(got).__name__}: {short(got)}")
        answers.append([as_int(x, f"an id in the list {what} returned") for x in got])
    wants = [encode_with_merges(t, m) for t, m in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("encode with merges", len(cases))
        return
    i = wrong[0]
    text, merges = cases[i]
    hint = matching_mistake(answers, _encode_mistakes(cases), list.__eq__)
    raise CheckFailed(f"For text={text!r} and merges={short(merges, 80)}, expected {wants[i]} "
                      f"but got {short(answers[i])}. "
                      + (hint or "Keep merging until no adjacent pair has a merge, always taking "
                                 "the merge learned earliest (the smallest index) among the pairs "
                                 "present."))
