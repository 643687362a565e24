"""Several LoRA adapters served in one batch (多 LoRA 服务; S-LoRA, Punica, vLLM's
`--enable-lora`).

A LoRA adapter trains two small matrices beside a linear layer: the output becomes
x Wᵀ + scale · x Aᵀ Bᵀ, with A of (rank, in) and B of (out, rank). Merged into the weights
(W + scale · B A) it costs nothing per token, but each adapter then needs its own copy of the
model and its requests batch only with each other. Served unmerged, one copy of W serves every
request: the base multiply runs once for the whole batch, and each row adds the product of its
own adapter's A and B, gathered by index (Punica's BGMV does that gather on a GPU).

`MultiLoRA(model, adapters)` wraps the named linear layers in `LoRALinear`; `rows(ids)` says,
for the forward passes inside it, which adapter each row of the batch uses (-1: none). The
engine takes one (`Engine(..., lora=)`) and each request names its adapter
(`add_request(..., adapter=)`).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch
from torch import nn

from ..utils.validate import check_int, check_number


class LoRALinear(nn.Module):
    """`base` plus one of several adapters per row: A (adapters, rank, in), B (adapters, out,
    rank). `row_adapters`, set by MultiLoRA.rows, holds each row's adapter (-1: none)."""

    def __init__(self, base: nn.Module, A: torch.Tensor, B: torch.Tensor, scale: float):
        super().__init__()
        self.base, self.scale = base, scale
        self.register_buffer("A", A, persistent=False)
        self.register_buffer("B", B, persistent=False)
        self.row_adapters: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        rows = self.row_adapters
        if rows is None or bool((rows < 0).all()):
            return out
        if rows.numel() != x.shape[0]:
            raise ValueError(f"{rows.numel()} adapter ids for a batch of {x.shape[0]} rows")
        pick = rows.clamp(min=0)
        low = torch.matmul(x, self.A[pick].transpose(1, 2).to(x.dtype))  # (batch, seq, rank)
        delta = torch.matmul(low, self.B[pick].transpose(1, 2).to(x.dtype))  # (batch, seq, out)
        return out + self.scale * delta * (rows >= 0).to(x.dtype)[:, None, None]


def random_adapter(model, targets: tuple[str, ...], rank: int, seed: int, size: float = 0.02
                   ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """An untrained adapter for the layers of `model` whose names end in one of `targets`:
    {layer name: (A, B)}, random with a fixed seed (an adapter that changes the output, for
    showing how adapters are served; training one is another course)."""
    check_int("rank", rank, 1)
    generator = torch.Generator().manual_seed(seed)
    adapter = {}
    for name, module in model.named_modules():
        if name.split(".")[-1] in targets:
            out_features, in_features = module.out_features, module.in_features
            A = torch.randn(rank, in_features, generator=generator) / in_features ** 0.5
            B = size * torch.randn(out_features, rank, generator=generator)
            adapter[name] = (A, B)
    if not adapter:
        raise ValueError(f"no layer of the model is named {targets}")
    return adapter


class MultiLoRA:
    """Adapters {name: {layer name: (A, B)}} installed beside one model's linear layers."""

    def __init__(self, model, adapters: dict, scale: float = 1.0):
        if not adapters:
            raise ValueError("adapters is empty: give at least one {name: {layer: (A, B)}}")
        check_number("scale", scale)
        self.model, self.names, self._fused = model, list(adapters), None
        ranks = {A.shape[0] for adapter in adapters.values() for A, _ in adapter.values()}
        if len(ranks) != 1:
            raise ValueError(f"the adapters have ranks {sorted(ranks)}; serve one rank together")
        rank = ranks.pop()
        modules = dict(model.named_modules())
        self.layers: list[LoRALinear] = []
        for layer in sorted(set().union(*adapters.values())):
            if layer not in modules:
                raise ValueError(f"the model has no layer {layer!r}")
            base = modules[layer]
            parts = [_checked(adapter, layer, rank, base) for adapter in adapters.values()]
            A, B = (torch.stack(p).to(_device(base)) for p in zip(*parts))
            wrapped = LoRALinear(base, A, B, scale)
            self._swap(layer, wrapped)
            self.layers.append(wrapped)
        if getattr(model, "fused_decode", None) is not None:
            # The fused decode step holds the layers it was built with, not these wrappers.
            self._fused, model.fused_decode = model.fused_decode, None
            warnings.warn("LoRA adapters installed: this model's batch-1 decode runs the "
                          "layers one by one (minillm's fused decode step skips the adapters)",
                          RuntimeWarning, stacklevel=2)

    def _swap(self, layer: str, module: nn.Module) -> None:
        parent, _, child = layer.rpartition(".")
        setattr(self.model.get_submodule(parent) if parent else self.model, child, module)

    def remove(self) -> None:
        """Put the model's own layers (and its fused decode step) back."""
        names = {id(m): n for n, m in self.model.named_modules()}
        for wrapped in self.layers:
            self._swap(names[id(wrapped)], wrapped.base)
        if self._fused is not None:
            self.model.fused_decode = self._fused
        self.layers = []

    def index(self, adapter: str | None) -> int:
        """The adapter's row id: -1 for None (the base model)."""
        if adapter is None:
            return -1
        if adapter not in self.names:
            raise ValueError(f"unknown adapter {adapter!r}; this engine serves {self.names} "
                             "(or None for the base model)")
        return self.names.index(adapter)

    @contextmanager
    def rows(self, ids: list[int]):
        """Inside: row i of every batch uses adapter ids[i] (-1: none)."""
        tensor = torch.tensor(ids, dtype=torch.long, device=_device(self.layers[0].base))
        for layer in self.layers:
            layer.row_adapters = tensor
        try:
            yield
        finally:
            for layer in self.layers:
                layer.row_adapters = None


def _checked(adapter: dict, layer: str, rank: int, base) -> tuple[torch.Tensor, torch.Tensor]:
    """The adapter's (A, B) for `layer` as float32, zeros where it leaves the layer alone."""
    if layer not in adapter:
        return torch.zeros(rank, base.in_features), torch.zeros(base.out_features, rank)
    A, B = (t.float() for t in adapter[layer])
    for name, t, want in (("A", A, (rank, base.in_features)), ("B", B, (base.out_features, rank))):
        if tuple(t.shape) != want:
            raise ValueError(f"{layer}: {name} has shape {tuple(t.shape)}, the layer needs {want}")
    return A, B


def _device(module) -> torch.device:
    return next(module.parameters()).device
