"""Sampling: the drawn tokens follow the processed distribution (a chi-square test over 20,000
draws), a seed fixes the draws, and greedy is argmax."""

import math

import pytest
import torch

from minillm.decoding import GenerationConfig, build_processors, choose_next_token, make_generator

DRAWS = 20_000


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """The chi-square value that a true distribution exceeds with probability 0.001 (z = 3.0902
    is the standard normal's 0.999 quantile), by the Wilson-Hilferty approximation (Wilson and
    Hilferty, 1931): chi2 ~ df * (1 - 2/(9 df) + z * sqrt(2/(9 df)))^3."""
    a = 2 / (9 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def test_critical_values_agree_with_the_published_table():
    # NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.4 (upper 0.001 point)
    for df, table in [(5, 20.515), (9, 27.877), (20, 45.315), (40, 73.402)]:
        assert chi_square_critical(df) == pytest.approx(table, rel=0.02)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic over the tokens with probability > 0 (a drawn token outside them
    fails the test outright), and its degrees of freedom."""
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token the processors removed"
    expected = probs[support] * counts.sum()
    observed = counts[support].double()
    return float(((observed - expected) ** 2 / expected).sum()), int(support.sum()) - 1


@pytest.mark.parametrize("fields", [
    dict(),
    dict(temperature=0.7),
    dict(temperature=1.5, top_k=12),
    dict(top_p=0.9),
    dict(temperature=0.8, top_k=20, top_p=0.95),
    dict(min_p=0.05, repetition_penalty=1.8),
])
def test_draws_follow_the_processed_distribution(fields):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 30, generator=gen) * 1.5
    input_ids = torch.tensor([[0, 1, 2, 3, 3]])
    config = GenerationConfig(do_sample=True, seed=123, **fields)
    scores = build_processors(config)(input_ids, logits)
    probs = torch.softmax(scores, dim=-1)[0].double()
    draws = choose_next_token(scores.expand(DRAWS, -1), config, make_generator(config))
    assert draws.shape == (DRAWS,) and draws.dtype == torch.long
    counts = torch.bincount(draws, minlength=probs.numel())
    statistic, df = chi_square(counts, probs)
    assert statistic < chi_square_critical(df), (statistic, df, fields)


def test_a_wrong_distribution_fails_the_same_test():
    """The test has teeth: draws at temperature 1 judged against temperature 0.7 fail."""
    logits = torch.randn(1, 30, generator=torch.Generator().manual_seed(0)) * 1.5
    config = GenerationConfig(do_sample=True, seed=1)
    draws = choose_next_token(logits.expand(DRAWS, -1), config, make_generator(config))
    counts = torch.bincount(draws, minlength=30)
    statistic, df = chi_square(counts, torch.softmax(logits / 0.7, -1)[0].double())
    assert statistic > chi_square_critical(df)


def test_same_seed_same_draws_and_different_seed_different_draws():
    scores = torch.randn(4, 100, generator=torch.Generator().manual_seed(3))
    config = GenerationConfig(do_sample=True, seed=7)
    first = [choose_next_token(scores, config, g) for g in [make_generator(config)] * 20]
    again = [choose_next_token(scores, config, g) for g in [make_generator(config)] * 20]
    assert torch.equal(torch.stack(first), torch.stack(again))
    other = GenerationConfig(do_sample=True, seed=8)
    third = [choose_next_token(scores, other, g) for g in [make_generator(other)] * 20]
    assert not torch.equal(torch.stack(first), torch.stack(third))


def test_greedy_is_argmax_and_ignores_the_generator():
    scores = torch.tensor([[0.1, 3.0, -1.0], [5.0, float("-inf"), 4.9]])
    assert choose_next_token(scores, GenerationConfig()).tolist() == [1, 0]


def test_sampling_never_picks_a_removed_token():
    scores = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]]).expand(2000, -1)
    config = GenerationConfig(do_sample=True, seed=0)
    draws = choose_next_token(scores, config, make_generator(config))
    assert set(draws.tolist()) == {0, 2}


def test_scores_must_be_two_dimensional():
    with pytest.raises(ValueError, match="batch, vocab"):
        choose_next_token(torch.zeros(5), GenerationConfig())
