"""Checkers for the chapter 01 exercise: the three operations of BPE.

Each checker calls the learner's function on fixed cases and on random ones (seeded), compares
with minillm's reference (`minillm.tokenizer.bpe`) and says in plain words what is wrong.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ..tokenizer.bpe import encode_with_merges, merge_pair, pair_counts
from ..tokenizer.train import learn_merges
from ._base import CheckFailed, call, expect, passed


def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


# --- 1. counting adjacent pairs ------------------------------------------------------------

def _pair_cases(rng: random.Random):
    cases = [[1, 2, 3, 1, 2], [], [7], [5, 5, 5], [1, 2, 1, 2, 1, 2], [104, 105, 33]]
    for _ in range(30):
        cases.append([rng.randint(0, 4) for _ in range(rng.randint(0, 20))])
    return cases


def check_pair_counts(fn) -> None:
    """`fn(ids)` must return {(a, b): count} for every adjacent pair in the list `ids`."""
    cases = _pair_cases(random.Random(1))
    for ids in cases:
        got = call(fn, list(ids))
        want = pair_counts(ids)
        if not isinstance(got, Mapping):
            raise CheckFailed(f"`{fn.__name__}` should return a dict {{(a, b): count}}, "
                              f"but returned a {type(got).__name__}: {_short(got)}")
        got = dict(got)
        if got == want:
            continue
        where = f"For ids={ids}, expected {want} but got {_short(got)}."
        wrong_keys = [k for k in got if not (isinstance(k, tuple) and len(k) == 2)]
        if wrong_keys:
            raise CheckFailed(f"{where} Each key must be a pair of ids as a tuple, like (1, 2); "
                              f"found the key {wrong_keys[0]!r}.")
        if len(ids) >= 2 and ids[-2] != ids[-1] and got == pair_counts(ids[:-1]):
            raise CheckFailed(f"{where} The last pair {(ids[-2], ids[-1])} was not counted: a "
                              "list of n ids has n - 1 adjacent pairs, the last starts at n - 2.")
        extra = set(got) - set(want)
        missing = set(want) - set(got)
        if missing and len(ids) >= 2 and (ids[-2], ids[-1]) in missing:
            raise CheckFailed(f"{where} The last pair {(ids[-2], ids[-1])} is missing: a list of "
                              f"n ids has n - 1 adjacent pairs, the last one starts at n - 2.")
        if extra:
            raise CheckFailed(f"{where} The pair {sorted(extra)[0]} is not adjacent anywhere in "
                              "the list: count only ids[i], ids[i + 1] side by side.")
        if missing:
            raise CheckFailed(f"{where} The pair {sorted(missing)[0]} is missing.")
        bad = next(k for k in want if got.get(k) != want[k])
        hint = ""
        if bad[0] == bad[1]:
            hint = (" Overlapping occurrences all count: [5, 5, 5] holds the pair (5, 5) twice "
                    "(at positions 0 and 1).")
        raise CheckFailed(f"{where} The pair {bad} occurs {want[bad]} times, you counted "
                          f"{got.get(bad)}.{hint}")
    passed("pair counts", len(cases))


# --- 2. merging one pair -------------------------------------------------------------------

def _merge_cases(rng: random.Random):
    cases = [([1, 2, 3, 1, 2], (1, 2), 9), ([5, 5, 5], (5, 5), 9), ([5, 5, 5, 5], (5, 5), 9),
             ([1, 2], (2, 1), 9), ([], (1, 2), 9), ([1, 2], (1, 2), 256)]
    for _ in range(30):
        ids = [rng.randint(0, 3) for _ in range(rng.randint(0, 16))]
        pair = (rng.randint(0, 3), rng.randint(0, 3))
        cases.append((ids, pair, 256 + rng.randint(0, 10)))
    return cases


def check_merge_pair(fn) -> None:
    """`fn(ids, pair, new_id)` must return a new list where every occurrence of `pair`, found
    left to right without overlapping, is replaced by `new_id`."""
    cases = _merge_cases(random.Random(2))
    for ids, pair, new_id in cases:
        original = list(ids)
        got = call(fn, original, pair, new_id)
        want = merge_pair(ids, pair, new_id)
        expect(original == ids, f"`{fn.__name__}` changed the list it was given (ids={ids} became "
                                f"{original}): build and return a new list instead.")
        if not isinstance(got, list):
            raise CheckFailed(f"`{fn.__name__}` should return a list, but returned "
                              f"{type(got).__name__}: {_short(got)}")
        if got == want:
            continue
        where = (f"For ids={ids}, pair={pair}, new_id={new_id}, expected {want} but got "
                 f"{_short(got)}.")
        hint = ""
        if len(got) > len(ids):
            hint = " The result is longer than the input: a merge turns two ids into one."
        elif len(got) == len(ids) and len(want) < len(ids):
            hint = (" The result should be shorter than the input: an occurrence of the pair "
                    "(two ids side by side) becomes one new_id, and both ids are skipped.")
        elif pair[0] == pair[1] and len(got) < len(want):
            hint = (" Occurrences must not overlap: after merging at position i, continue at "
                    "i + 2, so [5, 5, 5] with the pair (5, 5) gives [new_id, 5].")
        elif new_id not in got and new_id in want:
            hint = " The pair occurs but never became new_id."
        elif got.count(new_id) < want.count(new_id):
            hint = " Replace every occurrence, not only the first one."
        elif not ids or ids[-1] != (got[-1] if got else None):
            hint = " Check the end of the list: the last id must be kept when it is not merged."
        raise CheckFailed(where + hint)
    passed("merge pair", len(cases))


# --- 3. encoding with a list of merges -----------------------------------------------------

def _encode_cases(rng: random.Random):
    fixed_merges = [(97, 97), (256, 98)]
    cases = [("aaab", fixed_merges), ("aab", fixed_merges), ("", fixed_merges),
             ("hello", []), ("aab", [(97, 98), (97, 97)]), ("你好", [(228, 189), (256, 160)])]
    alphabet = "ab c你"
    for _ in range(20):
        train_text = "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 80)))
        merges = learn_merges(train_text, 256 + rng.randint(1, 12), special_tokens=())
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        cases.append((text, merges))
    return cases


def check_encode_with_merges(fn) -> None:
    """`fn(text, merges)` must return the token ids of `text`, where `merges[i]` is the pair of
    ids that training merged into the new id 256 + i."""
    cases = _encode_cases(random.Random(3))
    for text, merges in cases:
        got = call(fn, text, list(merges))
        want = encode_with_merges(text, merges)
        if not isinstance(got, list):
            raise CheckFailed(f"`{fn.__name__}` should return a list of ids, but returned "
                              f"{type(got).__name__}: {_short(got)}")
        if got == want:
            continue
        where = (f"For text={text!r} and merges={_short(merges, 80)}, expected {want} but got "
                 f"{_short(got)}.")
        hint = ""
        if not merges and got != list(text.encode("utf-8")):
            hint = " With no merges the answer is just the UTF-8 bytes: list(text.encode('utf-8'))."
        elif got == list(text.encode("utf-8")):
            hint = (" You returned the UTF-8 bytes without merging: apply the merges, the "
                    "earliest learned first, while some adjacent pair has one.")
        elif any(ord(c) > 255 for c in text) and any(i == ord(c) for i in got for c in text
                                                     if ord(c) > 255):
            hint = (" Start from the UTF-8 bytes, not the characters' code points: "
                    "list(text.encode('utf-8')); '你' is three bytes.")
        elif any(i > 255 + len(merges) for i in got):
            hint = " merges[i] makes the id 256 + i; no id is larger than 255 + len(merges)."
        else:
            reverse = list(text.encode("utf-8"))
            for i in reversed(range(len(merges))):
                reverse = merge_pair(reverse, tuple(merges[i]), 256 + i)
            if got == reverse:
                hint = " The merges were applied latest first: the earliest merge goes first."
            else:
                hint = (" Keep merging until no adjacent pair has a merge, always taking the "
                        "merge learned earliest (the smallest index) among the pairs present.")
        raise CheckFailed(where + hint)
    passed("encode with merges", len(cases))
