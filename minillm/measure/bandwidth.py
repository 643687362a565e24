"""The memory-bandwidth bound (内存带宽瓶颈) of decoding.

Every decode step reads every weight once to produce one token per row. So a machine that reads
memory at B bytes/s cannot decode faster than B / (bytes of weights) tokens per second at batch 1,
however fast its arithmetic is. `read_bandwidth` measures B; `decode_bound` does the division.
"""

from __future__ import annotations

import torch

from ..utils.devices import best_time


def read_bandwidth(device="cpu", megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second this process reads from memory: the best of `repeats` sums over a
    float32 tensor of `megabytes` MB (larger than the CPU's caches), with PyTorch's threads."""
    device = torch.device(device)
    if megabytes < 1 or repeats < 1:
        raise ValueError("megabytes and repeats must be >= 1")
    data = torch.ones(megabytes * 1024 * 1024 // 4, device=device)
    return data.numel() * 4 / best_time(data.sum, device, repeats, warmup=1)


def decode_bound(n_bytes: int, bandwidth: float) -> float:
    """The most tokens per second a batch-1 decode can reach: bandwidth / bytes per token."""
    if n_bytes <= 0 or bandwidth <= 0:
        raise ValueError("bytes per token and bandwidth must be positive")
    return bandwidth / n_bytes
