"""`quantize(model, scheme)`: a copy of a minillm model with its weights stored by `scheme`.

    "fp32"  float32 copy (the baseline)          4 bytes a weight
    "bf16"  bfloat16 cast of every weight        2 bytes: fp32's range, 7 stored mantissa bits
    "fp16"  float16 cast of every weight         2 bytes: 10 stored mantissa bits, range ±65,504
    "int8"  linear layers -> Int8Linear          1 byte + a scale per output channel
    "int4"  linear layers -> Int4Linear          4 bits + a float16 scale and minimum a group
                                                 (group_size=32: 5 bits a weight, GGUF Q4_1)

int8 and int4 are weight-only (仅权重量化): activations stay in the model's float dtype and only
the `nn.Linear` layers of the transformer blocks change. The embedding table stays as it is: in
minillm's Llama it is also the LM head (tied embeddings), read as a plain tensor. Nothing in
`minillm.model` changes: the layers are swapped on a copy, the original is left as it was.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..utils.devices import FLOAT_DTYPES
from ..layers.linear import replace_module
from ..model.memory import weight_bytes  # noqa: F401  (minillm.quant.weight_bytes)
from .int4 import GROUP_SIZE, _check_int4_group
from .linear import Int4Linear, Int8Linear, QuantizedLinear

SCHEMES = ("fp32", "bf16", "fp16", "int8", "int4")


def is_quantized(model: nn.Module) -> bool:
    """True for a model that came out of `quantize` with a scheme other than "fp32", or holds
    quantized layers."""
    return getattr(model, "quant_scheme", "fp32") != "fp32" or any(
        isinstance(m, QuantizedLinear) for m in model.modules())


def _linear_layers(model: nn.Module, skip) -> list[tuple[str, nn.Linear]]:
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and name.split(".")[-1] not in skip]


def quantize(model: nn.Module, scheme: str, *, group_size: int = GROUP_SIZE,
             int8_path: str = "auto", skip=("lm_head",)) -> nn.Module:
    """A copy of `model` with its weights stored by `scheme` (one of SCHEMES).

    group_size  int4's group length (must divide every quantized layer's input width, and be even)
    int8_path   Int8Linear's path: "auto", "fused" or "dequantize" (see minillm.quant.linear)
    skip        names of linear layers left as they are ("lm_head": minillm reads its weight
                directly)

    The copy records its scheme as `.quant_scheme`. Quantizing an already quantized model is an
    error: quantize the original float model instead, so errors do not stack up unseen."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize takes a torch model (nn.Module), got {type(model).__name__}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    if is_quantized(model):
        raise ValueError(f"this model is already quantized "
                         f"({getattr(model, 'quant_scheme', 'quantized layers')}); quantize the "
                         f"original float model (from minillm.load) instead")
    linears = _linear_layers(model, skip)
    if not linears:
        raise TypeError(f"{type(model).__name__} has no nn.Linear layers to quantize; pass a "
                        f"model from minillm.load (not a minillm.fast copy)")
    if scheme == "int4":
        for name, linear in linears:  # check every layer before building anything
            try:
                _check_int4_group(linear.in_features, group_size)
            except ValueError as error:
                raise ValueError(f"int4 layer {name}: {error}") from None
    elif group_size != GROUP_SIZE:
        raise ValueError(f"group_size applies to the int4 scheme only, not {scheme!r}")

    if scheme in FLOAT_DTYPES:
        out = copy.deepcopy(model).to(FLOAT_DTYPES[scheme])
    else:
        out = copy.deepcopy(model)
        with torch.no_grad():
            for name, linear in _linear_layers(out, skip):
                new = (Int8Linear.from_linear(linear, path=int8_path) if scheme == "int8"
                       else Int4Linear.from_linear(linear, group_size))
                replace_module(out, name, new.to(linear.weight.device))
    out.quant_scheme = scheme
    return out.eval().requires_grad_(False)


def set_int8_path(model: nn.Module, path: str) -> nn.Module:
    """Switch every Int8Linear of `model` to `path` ("auto", "fused", "dequantize")."""
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    if not layers:
        raise ValueError("this model has no Int8Linear layers; quantize(model, 'int8') first")
    for layer in layers:
        layer.path = path
    return model
