"""FastLinear: a linear layer stored and multiplied for speed, the fast path's only new layer.

Decoding multiplies a row vector by every weight matrix, so a decode step's time is mostly the
time to read the matrices. Three choices make that read fast, and this layer makes them once:

1. Layout. PyTorch reads the two layouts of a matrix at different speeds, and which one wins
   depends on the dtype and the machine (`layout.best_layout` times both): (in, out) for
   `x @ W`, or (out, in) for `F.linear`.
2. Storage dtype. The weights may be narrower than the activations: bfloat16 weights with
   float32 activations on a CPU without fast bf16 arithmetic. Then one row is multiplied by
   minillm's bf16 kernel (minillm/kernels.py, which widens each weight in registers), a few rows by
   PyTorch's bf16 matmul, and many rows (a prefill) by widening the weights once for the call.
   Float32 weights multiply with minillm's float32 kernels: one row streams the (in, out) matrix
   in memory order, faster than PyTorch's matrix-vector product at batch 1; more rows, up to
   `kernels.gemm_f32_max_rows()`, go through a tiled kernel that uses each weight it loads for
   every row (a decode batch's rows, or with AVX-512 a whole prompt), faster than PyTorch's
   multiply here. More rows than that (a prefill on an AVX2 CPU) go to PyTorch.
3. The bias is added inside the multiplication (`addmm`).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import kernels
from .layout import best_layout

# Rows at which a prefill on a CPU widens bf16/fp16 weights to float32 for the multiply: at many
# rows the multiply is compute-bound and float32's kernels are several times faster (measured on
# AVX2: even at 11 rows, 4x faster at 128).
UPCAST_ROWS = 8

# The weight dtypes minillm has a one-row CPU kernel for (minillm/kernels.py), by kernel name.
ONE_ROW_KERNELS = {torch.bfloat16: "gemv_bf16", torch.float32: "gemv_f32"}


class FastLinear(nn.Module):
    """y = x Wᵀ + b with W (out, in) stored as `dtype` in `layout` ("auto": the faster here)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 dtype: torch.dtype | None = None, layout: str = "auto", kernel: bool = False):
        super().__init__()
        dtype = weight.dtype if dtype is None else dtype
        self.out_features, self.in_features = weight.shape
        self.kernel = bool(kernel)  # decode rows through minillm's kernels (see few_rows)
        if self.kernel:
            name = ONE_ROW_KERNELS.get(dtype)
            if name is None or weight.device.type != "cpu" or kernels.load(name) is None:
                raise ValueError("minillm's kernels take bfloat16 or float32 weights on a CPU "
                                 "where they can be built (x86-64 AVX2 and a C compiler)")
            layout = "out_in" if dtype == torch.bfloat16 else "in_out"  # the order each reads
        self.layout = best_layout(dtype, weight.device) if layout == "auto" else layout
        if self.layout not in ("in_out", "out_in"):
            raise ValueError(f"layout must be 'auto', 'in_out' or 'out_in', got {layout!r}")
        w = weight.detach().to(dtype)
        self.weight = nn.Parameter((w.t() if self.layout == "in_out" else w).contiguous(),
                                   requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(),
                                                           requires_grad=False)
        self._cache_views()

    def _cache_views(self) -> None:
        # Plain attributes, read in the hot path without nn.Module's attribute lookup: W as
        # (out, in) for F.linear (a transposed view of the stored (in, out) matrix, no copy).
        w = self.weight
        self._w_out_in = w.t() if self.layout == "in_out" else w
        self._w_in_out = w if self.layout == "in_out" else w.t()
        self._b = self.bias
        self._same_dtype_as = w.dtype
        # the most rows `few_rows` takes (0: none), the name Int8Linear and Q41Linear use too
        self.few_rows_max = (kernels.gemm_f32_max_rows() if self.kernel and w.dtype == torch.float32
                             and w.device.type == "cpu" else 0)

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .double(): refresh the views
        # Let go of the views first: a view pins its tensor, which then cannot be swapped for
        # the moved one (what Module.to does for tensor subclasses, or with
        # torch.__future__.set_swap_module_params_on_conversion(True)).
        self._w_out_in = self._w_in_out = self._b = None
        out = super()._apply(fn, *args, **kwargs)
        self._cache_views()
        return out

    def matrix(self, dtype=None) -> torch.Tensor:
        """W as (in, out), for x @ W, in `dtype` (default: as stored)."""
        w = self.weight if self.layout == "in_out" else self.weight.t()
        return w if dtype is None else w.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self._same_dtype_as:  # one call, any leading dimensions, bias inside
            if x.numel() <= self.few_rows_max * self.in_features:
                return self.few_rows(x.reshape(-1, self.in_features)).view(*x.shape[:-1],
                                                                             self.out_features)
            return F.linear(x, self._w_out_in, self._b)
        lead = x.shape[:-1]
        x = x.reshape(-1, self.in_features)
        bias = self.bias
        if x.shape[0] == 1 and self.kernel:
            y = torch.empty(1, self.out_features, dtype=torch.float32, device=x.device)
            x32 = x.float().contiguous()  # a name keeps a converted copy alive for the call
            kernels.load("gemv_bf16")(self.weight.data_ptr(), x32.data_ptr(), y.data_ptr(),
                                      self.out_features, self.in_features,
                                      torch.get_num_threads())
            y = y.to(x.dtype) if bias is None else y.to(x.dtype).add_(bias)
        elif x.shape[0] >= UPCAST_ROWS:
            w = self.matrix(x.dtype)
            y = x @ w if bias is None else torch.addmm(bias, x, w)
        else:
            y = (x.to(self.weight.dtype) @ self.matrix()).to(x.dtype)
            y = y if bias is None else y.add_(bias)
        return y.view(*lead, self.out_features)

    def few_rows(self, x: torch.Tensor) -> torch.Tensor:
        """x (rows, in) float32, 1 <= rows <= `few_rows_max`, times the float32
        weights by minillm's kernels: (rows, out)."""
        rows = x.shape[0]
        y = torch.empty(rows, self.out_features, dtype=torch.float32, device=x.device)
        x = x.contiguous()
        bias = None if self._b is None else self._b.data_ptr()
        if rows == 1:
            kernels.load("gemv_f32")(self.weight.data_ptr(), bias, x.data_ptr(), y.data_ptr(),
                                     self.out_features, self.in_features,
                                     torch.get_num_threads())
        else:
            kernels.load("gemm_f32")(self.weight.data_ptr(), bias, x.data_ptr(), y.data_ptr(),
                                     rows, self.out_features, self.in_features,
                                     torch.get_num_threads())
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"dtype={self.weight.dtype}, layout={self.layout!r}, bias={self.bias is not None}"
                + (f", kernel={'bf16 gemv' if self.weight.dtype == torch.bfloat16 else 'f32'}"
                   if self.kernel else ""))
