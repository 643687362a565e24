"""Measures of generated text that chapter 04 compares decoding strategies with.

    distinct_n            share of n-grams that are different (1.0: no n-gram repeats)
    repeated_ngram_rate   share of n-grams that already appeared earlier in the text
    repeated_ngrams       where the repeats are, for highlighting
    mean_logprob          the model's average log-probability of the new tokens (higher: the
                          text is more "expected" by the model; minillm.generation.agreement's)
"""

from __future__ import annotations

from ..generation.agreement import mean_logprob  # noqa: F401 - the lessons import it here


def _ngrams(tokens, n: int) -> list[tuple]:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    tokens = list(tokens)
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(tokens, n: int = 2) -> float:
    """Distinct n-grams / all n-grams (Li et al., 2016). 1.0 when there are none at all."""
    grams = _ngrams(tokens, n)
    return len(set(grams)) / len(grams) if grams else 1.0


def repeated_ngram_rate(tokens, n: int = 3) -> float:
    """The share of n-gram positions whose n-gram occurred earlier: 0.0 means no repeats."""
    grams = _ngrams(tokens, n)
    return len(repeated_ngrams(tokens, n)) / len(grams) if grams else 0.0


def repeated_ngrams(tokens, n: int = 3) -> list[int]:
    """Start positions of the n-grams that repeat an earlier one."""
    seen, repeats = set(), []
    for start, gram in enumerate(_ngrams(tokens, n)):
        if gram in seen:
            repeats.append(start)
        seen.add(gram)
    return repeats


def repeated_token_mask(tokens, n: int = 3) -> list[bool]:
    """For each token, whether it is part of a repeated n-gram (to colour it)."""
    tokens = list(tokens)
    mask = [False] * len(tokens)
    for start in repeated_ngrams(tokens, n):
        for i in range(start, start + n):
            mask[i] = True
    return mask
