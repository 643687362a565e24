"""The chapter 01 exercise checkers: the reference passes; typical mistakes get plain words."""

import pytest

from minillm.checks import ch01_tokenization as checks
from minillm.checks._base import CheckFailed
from minillm.tokenizer import encode_with_merges, merge_pair, pair_counts


def test_reference_passes(capsys):
    checks.check_pair_counts(pair_counts)
    checks.check_merge_pair(merge_pair)
    checks.check_encode_with_merges(encode_with_merges)
    assert capsys.readouterr().out.count("✅") == 3


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("check", [checks.check_pair_counts, checks.check_merge_pair,
                                   checks.check_encode_with_merges])
def test_unwritten_stub(check):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(_stub)


def test_pair_counts_mistakes():
    def skips_last(ids):
        return pair_counts(ids[:-1])

    with pytest.raises(CheckFailed, match="last pair"):
        checks.check_pair_counts(skips_last)

    def no_overlap(ids):
        out, i = {}, 0
        while i < len(ids) - 1:
            pair = (ids[i], ids[i + 1])
            out[pair] = out.get(pair, 0) + 1
            i += 2 if ids[i] == ids[i + 1] else 1
        return out

    with pytest.raises(CheckFailed, match="Overlapping occurrences all count"):
        checks.check_pair_counts(no_overlap)
    with pytest.raises(CheckFailed, match="should return a dict"):
        checks.check_pair_counts(lambda ids: list(pair_counts(ids).items()))


def test_merge_pair_mistakes():
    def overlapping(ids, pair, new_id):
        return [new_id if (a, b) == pair else a for a, b in zip(ids, ids[1:] + [None])]

    with pytest.raises(CheckFailed, match="shorter than the input"):
        checks.check_merge_pair(overlapping)

    def first_only(ids, pair, new_id):
        for i in range(len(ids) - 1):
            if (ids[i], ids[i + 1]) == pair:
                return ids[:i] + [new_id] + ids[i + 2:]
        return list(ids)

    with pytest.raises(CheckFailed, match="every occurrence"):
        checks.check_merge_pair(first_only)

    def in_place(ids, pair, new_id):
        ids[:] = merge_pair(ids, pair, new_id)
        return ids

    with pytest.raises(CheckFailed, match="changed the list"):
        checks.check_merge_pair(in_place)


def test_encode_with_merges_mistakes():
    with pytest.raises(CheckFailed, match="without merging"):
        checks.check_encode_with_merges(lambda text, merges: list(text.encode("utf-8")))

    def latest_first(text, merges):
        ids = list(text.encode("utf-8"))
        for i in reversed(range(len(merges))):
            ids = merge_pair(ids, tuple(merges[i]), 256 + i)
        return ids

    with pytest.raises(CheckFailed, match="latest first"):
        checks.check_encode_with_merges(latest_first)

    def code_points(text, merges):
        ids = [ord(c) for c in text]
        for i, pair in enumerate(merges):
            ids = merge_pair(ids, tuple(pair), 256 + i)
        return ids

    with pytest.raises(CheckFailed, match="UTF-8 bytes"):
        checks.check_encode_with_merges(code_points)


def test_merges_in_list_order_are_accepted():
    """Applying every merge in order, each over the whole list, is the same rule: accepted."""
    def in_order(text, merges):
        ids = list(text.encode("utf-8"))
        for i, pair in enumerate(merges):
            ids = merge_pair(ids, tuple(pair), 256 + i)
        return ids

    checks.check_encode_with_merges(in_order)
