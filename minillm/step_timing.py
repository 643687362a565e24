"""Timing the generation loop step by step, with and without the KV cache (chapter 03).

- `decode_step_times` runs the real loop (`generation.token_steps`) and times every step: step 0
  is the prefill, each later step one decode pass.
- `recompute_step_time` times what one step costs without a cache at a given sequence length: a
  forward pass over all the tokens, then the argmax. Sampling a few lengths draws the no-cache
  curve without running the whole O(n^2) loop.
"""

from __future__ import annotations

import time

import torch

from .generation import start, token_steps


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_step_times(model, tokenizer, prompt, new_tokens: int, *, use_cache: bool = True,
                      ignore_eos: bool = True):
    """Greedy generation of exactly `new_tokens` tokens (EOS ignored unless `ignore_eos` is
    False). Returns `(seconds per step, new token ids)`; seconds[0] is the prefill."""
    prompts, sequences, config, batch, pad_id = start(model, tokenizer, prompt,
                                                      max_new_tokens=new_tokens,
                                                      do_sample=False, ignore_eos=ignore_eos)
    if batch:
        raise ValueError("decode_step_times takes one prompt")
    device = next(model.parameters()).device
    times = []
    _sync(device)
    last = time.perf_counter()
    for _ in token_steps(model, prompts, sequences, config, use_cache=use_cache, pad_id=pad_id):
        _sync(device)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times, sequences[0].token_ids


def recompute_step_time(model, n_tokens: int, repeats: int = 1, seed: int = 0) -> float:
    """Seconds for one no-cache decode step at sequence length `n_tokens`: a forward pass over
    all of them (random ids) and the argmax of the last position. The best of `repeats`."""
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    ids = torch.randint(model.config.vocab_size, (1, n_tokens), generator=gen).to(device)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            _sync(device)
            begin = time.perf_counter()
            model(ids)[:, -1].argmax(-1).tolist()
            _sync(device)
            best = min(best, time.perf_counter() - begin)
    return best


def prefill_time(model, n_tokens: int, repeats: int = 1, seed: int = 0) -> float:
    """Seconds for a prefill of `n_tokens` random tokens into a fresh KV cache (best of
    `repeats`)."""
    from .kv_cache import KVCache

    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    ids = torch.randint(model.config.vocab_size, (1, n_tokens), generator=gen).to(device)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            cache = KVCache.for_model(model, 1, n_tokens + 1)
            _sync(device)
            begin = time.perf_counter()
            model(ids, cache=cache)[:, -1].argmax(-1).tolist()
            _sync(device)
            best = min(best, time.perf_counter() - begin)
    return best


def kv_cache_formula_bytes(config, tokens: int, bytes_per_value: int, batch: int = 1) -> int:
    """2 (keys and values) x layers x kv_heads x head_dim x tokens x bytes per value x batch."""
    return (2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens
            * bytes_per_value * batch)
