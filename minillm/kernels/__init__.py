"""minillm's CPU kernels: C for the few operations a decode step spends its time in.

Decoding multiplies one row (or a few) by every weight matrix, so a decode step's time is the
time to read the weights. The weight kernels read each weight once, in the order it lies in
memory, and multiply it in registers (widened to float32, or as an integer against x rounded to
int16 (int8) or to int8 per block of 32 (Q4_1, as llama.cpp does)): fewer bytes read, and the
speed follows. The small operations of a decode step (its RMSNorms, its attention over the
cache) are one call each, where PyTorch's general kernels cost more per call than their
arithmetic.

    c/simd.h               the vector helpers, one set of names for AVX2 and AVX-512
    c/minillm_kernels.h    every kernel's signature, declared once (signatures.py reads it)
    c/matmul_f32.c         gemv_f32, gemm_f32: float32 weights, (in, out) layout
    c/matmul_bf16.c        gemv_bf16, gemm_bf16: bf16 weights, (out, in) layout
    c/gemm_tile.h          the register tile and the panel loop gemm_f32 and gemm_bf16 share
    c/amx.h                what the AMX paths share (a prompt's rows of bf16, int8 and Q4_1):
                           Linux's permission to use the tiles, their configuration, and the
                           driver that packs the weights a slice at a time and runs the tiles
    c/matmul_int8.c        gemm_int8: int8 weights with a scale per output row
    c/matmul_q4_1.c        gemm_q4_1: the GGUF file's own Q4_1 blocks
    c/norm.c, attention.c  rms_norm_f32; decode_attention (contiguous cache), paged_scores and
                           paged_values (the engine's paged pool, read in place)
    c/rope.c               rope_write_cache: a decode step's RoPE of q and k and its cache write
    c/activation.c         silu_mul_f32: SiLU(gate) * up
    c/decode_blocks.c      decode_blocks: a decode step's blocks, the kernels above in one call
    build.py               compiled on first use with the system's C compiler, for this CPU
    limits.py              the sizes the C is built for (MAX_HEAD_DIM, ...), named once
    matmul.py, norm.py,    one wrapper per kernel: checks its tensors (dtype, shape, the CPU:
    attention.py, rope.py, a GPU tensor never reaches C), then calls it; the fused decode step
    activation.py          calls the small operations' `_unchecked` twins after checking its
                           tensors once per step
    dispatch.py            which kernel an operation gets (C or PyTorch), the row limits, and
                           the switch MINILLM_NO_KERNEL

Where the kernels cannot be built (not x86-64, no AVX2, no C compiler) or are switched off, the
layers run PyTorch's kernels and give the same tokens, slower; `minillm.load` says so once and
`python -m minillm doctor` measures the difference. Measured speeds: docs/benchmarks.md.
"""

from .attention import decode_attention, paged_decode_attention
from .build import KernelBuildWarning, Status, cannot_build, status
from .dispatch import SWITCH, without_kernels
from .limits import INT8_MAX_K, INT8_MAX_ROWS, MAX_HEAD_DIM
from .matmul import gemm_bf16, gemm_f32, gemm_int8, gemm_q4_1, gemv_bf16, gemv_f32
from .activation import silu_mul
from .norm import rms_norm
from .rope import rope_write_cache

__all__ = ["gemv_f32", "gemm_f32", "gemv_bf16", "gemm_bf16", "gemm_int8", "gemm_q4_1", "rms_norm",
           "rope_write_cache", "silu_mul", "decode_attention", "paged_decode_attention",
           "status", "available", "cannot_build", "without_kernels", "KernelBuildWarning",
           "Status", "SWITCH", "MAX_HEAD_DIM", "INT8_MAX_ROWS", "INT8_MAX_K"]


def available() -> bool:
    """Whether the kernels are built and can be called here (building them on first ask)."""
    return status().built
