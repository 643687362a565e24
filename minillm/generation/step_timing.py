"""Timing the generation loop step by step, with and without the KV cache (chapter 03).

- `decode_step_times` runs the real loop (`generation.token_steps`) and times every step: step 0
  is the prefill, each later step one decode pass.
- `recompute_step_time` times what one step costs without a cache at a given sequence length: a
  forward pass over all the tokens, then the argmax. Sampling a few lengths draws the no-cache
  curve without running the whole O(n^2) loop.
"""

from __future__ import annotations

import torch

from ..utils.devices import Timer, best_time, model_device, now
from .loop import start


def decode_step_times(model, tokenizer, prompt, new_tokens: int, *, use_cache: bool = True,
                      ignore_eos: bool = True):
    """Greedy generation of exactly `new_tokens` tokens (EOS ignored unless `ignore_eos` is
    False). Returns `(seconds per step, new token ids)`; seconds[0] is the prefill."""
    setup = start(model, tokenizer, prompt, max_new_tokens=new_tokens, do_sample=False,
                  ignore_eos=ignore_eos, runner="decode_step_times")
    device = model_device(model)
    times = []
    last = now(device)
    for _ in setup.steps(use_cache):
        t = now(device)
        times.append(t - last)
        last = t
    return times, setup.sequences[0].token_ids


def recompute_step_time(model, n_tokens: int, repeats: int = 1, seed: int = 0) -> float:
    """Seconds for one no-cache decode step at sequence length `n_tokens`: a forward pass over
    all of them (random ids) and the argmax of the last position. The best of `repeats`."""
    gen = torch.Generator().manual_seed(seed)
    device = model_device(model)
    ids = torch.randint(model.config.vocab_size, (1, n_tokens), generator=gen).to(device)
    with torch.inference_mode():
        return best_time(lambda: model(ids, logits_to_keep=1)[:, -1].argmax(-1).tolist(),
                         device, repeats)


def prefill_time(model, n_tokens: int, repeats: int = 1, seed: int = 0) -> float:
    """Seconds for a prefill of `n_tokens` random tokens into a fresh KV cache (best of
    `repeats`)."""
    from .kv_cache import KVCache

    gen = torch.Generator().manual_seed(seed)
    device = model_device(model)
    ids = torch.randint(model.config.vocab_size, (1, n_tokens), generator=gen).to(device)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            cache = KVCache.for_model(model, 1, n_tokens + 1)
            with Timer(device) as t:
                model(ids, cache=cache, logits_to_keep=1)[:, -1].argmax(-1).tolist()
            best = min(best, t.seconds)
    return best


def kv_cache_formula_bytes(config, tokens: int, bytes_per_value: int, batch: int = 1) -> int:
    """2 (keys and values) x layers x kv_heads x head_dim x tokens x bytes per value x batch."""
    return (2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens
            * bytes_per_value * batch)
