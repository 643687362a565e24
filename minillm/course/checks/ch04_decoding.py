"""Checkers for exercises/04_decoding.ipynb: temperature, top-k, top-p, the repetition penalty and
one beam-search step, each against minillm's own processors on random logits of several batch and
vocabulary sizes. A hint names a mistake only when the learner's scores equal that mistake's
scores on every case."""

from __future__ import annotations

import torch

from ...decoding.processors import (RepetitionPenaltyProcessor, TemperatureProcessor,
                                   TopKProcessor, TopPProcessor)
from ._base import CheckFailed, call, checker, expect, matching_mistake, passed, short

NEG_INF = float("-inf")


def _logits(seed: int, batch: int = 3, vocab: int = 20, ties: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(-2, 3, (batch, vocab), generator=gen).float()
    return torch.randn(batch, vocab, generator=gen) * 2


def _as_scores(got, what: str, shape) -> torch.Tensor:
    expect(isinstance(got, torch.Tensor), f"{what} returned {type(got).__name__}; return a "
                                          "torch.Tensor of scores")
    expect(tuple(got.shape) == tuple(shape), f"{what} returned shape {tuple(got.shape)}, "
                                             f"expected {tuple(shape)} (same as the logits)")
    expect(got.is_floating_point(), f"{what} returned a {got.dtype} tensor; return the float "
                                    "scores (removed tokens at -inf), not a mask or indices")
    return got.detach()


def _same_scores(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The same tokens removed (-inf) and the kept scores equal."""
    if got.shape != want.shape or not torch.equal(torch.isneginf(got), torch.isneginf(want)):
        return False
    keep = ~torch.isneginf(want)
    return bool(torch.allclose(got[keep], want[keep], rtol=1e-5, atol=1e-6))


def _score_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    removed_got, removed_want = torch.isneginf(got), torch.isneginf(want)
    extra = int((removed_got & ~removed_want).sum())
    missing = int((~removed_got & removed_want).sum())
    if extra or missing:
        return (f"{extra} token(s) set to -inf that should stay, and {missing} that should be "
                "-inf but are not")
    return ("the kept scores changed; a filter only sets removed tokens to -inf and leaves the "
            "others exactly as they were")


def _check_all(fn, name, cases, reference, mistakes, describe, fallback, scores_at=0) -> None:
    """Run `fn` on every case (args tuples, the logits at position `scores_at`), compare with
    `reference(*args)`; on a difference name the mistake whose scores match everywhere, else
    `fallback(got, want)`."""
    answers = []
    for args, if_raises in cases:
        what = describe(*args)
        answers.append(_as_scores(call(fn, *args, what=what, if_raises=if_raises), what,
                                  args[scores_at].shape))
    wants = [reference(*args) for args, _ in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _same_scores(g, w)]
    if not wrong:
        passed(name, len(cases))
        return
    i = wrong[0]
    models = [(hint, [model(*args) for args, _ in cases]) for hint, model in mistakes]
    hint = matching_mistake(answers, models, _same_scores)
    raise CheckFailed(f"{describe(*cases[i][0])}: " + (hint or fallback(answers[i], wants[i])))


# --- 1. temperature ---------------------------------------------------------------------------

TEMPERATURES = [(0, 3, 20, 1.0), (1, 3, 20, 0.5), (2, 2, 50, 2.0), (3, 3, 20, 0.01),
                (4, 1, 7, 1.3), (5, 4, 100, 0.8)]


@checker
def check_apply_temperature(apply_temperature) -> None:
    """`apply_temperature(logits, temperature)` -> logits / temperature."""
    cases = [((_logits(seed, batch, vocab), t), "") for seed, batch, vocab, t in TEMPERATURES]
    _check_all(
        apply_temperature, "apply_temperature", cases,
        lambda logits, t: TemperatureProcessor(t)(None, logits),
        [("you multiplied by the temperature; divide: P_i = e^(z_i/T) / sum_j e^(z_j/T)",
          lambda logits, t: logits * t),
         ("you returned probabilities; return the scaled logits (the softmax comes later)",
          lambda logits, t: torch.softmax(logits / t, -1)),
         ("you subtracted the temperature; divide the logits by it",
          lambda logits, t: logits - t)],
        lambda logits, t: f"apply_temperature(logits of shape {tuple(logits.shape)}, {t})",
        lambda got, want: "expected logits / temperature")


# --- 2. top-k ---------------------------------------------------------------------------------

TOP_K_CASES = [(0, 3, 20, 1, False), (1, 3, 20, 5, False), (2, 3, 20, 3, True),
               (3, 3, 20, 20, False), (4, 3, 20, 50, False), (5, 3, 20, 2, True),
               (6, 2, 100, 40, False), (7, 1, 5, 4, True), (8, 4, 64, 64, False)]


def _strict_top_k(logits, k):
    k = min(k, logits.shape[-1])
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(
        -1, torch.topk(logits, k).indices, True)
    return logits.masked_fill(~keep, NEG_INF)


def _top_k_variant(logits, k, *, shift=0, largest=True, fill=NEG_INF):
    k = max(1, min(k + shift, logits.shape[-1]))
    kth = torch.topk(logits, k, largest=largest).values[..., -1:]
    drop = logits < kth if largest else logits > kth
    return logits.masked_fill(drop, fill)


@checker
def check_top_k(top_k_filter) -> None:
    """`top_k_filter(logits, k)`: keep the k highest scores of each row (and any tied with the
    k-th), set the rest to -inf."""
    cases = []
    for seed, batch, vocab, k, ties in TOP_K_CASES:
        if_raises = (f"k = {k} is at least the vocabulary size ({vocab}): every token stays "
                     "(use min(k, vocab))" if k > vocab else "")
        cases.append(((_logits(seed, batch, vocab, ties), k), if_raises))
    _check_all(
        top_k_filter, "top_k_filter", cases, lambda logits, k: TopKProcessor(k)(None, logits),
        [("you removed tokens tied with the k-th best: keep every token whose score is >= the "
          "k-th highest score", _strict_top_k),
         ("you kept k + 1 tokens: the k-th highest score is topk(logits, k).values[..., -1]",
          lambda logits, k: _top_k_variant(logits, k, shift=1)),
         ("you kept k - 1 tokens: the k-th highest score is topk(logits, k).values[..., -1]",
          lambda logits, k: _top_k_variant(logits, k, shift=-1)),
         ("you kept the k lowest scores; keep the highest (torch.topk's default, largest=True)",
          lambda logits, k: _top_k_variant(logits, k, largest=False)),
         ("removed tokens must get the score -inf, not 0 (a score of 0 still has a chance)",
          lambda logits, k: _top_k_variant(logits, k, fill=0.0))],
        lambda logits, k: (f"top_k_filter(logits of shape {tuple(logits.shape)}, {k})"
                           + (" on logits with ties" if logits.eq(logits.round()).all() else "")),
        _score_difference)


# --- 3. top-p ---------------------------------------------------------------------------------

def _clear_of_boundary(logits: torch.Tensor, p: float) -> bool:
    """True when no cumulative probability lies within 1e-4 of p, so summing in another order
    cannot change which token crosses the line."""
    probs = logits.softmax(-1).sort(descending=True).values
    return bool(((probs.cumsum(-1) - p).abs() > 1e-4).all())


def _top_p_logits():
    cases, seed = [], 0
    for p, batch, vocab in [(0.1, 3, 20), (0.5, 3, 20), (0.8, 3, 20), (0.9, 2, 50),
                            (0.95, 3, 20), (1.0, 3, 20), (0.7, 4, 100), (0.3, 1, 6)]:
        logits = _logits(seed, batch, vocab)
        while p < 1.0 and not _clear_of_boundary(logits, p):
            seed += 1
            logits = _logits(seed, batch, vocab)
        seed += 1
        cases.append((logits, p))
    cases.append((torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]).log(), 0.7))
    return cases


def _top_p_variant(logits, p, *, crossing=True, descending=True, softmax=True, unsort=True):
    sorted_logits, order = torch.sort(logits, descending=descending)
    probs = sorted_logits.softmax(-1) if softmax else sorted_logits
    total = probs.cumsum(-1)
    remove = (total - probs >= p) if crossing else (total > p)
    if unsort:
        remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, NEG_INF)


def _one_too_many(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(-1)
    before = probs.cumsum(-1) - probs
    remove = torch.cat([torch.zeros_like(before[..., :1], dtype=torch.bool),
                        (before >= p)[..., :-1]], -1)
    return logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)


@checker
def check_top_p(top_p_filter) -> None:
    """`top_p_filter(logits, p)`: keep the smallest set of most likely tokens whose probability
    adds up to at least p — including the token that crosses p — and set the rest to -inf."""
    cases = [(args, "") for args in _top_p_logits()]
    _check_all(
        top_p_filter, "top_p_filter", cases, lambda logits, p: TopPProcessor(p)(None, logits),
        [("you dropped the token that crosses p: keep tokens until the running total reaches p, "
          "and keep the one that gets it there",
          lambda logits, p: _top_p_variant(logits, p, crossing=False)),
         ("you kept one token too many: stop right after the token whose running total first "
          "reaches p", _one_too_many),
         ("you kept the least likely tokens: sort the probabilities from the most likely down "
          "(descending=True)", lambda logits, p: _top_p_variant(logits, p, descending=False)),
         ("you added up the logits; add up probabilities: softmax the sorted logits first",
          lambda logits, p: _top_p_variant(logits, p, softmax=False)),
         ("the mask is still in sorted order: put it back in vocabulary order "
          "(remove.scatter(-1, order, remove)) before masking the logits",
          lambda logits, p: _top_p_variant(logits, p, unsort=False))],
        lambda logits, p: f"top_p_filter(logits of shape {tuple(logits.shape)}, {p})",
        _score_difference)


# --- 4. repetition penalty --------------------------------------------------------------------

def _penalty_cases():
    cases = [(torch.tensor([[0, 0, 0, 1]]), torch.tensor([[2.0, -2.0, 2.0, 1.0]]), 2.0)]
    for seed, batch, vocab, length, penalty in [(0, 3, 20, 7, 1.2), (1, 3, 20, 7, 1.8),
                                                (2, 3, 20, 7, 0.5), (3, 3, 20, 7, 3.0),
                                                (4, 2, 50, 30, 1.3), (5, 1, 6, 12, 2.5)]:
        logits = _logits(seed, batch, vocab)
        ids = torch.randint(0, vocab, (batch, length),
                            generator=torch.Generator().manual_seed(100 + seed))
        cases.append((ids, logits, penalty))
    return cases


def _per_occurrence(ids, logits, penalty):
    out = logits.clone()
    for row in range(ids.shape[0]):
        for token in ids[row].tolist():
            value = out[row, token]
            out[row, token] = value * penalty if value < 0 else value / penalty
    return out


@checker
def check_repetition_penalty(repetition_penalty) -> None:
    """`repetition_penalty(input_ids, logits, penalty)`: each token that appears in input_ids
    (prompt included) has its score divided by penalty when positive, multiplied when negative —
    once, however often it appeared."""
    cases = [(args, "") for args in _penalty_cases()]
    _check_all(
        repetition_penalty, "repetition_penalty", cases,
        lambda ids, logits, p: RepetitionPenaltyProcessor(p)(ids, logits),
        [("you divided negative scores too (-2 became -1), which makes those tokens MORE "
          "likely; multiply a negative score by the penalty",
          lambda ids, logits, p: logits.scatter(1, ids, logits.gather(1, ids) / p)),
         ("you applied the penalty once per occurrence (token 0 appears 3 times in "
          "[[0, 0, 0, 1]]: its 2.0 became 0.25); apply it once per distinct token",
          _per_occurrence),
         ("positive and negative are the wrong way round: divide a positive score by the "
          "penalty and multiply a negative one",
          lambda ids, logits, p: logits.scatter(1, ids, torch.where(
              logits.gather(1, ids) < 0, logits.gather(1, ids) / p, logits.gather(1, ids) * p))),
         ("every row has its own input_ids: penalise the tokens of row b in row b only",
          lambda ids, logits, p: RepetitionPenaltyProcessor(p)(
              ids.reshape(1, -1).expand(ids.shape[0], -1), logits))],
        lambda ids, logits, p: (f"repetition_penalty(input_ids {short(ids.tolist(), 40)}, logits "
                                f"of shape {tuple(logits.shape)}, {p})"),
        lambda got, want: (f"{int((~torch.isclose(got, want)).sum())} scores differ: each token "
                           "seen in its row's input_ids gets score / penalty if positive, "
                           "score * penalty if negative"), scores_at=1)


# --- 5. one beam-search step ------------------------------------------------------------------

def reference_beam_step(log_probs: torch.Tensor, beam_scores: torch.Tensor, num_beams: int):
    """The reference: the num_beams best (score, parent beam, token) over all beams."""
    vocab = log_probs.shape[-1]
    totals = (beam_scores[:, None] + log_probs).reshape(-1)
    scores, flat = torch.topk(totals, num_beams)
    return scores, flat // vocab, flat % vocab


def _beam_cases():
    cases = []
    for seed, beams, vocab in [(0, 2, 10), (1, 3, 7), (2, 4, 50), (3, 1, 5), (4, 5, 12),
                               (5, 3, 200)]:
        gen = torch.Generator().manual_seed(seed)
        log_probs = torch.log_softmax(torch.randn(beams, vocab, generator=gen) * 2, -1)
        beam_scores = -torch.rand(beams, generator=gen) * 3
        cases.append((log_probs, beam_scores, beams))
    return cases


def _as_triple(got, what, beams):
    expect(isinstance(got, (tuple, list)) and len(got) == 3,
           f"{what} returned {type(got).__name__} {short(got)}; return a tuple "
           "(scores, parents, tokens)")
    out = []
    for name, part in zip(("scores", "parents", "tokens"), got):
        try:
            t = torch.as_tensor(part)
        except Exception:
            raise CheckFailed(f"{what}: {name} is {type(part).__name__} {short(part)}; return a "
                              "tensor (or a list) of numbers") from None
        expect(t.numel() == beams, f"{what}: {name} has {t.numel()} entries, expected "
                                   f"num_beams = {beams}")
        out.append(t.flatten())
    return out


def _same_beams(got, want) -> bool:
    return (torch.allclose(got[0].cpu().double(), want[0].cpu().double(), atol=1e-5)
            and torch.equal(got[1].long(), want[1].long())
            and torch.equal(got[2].long(), want[2].long()))


def _per_beam_best(log_probs, beam_scores, num_beams):
    totals = beam_scores[:, None] + log_probs
    best = totals.max(-1)
    order = best.values.argsort(descending=True)[:num_beams]
    return best.values[order], order, best.indices[order]


@checker
def check_beam_step(beam_step) -> None:
    """`beam_step(log_probs, beam_scores, num_beams)` -> (scores, parents, tokens), each of
    length num_beams, best first: the num_beams best continuations over ALL beams, scored
    beam_scores[parent] + log_probs[parent, token]."""
    cases = _beam_cases()
    answers = []
    for log_probs, beam_scores, beams in cases:
        what = f"beam_step on {beams} beams x {log_probs.shape[-1]} tokens"
        answers.append(_as_triple(call(beam_step, log_probs, beam_scores, beams, what=what),
                                  what, beams))
    wants = [reference_beam_step(*case) for case in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _same_beams(g, w)]
    if not wrong:
        passed("beam_step", len(cases))
        return
    i = wrong[0]

    def model(f):
        return [tuple(t.flatten() for t in f(*case)) for case in cases]

    mistakes = [
        ("parents and tokens are swapped: in the flattened (beams x vocab) index, "
         "parent = index // vocab, token = index % vocab",
         model(lambda lp, bs, n: (lambda s, p, t: (s, t, p))(*reference_beam_step(lp, bs, n)))),
        ("the scores ignore the beams' running scores; add beam_scores[:, None] to log_probs "
         "before ranking", model(lambda lp, bs, n: reference_beam_step(lp, torch.zeros_like(bs),
                                                                       n))),
        ("you took the best token of each beam; rank all beams x vocab continuations together, "
         "so a strong beam may keep two children and a weak one none", model(_per_beam_best)),
        ("return the candidates best first (torch.topk sorts them)",
         model(lambda lp, bs, n: (lambda s, p, t: (s.flip(0), p.flip(0), t.flip(0)))(
             *reference_beam_step(lp, bs, n)))),
    ]
    hint = matching_mistake(answers, mistakes, _same_beams)
    log_probs, _, beams = cases[i]
    got, want = answers[i], wants[i]
    raise CheckFailed(
        f"beam_step on {beams} beams x {log_probs.shape[-1]} tokens: scores "
        f"{[round(x, 4) for x in got[0].tolist()]}, (parent, token) pairs "
        f"{list(zip(got[1].tolist(), got[2].tolist()))}; expected scores "
        f"{[round(x, 4) for x in want[0].tolist()]} and pairs "
        f"{list(zip(want[1].tolist(), want[2].tolist()))}. "
        + (hint or "Flatten beam_scores[:, None] + log_probs, take torch.topk, then parent = "
                   "index // vocab and token = index % vocab"))
