"""The weight kernels' wrappers: float32, bf16, int8 and GGUF Q4_1 weights times float32 rows.
Each checks its tensors (minillm.kernels.checks) and calls its C function (c/matmul_*.c); the
layers' hot paths call these same functions (through minillm.kernels.dispatch)."""

from __future__ import annotations

import torch

from . import checks
from .build import function
from .limits import (DECODE_BF16, DECODE_F32, DECODE_INT8, INT8_MAX_K, Q4_1_BLOCK_BYTES,
                     Q4_1_BLOCK_WEIGHTS)


def _one_row(x: torch.Tensor, k: int) -> tuple[int, ...]:
    """x, k float32 values as (K,) or (1, K), checked; the output's lead shape: () or (1,)."""
    checks.on_cpu("x", x, torch.float32)
    if x.numel() != k or x.dim() > 2:
        raise ValueError(f"x must be {k} float32 values ((K,) or (1, K)), got shape "
                         f"{tuple(x.shape)}")
    return (1,) if x.dim() == 2 else ()


def gemv_f32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x, K float32 values ((K,) or (1, K)), times weight (K, N) float32 (the (in, out) layout),
    plus `bias` (N,): (N,) or (1, N) float32 as x is (or `out`). Sixteen weight rows are
    streamed at a time in memory order while the output stays in the L1 cache."""
    k, n = checks.matrix("weight", weight, torch.float32, "(in, out)")
    lead = _one_row(x, k)
    checks.vector("bias", bias, n)
    out = torch.empty(*lead, n, dtype=torch.float32) if out is None else \
        checks.output(out, (*lead, n))
    function("gemv_f32")(weight.data_ptr(), checks.address(bias), x.data_ptr(), out.data_ptr(),
                         n, k, checks.threads(threads))
    return out


def gemm_f32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x (M, K) float32, contiguous, times weight (K, N) float32 (the (in, out) layout), plus
    `bias` (N,): (M, N) float32 (or `out`), any M >= 1. Tiles of rows by columns whose sums stay
    in registers: each weight loaded serves several rows."""
    k, n = checks.matrix("weight", weight, torch.float32, "(in, out)")
    checks.on_cpu("x", x, torch.float32)
    if x.dim() != 2 or x.shape[1] != k or x.shape[0] < 1:
        raise ValueError(f"x must be 1 or more rows of {k} float32 values, got shape "
                         f"{tuple(x.shape)}")
    checks.vector("bias", bias, n)
    m = x.shape[0]
    out = torch.empty(m, n, dtype=torch.float32) if out is None else checks.output(out, (m, n))
    if function("gemm_f32")(weight.data_ptr(), checks.address(bias), x.data_ptr(),
                            out.data_ptr(), m, n, k, checks.threads(threads)) != 0:
        raise MemoryError(f"the float32 kernel could not allocate its panel for a strip of the "
                          f"weight ({k} rows of floats)")
    return out


def gemv_bf16(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x, K float32 values ((K,) or (1, K)), times weight (N, K) bfloat16 (the (out, in)
    layout): (N,) or (1, N) float32 as x is (or `out`). Each weight is widened to float32 in
    registers."""
    n, k = checks.matrix("weight", weight, torch.bfloat16, "(out, in)")
    lead = _one_row(x, k)
    out = torch.empty(*lead, n, dtype=torch.float32) if out is None else \
        checks.output(out, (*lead, n))
    function("gemv_bf16")(weight.data_ptr(), x.data_ptr(), out.data_ptr(), n, k,
                          checks.threads(threads))
    return out


def gemm_bf16(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x, rows of K float32 values, times weight (N, K) bfloat16 (the (out, in) layout), plus
    `bias` (N,): (rows, N) float32. Where the CPU has AMX's bf16 tiles (`gemm_bf16_amx`), K is a
    multiple of 32, N at least 32 and there are 2 rows or more, x is rounded to bf16 (nearest even, as
    `x.to(torch.bfloat16)`) and the tiles add the exact products in float32, as transformers'
    bf16 multiplies. Elsewhere one strip of the weight at a time is widened to float32 and
    multiplied by gemm_f32's tiles: the sums of widening the weight and multiplying in float32."""
    n, k = checks.matrix("weight", weight, torch.bfloat16, "(out, in)")
    x = checks.rows("x", x, k, contiguous=False).contiguous()
    checks.vector("bias", bias, n)
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    if function("gemm_bf16")(weight.data_ptr(), checks.address(bias), x.data_ptr(),
                             out.data_ptr(), x.shape[0], n, k, checks.threads(threads)) != 0:
        raise MemoryError(f"the bf16 kernel could not allocate its buffers for {x.shape[0]} "
                          f"rows of {k} values (x rounded, or float32 strips of the weight)")
    return out


def project_rows_unchecked(kind: int, x: torch.Tensor, weight: torch.Tensor,
                           bias: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                           threads: int | None = None) -> torch.Tensor:
    """x (rows, K) float32 on the CPU times a layer's `weight` in format `kind` (limits.DECODE_*:
    float32 (K, N), bf16 (N, K), int8 (N, K) with its `scale`), plus `bias`: (rows, N) float32.
    The rows go to the format's kernels as the C table (c/project.c) says, the table the decode
    step in one C call multiplies through too. No checks: for a layer whose weights its route
    checked (minillm.kernels.dispatch), or the C reads out of bounds."""
    x = x if x.is_contiguous() else x.contiguous()
    rows, k = x.shape
    n = weight.shape[1] if kind == DECODE_F32 else weight.shape[0]
    out = torch.empty(rows, n, dtype=torch.float32)
    if function("project_rows")(kind, weight.data_ptr(), checks.address(scale),
                                checks.address(bias), x.data_ptr(), out.data_ptr(), rows, n, k,
                                torch.get_num_threads() if threads is None else threads) != 0:
        raise MemoryError(f"the kernel could not allocate its buffers for {rows} rows of {k} "
                          "values (x's rounded copy, or a float32 panel of the weight)")
    return out


def rows_f32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             threads: int | None = None) -> torch.Tensor:
    """x, rows of K float32 values, times weight (K, N) float32 (the (in, out) layout), plus
    `bias`: one row streams the weight (gemv_f32), more share each weight (gemm_f32)."""
    k, n = checks.matrix("weight", weight, torch.float32, "(in, out)")
    x = checks.rows("x", x, k, contiguous=False)
    checks.vector("bias", bias, n)
    return project_rows_unchecked(DECODE_F32, x, weight, bias, None, checks.threads(threads))


def rows_bf16(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x, rows of K float32 values, times weight (N, K) bfloat16 (the (out, in) layout), plus
    `bias`: one row streams the weight (gemv_bf16, the bias added after), more go to gemm_bf16
    (on AMX's tiles with x rounded to bf16, or strips of the weight widened for gemm_f32's)."""
    n, k = checks.matrix("weight", weight, torch.bfloat16, "(out, in)")
    x = checks.rows("x", x, k, contiguous=False)
    checks.vector("bias", bias, n)
    return project_rows_unchecked(DECODE_BF16, x, weight, bias, None, checks.threads(threads))


def gemm_int8(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
              bias: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x, rows of K float32 values, times the int8 weight (N, K) with one float32 scale per
    output row (N,), plus `bias` (N,): (rows, N) float32. x is rounded to int16 per row and
    multiplied in integers, INT8_MAX_ROWS rows a call; K at most INT8_MAX_K."""
    check_int8_weights(qweight, scale, bias)
    x = checks.rows("x", x, qweight.shape[1], contiguous=False)
    return project_rows_unchecked(DECODE_INT8, x, qweight, bias, scale, checks.threads(threads))


def gemm_int8_unchecked(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                        bias: torch.Tensor | None) -> torch.Tensor:
    """`gemm_int8` without its checks, for a layer whose weights `check_int8_weights` passed when
    its route was planned (minillm.kernels.dispatch): x (rows, K) float32 on the CPU, the rest
    as checked, or the C reads out of bounds. A decode step calls this 121 times a token."""
    return project_rows_unchecked(DECODE_INT8, x, qweight, bias, scale)


def check_int8_weights(qweight: torch.Tensor, scale: torch.Tensor,
                       bias: torch.Tensor | None) -> None:
    """What `gemm_int8` checks of a layer's weights, once: a ValueError naming what is wrong."""
    n, k = checks.matrix("qweight", qweight, torch.int8, "(out, in)")
    if k > INT8_MAX_K:
        raise ValueError(f"the int8 kernel takes rows of at most {INT8_MAX_K:,} values "
                         f"(INT8_MAX_K), got {k:,}")
    checks.vector("scale", scale, n)
    checks.vector("bias", bias, n)


def gemm_q4_1(x: torch.Tensor, blocks: torch.Tensor, bias: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x, rows of K float32 values, times a weight stored as GGUF Q4_1 blocks, `blocks` uint8
    (N, K / 32 * 20), plus `bias` (N,): (rows, N) float32. Like llama.cpp's, the kernel rounds
    each block of 32 values of x to int8 (its own scale) and multiplies integers."""
    n, width = checks.matrix("blocks", blocks, torch.uint8, "(out, blocks of the row)")
    if width % Q4_1_BLOCK_BYTES:
        raise ValueError(f"blocks must hold {Q4_1_BLOCK_BYTES} bytes per block of "
                         f"{Q4_1_BLOCK_WEIGHTS} weights, got rows of {width} bytes")
    k = width // Q4_1_BLOCK_BYTES * Q4_1_BLOCK_WEIGHTS
    x = checks.rows("x", x, k, contiguous=False).contiguous()
    checks.vector("bias", bias, n)
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    if function("gemm_q4_1")(blocks.data_ptr(), checks.address(bias), x.data_ptr(),
                             out.data_ptr(), x.shape[0], n, k,
                             checks.threads(threads)) != 0:
        raise MemoryError(f"the Q4_1 kernel could not allocate x's rounded copy "
                          f"({x.shape[0]} x {k}) or its tiles' buffers")
    return out
