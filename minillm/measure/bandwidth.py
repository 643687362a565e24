"""The memory-bandwidth bound (内存带宽瓶颈) of decoding.

Every decode step reads every weight once to produce one token per row. So a machine that reads
memory at B bytes/s cannot decode faster than B / (bytes of weights) tokens per second at batch 1,
however fast its arithmetic is. `read_bandwidth` measures B; `decode_bound` does the division.
"""

from __future__ import annotations

import torch

from ..utils.devices import best_time


def read_bandwidth(device="cpu", megabytes: int = 256, repeats: int = 5,
                   calls: int | None = None) -> float:
    """Bytes per second this process reads from memory: the best of `repeats` timings of
    `calls` sums over a float32 tensor of `megabytes` MB (larger than the CPU's caches), with
    PyTorch's threads. Each timing waits for the device once, after all its calls: on a GPU one
    sum of 256 MB takes well under a millisecond, about what a launch and a synchronization
    cost, so timing one sum per sync would measure them too. `calls` defaults to 1 on a CPU
    (nothing to wait for) and 20 elsewhere."""
    device = torch.device(device)
    calls = (1 if device.type == "cpu" else 20) if calls is None else calls
    if megabytes < 1 or repeats < 1 or calls < 1:
        raise ValueError("megabytes, repeats and calls must be >= 1")
    data = torch.ones(megabytes * 1024 * 1024 // 4, device=device)

    def sums():
        for _ in range(calls):
            data.sum()

    return calls * data.numel() * 4 / best_time(sums, device, repeats, warmup=1)


def decode_bound(n_bytes: int, bandwidth: float) -> float:
    """The most tokens per second a batch-1 decode can reach: bandwidth / bytes per token."""
    if n_bytes <= 0 or bandwidth <= 0:
        raise ValueError("bytes per token and bandwidth must be positive")
    return bandwidth / n_bytes
