"""The memory-bandwidth bound (内存带宽瓶颈) of decoding.

Every decode step reads every weight once to produce one token per row. So a machine that reads
memory at B bytes/s cannot decode faster than B / (bytes of weights) tokens per second at batch 1,
however fast its arithmetic is. `read_bandwidth` measures B; `decode_bound` does the division.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..utils.devices import best_time


def last_level_cache_bytes() -> int | None:
    """The size of this CPU's largest cache (Linux's sysfs), or None where the system does not
    say."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=None)


def beyond_caches_megabytes(device="cpu") -> int:
    """A buffer that no cache holds: 256 MB, or on a CPU four times its largest cache where
    that is more. A read of a buffer the caches hold measures the cache, not memory: an AMD
    EPYC's 64 MB buffer read at twice the bandwidth its decode steps see."""
    llc = last_level_cache_bytes() if torch.device(device).type == "cpu" else None
    return max(256, -(-4 * (llc or 0) // (1 << 20)))


def read_bandwidth(device="cpu", megabytes: int | None = None, repeats: int = 5,
                   calls: int | None = None) -> float:
    """Bytes per second this process reads from memory: the best of `repeats` timings of
    `calls` sums over a float32 tensor of `megabytes` MB (by default `beyond_caches_megabytes`:
    larger than the CPU's caches), with PyTorch's threads. Each timing waits for the device
    once, after all its calls: on a GPU one sum of 256 MB takes well under a millisecond, about
    what a launch and a synchronization cost, so timing one sum per sync would measure them too.
    `calls` defaults to 1 on a CPU (nothing to wait for) and 20 elsewhere."""
    device = torch.device(device)
    calls = (1 if device.type == "cpu" else 20) if calls is None else calls
    megabytes = beyond_caches_megabytes(device) if megabytes is None else megabytes
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
