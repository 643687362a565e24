"""Log-probabilities (对数概率) of tokens, as the engine reports them.

They come from the model's *raw* distribution, log_softmax(logits), before any processor:
temperature, top-k/top-p, the penalties and a JSON constraint change which token is picked, not
the numbers reported (vLLM's default, "raw_logprobs"). So the same text scores the same under any
sampling settings, and a prompt's log-probabilities (echo) are comparable with a reference run of
the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLogprob:
    """One position: the token there, its log-probability, and the `top` most likely tokens at
    that position as (token id, log-probability) pairs, most likely first (empty when none were
    asked for)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: torch.Tensor, token_ids: list[int], top: int = 0
                   ) -> list[TokenLogprob]:
    """For each row of `logits` (positions, vocab): the log-probability of `token_ids[row]` and
    the `top` most likely tokens, under log_softmax of that row."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.tensor(token_ids, dtype=torch.long, device=logprobs.device)
    chosen = logprobs.gather(1, ids[:, None])[:, 0].tolist()
    if top:
        values, indices = logprobs.topk(min(top, logprobs.shape[-1]), dim=-1)
        alternatives = [tuple(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist())]
    else:
        alternatives = [()] * len(token_ids)
    return [TokenLogprob(t, lp, alt) for t, lp, alt in zip(token_ids, chosen, alternatives)]
