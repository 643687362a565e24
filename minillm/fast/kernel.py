"""A bf16 matrix-vector kernel for CPUs without bf16 arithmetic (AVX2, no AVX-512 BF16).

On such CPUs PyTorch multiplies bf16 matrices in a slow generic loop (a few GB/s), so bf16
weights, though half the bytes, decode no faster than float32. This kernel reads each bf16 weight
once, widens it to float32 in registers (a bf16 is the top half of a float32: shift left by 16)
and accumulates with fused multiply-adds: the bytes read halve and the speed follows.

It is 30 lines of C, compiled on first use with the system's C compiler (`cc`) into minillm's
cache folder and called through ctypes. Where there is no compiler, no x86-64 AVX2 CPU, or the
compile fails, `load()` returns None and minillm.fast uses PyTorch's own kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* y[n] = sum_k W[n][k] * x[k]; W is bf16 (uint16), row-major (N, K); x and y are float32. */
void gemv_bf16(const uint16_t *W, const float *x, float *y, int64_t N, int64_t K, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = W + n * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i w0 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k))), 16);
            __m256i w1 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k + 8))), 16);
            a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(w0), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(w1), _mm256_loadu_ps(x + k + 8), a1);
        }
        __m256 a = _mm256_add_ps(a0, a1);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        float total = _mm_cvtss_f32(s);
        for (; k < K; k++) {
            uint32_t bits = (uint32_t)row[k] << 16;
            float w;
            memcpy(&w, &bits, 4);
            total += w * x[k];
        }
        y[n] = total;
    }
}
"""

_LOADED: dict[str, object] = {}


def _supported() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return False
    return capability in ("AVX2", "AVX512")


def load():
    """The compiled kernel (a ctypes function), or None where it cannot be built here."""
    if "gemv" in _LOADED:
        return _LOADED["gemv"]
    _LOADED["gemv"] = None
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if os.environ.get("MINILLM_NO_KERNEL") or not _supported() or compiler is None:
        return None
    from ..files import cache_dir

    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    folder = cache_dir() / "kernels"
    library = folder / f"gemv_bf16_{digest}.so"
    try:
        if not library.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "gemv_bf16.c"
                src.write_text(SOURCE)
                built = Path(tmp) / library.name
                subprocess.run([compiler, "-O3", "-mavx2", "-mfma", "-fopenmp", "-shared",
                                "-fPIC", str(src), "-o", str(built)], check=True,
                               capture_output=True, timeout=120)
                os.replace(built, library)  # atomic: a parallel build never sees half a file
        lib = ctypes.CDLL(str(library))
    except (OSError, subprocess.SubprocessError):
        return None
    fn = lib.gemv_bf16
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_int]
    fn.restype = None
    _LOADED["gemv"] = fn
    return fn


def gemv_bf16(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x (K,) or (1, K) float32, weight (N, K) bf16 contiguous on the CPU -> (N,) float32 (or
    `out`). Raises RuntimeError where the kernel is not available (see `load`)."""
    fn = load()
    if fn is None:
        raise RuntimeError("the bf16 kernel is not available on this machine")
    if weight.dtype != torch.bfloat16 or not weight.is_contiguous() or weight.dim() != 2:
        raise ValueError("weight must be a contiguous 2-D bfloat16 tensor")
    n, k = weight.shape
    x = x.reshape(-1)
    if x.dtype != torch.float32 or x.numel() != k or not x.is_contiguous():
        raise ValueError(f"x must be {k} contiguous float32 values, got {tuple(x.shape)} "
                         f"{x.dtype}")
    if out is None:
        out = torch.empty(n, dtype=torch.float32)
    fn(weight.data_ptr(), x.data_ptr(), out.data_ptr(), n, k, threads or torch.get_num_threads())
    return out
