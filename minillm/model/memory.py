"""How many bytes a model's weights take, at rest and per decoded token: one definition for the
lessons, the quantization chapter and the benchmarks."""

from __future__ import annotations

import torch
import torch.nn as nn


def _unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are views of one block of memory (a fast model's tied head)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _is_linear(module: nn.Module) -> bool:
    """nn.Linear and the layers that stand in for one (minillm.fast's FastLinear, the quantized
    layers of minillm.quant): each says its in_features and out_features."""
    return isinstance(module, nn.Linear) or (hasattr(module, "in_features")
                                              and hasattr(module, "out_features"))


def weight_bytes(model: nn.Module, linear_only: bool = False) -> int:
    """Bytes the model's weights take: every parameter and buffer, a shared (tied) tensor once.
    `linear_only`: only the transformer blocks' linear layers (float, fast or quantized), not
    the LM head."""
    if not linear_only:
        return _unique_bytes([*model.parameters(), *model.buffers()])
    tensors = []
    for name, module in model.named_modules():
        if name.split(".")[-1] == "lm_head" or not _is_linear(module):
            continue
        tensors += [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    return _unique_bytes(tensors)


def bytes_per_token(model: nn.Module) -> int:
    """Bytes of weights one batch-1 decode step reads: every weight once, except the token
    embedding table, of which a step reads one row, unless that table is also the LM head
    (tied embeddings, read whole). Works for minillm's models and transformers' alike."""
    from ..layers.linear import LMHead

    if hasattr(model, "get_input_embeddings"):  # a transformers model
        table = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        tied = head is not None and head.weight.data_ptr() == table.data_ptr()
    else:
        table = model.embed.weight
        tied = (isinstance(model.lm_head, LMHead) and model.lm_head.tied) or any(
            _same_storage(table, t) for t in model.lm_head.parameters())
    total = weight_bytes(model)
    if tied:
        return total  # the head reads the whole table
    return total - table.numel() * table.element_size() + table.shape[1] * table.element_size()
