"""Which kernels multiply the rows of the engine's forward passes, for the weights its model holds.

A decode pass runs one row per running request (up to max_num_seqs); a prompt chunk one row per
token (up to max_num_batched_tokens). The fast path's linear layers send a pass of a few rows to
minillm's multi-row kernel of their format (gemm_int8, gemm_q4_1, gemm_bf16, gemm_f32; how many
rows is minillm.kernels.dispatch's answer); a pass of more rows takes a PyTorch path, which for
int8 and Q4_1 weights (and bf16 from dispatch.UPCAST_ROWS rows) builds a float32 copy of each
weight for the call. A prompt chunk's last row alone reaches the LM head. `batched_fallback` says which passes, in one sentence; the engine says it once.
"""

from __future__ import annotations

from ..kernels import dispatch
from ..utils.devices import FLOAT_DTYPES, model_dtype

REBUILT = ("int8", "q4_1")  # formats whose passes past their kernel's rows rebuild float weights


def weight_format(model) -> str:
    """How `model`'s weights are stored: the fast path's format ("fp32", "bf16", "int8", "q4_1",
    ...), or a readable model's dtype by its short name ("fp32")."""
    fmt = getattr(model, "weight_format", None)
    if fmt is not None:
        return fmt
    dtype = model_dtype(model)
    names = {v: k for k, v in FLOAT_DTYPES.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def kernel_rows(model, leave_out=None) -> tuple[list[str], int]:
    """The kernels `model`'s linear layers (but `leave_out`) multiply a few rows with, and up to
    how many rows every layer does (0: some layer has no kernel here, or the model has no routed
    layer)."""
    layers = [m for m in model.modules() if isinstance(m, dispatch.RoutedLinear)
              and m is not leave_out]
    kernels = sorted({m.route.kernel for m in layers if m.route.kernel})
    return kernels, min((m.few_rows_max for m in layers), default=0)


def batched_fallback(model, max_num_seqs: int, max_num_batched_tokens: int) -> str | None:
    """One sentence naming the engine's passes that do not go through the multi-row kernel of
    `model`'s weight format (int8, q4_1, bf16) and what they do instead; None when every pass
    does, or when no kernel runs here at all (minillm.load has said that already)."""
    fmt = weight_format(model)
    kernels, rows = kernel_rows(model)
    if fmt not in (*REBUILT, "bf16") or rows == 0 \
            or max(max_num_seqs, max_num_batched_tokens) <= rows:
        return None
    kernels = " and ".join(kernels)
    if fmt == "bf16":  # one row through the kernel; PyTorch's paths beyond: FastLinear.forward
        wide = dispatch.UPCAST_ROWS
        return (f"the engine multiplies weights 'bf16' with {kernels} only in passes of one row "
                f"(a decode step of one request); passes of 2 to {wide - 1} rows run PyTorch's "
                f"bf16 matmul, and passes of {wide} rows or more (prompt chunks, decode steps "
                f"of {wide} or more requests) widen each weight to float32 for the call")
    # a prompt chunk's rows reach every layer but the LM head, which takes its last row alone
    chunk_rows = kernel_rows(model, leave_out=getattr(model, "lm_head", None))[1] or rows
    which = []
    if max_num_batched_tokens > chunk_rows:
        which.append(f"prompt chunks of more than {chunk_rows} tokens in one pass")
    if max_num_seqs > rows:
        which.append(f"decode steps of more than {rows} requests")
    if not which:
        return None
    limits = f"up to {rows} rows" + ("" if chunk_rows == rows else
                                      f" (a prompt chunk's up to {chunk_rows:,})")
    return (f"the engine multiplies weights '{fmt}' with {kernels} in passes of {limits}; a "
            f"pass of more rows ({' and '.join(which)}) rebuilds each float32 weight "
            "for the call and multiplies it with PyTorch")
