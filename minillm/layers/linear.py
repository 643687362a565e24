"""Building linear layers from tensors, and the LM head that may share the embedding's matrix."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def plain_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    """An nn.Linear holding `weight` (out, in) and `bias` as they are (device, dtype)."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias, requires_grad=False)
    return layer


def fuse_linears(parts, make_linear=None) -> nn.Module:
    """One layer that computes what the linear layers `parts` compute, one output after the
    other (their matrices stacked): one multiplication instead of len(parts). A layer type that
    stacks its own storage (a quantized one: `stack`) does so; float layers are concatenated
    and given to `make_linear(weight, bias)` (default: an nn.Linear)."""
    if hasattr(type(parts[0]), "stack"):
        return type(parts[0]).stack(parts)
    weight = torch.cat([p.weight.detach() for p in parts])
    bias = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    return (make_linear or plain_linear)(weight, bias)


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put `new` where the submodule called `name` (e.g. "layers.0.attn.o_proj") is."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


class LMHead(nn.Module):
    """The LM head (语言模型头): logits = x Wᵀ, one score per vocabulary entry.

    With tied embeddings (`config.tie_embeddings`, as SmolLM2 has) W *is* the token embedding
    table: this module holds no weight of its own and reads the embedding's, whichever device or
    dtype it has been moved to. Otherwise it holds its own `weight` (vocab, hidden)."""

    def __init__(self, config, embed: nn.Embedding):
        super().__init__()
        self.tied = config.tie_embeddings
        if self.tied:
            self._embed = (embed,)  # a tuple, so the table is not registered (and saved) twice
        else:  # initialised as nn.Linear is, for a model built without loading weights
            self.weight = nn.Linear(config.hidden_size, config.vocab_size, bias=False).weight

    @property
    def matrix(self) -> torch.Tensor:
        return self._embed[0].weight if self.tied else self.weight

    def forward(self, x):
        return F.linear(x, self.matrix)

    def extra_repr(self) -> str:
        return "tied to the token embedding" if self.tied else ""
