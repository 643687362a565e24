"""The acceptance rule keeps the target's distribution: with toy draft and target distributions,
the tokens it emits follow the target (chi-square), not the draft, for one step and for a chain
of drafted tokens; greedy verification; the rule's pieces on hand-worked cases; bad input."""

import math

import pytest
import torch

from minillm.speculative import (accept_or_resample, accept_probability,
                                 expected_tokens_per_pass, residual_distribution, verify_greedy,
                                 verify_sampled)

P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)
Q = torch.tensor([0.10, 0.15, 0.30, 0.05, 0.25, 0.15], dtype=torch.float64)


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(chi2 >= observed) for `counts` drawn from `probs` (cells with zero probability must be
    empty: any count there gives 0)."""
    n = counts.sum().item()
    if (counts[probs == 0] > 0).any():
        return 0.0
    keep = probs > 0
    expected = n * probs[keep]
    statistic = ((counts[keep] - expected) ** 2 / expected).sum()
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         statistic.double() / 2))


def test_chi_square_helper_on_known_cases():
    fair = torch.tensor([1000.0, 1000.0])
    assert chi_square_p_value(fair, torch.tensor([0.5, 0.5])) == pytest.approx(1.0)
    # chi2 = 2 * 100^2 / 1000 = 20 with 1 degree of freedom: p = erfc(sqrt(10))
    skewed = torch.tensor([1100.0, 900.0])
    assert chi_square_p_value(skewed, torch.tensor([0.5, 0.5])) == pytest.approx(
        math.erfc(math.sqrt(10)), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_one_step_follows_target_not_draft(seed):
    n = 50_000
    g = torch.Generator().manual_seed(seed)
    drafted = torch.multinomial(Q, n, replacement=True, generator=g)
    p, q = P.expand(n, -1), Q.expand(n, -1)
    tokens, accepted = accept_or_resample(p, q, drafted, g)
    counts = torch.bincount(tokens, minlength=len(P)).double()
    assert chi_square_p_value(counts, P) > 1e-3
    assert chi_square_p_value(counts, Q) < 1e-12
    # the acceptance rate is sum_x min(p(x), q(x)) = 0.10 + 0.15 + 0.15 + 0.05 + 0.06 + 0.04
    beta = torch.minimum(P, Q).sum().item()
    assert beta == pytest.approx(0.55)
    assert accepted.double().mean().item() == pytest.approx(beta, abs=0.01)


def test_always_accepting_would_follow_the_draft():
    """The test above can tell the two apart: the draft's own tokens fail the target test."""
    g = torch.Generator().manual_seed(3)
    drafted = torch.multinomial(Q, 50_000, replacement=True, generator=g)
    counts = torch.bincount(drafted, minlength=len(P)).double()
    assert chi_square_p_value(counts, P) < 1e-12
    assert chi_square_p_value(counts, Q) > 1e-3


def test_resampling_from_p_instead_of_the_residual_is_biased():
    """Pinned: on rejection the draw must come from max(0, p - q), not from p."""
    n = 50_000
    g = torch.Generator().manual_seed(4)
    drafted = torch.multinomial(Q, n, replacement=True, generator=g)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    keep = u < accept_probability(P.expand(n, -1), Q.expand(n, -1), drafted)
    wrong = torch.where(keep, drafted, torch.multinomial(P, n, replacement=True, generator=g))
    counts = torch.bincount(wrong, minlength=len(P)).double()
    assert chi_square_p_value(counts, P) < 1e-12


# --- a chain of drafted tokens: context-dependent toy distributions -------------------------------

V = 4


def _toy(seed, peaked):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(V ** 2 + V + 1, V, generator=g, dtype=torch.float64) * peaked
    return torch.softmax(logits, -1)


TARGET, DRAFT = _toy(10, 1.5), _toy(11, 1.0)


def _row(table, prefix):
    """The toy model's distribution after `prefix` (0, 1 or 2 tokens)."""
    if len(prefix) == 0:
        return table[0]
    if len(prefix) == 1:
        return table[1 + prefix[0]]
    return table[1 + V + prefix[0] * V + prefix[1]]


def _joint(table):
    """P(x1, x2) under a toy model, as a flat (V*V,) tensor."""
    return torch.stack([_row(table, []) [a] * _row(table, [a])[b]
                        for a in range(V) for b in range(V)])


def _rows(table, *prefix):
    """The toy model's distributions after each row's prefix: (n, V)."""
    if len(prefix) == 0:
        return table[0]
    if len(prefix) == 1:
        return table[1 + prefix[0]]
    return table[1 + V + prefix[0] * V + prefix[1]]


def test_two_drafted_tokens_give_the_targets_joint_distribution():
    """k = 2, 40,000 sequences at once: d1 ~ q, d2 ~ q(.|d1); the rule at position 1, then at
    position 2 where d1 passed; where d1 was rejected, the next round drafts after the
    replacement. The first two emitted tokens follow the target's joint P(x1, x2), not the
    draft's."""
    n = 40_000
    g = torch.Generator().manual_seed(7)
    draw = lambda probs: torch.multinomial(probs, 1, generator=g)[:, 0]  # noqa: E731
    d1 = draw(_rows(DRAFT).expand(n, -1))
    d2 = draw(_rows(DRAFT, d1))
    x1, ok1 = accept_or_resample(_rows(TARGET).expand(n, -1), _rows(DRAFT).expand(n, -1), d1, g)
    x2_same_pass, ok2 = accept_or_resample(_rows(TARGET, d1), _rows(DRAFT, d1), d2, g)
    d = draw(_rows(DRAFT, x1))  # the next round, after a rejection at position 1
    x2_next_pass, _ = accept_or_resample(_rows(TARGET, x1), _rows(DRAFT, x1), d, g)
    x2 = torch.where(ok1, x2_same_pass, x2_next_pass)
    assert 0 < ok1.double().mean() < 1 and 0 < (ok1 & ok2).double().mean() < 1
    counts = torch.bincount(x1 * V + x2, minlength=V * V).double()
    assert chi_square_p_value(counts, _joint(TARGET)) > 1e-3
    assert chi_square_p_value(counts, _joint(DRAFT)) < 1e-12


def test_verify_sampled_runs_the_rule_left_to_right():
    """verify_sampled makes exactly the draws of accept_or_resample applied position by
    position (stopping at the first rejection), then the bonus draw: same seed, same tokens."""
    for seed in range(40):
        g = torch.Generator().manual_seed(100 + seed)
        d1 = int(torch.multinomial(_row(DRAFT, []), 1, generator=g))
        d2 = int(torch.multinomial(_row(DRAFT, [d1]), 1, generator=g))
        target = torch.stack([_row(TARGET, []), _row(TARGET, [d1]), _row(TARGET, [d1, d2])])
        draft = torch.stack([_row(DRAFT, []), _row(DRAFT, [d1])])
        got = verify_sampled(target, draft, [d1, d2], torch.Generator().manual_seed(seed))
        g = torch.Generator().manual_seed(seed)
        want = []
        for i, token in enumerate([d1, d2]):
            x, ok = accept_or_resample(target[i], draft[i], token, g)
            want.append(int(x))
            if not ok:
                break
        else:
            want.append(int(torch.multinomial(target[2], 1, generator=g)))
        assert got == (want, len(want) - 1)


def test_deterministic_draft_keeps_the_target_distribution():
    """Prompt lookup proposes without probabilities (q all on its token): a token is accepted
    with probability p(token), and the target's distribution still comes out."""
    n = 20_000
    g = torch.Generator().manual_seed(8)
    target = P.expand(n, -1)
    onehot = torch.zeros(n, len(P), dtype=torch.float64)
    onehot[:, 2] = 1.0
    tokens, accepted = accept_or_resample(target, onehot, torch.full((n,), 2), g)
    counts = torch.bincount(tokens, minlength=len(P)).double()
    assert chi_square_p_value(counts, P) > 1e-3
    assert accepted.double().mean().item() == pytest.approx(P[2].item(), abs=0.01)
    out, _ = verify_sampled(P[None].expand(2, -1), None, [2], g)
    assert len(out) in (1, 2)


def test_bonus_token_when_every_draft_passes():
    """p == q: every drafted token is accepted and the bonus comes from the last distribution."""
    g = torch.Generator().manual_seed(0)
    sure = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    last = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    out, n_accepted = verify_sampled(torch.stack([sure, sure, last]), torch.stack([sure, sure]),
                                     [1, 1], g)
    assert (out, n_accepted) == ([1, 1, 2], 2)


# --- the pieces, by hand ----------------------------------------------------------------------------

def test_accept_probability_and_residual_by_hand():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.25, 0.6, 0.15])
    assert accept_probability(p, q, 0).item() == pytest.approx(1.0)    # p >= q
    assert accept_probability(p, q, 1).item() == pytest.approx(0.5)    # 0.3 / 0.6
    # max(0, p - q) = [0.25, 0, 0.05] -> normalised [5/6, 0, 1/6]
    assert residual_distribution(p, q).tolist() == pytest.approx([5 / 6, 0.0, 1 / 6])
    # p == q: no residual mass; the fallback is p itself
    assert residual_distribution(p, p.clone()).tolist() == pytest.approx(p.tolist())


def test_a_token_the_target_rules_out_is_never_emitted():
    n = 5000
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([0.0, 0.7, 0.3]).expand(n, -1)
    q = torch.tensor([0.8, 0.1, 0.1]).expand(n, -1)
    drafted = torch.multinomial(q[0], n, replacement=True, generator=g)
    tokens, _ = accept_or_resample(p, q, drafted, g)
    assert (tokens != 0).all()


def test_verify_greedy():
    scores = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    assert verify_greedy(scores, [1, 0]) == ([1, 0, 2], 2)  # all pass: bonus argmax 2
    assert verify_greedy(scores, [1, 2]) == ([1, 0], 1)     # 2nd rejected: replaced by argmax 0
    assert verify_greedy(scores, [0, 0]) == ([1], 0)        # 1st rejected
    assert verify_greedy(scores[:1], []) == ([1], 0)        # no draft: a plain greedy step


def test_expected_tokens_per_pass():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(1.0, 4) == 5.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)


@pytest.mark.parametrize("call, error, words", [
    (lambda: accept_or_resample(P, Q[:3], 0), ValueError, "same shape"),
    (lambda: accept_or_resample(P, Q, 9), ValueError, "token id in 0..5"),
    (lambda: accept_or_resample(P.tolist(), Q, 0), TypeError, "float tensor"),
    (lambda: accept_or_resample(P.expand(2, -1), Q.expand(2, -1), 0), ValueError, "shape (2,)"),
    (lambda: verify_sampled(P[None], None, [1]), ValueError, "(n + 1, vocab)"),
    (lambda: verify_greedy(P[None], [1]), ValueError, "(n + 1, vocab)"),
    (lambda: expected_tokens_per_pass(1.5, 2), ValueError, "probability"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=None) as info:
        call()
    assert words in str(info.value)
