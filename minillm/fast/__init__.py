"""minillm.fast: the fast batch-1 decode path (chapter 05).

    optimize(model, dtype=None) -> FastLlama   the same network, weights fused and laid out for
                                               speed, a lean decode step; `minillm.generate`
                                               runs it unchanged
    layout.py                                  which weight layout multiplies fastest here
    kernel.py                                  a bf16 matrix-vector kernel for AVX2 CPUs
    model.py                                   FastLlama

    >>> model, tokenizer = minillm.load("smollm2-135m")
    >>> fast = minillm.fast.optimize(model)                        # float32
    >>> fast16 = minillm.fast.optimize(model, dtype=torch.bfloat16)
    >>> minillm.generate(fast, tokenizer, "Hello", max_new_tokens=20).metrics
"""

from __future__ import annotations

import torch

from .layout import best_layout, time_layouts
from .model import FastLlama

__all__ = ["optimize", "FastLlama", "best_layout", "time_layouts"]


def optimize(model, dtype: torch.dtype | None = None, *, layout: str = "auto",
             logits: str = "all", kernel="auto") -> FastLlama:
    """A fast copy of a minillm Llama/Qwen2 `model` (from `minillm.load`).

    dtype   None keeps the model's dtype; torch.bfloat16 halves the bytes each token reads.
    layout  "auto" (time both and keep the faster), "in_out" (x @ W) or "out_in" (F.linear).
    logits  "all": logits at every position (the forward contract). "last": a prompt's forward
            pass returns only its last position's logits, which is all generation needs, as
            transformers' generate() does; it skips most of the LM head's work in prefill.
    kernel  bf16 on a CPU: "auto" uses minillm's own bf16 matrix-vector kernel for batch-1
            decode where it can be built (kernel.py; x86-64 AVX2 and a C compiler), False
            never, True insists (RuntimeError where it cannot be built).

    The original model is left as it is; the copy holds its own weights (about as many bytes
    again, plus the LM head when the embeddings are tied)."""
    if isinstance(model, FastLlama):
        raise TypeError("this model is already a FastLlama; optimize the original model")
    if not hasattr(model, "config") or not hasattr(model, "layers"):
        raise TypeError(f"optimize takes a minillm Llama/Qwen2 model (from minillm.load), got "
                        f"{type(model).__name__}")
    from ..quant import is_quantized

    if is_quantized(model):
        raise TypeError("optimize takes a float model; this one is quantized (minillm.quantize). "
                        "Quantize or optimize, not both: optimize(model, dtype=torch.bfloat16) "
                        "is the fast path for smaller weights")
    with torch.no_grad():
        return FastLlama(model, dtype=dtype, layout=layout, logits=logits, kernel=kernel)
