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
(`add_request(..., adapter=)`). `save_adapter` writes an adapter to a safetensors file in
minillm's layer names, `load_adapter` reads it back and `fit_adapter` fits it to a model, the
fast path's fused layers included (what `minillm serve --lora NAME=PATH` serves).
"""

from __future__ import annotations

import itertools
import warnings
from contextlib import contextmanager
from pathlib import Path

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
            base = _target(modules, layer)
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


# An adapter file: a safetensors file holding, for each layer, `<layer>.lora_A.weight` (rank, in)
# and `<layer>.lora_B.weight` (out, rank), in minillm's layer names (PEFT's tensor suffixes; PEFT's
# layer names are Hugging Face's, "base_model.model.model.layers.0.self_attn.q_proj"). B carries
# the adapter's scale (PEFT's lora_alpha / r): MultiLoRA's own scale multiplies on top.
ADAPTER_FORMAT = "minillm-lora-v1"
_PARTS = (".lora_A.weight", ".lora_B.weight")
# The layers minillm's fast path fuses (Attention.fuse, GatedMLP.fuse): the parts' outputs one
# after the other in the fused layer's, and how wide each part is, read from the parent module.
FUSED = {"qkv_proj": (("q_proj", "k_proj", "v_proj"),
                      lambda attn: (attn.q_width, attn.kv_width, attn.kv_width)),
         "gate_up_proj": (("gate_proj", "up_proj"),
                          lambda mlp: (mlp.intermediate_size, mlp.intermediate_size))}


def save_adapter(path, adapter: dict) -> Path:
    """Write `adapter` ({layer name: (A, B)}) to the safetensors file `path`, float32."""
    from safetensors.torch import save_file

    if not adapter:
        raise ValueError("the adapter is empty: give {layer name: (A, B)}")
    tensors = {}
    for layer, (A, B) in adapter.items():
        tensors[layer + _PARTS[0]] = A.detach().float().cpu().contiguous()
        tensors[layer + _PARTS[1]] = B.detach().float().cpu().contiguous()
    save_file(tensors, str(path), metadata={"format": ADAPTER_FORMAT})
    return Path(path)


def load_adapter(path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The adapter {layer name: (A, B)} that save_adapter wrote to `path` (fit_adapter checks it
    against a model); FileNotFoundError or ValueError naming the file and what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"{path}: not a safetensors file ({error})") from None
    pieces: dict[str, dict] = {}
    for key, tensor in tensors.items():
        part = next((p for p in _PARTS if key.endswith(p)), None)
        if part is None:
            raise ValueError(f"{path}: the tensor {key!r} is not part of a LoRA adapter (an "
                             f"adapter file holds <layer>{_PARTS[0]} and <layer>{_PARTS[1]})")
        pieces.setdefault(key[:-len(part)], {})[part] = tensor
    if not pieces:
        raise ValueError(f"{path}: holds no tensors")
    adapter = {}
    for layer, found in sorted(pieces.items()):
        missing = [p for p in _PARTS if p not in found]
        if missing:
            raise ValueError(f"{path}: {layer}{missing[0]} is missing")
        adapter[layer] = (found[_PARTS[0]], found[_PARTS[1]])
    return adapter


def fit_adapter(model, adapter: dict, rank: int | None = None) -> dict:
    """`adapter` in the layers `model` has, each of one rank: the same products, ready for
    MultiLoRA. A layer the model has fused (the fast path's q_proj, k_proj, v_proj in qkv_proj;
    gate_proj, up_proj in gate_up_proj) moves into the fused layer: its A stacks the parts' A
    (their ranks add up) and its B holds each part's B in that part's rows and columns, zeros
    elsewhere. Then every layer is padded with zeros to the largest rank, or to `rank`.
    ValueError, saying what, for a layer the model lacks or a shape the layer cannot take."""
    if not adapter:
        raise ValueError("the adapter is empty: give {layer name: (A, B)}")
    modules = dict(model.named_modules())
    kept, parts = {}, {}
    for layer, (A, B) in adapter.items():
        if layer.startswith("base_model.model."):
            raise ValueError(f"{layer!r} is a Hugging Face (PEFT) layer name; minillm reads "
                             "adapters in its own layer names, as save_adapter writes them")
        A, B = A.float(), B.float()
        if A.dim() != 2 or B.dim() != 2 or A.shape[0] != B.shape[1]:
            raise ValueError(f"{layer}: A of shape {tuple(A.shape)} and B of shape "
                             f"{tuple(B.shape)} are not a LoRA pair: (rank, in) and (out, rank)")
        parent, _, leaf = layer.rpartition(".")
        fused = next((f"{parent}.{name}" for name, (names, _) in FUSED.items()
                      if leaf in names), None)
        if layer not in modules and fused in modules:
            parts.setdefault(fused, {})[leaf] = (A, B)
        else:
            kept[layer] = (A, B)
    for fused, found in parts.items():
        if fused in kept:
            raise ValueError(f"the adapter holds {fused} and its parts {sorted(found)}: give one")
        kept[fused] = _fused(modules, fused, found)
    width = rank or max(A.shape[0] for A, _ in kept.values())
    fitted = {}
    for layer, (A, B) in kept.items():
        if A.shape[0] > width:
            raise ValueError(f"{layer}: rank {A.shape[0]} is above the rank {width} asked for")
        pad = width - A.shape[0]
        padded = (torch.cat([A, A.new_zeros(pad, A.shape[1])]),
                  torch.cat([B, B.new_zeros(B.shape[0], pad)], dim=1))
        fitted[layer] = _checked({layer: padded}, layer, width, _target(modules, layer))
    return fitted


def _fused(modules: dict, layer: str, found: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """One (A, B) for the fused `layer` from its parts' {part name: (A, B)}, each a LoRA pair."""
    parent, _, name = layer.rpartition(".")
    names, widths_of = FUSED[name]
    try:
        widths = widths_of(modules[parent])
    except AttributeError:  # a family whose own layer is fused: no parts to move
        raise ValueError(f"the model has no layer {parent}.{sorted(found)[0]}") from None
    d_in = _target(modules, layer).in_features
    for part, width in zip(names, widths):
        a, b = found.get(part, (None, None))
        if a is not None and (a.shape[1] != d_in or b.shape[0] != width):
            raise ValueError(f"{parent}.{part}: A has shape {tuple(a.shape)} and B "
                             f"{tuple(b.shape)}; the layer needs (rank, {d_in}) and "
                             f"({width}, rank)")
    A = torch.cat([found[n][0] for n in names if n in found])
    B = A.new_zeros(sum(widths), A.shape[0])
    row = col = 0
    for part, width in zip(names, widths):
        if part in found:
            rank = found[part][1].shape[1]
            B[row:row + width, col:col + rank] = found[part][1]
            col += rank
        row += width
    return A, B


def _target(modules: dict, layer: str):
    """The linear layer named `layer` among the model's `modules`."""
    if layer not in modules:
        raise ValueError(f"the model has no layer {layer!r}")
    base = modules[layer]
    if not hasattr(base, "in_features") or not hasattr(base, "out_features"):
        raise ValueError(f"the model's layer {layer!r} is a {type(base).__name__}, not a linear "
                         "layer")
    return base


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
    """Where the layer's weights are: parameters, or buffers for a quantized layer."""
    return next(itertools.chain(module.parameters(), module.buffers())).device
