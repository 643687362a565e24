"""Picking the next token from processed scores: greedy (贪心) or sampling (采样)."""

from __future__ import annotations

import torch


def make_generator(config, device="cpu") -> torch.Generator:
    """A torch.Generator seeded from `config.seed` (a random seed when None): the same seed
    draws the same tokens, so the same prompt and config give the same text."""
    generator = torch.Generator(device=device)
    if config.seed is None:
        generator.seed()
    else:
        generator.manual_seed(config.seed)
    return generator


def choose_next_token(scores: torch.Tensor, config, generator: torch.Generator | None = None
                      ) -> torch.Tensor:
    """The next token of each row of `scores` (batch, vocab), as a (batch,) LongTensor.

    Greedy (do_sample=False): the highest score. Sampling: a draw from softmax(scores), made with
    `generator` (the global torch RNG when None). Run the processors on `scores` first."""
    if scores.dim() != 2:
        raise ValueError(f"scores must be shaped (batch, vocab), got {tuple(scores.shape)}")
    if not config.do_sample:
        return scores.argmax(dim=-1)
    probs = torch.softmax(scores.float(), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
