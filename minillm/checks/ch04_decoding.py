"""Checkers for exercises/04_decoding.ipynb: temperature, top-k, top-p, the repetition penalty and
one beam-search step, each against minillm's own processors on random logits."""

from __future__ import annotations

import torch

from ..decoding.processors import (RepetitionPenaltyProcessor, TemperatureProcessor,
                                   TopKProcessor, TopPProcessor)
from ._base import CheckFailed, call, expect, passed


def _logits(seed: int, batch: int = 3, vocab: int = 20, ties: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(-2, 3, (batch, vocab), generator=gen).float()
    return torch.randn(batch, vocab, generator=gen) * 2


def _as_tensor(got, what: str, shape) -> torch.Tensor:
    expect(isinstance(got, torch.Tensor), f"{what} returned {type(got).__name__}; return a "
                                          "torch.Tensor of scores")
    expect(tuple(got.shape) == tuple(shape), f"{what} returned shape {tuple(got.shape)}, "
                                             f"expected {tuple(shape)} (same as the logits)")
    return got


def _same_scores(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    removed_got, removed_want = torch.isneginf(got), torch.isneginf(want)
    if not torch.equal(removed_got, removed_want):
        extra = int((removed_got & ~removed_want).sum())
        missing = int((~removed_got & removed_want).sum())
        raise CheckFailed(f"{what}: {extra} token(s) set to -inf that should stay, and "
                          f"{missing} that should be -inf but are not")
    keep = ~removed_want
    if not torch.allclose(got[keep], want[keep], rtol=1e-5, atol=1e-6):
        raise CheckFailed(f"{what}: the kept scores changed; a filter only sets removed "
                          "tokens to -inf and leaves the others exactly as they were")


def check_apply_temperature(apply_temperature) -> None:
    """`apply_temperature(logits, temperature)` -> logits / temperature."""
    cases = 0
    for seed, t in [(0, 1.0), (1, 0.5), (2, 2.0), (3, 0.01)]:
        logits = _logits(seed)
        got = _as_tensor(call(apply_temperature, logits.clone(), t),
                         f"apply_temperature(logits, {t})", logits.shape)
        want = TemperatureProcessor(t)(None, logits)
        if t != 1.0 and torch.allclose(got, logits * t):
            raise CheckFailed(f"apply_temperature(logits, {t}) multiplied by the temperature; "
                              "divide: P_i = e^(z_i/T) / sum_j e^(z_j/T)")
        if bool((got >= 0).all()) and torch.allclose(got.sum(-1), torch.ones(3), atol=1e-4):
            raise CheckFailed(f"apply_temperature(logits, {t}) returned probabilities; return "
                              "the scaled logits (softmax comes later)")
        expect(torch.allclose(got, want, rtol=1e-5),
               f"apply_temperature(logits, {t}) gave wrong scores: expected logits / {t}")
        cases += 1
    passed("apply_temperature", cases)


def check_top_k(top_k_filter) -> None:
    """`top_k_filter(logits, k)`: keep the k highest scores of each row (and any tied with the
    k-th), set the rest to -inf."""
    cases = 0
    for seed, k, ties in [(0, 1, False), (1, 5, False), (2, 3, True), (3, 20, False),
                          (4, 50, False), (5, 2, True)]:
        logits = _logits(seed, ties=ties)
        what = f"top_k_filter(logits, {k})" + (" on logits with ties" if ties else "")
        got = _as_tensor(call(top_k_filter, logits.clone(), k), what, logits.shape)
        want = TopKProcessor(k)(None, logits)
        if ties and torch.isneginf(got).sum() > torch.isneginf(want).sum():
            raise CheckFailed(f"{what} removed tokens tied with the k-th best: keep every "
                              "token whose score is >= the k-th highest score")
        if k >= logits.shape[-1]:
            expect(not torch.isneginf(got).any(),
                   f"{what}: k is at least the vocabulary size ({logits.shape[-1]}), so every "
                   "token stays (hint: min(k, vocab))")
        _same_scores(got, want, what)
        cases += 1
    passed("top_k_filter", cases)


def _clear_of_boundary(logits: torch.Tensor, p: float) -> bool:
    """True when no cumulative probability lies within 1e-4 of p, so summing in another order
    cannot change which token crosses the line."""
    probs = logits.softmax(-1).sort(descending=True).values
    return bool(((probs.cumsum(-1) - p).abs() > 1e-4).all())


def check_top_p(top_p_filter) -> None:
    """`top_p_filter(logits, p)`: keep the smallest set of most likely tokens whose probability
    adds up to at least p — including the token that crosses p — and set the rest to -inf."""
    cases, seed = 0, 0
    for p in [0.1, 0.5, 0.8, 0.9, 0.95, 1.0]:
        logits = _logits(seed)
        while not _clear_of_boundary(logits, p) and p < 1.0:
            seed += 1
            logits = _logits(seed)
        seed += 1
        what = f"top_p_filter(logits, {p})"
        got = _as_tensor(call(top_p_filter, logits.clone(), p), what, logits.shape)
        want = TopPProcessor(p)(None, logits)
        kept_got = (~torch.isneginf(got)).sum(-1)
        kept_want = (~torch.isneginf(want)).sum(-1)
        if p < 1.0 and torch.equal(kept_got + 1, kept_want):
            raise CheckFailed(f"{what} dropped the token that crosses p: keep tokens until the "
                              "running total reaches p, and keep the one that gets it there")
        if p < 1.0 and torch.equal(kept_got, kept_want + 1):
            raise CheckFailed(f"{what} kept one token too many: stop right after the token "
                              "whose running total first reaches p")
        if p == 1.0:
            expect(not torch.isneginf(got).any(), f"{what} removed tokens; p = 1.0 keeps all")
        _same_scores(got, want, what)
        cases += 1
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    got = call(top_p_filter, probs.log(), 0.7)
    expect(torch.isfinite(got).tolist() == [[True, True, False, False]],
           "top_p_filter on probabilities [0.5, 0.3, 0.15, 0.05] with p = 0.7 must keep the "
           f"first two (0.5 + 0.3 crosses 0.7), kept {torch.isfinite(got).tolist()}")
    passed("top_p_filter", cases + 1)


def check_repetition_penalty(repetition_penalty) -> None:
    """`repetition_penalty(input_ids, logits, penalty)`: each token that appears in input_ids
    (prompt included) has its score divided by penalty when positive, multiplied when negative —
    once, however often it appeared."""
    hand_ids = torch.tensor([[0, 0, 0, 1]])
    hand = torch.tensor([[2.0, -2.0, 2.0, 1.0]])
    got = _as_tensor(call(repetition_penalty, hand_ids, hand.clone(), 2.0),
                     "repetition_penalty", hand.shape)
    if got[0, 1] == -1.0:
        raise CheckFailed("repetition_penalty divided a negative score (-2 became -1), which "
                          "makes the token MORE likely; multiply negative scores by the penalty")
    if got[0, 0] == 0.5:
        raise CheckFailed("repetition_penalty applied the penalty once per occurrence (token 0 "
                          "appears 3 times: 2 became 0.5); apply it once per distinct token")
    expect(got.tolist() == [[1.0, -4.0, 2.0, 1.0]],
           f"repetition_penalty([[0, 0, 0, 1]], [[2, -2, 2, 1]], 2.0) gave {got.tolist()}, "
           "expected [[1.0, -4.0, 2.0, 1.0]]")
    cases = 1
    for seed, penalty in [(0, 1.2), (1, 1.8), (2, 0.5), (3, 3.0)]:
        logits = _logits(seed)
        ids = torch.randint(0, logits.shape[-1], (logits.shape[0], 7),
                            generator=torch.Generator().manual_seed(seed))
        got = _as_tensor(call(repetition_penalty, ids, logits.clone(), penalty),
                         f"repetition_penalty(ids, logits, {penalty})", logits.shape)
        want = RepetitionPenaltyProcessor(penalty)(ids, logits)
        expect(torch.allclose(got, want, rtol=1e-5),
               f"repetition_penalty(ids, logits, {penalty}) gave wrong scores for "
               f"{int((~torch.isclose(got, want)).sum())} entries")
        cases += 1
    passed("repetition_penalty", cases)


def reference_beam_step(log_probs: torch.Tensor, beam_scores: torch.Tensor, num_beams: int):
    """The reference: the num_beams best (score, parent beam, token) over all beams."""
    vocab = log_probs.shape[-1]
    totals = (beam_scores[:, None] + log_probs).reshape(-1)
    scores, flat = torch.topk(totals, num_beams)
    return scores, flat // vocab, flat % vocab


def check_beam_step(beam_step) -> None:
    """`beam_step(log_probs, beam_scores, num_beams)` -> (scores, parents, tokens), each of
    length num_beams, best first: the num_beams best continuations over ALL beams, scored
    beam_scores[parent] + log_probs[parent, token]."""
    cases = 0
    for seed, beams, vocab in [(0, 2, 10), (1, 3, 7), (2, 4, 50), (3, 1, 5)]:
        gen = torch.Generator().manual_seed(seed)
        log_probs = torch.log_softmax(torch.randn(beams, vocab, generator=gen) * 2, -1)
        beam_scores = -torch.rand(beams, generator=gen) * 3
        what = f"beam_step on {beams} beams x {vocab} tokens"
        got = call(beam_step, log_probs.clone(), beam_scores.clone(), beams)
        expect(isinstance(got, tuple) and len(got) == 3,
               f"{what} returned {type(got).__name__}; return a tuple (scores, parents, tokens)")
        scores, parents, tokens = (torch.as_tensor(x) for x in got)
        want_scores, want_parents, want_tokens = reference_beam_step(log_probs, beam_scores,
                                                                     beams)
        expect(scores.numel() == beams,
               f"{what}: returned {scores.numel()} candidates, expected num_beams = {beams}")
        if beams > 1 and torch.equal(parents.flatten(), want_tokens) and \
                torch.equal(tokens.flatten(), want_parents):
            raise CheckFailed(f"{what}: parents and tokens are swapped: in the flattened "
                              "(beams x vocab) index, parent = index // vocab, "
                              "token = index % vocab")
        plain = torch.topk(log_probs.reshape(-1), beams)
        if beams > 1 and torch.allclose(scores.flatten(), plain.values) and not \
                torch.allclose(plain.values, want_scores):
            raise CheckFailed(f"{what}: the scores ignore the beams' running scores; add "
                              "beam_scores[:, None] to log_probs before ranking")
        expect(torch.allclose(scores.flatten().float(), want_scores, atol=1e-6),
               f"{what}: scores {scores.flatten().tolist()}, expected "
               f"{want_scores.tolist()} (best first)")
        expect(torch.equal(parents.flatten().long(), want_parents) and
               torch.equal(tokens.flatten().long(), want_tokens),
               f"{what}: (parent, token) pairs {list(zip(parents.tolist(), tokens.tolist()))}, "
               f"expected {list(zip(want_parents.tolist(), want_tokens.tolist()))}")
        cases += 1
    passed("beam_step", cases)
