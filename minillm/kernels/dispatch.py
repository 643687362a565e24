"""Which kernel runs an operation: minillm's C kernels or PyTorch's. Decided here and nowhere else.

    operation         minillm's kernel (float32 rows, CPU)   up to           else (PyTorch's)
    float32 linear    gemv_f32, gemm_f32 ((in, out) layout)  f32_max_rows()  F.linear
                                                             (32 on Intel)
    bf16 linear       gemv_bf16, gemm_bf16 ((out, in);       BF16_MAX_ROWS   bf16 matmul; from
                      2 rows: AMX's bf16 tiles, x                            UPCAST_ROWS widened
                      rounded to bf16)
    int8 linear       gemm_int8 (a prompt: AMX's tiles,      int8_max_rows() _weight_int8pack_mm
                      else groups of weight rows)            (any)
    Q4_1 linear       gemm_q4_1 (a prompt: AMX's tiles,      Q4_1_MAX_ROWS   dequantize (x
                      else groups of weight rows in the                      rounded as the
                      tiles' order)                                          kernel rounds it)
    decode RMSNorm    rms_norm_f32                           any             F.rms_norm
    decode RoPE and   rope_write_cache (contiguous cache)    any             apply_rope, copies
    cache write
    SiLU*mul (a fast  silu_mul_f32                           any             F.silu, mul_
    model's)
    prompt attention  (PyTorch's SDPA; a fast bf16 model's   -               SDPA in float32
    (causal)          in bf16 with AMX: bf16_arithmetic)
    decode attention  decode_attention (contiguous cache)    any             SDPA
    paged attention   paged_scores, paged_values             decode steps    gather, then SDPA

How a linear layer's rows go to its format's kernels (one row to a gemv, more to a gemm; int8
INT8_MAX_ROWS rows a call) is the C table of c/project.c, one entry per format: the routes here
call it (matmul.rows_f32, rows_bf16, gemm_int8) and so does the decode step in one C call
(decode_blocks.c), so the policy is written once. The row limits above decide which rows reach
it at all.

The layers ask when they are built and again after every device or dtype change (`.to()`,
`.cuda()`, `.float()`, `.half()`: nn.Module's `_apply`): FastLinear, Int8Linear and Q41Linear
(`RoutedLinear`), the fast path's fused decode step (`decode_step`, each step, before it touches
the C library) and the engine's PagedBatch (`paged_attention`). A tensor on a GPU is never routed
to a C kernel (and the kernels' wrappers refuse one), and nothing is built for a GPU.

MINILLM_NO_KERNEL=1 (any non-empty value) switches the kernels off for every layer: decoding
runs on PyTorch's kernels, with the same greedy tokens (tested; for Q4_1, PyTorch rounds x as
the kernel does, and the tokens agree up to a near tie: x's rounding is a step function), and
nothing is compiled. The
switch is read when a layer plans its route and by every decode step; `without_kernels()` sets
it for a block. The wrappers themselves (minillm.kernels.gemv_f32, ...) still run when called.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch

from ..utils.wording import text
from . import build, matmul
from .limits import MAX_HEAD_DIM

SWITCH = "MINILLM_NO_KERNEL"

# Rows up to which gemm_f32 takes a float32 layer (scripts/bench_gemm_f32.py against PyTorch's
# multiply): with AVX-512 every count (on the AMD EPYC faster at every count up to a 2,048-token
# prompt; on the Sapphire Rapids faster up to 32 rows, about 0.9x MKL's from 64, as
# docs/benchmarks.md shows); with AVX2 (4-row tiles), up to 8 rows.
F32_MAX_ROWS = {"AVX-512": 1 << 20, "AVX2": 8}
# On an Intel CPU PyTorch's float32 multiply is MKL's, built for it: on the Sapphire Rapids it is
# faster than gemm_f32 from 48 rows (0.88-0.94x at 48, 64 and 512 rows) and a 512-token prefill
# through it beats transformers' (docs/benchmarks.md). There PyTorch takes rows beyond these.
F32_MAX_ROWS_BESIDE_MKL = 32
# Rows up to which gemv_bf16 (one row) and gemm_bf16 (more) take a bf16 layer's float32 rows.
# With AVX-512, against PyTorch's paths before it (scripts/bench_prefill_kernels.py): faster from
# 8 rows to a 512-token prompt, the whole prefill included; at 2-4 rows, without AMX, slower than
# PyTorch's bf16 matmul, taken for float32 sums all the same. With AMX, gemm_bf16 rounds x to
# bf16 on the tiles from 2 rows, as PyTorch's matmul does. With AVX2 no row count was clearly
# faster: one row.
BF16_MAX_ROWS = {"AVX-512": 1 << 20, "AVX2": 1}
# Rows up to which an int8 layer that no kernel takes uses PyTorch's weight-only int8 kernel
# (decode steps, batched); more rebuild the float weight once for the call and multiply with
# PyTorch, faster there (int8_pytorch_path).
QUANT_MAX_ROWS = 16
# Rows up to which int8 weights go through gemm_int8, which multiplies a prompt's many rows on
# AMX's tiles or on groups of weight rows: every count (scripts/bench_gemm_int8.py, SmolLM2's
# int8 layers: on AMX the kernel 4.5-30x faster than PyTorch's path at each count from 1 row to
# a 512-token prompt; without AMX, docs/benchmarks.md, faster than rebuilding the float weight
# for PyTorch's multiply at each level, AVX2's measured against MKL held to AVX2).
INT8_PROMPT_MAX_ROWS = 1 << 20
# Rows up to which Q4_1 weights go through gemm_q4_1, a prompt's included (from 16 rows on AMX's
# int8 tiles where the CPU has them, else groups of weight rows on the vector units): faster
# than rebuilding the float weight for PyTorch's multiply at each level (docs/benchmarks.md;
# AVX2's measured against MKL held to AVX2).
Q4_1_MAX_ROWS = {"AVX-512": 1 << 20, "AVX2": 1 << 20}
# Rows from which bf16/fp16 weights times float32 rows on a CPU are widened to float32 for the
# call: at many rows the multiply is compute-bound, and PyTorch's float32 kernels are far faster
# there than its bf16/fp16 ones on a CPU without bf16 arithmetic.
UPCAST_ROWS = 8
# The weight layout each one-row kernel reads: gemv_f32 streams (in, out), gemv_bf16 (out, in).
KERNEL_LAYOUTS = {torch.float32: "in_out", torch.bfloat16: "out_in"}


def switched_off() -> bool:
    return bool(os.environ.get(SWITCH))


@contextmanager
def without_kernels():
    """A block in which every layer that plans a route, and every decode step, takes PyTorch's
    kernels (MINILLM_NO_KERNEL set, then restored)."""
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = before


def cpu_kernels(device) -> bool:
    """Whether tensors on `device` may go to minillm's kernels: a CPU, the switch not set, and
    the kernels built here (on first ask). A GPU device answers False without building."""
    device = device if isinstance(device, torch.device) else torch.device(device)
    return device.type == "cpu" and not switched_off() and build.library() is not None


def why_not(device) -> str | None:
    """Why tensors on `device` do not go to minillm's kernels, or None when they do."""
    device = device if isinstance(device, torch.device) else torch.device(device)
    if device.type != "cpu":
        return f"they are CPU code, and this model is on {device}"
    if switched_off():
        return f"switched off by {SWITCH}"
    state = build.status()
    return None if state.built else state.reason


def describe(device) -> str:
    """One line: which kernels the fast path decodes with on `device`, or why PyTorch's; in the
    reader's language (minillm.utils.wording: a Chinese notebook prints it in Chinese)."""
    reason = why_not(device)
    if reason is None:
        return text("minillm's C kernels ({label}) decode on the CPU",
                    "minillm 的 C 算子（{label}）在 CPU 上负责解码", label=build.status().label)
    return text("minillm's C kernels are not used ({reason}): decoding runs on PyTorch's "
                "kernels, slower on a CPU; `python -m minillm doctor` measures how much",
                "没有用上 minillm 的 C 算子（{reason}）：解码改用 PyTorch 的算子，在 CPU 上更慢；"
                "慢多少，`python -m minillm doctor` 会测出来", reason=_reason_text(device, reason))


def _reason_text(device, reason: str) -> str:
    """`why_not`'s reason in the reader's language, where it is one of this module's own; a
    compiler's reason stays as the build gave it."""
    device = device if isinstance(device, torch.device) else torch.device(device)
    if device.type != "cpu":
        return text("they are CPU code, and this model is on {device}",
                    "它们是 CPU 代码，而这个模型在 {device} 上", device=device)
    if switched_off():
        return text("switched off by {switch}", "已被 {switch} 关闭", switch=SWITCH)
    return reason


_ANNOUNCED = []


def announce(device, weights=None) -> None:
    """Say `describe(device)` on stderr, once per process (minillm.load's first fast model; a
    failed build has already said it, as a KernelBuildWarning), and once that Q4_1 weights
    without minillm's kernel are rebuilt at every call."""
    reason = why_not(device)
    if weights == "q4_1" and reason is not None and "q4_1" not in _ANNOUNCED:
        _ANNOUNCED.append("q4_1")
        print(text("minillm: weights='q4_1' without minillm's Q4_1 kernel ({reason}) rebuilds "
                   "every float weight at each call: far slower than 'fp32' or 'int8' here",
                   "minillm：没有 minillm 的 Q4_1 算子（{reason}），weights='q4_1' 每次调用都要重建"
                   "全部浮点权重：这里比 'fp32' 或 'int8' 慢得多",
                   reason=_reason_text(device, reason)), file=sys.stderr)
    if "kernels" in _ANNOUNCED:
        return
    _ANNOUNCED.append("kernels")
    if torch.device(device).type != "cpu" or switched_off() or not build.status().failed:
        print(text("minillm: {line}", "minillm：{line}", line=describe(device)), file=sys.stderr)


# ---- linear layers -------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    """How a linear layer multiplies a few float32 rows on the CPU: `run(x, *operands)` for
    1 <= rows <= max_rows (x (rows, in) -> (rows, out)); max_rows 0: always PyTorch's kernels."""

    kernel: str  # the C kernel's name, "" for PyTorch's
    max_rows: int
    run: Callable | None


PYTORCH = Route("", 0, None)


def f32_max_rows() -> int:
    """Rows gemm_f32 takes from a float32 layer here (0 where the kernels are not built): fewer
    on an Intel CPU, where PyTorch multiplies a prompt's many rows with MKL."""
    rows = F32_MAX_ROWS.get(build.status().level, 0)
    if build.cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available():
        return min(rows, F32_MAX_ROWS_BESIDE_MKL)
    return rows


def _float32_or_none(t) -> bool:
    return t is None or t.dtype is torch.float32


def float_linear(weight: torch.Tensor, layout: str, bias=None, allowed: bool = True) -> Route:
    """A FastLinear's route: its weight's dtype, layout and device, and whether its owner lets
    it use minillm's kernels."""
    if not allowed or not _float32_or_none(bias) or not cpu_kernels(weight.device):
        return PYTORCH
    if weight.dtype is torch.float32 and layout == KERNEL_LAYOUTS[torch.float32]:
        return Route("gemv_f32/gemm_f32", f32_max_rows(), matmul.rows_f32)
    if weight.dtype is torch.bfloat16 and layout == KERNEL_LAYOUTS[torch.bfloat16]:
        return Route("gemv_bf16/gemm_bf16", BF16_MAX_ROWS.get(build.status().level, 0),
                     matmul.rows_bf16)
    return PYTORCH


def bf16_arithmetic(device) -> bool:
    """Whether a prompt's bf16 products here round x to bf16: minillm's kernels on a CPU whose
    tiles multiply bf16 (gemm_bf16 from BF16_AMX_FROM_ROWS rows, 2; K a multiple of 32 and 32
    outputs or more), as transformers' bf16 does."""
    return cpu_kernels(device) and bool(build.function("gemm_bf16_amx")())


def int8_max_rows() -> int:
    """Rows gemm_int8 takes from an int8 layer here (the kernels built: ask `cpu_kernels`
    first)."""
    return INT8_PROMPT_MAX_ROWS


def int8_linear(qweight: torch.Tensor, scale: torch.Tensor, bias, path: str) -> Route:
    """An Int8Linear's route ("auto" and "kernel" paths: minillm's int8 kernel for few rows)."""
    if path not in ("auto", "kernel") or scale.dtype is not torch.float32 \
            or not _float32_or_none(bias) or not cpu_kernels(qweight.device):
        return PYTORCH
    try:  # once here, not at each call
        matmul.check_int8_weights(qweight, scale, bias)
    except ValueError:
        return PYTORCH
    return Route("gemm_int8", int8_max_rows(), matmul.gemm_int8_unchecked)


def int8_pytorch_path(x: torch.Tensor, rows: int) -> str:
    """An Int8Linear's PyTorch path for rows minillm's kernel does not take: PyTorch's own
    weight-only int8 kernel ("fused": no float copy of the weight; faster than rebuilding it
    for a decode step's few rows) where it takes x, else "dequantize" (a prefill's many rows:
    compute-bound, and float32's multiply is the fastest at that)."""
    if rows <= QUANT_MAX_ROWS and x.is_cpu and x.dtype in (torch.float32, torch.bfloat16) \
            and hasattr(torch, "_weight_int8pack_mm"):
        return "fused"
    return "dequantize"


def q4_1_rounds_x(x: torch.Tensor, rows: int) -> bool:
    """Whether a Q41Linear's rows that no kernel takes are computed as its kernel computes them
    (x rounded to int8 per block, `Q41Linear.forward_rounded`): the rows the kernel would have
    had with AVX-512 (asked without building it), so that the tokens do not depend on whether
    it is built. More rows multiply the float weight by x as it is."""
    return rows <= Q4_1_MAX_ROWS["AVX-512"] and x.dtype is torch.float32


def q4_1_linear(blocks: torch.Tensor, bias) -> Route:
    """A Q41Linear's route: minillm's Q4_1 kernel, up to Q4_1_MAX_ROWS rows."""
    if not _float32_or_none(bias) or not cpu_kernels(blocks.device):
        return PYTORCH
    return Route("gemm_q4_1", Q4_1_MAX_ROWS.get(build.status().level, 0), matmul.gemm_q4_1)


class RoutedLinear:
    """What the linear layers that may call a kernel share (a mixin before nn.Module): a route
    planned here when the layer is built and again after every device or dtype change, and the
    one call that multiplies a few rows by it. A layer defines `_plan()` -> (route, the tensors
    the kernel takes after x)."""

    route: Route = PYTORCH
    few_rows_max: int = 0

    def _plan(self) -> tuple[Route, tuple]:
        raise NotImplementedError

    def replan(self) -> None:
        self.route, self._operands = self._plan()
        self.few_rows_max = self.route.max_rows

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .float(), .half(), ...
        out = super()._apply(fn, *args, **kwargs)
        self.replan()
        return out

    def few_rows(self, x: torch.Tensor) -> torch.Tensor:
        """x (rows, in) float32 on the CPU, 1 <= rows <= `few_rows_max`, through the layer's
        kernel: (rows, out) float32."""
        return self.route.run(x, *self._operands)


# ---- a decode step's small operations --------------------------------------------------------

@dataclass(frozen=True)
class DecodeKernels:
    norm: bool  # RMSNorm through rms_norm_f32
    attention: bool  # attention over the contiguous cache through decode_attention
    rope_cache: bool  # RoPE of q and k and the cache write through rope_write_cache
    silu_mul: bool  # SiLU(gate) * up through silu_mul_f32
    threads: int = 1  # the OpenMP threads a kernel that has them runs on (PyTorch's count)

    @property
    def every(self) -> bool:
        """Every small operation of the step on minillm's kernels (what one C call needs)."""
        return self.norm and self.attention and self.rope_cache and self.silu_mul

    @property
    def any(self) -> bool:
        return self.norm or self.attention or self.rope_cache or self.silu_mul


NO_DECODE_KERNELS = DecodeKernels(False, False, False, False)


def decode_step(x: torch.Tensor, keys: torch.Tensor) -> DecodeKernels:
    """Which of a fused decode step's small operations run on minillm's kernels, for the step's
    activations `x` and a layer's cache `keys`. The device is checked first: a GPU step never
    touches (or builds) the C library."""
    if not x.is_cpu or x.dtype is not torch.float32 or not cpu_kernels(x.device):
        return NO_DECODE_KERNELS
    cache = keys.is_cpu and keys.dtype is torch.float32 and keys.is_contiguous()
    return DecodeKernels(True, cache and keys.shape[-1] <= MAX_HEAD_DIM,
                         cache and keys.shape[-1] % 2 == 0, True, torch.get_num_threads())


def paged_attention(keys: torch.Tensor) -> bool:
    """Whether a decode step over a paged pool whose layers' keys look like `keys` reads them in
    place with minillm's kernel: float32 on the CPU, heads of at most MAX_HEAD_DIM values."""
    return (keys.is_cpu and keys.dtype is torch.float32 and keys.shape[-1] <= MAX_HEAD_DIM
            and cpu_kernels(keys.device))


def kernel_layout(dtype: torch.dtype) -> str | None:
    """The weight layout minillm's one-row kernel for `dtype` reads, or None: no such kernel."""
    return KERNEL_LAYOUTS.get(dtype)
