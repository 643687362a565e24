"""minillm.fast: the fast path. The same network, the same layer code, faster linear layers.

    optimize(model, weights=None) -> model   a copy of a minillm model whose q/k/v and gate/up
                                             projections are fused into one matrix each and
                                             whose every linear layer (LM head included) is a
                                             FastLinear (or, for "int8", minillm.quant's
                                             Int8Linear); `minillm.load` returns one by default
    linear.py                                FastLinear: layout, storage dtype, own kernels
    layout.py                                which weight layout multiplies fastest here
    decode.py, graph.py                      the fused decode step; on CUDA, replayed from a
                                             CUDA graph at batch 1 (model.fused_decode.cuda_graph)
    blocks.py                                on a CPU, the step's blocks in one C call
                                             (model.fused_decode.c_blocks)
    huge_pages.py                            on Linux, the weights the kernels stream in 2 MB
                                             pages (MINILLM_HUGE_PAGES=0: left in place)
    (minillm/kernels/                        the C kernels they call, and dispatch.py: which one)

Nothing else changes: the copy is the same class (LlamaModel, Qwen3Model, ...), runs the same
blocks and attention (minillm.layers), keeps the same forward contract, and gives the same
tokens (in float32; in bf16 on AMX's tiles, a prompt's products round x to bf16). What the fused
copy saves is work per step: 4 matrix multiplications per layer instead of 7, each in the
fastest layout, and the LM head read in its fastest layout too; a prompt's SiLU(gate) * up runs
through the decode step's kernel (`GatedMLP.silu_mul`, the same bits).

    >>> model, tokenizer = minillm.load("smollm2-135m", fast=False)   # the readable model
    >>> fast = minillm.fast.optimize(model)                          # float32
    >>> fast16 = minillm.fast.optimize(model, "bf16")                # bf16 weights
    >>> fast8 = minillm.fast.optimize(model, "int8")                 # int8 weights
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..utils.devices import FLOAT_DTYPES
from ..layers.linear import LMHead, replace_module
from ..layers.mlp import GatedMLP
from .layout import best_layout, time_layouts
from .decode import FusedDecode
from .graph import GraphedDecode
from .graph import switched_on as graph_switched_on
from .huge_pages import switched_on as huge_pages_switched_on, to_huge_pages
from ..kernels import activation, dispatch
from .linear import FastLinear, HeadEmbedding

__all__ = ["optimize", "is_optimized", "FastLinear", "best_layout", "time_layouts",
           "WEIGHT_FORMATS"]

WEIGHT_FORMATS = (*FLOAT_DTYPES, "int8", "q4_1")


def is_optimized(model) -> bool:
    return getattr(model, "weight_format", None) is not None


def weight_format(weights, model_dtype: torch.dtype) -> str:
    """A weight format's name from a name, a torch dtype, or None (the model's own dtype)."""
    if weights is None:
        weights = model_dtype
    if isinstance(weights, torch.dtype):
        names = {v: k for k, v in FLOAT_DTYPES.items()}
        if weights not in names:
            raise TypeError(f"weights must be one of {', '.join(WEIGHT_FORMATS)} or a floating "
                            f"torch.dtype, got {weights!r}")
        return names[weights]
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)} (or a floating "
                         f"torch.dtype), got {weights!r}")
    return weights


def optimize(model, weights=None, *, layout: str = "auto", kernel="auto"):
    """A fast copy of a minillm `model` (from `minillm.load(..., fast=False)`).

    weights  None keeps the model's dtype; "bf16" (or torch.bfloat16) or "fp16" halve the bytes
             each token reads, "int8" quarters them (minillm.quant.Int8Linear), "q4_1" runs a
             GGUF file's own 4-bit blocks (a model from minillm.load(..., weights="q4_1"),
             whose linear layers hold them; the LM head goes int8). On a CPU the
             activations stay in the model's dtype (float32): only the stored weights narrow
             (except where AMX's bf16 tiles multiply a bf16 layer's several rows: there x is
             rounded to bf16 for the products, and a prompt's attention computes in bf16,
             as transformers' bf16 does).
             On a GPU a float format casts the whole model (its arithmetic is fast in bf16).
    layout   "auto" (time both and keep the faster), "in_out" (x @ W) or "out_in" (F.linear).
    kernel   float32 or bf16 weights on a CPU: "auto" multiplies a decode step's rows with
             minillm's own kernels (minillm/kernels/: gemv_bf16 for one row of bf16, gemv_f32
             and gemm_f32 for float32 rows, as many as minillm.kernels.dispatch routes) where
             they can run, False never (PyTorch's own), True insists (ValueError where they
             cannot run).

    The original model is left as it is; the copy holds its own weights (about as many bytes
    again). Tied embeddings stay tied where the LM head keeps the embedding's dtype (float32;
    bf16 and fp16 on a GPU): the embedding then reads its rows from the head's weight
    (`HeadEmbedding`). A narrower head (bf16 on a CPU, int8, q4_1) is a copy of the table in
    that format beside the float32 embedding, and is counted as such."""
    fmt = _check(model, weights, layout, kernel)
    with torch.no_grad():
        return optimize_in_place(copy.deepcopy(model), fmt, layout=layout, kernel=kernel)


def optimize_in_place(model, weights=None, *, layout: str = "auto", kernel="auto"):
    """`optimize` without the copy: `model` itself is rebuilt (what `minillm.load` does, so a
    load holds one set of weights, not two)."""
    fmt = _check(model, weights, layout, kernel)
    with torch.no_grad():
        fast = model
        if fast.device.type != "cpu" and fmt in ("bf16", "fp16"):
            fast.to(FLOAT_DTYPES[fmt])  # GPUs compute in bf16/fp16 natively
        make = _linear_maker(fmt, fast.dtype, fast.device, layout, kernel)
        for module in list(fast.modules()):
            if hasattr(module, "fuse"):
                module.fuse(make)
        for name, module in list(fast.named_modules()):
            if isinstance(module, nn.Linear):
                replace_module(fast, name, make(module.weight, module.bias))
        tied = isinstance(fast.lm_head, LMHead) and fast.lm_head.tied
        fast.lm_head = make(fast.lm_head.matrix, None)
        if tied and isinstance(fast.lm_head, FastLinear) \
                and fast.lm_head.weight.dtype == fast.embed.weight.dtype:
            fast.embed = HeadEmbedding(fast.lm_head)  # one table, as in the readable model
    fast.weight_format = fmt
    _prompt_kernels(fast)
    fast.huge_page_bytes = to_huge_pages(fast) if huge_pages_switched_on() else 0
    fast.layout = next((m.layout for m in fast.modules() if isinstance(m, FastLinear)), None)
    if FusedDecode.supports(fast):
        fused = fast.fused_decode = FusedDecode(fast)
        fused.graph, fused.cuda_graph = GraphedDecode(fused), graph_switched_on()
    return fast.eval().requires_grad_(False)


def _prompt_kernels(fast) -> None:
    """What a prompt's layers take from minillm's kernels besides the projections, where the
    activations are float32 on a CPU that runs them: SiLU(gate) * up in one pass, the decode
    step's kernel (the same bits as PyTorch's operations; its RMSNorm is not, and a last bit
    moved there moves Q4_1's rounding of x by whole steps). (A prompt's attention follows its
    projections' products: `Attention.prompt_dtype`.)"""
    if fast.dtype is not torch.float32 or not dispatch.cpu_kernels(fast.device):
        return
    for module in fast.modules():
        if isinstance(module, GatedMLP):
            module.silu_mul = _silu_mul_where_kernels_run


def _silu_mul_where_kernels_run(gate_up: torch.Tensor):
    """`GatedMLP.silu_mul` of a fast model: the C kernel's SiLU(gate) * up of (rows, 2 F) rows,
    or None (PyTorch's operations) where the kernels do not run now: MINILLM_NO_KERNEL set (read
    at each call, as the decode step reads it), or a machine that cannot build them."""
    return activation.silu_mul_unchecked(gate_up) if dispatch.cpu_kernels(gate_up.device) \
        else None


def _check(model, weights, layout, kernel) -> str:
    from ..model import registry
    from ..quant import is_quantized

    if is_optimized(model):
        raise TypeError("this model is already optimized; optimize the original model "
                        "(minillm.load(..., fast=False))")
    if not isinstance(model, nn.Module) or not hasattr(model, "config") \
            or not hasattr(model, "lm_head"):
        raise TypeError(f"optimize takes a minillm model (from minillm.load(..., fast=False)), "
                        f"got {type(model).__name__}")
    registry.require(model.config, "fast")
    fmt = weight_format(weights, model.dtype)
    from ..quant.linear import Q41Linear

    has_blocks = any(isinstance(m, Q41Linear) for m in model.modules())
    if fmt == "q4_1" and not has_blocks:
        raise ValueError("weights='q4_1' runs a GGUF file's own Q4_1 blocks: load them with "
                         "minillm.load(gguf_file_or_name, weights='q4_1')")
    if is_quantized(model) and not (fmt == "q4_1" and has_blocks):
        raise TypeError("optimize takes a float model; this one is quantized (minillm.quantize). "
                        "Quantize or optimize, not both: optimize(model, 'int8') is the fast "
                        "path for int8 weights")
    if layout not in ("auto", "in_out", "out_in"):
        raise ValueError(f"layout must be 'auto', 'in_out' or 'out_in', got {layout!r}")
    if kernel not in ("auto", True, False):
        raise ValueError(f"kernel must be 'auto', True or False, got {kernel!r}")
    return fmt


def _linear_maker(fmt: str, act_dtype, device, layout: str, kernel):
    if fmt in ("int8", "q4_1"):  # q4_1: the layers the file does not store as Q4_1 go int8
        from ..quant.linear import Int8Linear

        return lambda w, b: Int8Linear.from_weight(w, b)
    dtype = FLOAT_DTYPES[fmt]
    use_kernel = False
    if dispatch.kernel_layout(dtype) and act_dtype == torch.float32 and device.type == "cpu" \
            and kernel in ("auto", True):
        use_kernel = dispatch.cpu_kernels(device)
        if kernel is True and not use_kernel:
            raise ValueError(f"minillm's kernels cannot run here ({dispatch.why_not(device)}); "
                             f"use kernel='auto'")
    elif kernel is True:
        raise ValueError("kernel=True needs float32 or bf16 weights with float32 activations "
                         "on a CPU")

    def make(weight, bias):
        return FastLinear(weight, None if bias is None else bias.to(act_dtype), dtype=dtype,
                          layout=layout, kernel=use_kernel)

    return make
