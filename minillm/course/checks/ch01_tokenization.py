"""Checkers for the chapter 01 exercise: the four operations of byte-level BPE.

Each checker calls the learner's function on fixed cases and on random ones (seeded), with ids of
one, two and three digits and ids above 255, compares with minillm's reference
(`minillm.tokenizer.bpe`, `minillm.tokenizer.train.learn_merges`) and says in plain words what is
wrong. A hint names a mistake only when the learner's answers equal that mistake's answers on
every case. Every message says both languages side by side (`say`), chosen by the notebook's
set_language.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ...tokenizer.bpe import encode_with_merges, merge_pair, pair_counts
from ...tokenizer.train import learn_merges
from ..language import say
from ._base import CheckFailed, as_int, call, checker, end_check, expect, function_name, short


def _name(fn) -> str:
    """The learner's function's name, as messages show it; any callable has one here."""
    return getattr(fn, "__name__", None) or function_name(fn)

# --- 1. counting adjacent pairs ------------------------------------------------------------


PAIR_CASES = [[1, 2, 3, 1, 2], [], [7], [5, 5, 5], [1, 2, 1, 2, 1, 2], [104, 105, 33],
              [11, 1, 11, 1], [256, 300, 256, 300, 256], [1000, 1000, 1000, 1000]]
HIDDEN_PAIR_CASES = [[3, 1, 3, 1, 3], [], [42], [9, 9, 9, 9], [9, 9], [2, 22, 2, 22, 2],
                     [116, 104, 101, 32], [255, 256, 255, 256], [4000, 4000, 4000, 4001, 4000]]


def _pair_cases(rng: random.Random, fixed):
    """The fixed cases, then 30 random lists of `rng` (a new seed gives other lists)."""
    cases = [list(ids) for ids in fixed]
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
        (say("The last pair was not counted: a list of n ids has n - 1 adjacent pairs, the last "
             "starts at n - 2.",
             "漏数了最后一对：n 个 id 的列表有 n - 1 个相邻对，最后一对从位置 n - 2 开始。"),
         [pair_counts(ids[:-1]) for ids in cases]),
        (say("Overlapping occurrences all count: [5, 5, 5] holds the pair (5, 5) twice (at "
             "positions 0 and 1).",
             "相互重叠的出现也都要计数：[5, 5, 5] 里 (5, 5) 这一对出现了两次（在位置 0 和 1）。"),
         [_count_without_overlap(ids) for ids in cases]),
        (say("Each pair counts once per occurrence, not once in all: add 1 every time it occurs.",
             "每一对每出现一次就计一次，而不是总共只计一次：它每出现一次就加 1。"),
         [dict.fromkeys(pair_counts(ids), 1) for ids in cases]),
        (say("Count the pairs side by side, ids[i] and ids[i + 1], not every pair of ids in the "
             "list.",
             "只统计挨在一起的两个 id，即 ids[i] 和 ids[i + 1]，而不是列表里任意两个 id 组成的对。"),
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
        raise CheckFailed(say(f"{what} should return a dict {{(a, b): count}}, but returned "
                              f"{type(got).__name__}: {short(got)}",
                              f"{what} 应当返回一个字典 {{(a, b): 次数}}，却返回了 "
                              f"{type(got).__name__}：{short(got)}"))
    out = {}
    for key, count in got.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise CheckFailed(say(f"{what}: each key must be a pair of ids as a tuple, like "
                                  f"(1, 2); found the key {key!r}",
                                  f"{what}：每个键都必须是由两个 id 组成的元组，比如 (1, 2)；"
                                  f"却发现了键 {key!r}"))
        out[key] = as_int(count, f"{what}[{key!r}]")
    return out


@checker
def check_pair_counts(fn, *, hidden=False) -> None:
    """`fn(ids)` must return {(a, b): count} for every adjacent pair in the list `ids`."""
    cases = (_pair_cases(random.Random(11), HIDDEN_PAIR_CASES) if hidden
             else _pair_cases(random.Random(1), PAIR_CASES))
    answers = []
    for ids in cases:
        what = f"{_name(fn)}({short(ids, 80)})"
        answers.append(_plain_counts(call(fn, ids, what=what), what))
    wants = [pair_counts(ids) for ids in cases]
    end_check("pair_counts", answers, wants, cases, _pair_failure,
              mistakes=lambda: _pair_mistakes(cases))


def _pair_failure(ids, got, want, hint) -> str:
    if hint is None:
        extra, missing = set(got) - set(want), set(want) - set(got)
        if extra:
            hint = say(f"The pair {sorted(extra)[0]} is not side by side anywhere in the list.",
                       f"列表里没有任何地方挨着出现 {sorted(extra)[0]} 这一对。")
        elif missing:
            hint = say(f"The pair {sorted(missing)[0]} is missing.",
                       f"漏掉了 {sorted(missing)[0]} 这一对。")
        else:
            bad = next(k for k in want if got[k] != want[k])
            hint = say(f"The pair {bad} occurs {want[bad]} times, you counted {got[bad]}.",
                       f"{bad} 这一对出现了 {want[bad]} 次，你数出的是 {got[bad]} 次。")
    return (say(f"For ids={ids}, expected {want} but got {short(got)}. ",
                f"ids={ids} 时，应为 {want}，却得到 {short(got)}。")
            + hint)


# --- 2. merging one pair -------------------------------------------------------------------


MERGE_CASES = [([1, 2, 3, 1, 2], (1, 2), 9), ([5, 5, 5], (5, 5), 9), ([5, 5, 5, 5], (5, 5), 9),
               ([1, 2], (2, 1), 9), ([], (1, 2), 9), ([1, 2], (1, 2), 256),
               ([11, 2, 1, 2, 1, 22], (1, 2), 256), ([12, 1, 2, 3], (2, 3), 300),
               ([256, 257, 256, 257, 258], (256, 257), 259), ([1, 21, 2, 1], (1, 2), 7),
               ([3, 1, 2], (1, 2), 9)]
HIDDEN_MERGE_CASES = [([4, 3, 4, 3, 9], (4, 3), 8), ([7, 7, 7], (7, 7), 300),
                      ([7, 7, 7, 7, 7], (7, 7), 301), ([4, 3], (3, 4), 9), ([], (0, 0), 256),
                      ([3, 4], (3, 4), 260), ([13, 4, 3, 4, 3, 44], (3, 4), 256),
                      ([6, 2, 3, 2, 3], (2, 3), 8), ([300, 301, 300, 301, 300], (300, 301), 302),
                      ([2, 32, 3, 2], (2, 3), 5), ([256, 256, 256], (256, 256), 257),
                      ([8, 9, 1], (9, 1), 10)]


def _merge_cases(rng: random.Random, fixed):
    """The fixed cases, then 30 random ones of `rng` (a new seed gives other cases)."""
    cases = [(list(ids), pair, new_id) for ids, pair, new_id in fixed]
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
        (say("Both ids of an occurrence become the one new_id: after a merge at position i, "
             "carry on at i + 2, so the pair's second id is skipped and occurrences never overlap "
             "([5, 5, 5] with the pair (5, 5) gives [new_id, 5]).",
             "一次出现的两个 id 合起来变成一个 new_id：在位置 i 合并之后，从 i + 2 接着扫描，"
             "这样就跳过了这一对的第二个 id，各次出现也不会重叠（[5, 5, 5] 合并 (5, 5) 得到 "
             "[new_id, 5]）。"), model(step=1)),
        (say("The pair's second id was kept: an occurrence (two ids side by side) becomes one "
             "new_id.",
             "你保留了这一对的第二个 id：一次出现（挨在一起的两个 id）整个变成一个 new_id。"),
         model(keep_second=True)),
        (say("Replace every occurrence, not only the first one.",
             "要替换每一次出现，而不只是第一次。"), model(first_only=True)),
        (say("The last id is missing: keep it when it is not merged.",
             "漏掉了最后一个 id：它没有被合并时要保留下来。"), model(keep_last=False)),
        (say("Scan from the left: [5, 5, 5] with the pair (5, 5) gives [new_id, 5], not "
             "[5, new_id].",
             "从左往右扫描：[5, 5, 5] 合并 (5, 5) 得到 [new_id, 5]，而不是 [5, new_id]。"),
         [_merge_from_the_right(ids, p, n) for ids, p, n in cases]),
    ]


def _id_list(got, what: str) -> list[int]:
    """The learner's answer as a list of ints, or a failure saying what it was instead."""
    if not isinstance(got, list):
        raise CheckFailed(say(f"{what} should return a list of ids, but returned "
                              f"{type(got).__name__}: {short(got)}",
                              f"{what} 应当返回由 id 组成的列表，却返回了 "
                              f"{type(got).__name__}：{short(got)}"))
    return [as_int(x, say(f"an id in the list {what} returned", f"{what} 返回的列表里的一个 id"))
            for x in got]


@checker
def check_merge_pair(fn, *, hidden=False) -> None:
    """`fn(ids, pair, new_id)` must return a new list where every occurrence of `pair`, found
    left to right without overlapping, is replaced by `new_id`."""
    cases = (_merge_cases(random.Random(12), HIDDEN_MERGE_CASES) if hidden
             else _merge_cases(random.Random(2), MERGE_CASES))
    answers = []
    for ids, pair, new_id in cases:
        what = f"{_name(fn)}({short(ids, 80)}, {pair}, {new_id})"
        answers.append(_id_list(call(fn, ids, pair, new_id, what=what), what))
    wants = [merge_pair(ids, pair, new_id) for ids, pair, new_id in cases]
    end_check("merge_pair", answers, wants, cases, _merge_failure,
              mistakes=lambda: _merge_mistakes(cases))


def _merge_failure(case, got, want, hint) -> str:
    ids, pair, new_id = case
    if hint is None:
        hint = say("Compare ids, not their text: walk the list with an index i, and where "
                   "(ids[i], ids[i + 1]) == pair append new_id and jump to i + 2, else append "
                   "ids[i] and go to i + 1.",
                   "比较的是 id，而不是它们的文本：用下标 i 遍历列表，若 (ids[i], ids[i + 1]) "
                   "== pair，就追加 new_id 并跳到 i + 2，否则追加 ids[i] 并前进到 i + 1。")
    return say(f"For ids={ids}, pair={pair}, new_id={new_id}, expected {want} but got "
               f"{short(got)}. {hint}",
               f"ids={ids}、pair={pair}、new_id={new_id} 时，应为 {want}，却得到 {short(got)}。"
               f"{hint}")


# --- 3. training: learning the merges ------------------------------------------------------


TRAIN_CASES = [({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10),
               ({"aaaa": 1}, 3),
               ({"ab": 1, "ba": 1}, 4),  # a tie: (97, 98) before (98, 97)
               ({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 8),
               ({"你好": 3, "好的": 2}, 5),
               ({"a": 7}, 2),  # no pair at all: no merge
               ({"xy": 1}, 5)]  # one merge, then nothing left
HIDDEN_TRAIN_CASES = [({"banana": 3, "bandana": 1, "ban": 4, "nab": 2}, 9),
                      ({"zzzzz": 2}, 4),
                      ({"dc": 2, "cd": 2}, 3),  # a tie: (99, 100) before (100, 99), seen second
                      ({"the": 9, "then": 4, "than": 3, "tea": 2}, 6),
                      ({"über": 4, "überall": 1, "bär": 2}, 7),
                      ({"q": 5, "r": 1}, 3),  # no pair at all: no merge
                      ({"pq": 2, "p": 3}, 4)]  # one merge, then nothing left


def _train_cases(rng: random.Random, fixed, letters: str):
    """The fixed cases, then 12 random ones of `rng` made of `letters`."""
    cases = [(dict(words), k) for words, k in fixed]
    for _ in range(12):
        words = {}
        for _ in range(rng.randint(1, 8)):
            word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))
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
        (say("Among pairs with the same count, take the one with the smallest ids, compared as "
             "(left id, right id): min(counts, key=lambda p: (-counts[p], p)).",
             "次数相同的几对中，取 id 最小的那一对，按（左 id，右 id）比较："
             "min(counts, key=lambda p: (-counts[p], p))。"), model(tie=max)),
        (say("Among pairs with the same count, take the one with the smallest ids (not the first "
             "one counted): min(counts, key=lambda p: (-counts[p], p)).",
             "次数相同的几对中，取 id 最小的那一对（而不是最先数到的那一对）："
             "min(counts, key=lambda p: (-counts[p], p))。"), model(tie=_first_seen)),
        (say("Each word counts as often as it occurs: add a pair's count times the word's count.",
             "每个词出现几次就要算几次：加上这一对的次数乘以这个词的次数。"),
         model(weighted=False)),
        (say("Count pairs inside each word only: merges never cross from one word into the next.",
             "只统计每个词内部的相邻对：合并永远不会从一个词跨到下一个词。"),
         model(across_words=True)),
    ]


def _train_crash_hint(words: dict, num_merges: int) -> str:
    """What a learner whose code raised on this case may have missed."""
    made = len(_reference_merges(words, num_merges))
    if made < num_merges:
        return say(f"Here no adjacent pair is left after {made} merge{'' if made == 1 else 's'}: "
                   "stop then, even before num_merges merges (max or min of an empty dict raises "
                   "ValueError).",
                   f"这里合并 {made} 次之后就没有相邻对了：这时就要停下，哪怕还不到 num_merges "
                   "次合并（对空字典取 max 或 min 会抛出 ValueError）。")
    return say("word_counts maps each word (a str) to how often it occurs: start from each word's "
               "UTF-8 bytes, list(word.encode('utf-8')), and return a list of (id, id) pairs.",
               "word_counts 把每个词（str）映射到它出现的次数：从每个词的 UTF-8 字节 "
               "list(word.encode('utf-8')) 开始，返回由 (id, id) 对组成的列表。")


@checker
def check_train_merges(fn, *, hidden=False) -> None:
    """`fn(word_counts, num_merges)` must return the merges BPE training learns: the most frequent
    adjacent pair inside the words (weighted by each word's count) each time, ties to the
    smallest ids, until num_merges merges or no pair is left."""
    cases = (_train_cases(random.Random(14), HIDDEN_TRAIN_CASES, "xyzü") if hidden
             else _train_cases(random.Random(4), TRAIN_CASES, "abcé"))
    answers = []
    for words, k in cases:
        what = f"{_name(fn)}({short(words, 70)}, {k})"
        got = call(fn, words, k, what=what, if_raises=_train_crash_hint(words, k))
        if not isinstance(got, (list, tuple)):
            raise CheckFailed(say(f"{what} should return a list of merges, but returned "
                                  f"{type(got).__name__}: {short(got)}",
                                  f"{what} 应当返回由合并组成的列表，却返回了 "
                                  f"{type(got).__name__}：{short(got)}"))
        merges = []
        for pair in got:
            expect(isinstance(pair, (tuple, list)) and len(pair) == 2,
                   say(f"{what}: each merge must be a pair of ids like (101, 115), found "
                       f"{pair!r}",
                       f"{what}：每次合并都必须是由两个 id 组成的一对，比如 (101, 115)；"
                       f"却发现了 {pair!r}"))
            merges.append(tuple(as_int(x, say(f"an id in a merge {what} returned",
                                              f"{what} 返回的某次合并里的一个 id"))
                                for x in pair))
        answers.append(merges)
    wants = [_reference_merges(w, k) for w, k in cases]
    end_check("train_merges", answers, wants, cases, _train_failure,
              mistakes=lambda: _train_mistakes(cases))


def _train_failure(case, got, want, hint) -> str:
    words, k = case
    if hint is None and len(got) > len(want) and got[:len(want)] == want:
        hint = say("Stop when no adjacent pair is left, even before num_merges merges.",
                   "没有相邻对剩下时就要停下，哪怕还不到 num_merges 次合并。")
    if hint is None:
        j = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got),
                                                                                len(want)))
        hint = say(f"The first {j} merges agree; merge {j} should be "
                   f"{want[j] if j < len(want) else 'none (stop)'}. Each step: count the pairs of "
                   "every word (times its count), take the most frequent, merge it into id "
                   "256 + step in every word.",
                   f"前 {j} 次合并一致；第 {j} 次合并应为 "
                   f"{want[j] if j < len(want) else '无（停下）'}。每一步：统计每个词的相邻对"
                   "（乘以这个词的次数），取次数最多的一对，在每个词里把它合并成 id 256 + step。")
    return say(f"For word_counts={short(words, 80)} and num_merges={k}, expected {want} but got "
               f"{short(got)}. {hint}",
               f"word_counts={short(words, 80)}、num_merges={k} 时，应为 {want}，"
               f"却得到 {short(got)}。{hint}")


# --- 4. encoding with a list of merges -----------------------------------------------------


ENCODE_CASES = [("aaab", [(97, 97), (256, 98)]), ("aab", [(97, 97), (256, 98)]),
                ("", [(97, 97), (256, 98)]), ("hello", []), ("aab", [(97, 98), (97, 97)]),
                ("你好", [(228, 189), (256, 160)]), ("abab", [(98, 97), (97, 98)]),
                ("aaaa", [(97, 97), (256, 256)]), ("🙂 ok", [(111, 107), (32, 256)])]
HIDDEN_ENCODE_CASES = [("bbba", [(98, 98), (256, 97)]), ("bbbbba", [(98, 98), (256, 97)]),
                       ("", [(98, 98)]), ("world", []), ("bba", [(98, 97), (98, 98)]),
                       ("好你", [(229, 165), (256, 189)]), ("baba", [(97, 98), (98, 97)]),
                       ("bbbb", [(98, 98), (256, 256)]), ("ok 🙂", [(111, 107), (32, 240)]),
                       ("xyx", [(121, 120), (120, 256)])]


def _encode_cases(rng: random.Random, fixed, alphabet: str):
    """The fixed cases, then 20 random ones of `rng`: merges learned on a random text of
    `alphabet`, and another random text to encode."""
    cases = [(text, [tuple(p) for p in merges]) for text, merges in fixed]
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
        (say("You returned the UTF-8 bytes without merging: apply the merges, the earliest "
             "learned first, while some adjacent pair has one.",
             "你返回的是没有合并过的 UTF-8 字节：只要还有相邻对有对应的合并规则，就要应用它，"
             "最早学到的规则先用。"), [utf8(t) for t, _ in cases]),
        (say("Start from the UTF-8 bytes, not the characters' code points: "
             "list(text.encode('utf-8')); '你' is three bytes.",
             "要从 UTF-8 字节开始，而不是从字符的码位开始：list(text.encode('utf-8'))；"
             "'你' 是三个字节。"),
         [_each_merge_once(t, m, list, code_points) for t, m in cases]),
        (say("The merges were applied latest first: the earliest merge (the smallest index) goes "
             "first.",
             "你先用了最晚学到的合并规则：应当先用最早学到的那条（下标最小）。"),
         [_each_merge_once(t, m, reversed, utf8) for t, m in cases]),
        (say("Among the pairs present you took the one learned latest: take the one learned "
             "earliest (the smallest index i).",
             "在当前出现的各对中，你取了最晚学到的那一对：应当取最早学到的那一对（下标 i 最小）。"),
         [_encode_by(t, m, lambda present, rank, ids: max(present, key=rank.get))
          for t, m in cases]),
        (say("You merged the most frequent pair in the text; encoding goes by the order the "
             "merges were learned: the smallest index among the pairs present.",
             "你合并的是文本里出现次数最多的一对；编码要按合并规则学到的先后顺序来：在当前出现的"
             "各对中取下标最小的。"),
         [_encode_by(t, m, lambda present, rank, ids: min(
             present, key=lambda p: (-pair_counts(ids)[p], rank[p]))) for t, m in cases]),
        (say("merges[i] makes the id 256 + i, not i.",
             "merges[i] 产生的 id 是 256 + i，而不是 i。"),
         [_offset_ids(t, m) for t, m in cases]),
    ]


def _offset_ids(text, merges):
    ids = list(text.encode("utf-8"))
    for i, pair in enumerate(merges):
        pair = tuple(p - 256 if p >= 256 else p for p in pair)
        ids = merge_pair(ids, pair, i)
    return ids


@checker
def check_encode_with_merges(fn, *, hidden=False) -> None:
    """`fn(text, merges)` must return the token ids of `text`, where `merges[i]` is the pair of
    ids that training merged into the new id 256 + i."""
    cases = (_encode_cases(random.Random(13), HIDDEN_ENCODE_CASES, "xy z好🙂é") if hidden
             else _encode_cases(random.Random(3), ENCODE_CASES, "ab c你🙂"))
    answers = []
    for text, merges in cases:
        what = f"{_name(fn)}({text!r}, {short(merges, 60)})"
        answers.append(_id_list(call(fn, text, merges, what=what), what))
    wants = [encode_with_merges(t, m) for t, m in cases]
    end_check("encode_with_merges", answers, wants, cases, _encode_failure,
              mistakes=lambda: _encode_mistakes(cases))


def _encode_failure(case, got, want, hint) -> str:
    text, merges = case
    return (say(f"For text={text!r} and merges={short(merges, 80)}, expected {want} but got "
                f"{short(got)}. ",
                f"text={text!r}、merges={short(merges, 80)} 时，应为 {want}，"
                f"却得到 {short(got)}。")
            + (hint or say("Keep merging until no adjacent pair has a merge, always taking the "
                           "merge learned earliest (the smallest index) among the pairs present.",
                           "一直合并下去，直到没有相邻对还有对应的合并规则；每次都在"
                           "当前出现的各对中取最早学到的那条规则（下标最小）。")))
