"""The memory-bandwidth bound (内存带宽瓶颈) of decoding.

Every decode step reads every weight once to produce one token per row. So a machine that reads
memory at B bytes/s cannot decode faster than B / (bytes of weights) tokens per second at batch 1,
however fast its arithmetic is. `read_bandwidth` measures B; `decode_bound` does the division.
"""

from __future__ import annotations

import time

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def read_bandwidth(device="cpu", megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second this process reads from memory: the best of `repeats` sums over a
    float32 tensor of `megabytes` MB (larger than the CPU's caches), with PyTorch's threads."""
    device = torch.device(device)
    if megabytes < 1 or repeats < 1:
        raise ValueError("megabytes and repeats must be >= 1")
    data = torch.ones(megabytes * 1024 * 1024 // 4, device=device)
    data.sum()
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        data.sum()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best


def weight_bytes(model) -> int:
    """Bytes of the weights one decode step reads. A FastLlama knows its own (its LM head is
    read, its embedding table only one row); for other models: every parameter, the embedding
    table counted once (a tied LM head reads it)."""
    known = getattr(model, "weight_bytes", None)
    if isinstance(known, int):
        return known
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    return total


def decode_bound(n_bytes: int, bandwidth: float) -> float:
    """The most tokens per second a batch-1 decode can reach: bandwidth / bytes per token."""
    if n_bytes <= 0 or bandwidth <= 0:
        raise ValueError("bytes per token and bandwidth must be positive")
    return bandwidth / n_bytes
