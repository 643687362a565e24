"""Checkers for exercises/08_speculative.ipynb, and the chi-square test they (and the tests) use."""

from __future__ import annotations

import torch

from ._base import CheckFailed, call, expect, passed

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
    got = call(accept_step, p.clone(), q.clone(), token, generator)
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
               f"rejected and a different token drawn; got token {token}, accepted={accepted}")
    # 4. the statistics: tokens follow p, the acceptance rate is sum min(p, q)
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
        passed("accept_step", 4)
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
