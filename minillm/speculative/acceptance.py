"""The acceptance rule (接受规则) of speculative sampling, which keeps the target's distribution.

The draft drew token x from its distribution q; the target's distribution at the same place is p.

    accept x with probability min(1, p(x) / q(x))
    otherwise draw a replacement from the residual r = max(0, p - q) / sum(max(0, p - q))

Why the result is distributed as p: the chance of ending with token y is

    q(y) min(1, p(y)/q(y))                  (y was drafted and accepted)
  + (1 - beta) r(y)                          (something was rejected, y drawn from the residual)

with beta = sum_x min(p(x), q(x)), the overall acceptance probability. The first term is
min(p(y), q(y)). The residual's normaliser is sum max(0, p - q) = 1 - beta, so the second term is
max(0, p(y) - q(y)). Their sum is min(p, q) + max(0, p - q) = p(y). So each position ends up drawn
from p, whatever q is; a better q only makes acceptance (beta) more likely.

With k drafted tokens the rule runs left to right and stops at the first rejection. When all k
pass, the target's distribution after the last one is already computed (the same forward pass),
so one more token is drawn from it for free: the bonus token (额外词元). A pass thus yields between
1 and k + 1 tokens.

Greedy decoding is the special case where p and q put all their mass on their argmax: a drafted
token is accepted exactly when it is the target's argmax, and the replacement is that argmax.
"""

from __future__ import annotations

import torch


def _check_pair(p: torch.Tensor, q: torch.Tensor) -> None:
    for name, t in (("p", p), ("q", q)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a float tensor of probabilities, got "
                            f"{type(t).__name__}")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape (..., vocab), got {tuple(p.shape)} "
                         f"and {tuple(q.shape)}")
    if p.dim() == 0:
        raise ValueError("p and q must have a vocabulary axis: shape (..., vocab)")


def accept_probability(p: torch.Tensor, q: torch.Tensor, token) -> torch.Tensor:
    """min(1, p[token] / q[token]) over the last axis (1 where p >= q, also when q[token] is 0)."""
    _check_pair(p, q)
    token = torch.as_tensor(token, device=p.device, dtype=torch.long)
    p_x = p.gather(-1, token[..., None]).squeeze(-1)
    q_x = q.gather(-1, token[..., None]).squeeze(-1)
    return torch.where(p_x >= q_x, torch.ones_like(p_x), p_x / q_x.clamp_min(1e-30))


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, p - q)) over the last axis: where a rejected draft sends its mass.

    When p <= q everywhere (p == q up to rounding) a rejection cannot happen in exact arithmetic;
    the rows whose residual is all zero fall back to p."""
    _check_pair(p, q)
    residual = (p - q).clamp_min(0)
    total = residual.sum(-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(1e-30), p)


def accept_or_resample(p: torch.Tensor, q: torch.Tensor, draft_token, generator=None):
    """One step of the rule: `(token, accepted)`.

    p, q          the target's and the draft's probabilities, shape (vocab,) or (batch, vocab)
    draft_token   the token the draft drew from q: an int, or a (batch,) LongTensor
    generator     a torch.Generator for the uniform draw and the resample (None: global RNG)

    `token` is the draft token when accepted, else a draw from the residual; both come back as
    tensors shaped like `draft_token` (0-d for an int)."""
    _check_pair(p, q)
    token = torch.as_tensor(draft_token, device=p.device, dtype=torch.long)
    if token.shape != p.shape[:-1]:
        raise ValueError(f"draft_token must have shape {tuple(p.shape[:-1])} (one per row of p), "
                         f"got {tuple(token.shape)}")
    if ((token < 0) | (token >= p.shape[-1])).any():
        raise ValueError(f"draft_token must be a token id in 0..{p.shape[-1] - 1}, got "
                         f"{token.tolist()}")
    u = torch.rand(token.shape, generator=generator, device=p.device)
    accepted = u < accept_probability(p, q, token)
    residual = residual_distribution(p.float(), q.float()).reshape(-1, p.shape[-1])
    replacement = torch.multinomial(residual, 1, generator=generator).reshape(token.shape)
    return torch.where(accepted, token, replacement), accepted


def verify_sampled(target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                   draft_tokens: list[int], generator=None) -> tuple[list[int], int]:
    """Check n drafted tokens against the target: `(new_tokens, n_accepted)`.

    target_probs  (n + 1, vocab): the target's distribution at each drafted position and after
                  the last one (all from one forward pass)
    draft_probs   (n, vocab): the draft's distribution q each token was drawn from; None for a
                  deterministic draft (prompt lookup), whose q is all on the proposed token
    Returns the accepted drafted tokens followed by one more: the replacement for the first
    rejected token, or the bonus token drawn from target_probs[n] when all n pass."""
    n = len(draft_tokens)
    if target_probs.dim() != 2 or target_probs.shape[0] != n + 1:
        raise ValueError(f"target_probs must be shaped (n + 1, vocab) = ({n + 1}, vocab) for "
                         f"{n} drafted tokens, got {tuple(target_probs.shape)}")
    if draft_probs is not None and tuple(draft_probs.shape) != (n, target_probs.shape[1]):
        raise ValueError(f"draft_probs must be shaped (n, vocab) = ({n}, "
                         f"{target_probs.shape[1]}), got {tuple(draft_probs.shape)}")
    out = []
    for i, x in enumerate(draft_tokens):
        p = target_probs[i]
        if draft_probs is None:  # q is one-hot on x: accept with p(x), else draw from p without x
            q = torch.zeros_like(p)
            q[x] = 1.0
        else:
            q = draft_probs[i]
        token, accepted = accept_or_resample(p, q, x, generator)
        out.append(int(token))
        if not bool(accepted):
            return out, i
    bonus = torch.multinomial(target_probs[n].float(), 1, generator=generator)
    return out + [int(bonus)], n


def verify_greedy(target_scores: torch.Tensor, draft_tokens: list[int]) -> tuple[list[int], int]:
    """Greedy verification: accept drafted tokens while each is the target's argmax; then add
    the target's argmax at the first mismatch (or after the last token). `(new_tokens,
    n_accepted)`; the tokens are exactly what greedy decoding of the target would give."""
    n = len(draft_tokens)
    if target_scores.dim() != 2 or target_scores.shape[0] != n + 1:
        raise ValueError(f"target_scores must be shaped (n + 1, vocab) = ({n + 1}, vocab) for "
                         f"{n} drafted tokens, got {tuple(target_scores.shape)}")
    best = target_scores.argmax(-1).tolist()
    out = []
    for i, x in enumerate(draft_tokens):
        out.append(best[i])
        if best[i] != x:
            return out, i
    return out + [best[n]], n


def expected_tokens_per_pass(acceptance: float, k: int) -> float:
    """Tokens one target pass yields on average when each drafted token is accepted with
    probability `acceptance`, independently: 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)."""
    if not 0 <= acceptance <= 1:
        raise ValueError(f"acceptance must be a probability in [0, 1], got {acceptance!r}")
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    return float(sum(acceptance ** i for i in range(k + 1)))
