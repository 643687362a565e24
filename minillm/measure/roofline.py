"""The roofline (屋顶线模型): how fast a piece of work can run on a machine, from two numbers.

A machine does at most `peak_flops` floating-point operations a second and reads at most
`bandwidth` bytes a second. Work that does F operations on B bytes read has an **arithmetic
intensity** (算术强度) of I = F / B operations per byte. It cannot run faster than

    attainable(I) = min(peak_flops, I x bandwidth)  operations a second.

Below the ridge point I* = peak_flops / bandwidth the slanted roof binds (bandwidth-bound);
above it the flat roof (compute-bound). A decode step at batch 1 reads every weight to do two
operations with it: about 0.5 FLOP per byte in float32, far left of any machine's ridge. B rows
in one step (a batch, chapter 06) or k tokens of one sequence in one pass (a speculative
verify, chapter 08) reuse each weight B or k times: the same bytes, B or k times the operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .bandwidth import read_bandwidth
from ..utils.devices import best_time


@dataclass(frozen=True)
class Roof:
    """A machine's two limits: FLOP/s and bytes/s."""

    peak_flops: float
    bandwidth: float

    def __post_init__(self):
        for name in ("peak_flops", "bandwidth"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    @property
    def ridge(self) -> float:
        """The intensity (FLOP per byte) where the two roofs meet."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s work of this intensity can reach here."""
        if not intensity > 0:
            raise ValueError(f"intensity must be positive, got {intensity!r}")
        return min(self.peak_flops, intensity * self.bandwidth)


def matmul_weights(config) -> int:
    """Weights a Llama-family forward pass multiplies with, per token: every layer's q, k, v,
    o, gate, up and down matrices and the LM head (the embedding lookup reads one row only)."""
    d, attn_width = config.hidden_size, config.n_heads * config.head_dim
    kv_width = config.n_kv_heads * config.head_dim
    per_layer = d * (attn_width + 2 * kv_width) + attn_width * d + 3 * d * config.intermediate_size
    return config.n_layers * per_layer + config.vocab_size * d


def step_cost(config, rows: int, context: int, bytes_per_weight: int = 4,
              bytes_per_value: int = 4) -> tuple[int, int]:
    """(FLOPs, bytes read) of one forward pass that feeds `rows` new tokens, each attending over
    `context` cached keys: `rows` sequences of one token (a decode step at batch `rows`) or one
    sequence's `rows` tokens (a verify pass, a prompt chunk) cost the same to first order.
    FLOPs: 2 per weight per row, plus attention's q·k and p·v (4 x heads x head_dim per key).
    Bytes: the weights once, plus each row's cached keys and values."""
    for name, value in [("rows", rows), ("bytes_per_weight", bytes_per_weight),
                        ("bytes_per_value", bytes_per_value)]:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(context, int) or context < 0:
        raise ValueError(f"context must be an int >= 0, got {context!r}")
    c = config
    weights = matmul_weights(c)
    attention = 4 * c.n_layers * c.n_heads * c.head_dim * context
    kv_per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * bytes_per_value
    flops = rows * (2 * weights + attention)
    n_bytes = weights * bytes_per_weight + rows * context * kv_per_token
    return flops, n_bytes


@dataclass(frozen=True)
class MatmulPeak:
    """The flat roof as measured: FLOP/s, and the kernel that reached it."""

    flops: float
    kernel: str  # "PyTorch's matmul" or minillm's kernel ("minillm's gemm_f32")


def fastest_matmul(device="cpu", n: int = 1024, repeats: int = 3,
                   dtype=torch.float32) -> MatmulPeak:
    """FLOP/s of the best of `repeats` (n x n) @ (n x n) products, by the fastest kernel the
    engine has here: PyTorch's matmul, and on a CPU also minillm's own multiply for `dtype`
    (gemm_f32, gemm_bf16) where it is built. A roof must be the fastest kernel's: a prefill
    through minillm's kernel can outrun PyTorch's matmul (whose library may not use every
    vector unit of the CPU), and would pass a roof measured with PyTorch's alone."""
    device = torch.device(device)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    found = [MatmulPeak(2 * n ** 3 / best_time(lambda: a @ b, device, repeats, warmup=1),
                        "PyTorch's matmul")]
    ours = _minillm_matmul(device, dtype, n)
    if ours is not None:
        name, run = ours
        found.append(MatmulPeak(2 * n ** 3 / best_time(run, device, repeats, warmup=1),
                                f"minillm's {name}"))
    return max(found, key=lambda peak: peak.flops)


def _minillm_matmul(device, dtype, n: int):
    """(name, a call that multiplies n float32 rows by an n x n weight) through minillm's kernel
    for weights in `dtype`, or None where that kernel does not run here."""
    from ..kernels import dispatch, matmul

    if dtype not in (torch.float32, torch.bfloat16) or not dispatch.cpu_kernels(device):
        return None
    x = torch.randn(n, n)
    if dtype is torch.float32:
        w = torch.randn(n, n)  # (in, out)
        return "gemm_f32", lambda: matmul.gemm_f32(x, w)
    w = torch.randn(n, n, dtype=torch.bfloat16)  # (out, in)
    return "gemm_bf16", lambda: matmul.gemm_bf16(x, w)


def peak_matmul_flops(device="cpu", n: int = 1024, repeats: int = 3,
                      dtype=torch.float32) -> float:
    """The flat roof's FLOP/s: `fastest_matmul`'s."""
    return fastest_matmul(device, n, repeats, dtype).flops


def measure_roof(device="cpu", megabytes: int | None = None, n: int = 1024,
                 dtype=torch.float32) -> Roof:
    """This machine's roof for work in `dtype` (the model's own: a bf16 roof under a float32
    model's points would place them against arithmetic it does not do): the matrix-multiply
    rate in that dtype (the fastest kernel's) and the read bandwidth, measured now."""
    return Roof(peak_matmul_flops(device, n, dtype=dtype),
                read_bandwidth(device, megabytes=megabytes))
