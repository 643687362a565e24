"""The chapter 01 exercise checkers: the reference passes; each typical mistake gets its own hint,
and no other mistake gets that hint."""

import functools
import random
from collections import Counter

import numpy as np
import pytest

from minillm.course.checks import ch01_tokenization as checks
from minillm.course.checks._base import CheckFailed
from minillm.tokenizer import encode_with_merges, merge_pair, pair_counts

from memorizing import assert_hidden_cases_catch_memorizing


def assert_hints_are_specific(check, mistakes):
    """Each wrong function fails with its own words and without any other mistake's words."""
    for name, (wrong, words) in mistakes.items():
        with pytest.raises(CheckFailed) as failure:
            check(wrong)
        message = str(failure.value)
        assert words in message, f"{name}: {message}"
        for other, (_, other_words) in mistakes.items():
            if other != name:
                assert other_words not in message, f"{name} got the hint of {other}: {message}"


def test_reference_passes(capsys):
    checks.check_pair_counts(pair_counts)
    checks.check_merge_pair(merge_pair)
    checks.check_train_merges(checks._reference_merges)
    checks.check_encode_with_merges(encode_with_merges)
    assert capsys.readouterr().out.count("✅") == 4


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_pair_counts, checks.check_merge_pair,
                                   checks.check_train_merges, checks.check_encode_with_merges])
def test_unwritten_stub(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


# --- pair counts ---------------------------------------------------------------------------


def no_overlap(ids):
    out, i = {}, 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        out[pair] = out.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return out


PAIR_MISTAKES = {
    "skips the last pair": (lambda ids: pair_counts(ids[:-1]), "last pair was not counted"),
    "no overlap": (no_overlap, "Overlapping occurrences all count"),
    "a set of pairs": (lambda ids: {p: 1 for p in zip(ids, ids[1:])}, "once per occurrence"),
    "every pair": (lambda ids: Counter((a, b) for i, a in enumerate(ids) for b in ids[i + 1:]),
                   "side by side, ids[i] and ids[i + 1]"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_pair_count_hints_are_specific(hidden):
    assert_hints_are_specific(functools.partial(checks.check_pair_counts, hidden=hidden),
                              PAIR_MISTAKES)


def test_pair_counts_accepts_numpy_counts_and_a_counter(capsys):
    checks.check_pair_counts(lambda ids: {p: np.int64(c) for p, c in pair_counts(ids).items()})
    checks.check_pair_counts(lambda ids: Counter(zip(ids, ids[1:])))
    assert capsys.readouterr().out.count("✅") == 2


def test_pair_counts_wrong_shapes_are_named():
    with pytest.raises(CheckFailed, match="should return a dict"):
        checks.check_pair_counts(lambda ids: list(pair_counts(ids).items()))
    with pytest.raises(CheckFailed, match="pair of ids as a tuple"):
        checks.check_pair_counts(lambda ids: {f"{a},{b}": c for (a, b), c in
                                              pair_counts(ids).items()})


def test_pair_counts_that_empties_the_list_is_named():
    def consumes(ids):
        counts = pair_counts(ids)
        ids.clear()
        return counts

    with pytest.raises(CheckFailed, match="changed its argument `ids`"):
        checks.check_pair_counts(consumes)


# --- merge pair ----------------------------------------------------------------------------


def merge_variant(**kind):
    return lambda ids, pair, new_id: checks._merge_variant(ids, pair, new_id, **kind)


def from_the_right(ids, pair, new_id):
    return merge_pair(ids[::-1], pair[::-1], new_id)[::-1]


MERGE_MISTAKES = {
    "no skip": (lambda ids, pair, new_id: [new_id if (a, b) == tuple(pair) else a
                                           for a, b in zip(ids, ids[1:] + [None])],
                "carry on at i + 2, so the pair's second id is skipped"),
    "keeps the second id": (merge_variant(keep_second=True), "second id was kept"),
    "first only": (merge_variant(first_only=True), "every occurrence"),
    "drops the last id": (merge_variant(keep_last=False), "The last id is missing"),
    "from the right": (from_the_right, "Scan from the left"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_merge_pair_hints_are_specific(hidden):
    assert_hints_are_specific(functools.partial(checks.check_merge_pair, hidden=hidden),
                              MERGE_MISTAKES)


@pytest.mark.parametrize("hidden", [False, True])
def test_merge_pair_by_string_replace_fails(hidden):
    """Replacing "a b" in the space-joined ids also matches inside longer ids (11 2 -> 1[1 2])."""
    def by_text(ids, pair, new_id):
        text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id))
        return [int(x) for x in text.split()]

    with pytest.raises(CheckFailed, match="Compare ids, not their text"):
        checks.check_merge_pair(by_text, hidden=hidden)


def test_merge_pair_in_place_is_named():
    def in_place(ids, pair, new_id):
        ids[:] = merge_pair(ids, pair, new_id)
        return ids

    with pytest.raises(CheckFailed, match="changed its argument `ids`"):
        checks.check_merge_pair(in_place)


def test_merge_pair_returning_a_tuple_is_named():
    with pytest.raises(CheckFailed, match="should return a list"):
        checks.check_merge_pair(lambda ids, pair, new_id: tuple(merge_pair(ids, pair, new_id)))


# --- training ------------------------------------------------------------------------------


def train_variant(**kind):
    return lambda words, k: checks._train_variant(words, k, **kind)


def never_stops(words, k):
    merges = checks._reference_merges(words, k)
    return merges + [(0, 0)] * (k - len(merges))


TRAIN_MISTAKES = {
    "ties to the largest pair": (train_variant(tie=max), "(left id, right id): min"),
    "ties to the first counted": (train_variant(tie=checks._first_seen), "not the first one"),
    "unweighted": (train_variant(weighted=False), "times the word's count"),
    "across words": (train_variant(across_words=True), "inside each word only"),
    "never stops": (never_stops, "Stop when no adjacent pair is left"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_train_merges_hints_are_specific(hidden):
    assert_hints_are_specific(functools.partial(checks.check_train_merges, hidden=hidden),
                              TRAIN_MISTAKES)


def test_train_merges_that_crashes_with_no_pair_left_gets_a_plain_message():
    def crashes(words, k):
        pieces = {w: list(w.encode()) for w in words}
        merges = []
        for new_id in range(256, 256 + k):
            counts = {}
            for w, ids in pieces.items():
                for p, c in pair_counts(ids).items():
                    counts[p] = counts.get(p, 0) + c * words[w]
            best = max(counts, key=lambda p: (counts[p], [-p[0], -p[1]]))
            merges.append(best)
            pieces = {w: merge_pair(ids, best, new_id) for w, ids in pieces.items()}
        return merges

    with pytest.raises(CheckFailed, match=r"raised ValueError: max\(\) ") as failure:
        checks.check_train_merges(crashes)
    assert "no adjacent pair is left after 2 merges: stop then" in str(failure.value)


def test_train_merges_that_crashes_on_its_input_gets_a_hint_about_the_input():
    def crashes(words, k):  # takes word_counts for a list of (word, count) pairs
        return [tuple(w.encode()[:2]) for w, n in words][:k]

    with pytest.raises(CheckFailed, match=r"raised ValueError: .*maps each word \(a str\) to "
                                          r"how often it occurs"):
        checks.check_train_merges(crashes)


def test_train_merges_accepts_lists_for_pairs(capsys):
    checks.check_train_merges(lambda w, k: [list(p) for p in checks._reference_merges(w, k)])
    assert "✅" in capsys.readouterr().out


# --- encode --------------------------------------------------------------------------------


def each_merge_once(order, start=lambda t: list(t.encode("utf-8"))):
    def encode(text, merges):
        ids = start(text)
        for i in order(range(len(merges))):
            ids = merge_pair(ids, tuple(merges[i]), 256 + i)
        return ids

    return encode


def latest_present(text, merges):
    return checks._encode_by(text, merges, lambda present, rank, ids: max(present, key=rank.get))


def most_frequent(text, merges):
    return checks._encode_by(text, merges, lambda present, rank, ids: min(
        present, key=lambda p: (-pair_counts(ids)[p], rank[p])))


ENCODE_MISTAKES = {
    "bytes only": (lambda text, merges: list(text.encode("utf-8")), "without merging"),
    "code points": (each_merge_once(list, lambda t: [ord(c) for c in t]), "code points"),
    "latest first": (each_merge_once(reversed), "applied latest first"),
    "latest present": (latest_present, "took the one learned latest"),
    "most frequent": (most_frequent, "most frequent pair in the text"),
    "ids without 256": (checks._offset_ids, "makes the id 256 + i, not i"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_encode_with_merges_hints_are_specific(hidden):
    assert_hints_are_specific(functools.partial(checks.check_encode_with_merges, hidden=hidden),
                              ENCODE_MISTAKES)


@pytest.mark.parametrize("hidden", [False, True])
def test_an_unnamed_encoding_mistake_gets_the_rule_not_a_wrong_hint(hidden):
    def one_pass(text, merges):  # merges each pair present once, in text order
        rank = {tuple(p): i for i, p in enumerate(merges)}
        ids = list(text.encode("utf-8"))
        for pair in list(pair_counts(ids)):
            if pair in rank:
                ids = merge_pair(ids, pair, 256 + rank[pair])
        return ids

    with pytest.raises(CheckFailed, match="Keep merging until no adjacent pair") as failure:
        checks.check_encode_with_merges(one_pass, hidden=hidden)
    assert not any(w in str(failure.value) for _, w in ENCODE_MISTAKES.values())


def test_merges_in_list_order_are_accepted(capsys):
    """Applying every merge in order, each over the whole list, is the same rule: accepted."""
    checks.check_encode_with_merges(each_merge_once(list))
    assert "✅" in capsys.readouterr().out


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

RIGHT = [(checks.check_pair_counts, pair_counts), (checks.check_merge_pair, merge_pair),
         (checks.check_train_merges, checks._reference_merges),
         (checks.check_encode_with_merges, encode_with_merges)]


def test_the_hidden_cases_pass_every_right_answer(capsys):
    for check, right in RIGHT:
        check(right, hidden=True)
    checks.check_encode_with_merges(each_merge_once(list), hidden=True)
    checks.check_train_merges(lambda w, k: [list(p) for p in checks._reference_merges(w, k)],
                              hidden=True)
    assert capsys.readouterr().out.count("✅") == 6


@pytest.mark.parametrize("check, right", RIGHT, ids=[c.__name__ for c, _ in RIGHT])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """Other fixed cases and other random ones (the empty list aside); still a single id,
    overlapping runs, ids above 255, a pair that does not occur, a word without pairs, training
    that stops early, non-ASCII text, an empty text and no merges at all. (Ids whose digits run
    into each other: test_merge_pair_by_string_replace_fails.)"""
    pairs = (checks._pair_cases(random.Random(1), checks.PAIR_CASES),
             checks._pair_cases(random.Random(11), checks.HIDDEN_PAIR_CASES))
    merges = (checks._merge_cases(random.Random(2), checks.MERGE_CASES),
              checks._merge_cases(random.Random(12), checks.HIDDEN_MERGE_CASES))
    trains = (checks._train_cases(random.Random(4), checks.TRAIN_CASES, "abcé"),
              checks._train_cases(random.Random(14), checks.HIDDEN_TRAIN_CASES, "xyzü"))
    encodes = (checks._encode_cases(random.Random(3), checks.ENCODE_CASES, "ab c你🙂"),
               checks._encode_cases(random.Random(13), checks.HIDDEN_ENCODE_CASES, "xy z好🙂é"))
    for visible, hidden in (pairs, merges, trains, encodes):
        assert all(case == [] or case not in visible for case in hidden)
    for cases in (checks.PAIR_CASES, checks.HIDDEN_PAIR_CASES):
        assert [] in cases and any(len(ids) == 1 for ids in cases)
        assert any(len(ids) >= 3 and len(set(ids)) == 1 for ids in cases)
        assert any(max(ids, default=0) > 255 for ids in cases)
    for cases in (checks.MERGE_CASES, checks.HIDDEN_MERGE_CASES):
        assert any(not ids for ids, _, _ in cases)
        assert any(len(ids) % 2 and len(set(ids)) == 1 for ids, _, _ in cases)  # 5, 5, 5
        assert any(merge_pair(ids, pair, n) == ids for ids, pair, n in cases)  # no occurrence
        assert any(min(pair) > 255 for _, pair, _ in cases)
    for cases in (checks.TRAIN_CASES, checks.HIDDEN_TRAIN_CASES):
        assert any(all(len(w.encode()) == 1 for w in words) for words, _ in cases)
        assert any(len(checks._reference_merges(w, k)) < k for w, k in cases)
        assert any(not w.isascii() for words, _ in cases for w in words)
    for cases in (checks.ENCODE_CASES, checks.HIDDEN_ENCODE_CASES):
        assert any(text == "" for text, _ in cases) and any(not m for _, m in cases)
        assert any(not text.isascii() for text, _ in cases)


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


ZH_WORDS = {  # the Chinese words of each hint; the English hint must not show
    "skips the last pair": "漏数了最后一对", "no overlap": "相互重叠的出现也都要计数",
    "a set of pairs": "每出现一次就计一次", "every pair": "只统计挨在一起的两个 id",
    "no skip": "从 i + 2 接着扫描", "keeps the second id": "你保留了这一对的第二个 id",
    "first only": "要替换每一次出现", "drops the last id": "漏掉了最后一个 id",
    "from the right": "从左往右扫描",
    "ties to the largest pair": "按（左 id，右 id）比较", "ties to the first counted": "最先数到",
    "unweighted": "乘以这个词的次数", "across words": "只统计每个词内部的相邻对",
    "never stops": "没有相邻对剩下时就要停下",
    "bytes only": "没有合并过的 UTF-8 字节", "code points": "而不是从字符的码位开始",
    "latest first": "你先用了最晚学到的合并规则", "latest present": "你取了最晚学到的那一对",
    "most frequent": "文本里出现次数最多的一对", "ids without 256": "产生的 id 是 256 + i",
}
ZH_CASES = [(check, name, wrong, words)
            for check, mistakes in [(checks.check_pair_counts, PAIR_MISTAKES),
                                    (checks.check_merge_pair, MERGE_MISTAKES),
                                    (checks.check_train_merges, TRAIN_MISTAKES),
                                    (checks.check_encode_with_merges, ENCODE_MISTAKES)]
            for name, (wrong, words) in mistakes.items()]


@pytest.mark.parametrize("check, name, wrong, english", ZH_CASES, ids=[c[1] for c in ZH_CASES])
def test_each_hint_comes_in_chinese(chinese, check, name, wrong, english):
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert ZH_WORDS[name] in message, message
    assert english not in message, message
    assert "应为" in message and "expected" not in message, message


def test_the_checkers_own_messages_come_in_chinese(chinese, capsys):
    with pytest.raises(CheckFailed, match="应当返回一个字典"):
        checks.check_pair_counts(lambda ids: list(zip(ids, ids[1:])))
    with pytest.raises(CheckFailed, match=r"每个键都必须是由两个 id 组成的元组"):
        checks.check_pair_counts(lambda ids: {str(p): 1 for p in zip(ids, ids[1:])})
    with pytest.raises(CheckFailed, match="应当返回由 id 组成的列表"):
        checks.check_merge_pair(lambda ids, pair, new_id: tuple(merge_pair(ids, pair, new_id)))
    with pytest.raises(CheckFailed, match="每次合并都必须是由两个 id 组成的一对"):
        checks.check_train_merges(lambda w, k: [p[0] for p in checks._reference_merges(w, k)])
    with pytest.raises(CheckFailed, match="一直合并下去"):
        checks.check_encode_with_merges(_one_pass)
    checks.check_merge_pair(merge_pair)
    assert "✅ merge_pair：全部" in capsys.readouterr().out


def test_a_crash_in_train_merges_gets_its_hint_in_chinese(chinese):
    def crashes(words, k):
        merges = []
        for _ in range(k):
            counts = {}
            for w, n in words.items():
                for p in zip(w.encode(), w.encode()[1:]):
                    counts[p] = counts.get(p, 0) + n
            merges.append(max(counts, key=counts.get))  # no stop: raises when no pair is left
        return merges

    with pytest.raises(CheckFailed) as failure:
        checks.check_train_merges(crashes)
    message = str(failure.value)
    assert "抛出了 ValueError" in message and "这时就要停下" in message, message
    assert "stop then" not in message, message


def _one_pass(text, merges):
    rank = {tuple(p): i for i, p in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    for pair in list(pair_counts(ids)):
        if pair in rank:
            ids = merge_pair(ids, pair, 256 + rank[pair])
    return ids
