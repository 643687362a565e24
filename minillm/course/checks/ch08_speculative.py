"""Checkers for exercises/08_speculative.ipynb, and the chi-square test they (and the tests) use.

- `prompt_lookup(ids, k, max_ngram)`: the draft that copies from the context, compared with
  `minillm.speculative.PromptLookupDraft.lookup`;
- `verify_greedy(target_scores, draft_tokens)`: greedy verification with its bonus token, compared
  with `minillm.speculative.acceptance.verify_greedy`;
- `accept_step(p, q, draft_token, generator)`: the sampled acceptance rule, tested by its
  statistics (the tokens follow p) and by its use of the generator it is given.
"""

from __future__ import annotations

import random

import torch

from ...speculative.acceptance import verify_greedy
from ...speculative.drafts import PromptLookupDraft
from ._base import CheckFailed, as_int, call, checker, expect, matching_mistake, passed, short

# A toy target p and draft q over six tokens (the lesson uses the same pair).
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)
Q = torch.tensor([0.10, 0.15, 0.30, 0.05, 0.25, 0.15], dtype=torch.float64)


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test: the chance of counts at least this far from `probs` if they
    were drawn from `probs`. Near 0: the counts do not follow `probs`. A count in a cell of
    probability 0 gives 0."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    if counts.shape != probs.shape:
        raise ValueError(f"counts and probs must have the same shape, got {tuple(counts.shape)} "
                         f"and {tuple(probs.shape)}")
    if (counts[probs == 0] > 0).any():
        return 0.0
    keep = probs > 0
    expected = counts.sum() * probs[keep] / probs[keep].sum()
    statistic = ((counts[keep] - expected) ** 2 / expected).sum()
    df = int(keep.sum()) - 1
    if df < 1:
        return 1.0
    # the chi-square survival function: the regularised upper incomplete gamma function
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         statistic / 2))


def _one(accept_step, p, q, token, generator):
    got = call(accept_step, p, q, token, generator,
               what=f"accept_step(p, q, draft_token={token}, generator)")
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed(f"accept_step returned {type(got).__name__} {got!r}; return a pair "
                          "(token, accepted): the token to emit and whether the draft's token "
                          "was accepted")
    token_out, accepted = got
    if isinstance(token_out, torch.Tensor) and token_out.numel() == 1:
        token_out = int(token_out)
    if isinstance(accepted, torch.Tensor) and accepted.numel() == 1:
        accepted = bool(accepted)
    if not isinstance(token_out, int) or isinstance(token_out, bool):
        raise CheckFailed(f"the token accept_step returned is {type(token_out).__name__} "
                          f"{token_out!r}; return an int token id (int(tensor) converts one)")
    if not isinstance(accepted, bool):
        raise CheckFailed(f"`accepted` is {type(accepted).__name__} {accepted!r}; return True "
                          "or False")
    expect(0 <= token_out < len(p), f"accept_step returned token {token_out}, outside the "
                                    f"vocabulary 0..{len(p) - 1}")
    if accepted and token_out != token:
        raise CheckFailed(f"accept_step said the draft token {token} was accepted but returned "
                          f"token {token_out}; an accepted draft token is emitted as it is")
    return token_out, accepted


@checker
def check_accept_step(accept_step, draws: int = 10_000) -> None:
    """`accept_step(p, q, draft_token, generator) -> (token, accepted)` must emit tokens that
    follow the target distribution p, whatever the draft q."""
    g = torch.Generator().manual_seed(0)
    # 1. a draft that agrees with the target is always accepted
    for token in range(len(P)):
        _, accepted = _one(accept_step, P, P, token, g)
        expect(accepted, f"with q equal to p, accept_step rejected draft token {token}; when "
                         "q(x) <= p(x) the acceptance probability min(1, p(x)/q(x)) is 1")
    # 2. q(x) <= p(x): always accepted
    for _ in range(50):
        _, accepted = _one(accept_step, P, Q, 0, g)  # p(0) = 0.40 >= q(0) = 0.10
        expect(accepted, "draft token 0 has p = 0.40 >= q = 0.10, so it must always be "
                         "accepted (probability min(1, 0.40/0.10) = 1), but it was rejected")
    # 3. a token the target rules out is never emitted
    p0 = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    q0 = torch.tensor([0.6, 0.2, 0.2], dtype=torch.float64)
    for _ in range(50):
        token, accepted = _one(accept_step, p0, q0, 0, g)
        expect(not accepted and token != 0,
               f"p = {p0.tolist()} gives token 0 probability 0, so draft token 0 must be "
               f"rejected and a different token drawn; got token {token}, accepted={accepted} "
               "(a rejected token is drawn from max(0, p - q), normalised, which has no mass "
               "where p is 0)")
    # 4. every draw comes from the generator it is given
    with torch.random.fork_rng():
        _check_generator_use(accept_step)
    # 5. the statistics: tokens follow p, the acceptance rate is sum min(p, q)
    counts = torch.zeros(len(P), dtype=torch.float64)
    n_accepted = 0
    drafted = torch.multinomial(Q, draws, replacement=True, generator=g).tolist()
    for x in drafted:
        token, accepted = _one(accept_step, P, Q, x, g)
        counts[token] += 1
        n_accepted += accepted
    freq = [round(c / draws, 3) for c in counts.tolist()]
    beta = float(torch.minimum(P, Q).sum())
    rate = n_accepted / draws
    if chi_square_p_value(counts, P) > 1e-4:
        expect(abs(rate - beta) < 0.03,
               f"the tokens follow p, but {rate:.1%} of the drafts were accepted; the rule "
               f"accepts sum_x min(p(x), q(x)) = {beta:.0%} of them")
        passed("accept_step", 5)
        print(f"   {draws} draws: frequencies {freq}, target p {P.tolist()}; "
              f"{rate:.1%} accepted (theory {beta:.0%})")
        return
    if chi_square_p_value(counts, Q) > 1e-4:
        raise CheckFailed(f"the emitted tokens follow the draft q, not the target p: "
                          f"frequencies {freq}, q = {Q.tolist()}. Accept the draft token only "
                          "with probability min(1, p(x)/q(x)); otherwise draw from "
                          "max(0, p - q), normalised")
    from_p = torch.minimum(P, Q) + (1 - beta) * P
    if chi_square_p_value(counts, from_p) > 1e-4:
        raise CheckFailed(f"the acceptance looks right, but after a rejection the new token "
                          f"seems drawn from p itself: frequencies {freq}, target {P.tolist()}. "
                          "Draw it from the residual max(0, p - q), normalised to sum to 1: "
                          "p's mass that the accepted draft tokens did not already cover")
    raise CheckFailed(f"the emitted tokens do not follow the target p: frequencies {freq} over "
                      f"{draws} draws, target {P.tolist()}, and {rate:.1%} of drafts were "
                      f"accepted (should be {beta:.0%}). Accept with probability "
                      "min(1, p(x)/q(x)) (draw u uniform in [0, 1) and accept when u < that); "
                      "on rejection draw from normalise(max(0, p - q))")


def _run(accept_step, generator_seed: int, global_seed: int, draws: int = 60):
    torch.manual_seed(global_seed)
    g = torch.Generator().manual_seed(generator_seed)
    drafted = [2, 4, 5, 2, 4, 1]  # tokens the draft over-proposes: often rejected
    return [_one(accept_step, P, Q, drafted[i % len(drafted)], g) for i in range(draws)]


def _check_generator_use(accept_step) -> None:
    """The same generator seed must give the same tokens whatever the global RNG holds, and
    another seed other tokens: every draw goes through `generator`."""
    first = _run(accept_step, 123, 0)
    again = _run(accept_step, 123, 1)
    if first != again:
        raise CheckFailed("with the same generator, seeded the same, accept_step gave different "
                          "results when torch's global random state changed: it draws from the "
                          "global RNG. Pass `generator=generator` to torch.rand and to "
                          "torch.multinomial, so a seeded generation can be reproduced")
    other = _run(accept_step, 456, 0)
    if first == other:
        raise CheckFailed("accept_step gave the same 60 results with two differently seeded "
                          "generators: draw u = torch.rand((), generator=generator) and the "
                          "replacement token with torch.multinomial(..., generator=generator)")


# --- prompt lookup --------------------------------------------------------------------------------

def _lookup_cases(rng: random.Random):
    cases = [([1, 2, 3, 4, 1, 2], 3, 3), ([1, 2, 3, 1, 2, 9, 1, 2], 2, 3), ([5, 6, 7], 4, 3),
             ([7, 7, 7, 7], 3, 2), ([1, 2, 3, 9, 2, 3, 8, 2, 3], 2, 3), ([4], 3, 3), ([], 2, 3),
             ([10, 20, 30, 40, 10, 20, 30], 5, 3), ([1, 2, 3, 4, 1, 2], 0, 3),
             ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3], 4, 2)]
    for _ in range(40):
        alphabet = rng.choice([[0, 1], [0, 1, 2], [5, 17, 256, 1000]])
        ids = [rng.choice(alphabet) for _ in range(rng.randint(0, 25))]
        cases.append((ids, rng.randint(1, 6), rng.randint(1, 4)))
    return cases


def _lookup_variant(ids, k, max_ngram, *, most_recent=True, longest_first=True, self_match=False,
                    cap=True):
    if k < 1:
        return []
    sizes = range(min(max_ngram, len(ids) - 1), 0, -1)
    for n in (sizes if longest_first else reversed(list(sizes))):
        suffix = ids[-n:]
        last = len(ids) - n if self_match else len(ids) - n - 1
        starts = range(last, -1, -1) if most_recent else range(0, last + 1)
        for start in starts:
            if ids[start:start + n] == suffix:
                return list(ids[start + n:start + n + k]) if cap else list(ids[start + n:])
    return []


@checker
def check_prompt_lookup(prompt_lookup) -> None:
    """`prompt_lookup(ids, k, max_ngram)`: up to k tokens that followed the most recent earlier
    occurrence of the context's last n tokens, trying n = max_ngram first, down to 1."""
    cases = _lookup_cases(random.Random(8))
    answers = []
    for ids, k, n in cases:
        what = f"prompt_lookup({short(ids, 80)}, k={k}, max_ngram={n})"
        got = call(prompt_lookup, ids, k, n, what=what)
        expect(isinstance(got, (list, tuple)), f"{what} returned {type(got).__name__}; return a "
                                               "list of token ids ([] when nothing matches)")
        answers.append([as_int(t, f"a token {what} returned") for t in got])
    wants = [PromptLookupDraft(max_ngram=n, min_ngram=1).lookup(ids, k) for ids, k, n in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("prompt_lookup", len(cases))
        return
    i = wrong[0]

    def model(**kind):
        return [_lookup_variant(ids, k, n, **kind) for ids, k, n in cases]

    hint = matching_mistake(answers, [
        ("you took the first occurrence; take the most recent one before the end (search "
         "backwards from len(ids) - n - 1): recent text is the better guess",
         model(most_recent=False)),
        ("try the longest n-gram first (n = max_ngram, then smaller): a longer match is "
         "stronger evidence", model(longest_first=False)),
        ("the last n tokens match themselves at the end; look for an EARLIER occurrence "
         "(start at most len(ids) - n - 1)", model(self_match=True)),
        ("return at most k tokens", model(cap=False)),
    ], list.__eq__)
    ids, k, n = cases[i]
    raise CheckFailed(f"prompt_lookup({short(ids, 80)}, k={k}, max_ngram={n}) returned "
                      f"{answers[i]}, expected {wants[i]}"
                      + (f": {hint}" if hint else ": for n from max_ngram down to 1, find the "
                                                   "latest earlier place where the last n ids "
                                                   "occur and return up to k ids after it"))


# --- greedy verification --------------------------------------------------------------------------

def _verify_cases(rng: random.Random):
    cases = []
    for vocab, n in [(6, 3), (10, 1), (8, 5), (5, 0), (50, 4), (7, 6)]:
        for _ in range(5):
            gen = torch.Generator().manual_seed(rng.randint(0, 10**6))
            scores = torch.randn(n + 1, vocab, generator=gen)
            best = scores.argmax(-1).tolist()
            agree = rng.randint(0, n)  # the draft matches the target's argmax this far
            draft = best[:agree] + [(b + 1 + rng.randint(0, vocab - 2)) % vocab
                                    for b in best[agree:n]]
            cases.append((scores, draft))
    return cases


def _verify_variant(scores, draft, *, bonus=True, keep_draft=False, go_on=False,
                    count_replacement=False):
    best = scores.argmax(-1).tolist()
    out, accepted = [], 0
    for i, x in enumerate(draft):
        if best[i] == x:
            out.append(x)
            accepted += 1
            continue
        out.append(x if keep_draft else best[i])
        if not go_on:
            return out, accepted + (1 if count_replacement else 0)
    return (out + [best[len(draft)]] if bonus else out), accepted


@checker
def check_verify_greedy(verify) -> None:
    """`verify_greedy(target_scores, draft_tokens)` -> (new_tokens, n_accepted): drafted tokens
    kept while each is the target's argmax, then the target's own token at the first mismatch,
    or the bonus token after the last one when all pass."""
    cases = _verify_cases(random.Random(9))
    answers = []
    for scores, draft in cases:
        what = f"verify_greedy(target_scores of shape {tuple(scores.shape)}, {draft})"
        got = call(verify, scores, draft, what=what)
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               f"{what} returned {short(got)}; return a pair (new_tokens, n_accepted)")
        expect(isinstance(got[0], (list, tuple)),
               f"{what} returned new_tokens {short(got[0])}; return them as a list of ints")
        answers.append(([as_int(t, f"a token {what} returned") for t in got[0]],
                        as_int(got[1], f"n_accepted from {what}")))
    wants = [verify_greedy(scores, draft) for scores, draft in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != tuple(w)]
    if not wrong:
        passed("verify_greedy", len(cases))
        return
    i = wrong[0]

    def model(**kind):
        return [_verify_variant(scores, draft, **kind) for scores, draft in cases]

    hint = matching_mistake(answers, [
        ("when every drafted token passes, add the bonus token: the target's argmax after the "
         "last one, target_scores[n]. It comes free with the same forward pass",
         model(bonus=False)),
        ("at the first mismatch emit the TARGET's token (its argmax), not the draft's",
         model(keep_draft=True)),
        ("stop at the first mismatch: the tokens after it were drafted from a context that is "
         "now wrong", model(go_on=True)),
        ("n_accepted counts the drafted tokens that passed; the target's replacement is not one "
         "of them", model(count_replacement=True)),
    ], lambda a, b: tuple(a) == tuple(b))
    scores, draft = cases[i]
    raise CheckFailed(f"verify_greedy(target_scores of shape {tuple(scores.shape)}, {draft}) "
                      f"returned {answers[i]}, expected {tuple(wants[i])} (the target's argmax at "
                      f"each position: {scores.argmax(-1).tolist()})"
                      + (f": {hint}" if hint else ""))
