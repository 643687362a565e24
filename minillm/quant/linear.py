"""Quantized linear layers (量化线性层): drop-in replacements for `nn.Linear` in minillm's models.

Each keeps the small integer weight and computes y = x W^T + b in the input's float dtype. The
teaching path is the plain one:

    dequantize the whole weight to floats  ->  ordinary matrix multiplication

It saves memory at rest, but every call rebuilds the float weight, so it reads the small weight
*and* writes and reads a full-size float copy: slower than the float layer it replaced. This is
why a naive int8 path can be slower than fp16 (the source text says so of Hugging Face's int8).
A fused kernel (融合算子) multiplies with the int8 numbers directly and applies the scales to the
result, never building the float weight. Int8Linear has three:

- "fused": PyTorch's weight-only kernel `torch._weight_int8pack_mm` (x (M, K) fp32/bf16, int8
  weight (N, K), scales (N,)). It widens every weight to float before multiplying, so whether
  it beats float32 depends on how well it is tuned for the CPU (lesson 07 §7 times it).
- "dynamic": fbgemm's int8 GEMM through PyTorch (`torch.ops.quantized.linear_dynamic`), which
  also quantizes the activations, one scale for the call's rows, and multiplies int8 by int8
  with the CPU's integer dot-product instructions (VNNI where there is one), then scales the
  int32 sums back to float. It reads a quarter of float32's bytes, but the activations'
  rounding costs accuracy (lesson 07 §7 measures it token by token), most over a whole prompt
  in one call: one scale for all its rows of activations, outliers included.
- "kernel": minillm's own (minillm.kernels.gemm_int8): int8 weights times x rounded to int16
  per row, in integers. It reads a quarter of float32's bytes, and x's rounding is far finer
  than the weights'. The fast path's int8 runs it for decode steps, and for prompts where it
  multiplies many rows on AMX's tiles or on groups of weight rows ("auto": up to
  minillm.kernels.dispatch.int8_max_rows() rows, where the kernels run here).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..kernels import dispatch
from .gguf_q4_1 import (BLOCK_BYTES, BLOCK_WEIGHTS, dequantize_q4_1, q4_1_minimums,
                        round_x_per_block)
from .int4 import GROUP_SIZE, dequantize_int4, quantize_int4
from .int8 import dequantize_int8, quantize_int8

INT8_PATHS = ("auto", "kernel", "dynamic", "fused", "dequantize")


def fused_int8_available() -> bool:
    """Whether this PyTorch has the fused int8 weight-only matmul (CPU)."""
    return hasattr(torch, "_weight_int8pack_mm")


def kernel_int8_available() -> bool:
    """Whether minillm's own int8 kernel can be built and run here (minillm.kernels)."""
    return dispatch.cpu_kernels("cpu")


def dynamic_int8_available() -> bool:
    """Whether this PyTorch has fbgemm's dynamic int8 linear (x86-64 CPUs)."""
    return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(
        torch.ops.quantized, "linear_dynamic")


def _linear_check(linear) -> None:
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"expected an nn.Linear to quantize, got {type(linear).__name__}")


class QuantizedLinear(nn.Module):
    """What the quantized layers share: shapes, the bias, and their size in bytes."""

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


class Int8Linear(dispatch.RoutedLinear, QuantizedLinear):
    """int8 weights, one float32 scale per output channel. `path`: "dequantize" (rebuild the float
    weight every call), "fused" (PyTorch's weight-only int8 kernel), "dynamic" (fbgemm's int8 x
    int8 kernel, float32 input on an x86-64 CPU), "kernel" (minillm's own) or "auto" (the kernel
    for the few rows minillm.kernels.dispatch routes to it, else the PyTorch path dispatch
    names: "fused" for a decode step's rows, "dequantize" for a prefill's)."""

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
        if value == "dynamic" and not dynamic_int8_available():
            raise ValueError("this PyTorch has no fbgemm engine (x86-64 CPUs only); use "
                             "path='dequantize'")
        if value == "kernel" and not kernel_int8_available():
            raise ValueError(f"minillm's int8 kernel cannot run here "
                             f"({dispatch.why_not('cpu')}); use path='dequantize'")
        self._path = value
        self.replan()

    def _plan(self):
        route = dispatch.int8_linear(self.qweight, self.scale, self.bias, self._path)
        return route, (self.qweight, self.scale, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, path: str = "auto") -> "Int8Linear":
        _linear_check(linear)
        return cls.from_weight(linear.weight, linear.bias, path)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    path: str = "auto") -> "Int8Linear":
        q, scale = quantize_int8(weight)
        return cls(q.to(weight.device), scale.to(weight.device), bias, path=path)

    def __getstate__(self):  # fbgemm's packed weight is rebuilt on first use after a copy
        state = self.__dict__.copy()
        state["_packed"] = None
        return state

    def _packed_weight(self):
        """The weight in fbgemm's packed layout (built on first use, kept)."""
        if getattr(self, "_packed", None) is None:
            zero = torch.zeros(self.out_features, dtype=torch.long)
            with warnings.catch_warnings():
                # PyTorch marks its quantized tensor types deprecated (pytorch/pytorch#184982);
                # fbgemm's prepack still takes one. minillm pins torch==2.13.0, where it works;
                # `dynamic_int8_available()` is the switch if a later release removes it.
                warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
                qw = torch._make_per_channel_quantized_tensor(
                    self.qweight.cpu(), self.scale.cpu().double(), zero, 0)
            bias = None if self.bias is None else self.bias.detach().float().cpu()
            self._packed = torch.ops.quantized.linear_prepack(qw, bias)
        return self._packed

    def forward_dynamic(self, x: torch.Tensor) -> torch.Tensor:
        """fbgemm: activations quantized to 8 bits (one scale for all rows of the call), int8 x
        int8 products summed in int32, scaled back to float; the bias is added inside."""
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise ValueError(f"the dynamic int8 kernel takes float32 input on the CPU, got "
                             f"{x.dtype} on {x.device.type}; use path='dequantize'")
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, self.in_features),
                                               self._packed_weight(), True)
        return y.reshape(*x.shape[:-1], self.out_features)

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

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        """minillm's kernel: each int8 weight widened to float32 in registers; x stays float32."""
        from ..kernels import gemm_int8

        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise ValueError(f"the int8 kernel takes float32 input on the CPU, got {x.dtype} on "
                             f"{x.device.type}; use path='dequantize'")
        y = gemm_int8(x.reshape(-1, self.in_features), self.qweight, self.scale, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        path = self.path
        if path == "auto":
            rows = x.numel() // max(self.in_features, 1)
            if x.dtype is torch.float32 and x.is_cpu and 0 < rows <= self.few_rows_max:
                return self.few_rows(x.reshape(rows, self.in_features)).reshape(
                    *x.shape[:-1], self.out_features)
            path = dispatch.int8_pytorch_path(x, rows)
        return {"kernel": self.forward_kernel, "dynamic": self.forward_dynamic,
                "fused": self.forward_fused, "dequantize": self.forward_dequantize}[path](x)

    def decode_path(self, dtype: torch.dtype) -> str:
        """The path one decode row of activations in `dtype` takes on this layer's device:
        "kernel" (minillm's, CPU), "fused" (PyTorch's weight-only int8 kernel, CPU), "dynamic",
        or "dequantize" (a float copy of the weight built at every call: on a GPU, where
        neither int8 kernel runs)."""
        if self.path != "auto":
            return self.path
        if dtype is torch.float32 and self.qweight.is_cpu and self.few_rows_max >= 1:
            return "kernel"
        return dispatch.int8_pytorch_path(torch.empty((1, 0), dtype=dtype,
                                                      device=self.qweight.device), 1)

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


class Q41Linear(dispatch.RoutedLinear, QuantizedLinear):
    """A weight kept as GGUF Q4_1 blocks, byte for byte as the model file stores them (see
    minillm.quant.gguf_q4_1): 20 bytes per 32 weights. A decode step's few rows are multiplied
    by minillm's Q4_1 kernel (minillm/kernels/c/matmul_q4_1.c), which reads the blocks directly,
    and so are a prefill's many rows up to minillm.kernels.dispatch's Q4_1_MAX_ROWS; more rows,
    or no kernel here, rebuild the float weight for the call."""

    scheme = "q4_1"

    def __init__(self, blocks: torch.Tensor, bias: torch.Tensor | None = None):
        if blocks.dtype != torch.uint8 or blocks.dim() != 2 or blocks.shape[1] % BLOCK_BYTES:
            raise ValueError(f"blocks must be uint8 (rows, {BLOCK_BYTES} bytes per block of "
                             f"{BLOCK_WEIGHTS}), got {tuple(blocks.shape)} {blocks.dtype}")
        super().__init__(blocks.shape[1] // BLOCK_BYTES * BLOCK_WEIGHTS, blocks.shape[0], bias)
        self.register_buffer("blocks", blocks.contiguous())
        self.replan()

    def _plan(self):
        return dispatch.q4_1_linear(self.blocks, self.bias), (self.blocks, self.bias)

    @classmethod
    def stack(cls, layers) -> "Q41Linear":
        """One layer computing `layers`' outputs one after another (their rows stacked)."""
        biases = [layer.bias for layer in layers]
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        return cls(torch.cat([layer.blocks for layer in layers]), bias)

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        return dequantize_q4_1(self.blocks).to(dtype)

    def forward_rounded(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel's arithmetic in PyTorch, for the rows dispatch would have sent it: x rounded
        to int8 per block of 32 times q * d, plus each minimum m times the block's exact sum of
        x (W = q * d + m, so W x̂ + m (Σx - Σx̂))."""
        lead, x = x.shape[:-1], x.reshape(-1, self.in_features)
        rounded = round_x_per_block(x.float())
        sums = (x.float() - rounded).reshape(x.shape[0], -1, BLOCK_WEIGHTS).sum(-1)
        y = rounded @ self.dequantized_weight().t() + sums @ q4_1_minimums(self.blocks).t()
        y = y.to(x.dtype)
        return (y if self.bias is None else y + self.bias.to(x.dtype)).reshape(
            *lead, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(self.in_features, 1)
        if x.dtype is torch.float32 and x.is_cpu and 0 < rows <= self.few_rows_max:
            return self.few_rows(x.reshape(rows, self.in_features)).reshape(
                *x.shape[:-1], self.out_features)
        if dispatch.q4_1_rounds_x(x, rows):
            return self.forward_rounded(x)
        return self.forward_dequantize(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"GGUF Q4_1 blocks, bias={self.bias is not None}")


def q4_1_kernel_available() -> bool:
    """Whether minillm's Q4_1 kernel can be built and run here (minillm.kernels)."""
    return dispatch.cpu_kernels("cpu")
