"""Which way round to store a weight matrix so that a one-token multiply reads it fastest.

A decode step multiplies a single row vector by each weight matrix: the work is reading the
matrix. PyTorch's kernels read the two layouts at different speeds, and which one wins depends on
the dtype and the machine (on an AVX2 CPU without native bf16, float32 is fastest as `x @ W` with
W stored (in, out), bf16 as `F.linear` with W stored (out, in)). `best_layout` times both on a
matrix the size of SmolLM2's feed-forward and remembers the answer.
"""

from __future__ import annotations

import torch

from ..utils.devices import best_time

_CHOSEN: dict[tuple, str] = {}


def time_layouts(dtype=torch.float32, device="cpu", shape=(576, 3072), repeats: int = 20) -> dict:
    """Seconds per `x @ W` for W stored (in, out) ("in_out") and (out, in) ("out_in"): the best
    of `repeats` runs of each, interleaved."""
    k, n = shape
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen).to(dtype=dtype, device=device)
    stored = {"in_out": w.t().contiguous(), "out_in": w}
    x = torch.randn(1, k, generator=gen).to(dtype=dtype, device=device)
    best = {name: float("inf") for name in stored}
    for _ in range(repeats):  # interleaved, so a busy moment of the machine hits both
        for name, m in stored.items():
            m = m if name == "in_out" else m.t()
            best[name] = min(best[name], best_time(lambda: torch.mm(x, m), device, 1))
    return best


def best_layout(dtype=torch.float32, device="cpu") -> str:
    """"in_out" or "out_in", whichever `time_layouts` finds faster (measured once per dtype and
    device type in a process)."""
    key = (dtype, torch.device(device).type)
    if key not in _CHOSEN:
        times = time_layouts(dtype, device)
        _CHOSEN[key] = min(times, key=times.get)
    return _CHOSEN[key]
