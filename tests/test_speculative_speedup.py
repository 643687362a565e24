"""What an acceptance rate buys (minillm/speculative/speedup.py): the expected speed-up against
a direct count over every accept/reject pattern, the break-even rate, and bad input."""

import itertools

import pytest

from minillm.speculative import (accepted_per_round, break_even_acceptance, expected_speedup,
                                 expected_tokens_per_pass)


def tokens_by_enumeration(a, k):
    """Average tokens per round over all 2^k accept/reject patterns: the accepted prefix, plus
    one (the replacement or the bonus token)."""
    total = 0.0
    for pattern in itertools.product([True, False], repeat=k):
        chance = 1.0
        for accepted in pattern:
            chance *= a if accepted else 1 - a
        prefix = next((i for i, accepted in enumerate(pattern) if not accepted), k)
        total += chance * (prefix + 1)
    return total


@pytest.mark.parametrize("a, k", [(0.0, 3), (0.3, 1), (0.7, 4), (0.9, 6), (1.0, 2)])
def test_speedup_is_tokens_per_round_over_the_round_cost(a, k):
    for draft_cost, verify_cost in [(0.0, 1.0), (0.05, 1.0), (0.3, 1.2)]:
        want = tokens_by_enumeration(a, k) / (k * draft_cost + verify_cost)
        assert expected_speedup(a, k, draft_cost, verify_cost) == pytest.approx(want)


def test_known_values():
    # a free draft at a = 0.7, k = 4: (1 - 0.7^5) / 0.3 tokens for one step
    assert expected_speedup(0.7, 4, 0.0) == pytest.approx((1 - 0.7 ** 5) / 0.3)
    assert expected_speedup(0.0, 4, 0.25) == pytest.approx(0.5)  # nothing accepted: pure cost
    assert expected_speedup(1.0, 3, 0.0, 2.0) == pytest.approx(2.0)


def test_accepted_per_round_matches_the_enumeration():
    a, k = 0.6, 4
    shares = accepted_per_round(a, k)
    assert sum(shares) == pytest.approx(1.0)
    assert sum((m + 1) * s for m, s in enumerate(shares)) == pytest.approx(
        expected_tokens_per_pass(a, k))
    assert shares[0] == pytest.approx(0.4) and shares[k] == pytest.approx(a ** k)


def test_break_even():
    for k, draft_cost, verify_cost in [(4, 0.1, 1.0), (2, 0.4, 1.1), (8, 0.05, 1.3)]:
        a = break_even_acceptance(k, draft_cost, verify_cost)
        assert 0 < a < 1
        assert expected_speedup(a, k, draft_cost, verify_cost) == pytest.approx(1.0, abs=1e-9)
        assert expected_speedup(a - 0.01, k, draft_cost, verify_cost) < 1
    assert break_even_acceptance(4, 0.0) == 0.0  # a free draft never loses
    assert break_even_acceptance(2, 1.1) is None  # 3 tokens at most for 3.2 steps: never wins
    assert break_even_acceptance(2, 1.0) == pytest.approx(1.0)  # only when every draft passes
    assert break_even_acceptance(2, 0.9) > 0.9


@pytest.mark.parametrize("call, error, words", [
    (lambda: expected_speedup(1.2, 4, 0.1), ValueError, "probability"),
    (lambda: expected_speedup(0.5, -1, 0.1), ValueError, "int >= 0"),
    (lambda: expected_speedup(0.5, 4, -0.1), ValueError, "draft_cost must be a number >= 0"),
    (lambda: expected_speedup(0.5, 4, 0.1, 0.0), ValueError, "verify_cost must be a number > 0"),
    (lambda: break_even_acceptance(2.5, 0.1), TypeError, "k must be an int"),
    (lambda: accepted_per_round(-0.1, 3), ValueError, "acceptance must be a probability"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
