"""Quantized linear layers (量化线性层): drop-in replacements for `nn.Linear` in minillm's models.

Each keeps the small integer weight and computes y = x W^T + b in the input's float dtype. The
teaching path is the plain one:

    dequantize the whole weight to floats  ->  ordinary matrix multiplication

It saves memory at rest, but every call rebuilds the float weight, so it reads the small weight
*and* writes and reads a full-size float copy: slower than the float layer it replaced. This is
why a naive int8 path can be slower than fp16 (the source text says so of Hugging Face's int8).
A fused kernel (融合算子) multiplies with the int8 numbers directly and applies the scales to the
result, never building the float weight: PyTorch ships one for CPU, `torch._weight_int8pack_mm`
(x (M, K) fp32/bf16, int8 weight (N, K), scales (N,)). `Int8Linear(path="fused")` uses it.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .int4 import GROUP_SIZE, dequantize_int4, quantize_int4
from .int8 import dequantize_int8, quantize_int8

INT8_PATHS = ("auto", "fused", "dequantize")
# The fused CPU kernel was measured to be much slower than dequantize-then-matmul on many rows at
# once (prefill) on an AVX2 machine: "auto" uses it only for small inputs such as a decode step.
FUSED_MAX_ROWS = 16


def fused_int8_available() -> bool:
    """Whether this PyTorch has the fused int8 weight-only matmul (CPU)."""
    return hasattr(torch, "_weight_int8pack_mm")


def _linear_check(linear) -> None:
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"expected an nn.Linear to quantize, got {type(linear).__name__}")


class QuantizedLinear(nn.Module):
    """What the int8 and int4 layers share: shapes, the bias, and their size in bytes."""

    scheme = "?"

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(),
                                                           requires_grad=False)

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        raise NotImplementedError

    def weight_bytes(self) -> int:
        """Bytes of everything the layer stores (integers, scales, minimums, bias)."""
        return sum(t.numel() * t.element_size() for t in (*self.buffers(), *self.parameters()))

    def forward_dequantize(self, x: torch.Tensor) -> torch.Tensor:
        """The teaching path: build the float weight, then an ordinary matmul."""
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantized_weight(x.dtype), bias)


class Int8Linear(QuantizedLinear):
    """int8 weights, one float32 scale per output channel. `path`: "dequantize" (rebuild the float
    weight every call), "fused" (PyTorch's int8 kernel, fp32/bf16 input on the CPU) or "auto"
    (fused for inputs of at most FUSED_MAX_ROWS rows where the kernel applies, else dequantize)."""

    scheme = "int8"

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor,
                 bias: torch.Tensor | None = None, path: str = "auto"):
        super().__init__(qweight.shape[1], qweight.shape[0], bias)
        if qweight.dtype != torch.int8:
            raise TypeError(f"qweight must be int8, got {qweight.dtype}")
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale.float())
        self.path = path

    @property
    def path(self) -> str:
        return self._path

    @path.setter
    def path(self, value: str) -> None:
        if value not in INT8_PATHS:
            raise ValueError(f"path must be one of {INT8_PATHS}, got {value!r}")
        if value == "fused" and not fused_int8_available():
            raise ValueError("this PyTorch has no torch._weight_int8pack_mm; use "
                             "path='dequantize'")
        self._path = value

    @classmethod
    def from_linear(cls, linear: nn.Linear, path: str = "auto") -> "Int8Linear":
        _linear_check(linear)
        q, scale = quantize_int8(linear.weight)
        return cls(q, scale, linear.bias, path=path)

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        return dequantize_int8(self.qweight, self.scale, dtype)

    def _fused_applies(self, x: torch.Tensor) -> bool:
        return (fused_int8_available() and x.device.type == "cpu"
                and x.dtype in (torch.float32, torch.bfloat16))

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """PyTorch's kernel: int8 weight times float x, scaled per output channel, no float copy
        of the weight."""
        if not self._fused_applies(x):
            raise ValueError(f"the fused int8 kernel takes float32 or bfloat16 input on the CPU, "
                             f"got {x.dtype} on {x.device.type}; use path='dequantize'")
        y = torch._weight_int8pack_mm(x.reshape(-1, self.in_features), self.qweight,
                                      self.scale.to(x.dtype))
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(self.in_features, 1)
        if self.path == "fused" or (self.path == "auto" and self._fused_applies(x)
                                    and rows <= FUSED_MAX_ROWS):
            return self.forward_fused(x)
        return self.forward_dequantize(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, path={self.path!r}")


class Int4Linear(QuantizedLinear):
    """4-bit weights in groups with a float16 scale and minimum each (GGUF Q4_1's layout), run by
    dequantize-then-matmul."""

    scheme = "int4"

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor,
                 bias: torch.Tensor | None = None):
        n_groups = scale.shape[1]
        super().__init__(2 * packed.shape[1], packed.shape[0], bias)
        self.group_size = self.in_features // n_groups
        self.register_buffer("qweight", packed)
        self.register_buffer("scale", scale)
        self.register_buffer("minimum", minimum)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = GROUP_SIZE) -> "Int4Linear":
        _linear_check(linear)
        return cls(*quantize_int4(linear.weight, group_size), linear.bias)

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        return dequantize_int4(self.qweight, self.scale, self.minimum, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_dequantize(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"group_size={self.group_size}, bias={self.bias is not None}")
