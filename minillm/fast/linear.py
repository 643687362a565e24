"""FastLinear: a linear layer stored and multiplied for speed, the fast path's only new layer.

Decoding multiplies a row vector by every weight matrix, so a decode step's time is mostly the
time to read the matrices. Three choices make that read fast, and this layer makes them once:

1. Layout. PyTorch reads the two layouts of a matrix at different speeds, and which one wins
   depends on the dtype and the machine (`layout.best_layout` times both): (in, out) for
   `x @ W`, or (out, in) for `F.linear`. Where minillm's kernels may run, the layout is the one
   its kernel for the dtype reads.
2. Storage dtype. The weights may be narrower than the activations: bfloat16 weights with
   float32 activations on a CPU. Then one row is multiplied by minillm's bf16 kernel (which
   widens each weight in registers), more rows by its multi-row kernel (on AMX's bf16 tiles with
   x rounded to bf16, as transformers' bf16 does: `products_dtype`; without the tiles a strip of
   the weight widened at a time); where that kernel does not take them, a few rows by PyTorch's
   bf16 matmul, and many (a prefill) by widening the weights for the call. Float32 weights
   multiply with minillm's float32 kernels: one row streams the (in, out) matrix in memory
   order; more rows go through a tiled kernel that uses each weight it loads for every row.
   Which kernel, and up to how many rows, is minillm.kernels.dispatch's answer (`route`), asked
   again whenever the layer changes device or dtype.
3. The bias is added inside the multiplication (`addmm`).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..kernels import dispatch
from .layout import best_layout


class FastLinear(dispatch.RoutedLinear, nn.Module):
    """y = x Wᵀ + b with W (out, in) stored as `dtype` in `layout` ("auto": the faster here).
    `kernel=True` lets it multiply decode rows with minillm's kernels where dispatch routes
    them (`route`, `few_rows`); it raises where no kernel can take this weight here."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 dtype: torch.dtype | None = None, layout: str = "auto", kernel: bool = False):
        super().__init__()
        dtype = weight.dtype if dtype is None else dtype
        self.out_features, self.in_features = weight.shape
        self.kernels_allowed = bool(kernel)
        if self.kernels_allowed:
            layout = dispatch.kernel_layout(dtype)
            why = dispatch.why_not(weight.device)
            if layout is None or why is not None:
                raise ValueError(f"minillm's kernels cannot take this weight here: "
                                 f"{why or f'they take bfloat16 or float32 weights, not {dtype}'}")
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
        self.replan()

    def replan(self) -> None:
        super().replan()
        # what several rows' products take x as, where it is not x's dtype: bf16 weights on a
        # CPU with bf16 tiles round it to bf16 (gemm_bf16's tiles: K a multiple of 32, 32 or
        # more outputs); a prompt's attention follows (Attention.prompt_dtype)
        tiles = self.route.kernel == "gemv_bf16/gemm_bf16" and self.in_features % 32 == 0 \
            and self.out_features >= 32 and dispatch.bf16_arithmetic(self.weight.device)
        self.products_dtype = torch.bfloat16 if tiles else None

    def _plan(self):
        route = dispatch.float_linear(self.weight, self.layout, self.bias, self.kernels_allowed)
        return route, (self.weight, self._b)

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .float(): new views, a new route
        # Let go of the views first: a view pins its tensor, which then cannot be swapped for
        # the moved one (what Module.to does for tensor subclasses, or with
        # torch.__future__.set_swap_module_params_on_conversion(True)).
        self._w_out_in = self._w_in_out = self._b = None
        try:
            return nn.Module._apply(self, fn, *args, **kwargs)
        finally:
            self._cache_views()

    @property
    def kernel(self) -> bool:
        """Whether this layer multiplies decode rows with one of minillm's kernels."""
        return self.route.run is not None

    def matrix(self, dtype=None) -> torch.Tensor:
        """W as (in, out), for x @ W, in `dtype` (default: as stored)."""
        w = self.weight if self.layout == "in_out" else self.weight.t()
        return w if dtype is None else w.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype is torch.float32 and 0 < x.numel() <= self.few_rows_max * self.in_features:
            return self.few_rows(x.reshape(-1, self.in_features).contiguous()).view(
                *x.shape[:-1], self.out_features)
        if x.dtype == self._same_dtype_as:  # one call, any leading dimensions, bias inside
            return F.linear(x, self._w_out_in, self._b)
        lead = x.shape[:-1]
        x = x.reshape(-1, self.in_features)
        bias = self.bias
        if x.shape[0] >= dispatch.UPCAST_ROWS:
            w = self.matrix(x.dtype)
            y = x @ w if bias is None else torch.addmm(bias, x, w)
        else:
            y = (x.to(self.weight.dtype) @ self.matrix()).to(x.dtype)
            y = y if bias is None else y.add_(bias)
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"dtype={self.weight.dtype}, layout={self.layout!r}, bias={self.bias is not None}"
                + (f", kernel={self.route.kernel}" if self.kernel else ""))


class HeadEmbedding(nn.Module):
    """The token embedding of a fast model whose LM head is tied to it (SmolLM2): each token's
    row is read from the head's own FastLinear weight, whichever layout it is stored in, so the
    fast model holds the table once, as the readable model does. It has no parameter of its own;
    `weight` is the head's matrix as (vocab, hidden), a view."""

    def __init__(self, head: FastLinear):
        super().__init__()
        self._head = (head,)  # a tuple: the head's weight is registered (and counted) once
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features

    @property
    def weight(self) -> torch.Tensor:
        return self._head[0]._w_out_in  # kept by the head, renewed when it moves

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, rows read from the LM head's "
                f"weight (tied)")
