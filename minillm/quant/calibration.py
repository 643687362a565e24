"""Calibration: what GPTQ and AWQ need to know about a layer's inputs, and a model with chosen
linear layers rounded by RTN, GPTQ or AWQ on one grid.

`input_stats` runs calibration text through the float model once and keeps, for each chosen
linear layer, H = mean of x^T x over its input rows and the mean |x| of each input feature. Every
layer is calibrated on the float model's activations (not on those of the layers rounded before
it, as the GPTQ paper does), so the layers can be rounded in any order.

`round_layers` returns a copy of the model whose chosen weights are replaced by their rounded
values, still stored as floats ("fake quantization"): what the model computes is what a b-bit
kernel would compute, the bytes are not. Measuring quality needs no more.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..utils.devices import model_device
from .awq import awq
from .gptq import gptq
from .grid import output_error, rtn

METHODS = ("rtn", "gptq", "awq")


@dataclass
class InputStats:
    """One linear layer's calibration inputs, summed up."""

    h: torch.Tensor  # (in, in), float64: mean of x^T x
    mean_abs: torch.Tensor  # (in,), float64: mean |x| of each input feature
    tokens: int


def linear_names(model: nn.Module, blocks=None) -> list[str]:
    """The names of the linear layers in the transformer blocks (the LM head left out), those of
    the blocks numbered in `blocks` only when it is given."""
    names = [name for name, m in model.named_modules()
             if isinstance(m, nn.Linear) and name.startswith("layers.")]
    if blocks is not None:
        wanted = set(blocks)
        names = [n for n in names if int(n.split(".")[1]) in wanted]
    if not names:
        raise ValueError(f"no linear layers found in blocks {blocks!r} of {type(model).__name__}; "
                         f"pass a model from minillm.load(..., fast=False)")
    return names


class _Seen(Exception):
    """Raised after the last chosen layer has run: the rest of the forward pass is not needed."""


@torch.inference_mode()
def input_stats(model: nn.Module, token_ids, names, window: int = 256) -> dict[str, InputStats]:
    """H and mean |x| for each linear layer in `names`, over `token_ids` cut into windows."""
    modules = dict(model.named_modules())
    missing = [n for n in names if not isinstance(modules.get(n), nn.Linear)]
    if missing:
        raise ValueError(f"not linear layers of this model: {missing[:3]}")
    ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    if ids.numel() < 1:
        raise ValueError("calibration needs at least one token")
    sums = {n: [0.0, 0.0, 0] for n in names}

    def keep(name):
        def hook(module, args):
            x = args[0].reshape(-1, args[0].shape[-1]).float().cpu()
            entry = sums[name]
            entry[0] = entry[0] + (x.T @ x).double()
            entry[1] = entry[1] + x.abs().sum(0).double()
            entry[2] += x.shape[0]
        return hook

    def stop(module, args, output):
        raise _Seen

    hooks = [modules[n].register_forward_pre_hook(keep(n)) for n in names]
    last = max(names, key=list(modules).index)  # no need to run the layers after it
    hooks.append(modules[last].register_forward_hook(stop))
    try:
        for start in range(0, ids.numel(), window):
            try:
                model(ids[start:start + window][None].to(model_device(model)))
            except _Seen:
                pass
    finally:
        for h in hooks:
            h.remove()
    return {n: InputStats(h / t, a / t, t) for n, (h, a, t) in sums.items()}


def round_weight(weight: torch.Tensor, stats: InputStats, method: str, bits: int,
                 group_size: int | None = None) -> torch.Tensor:
    """One weight (out, in) rounded by `method` on the b-bit grid with groups of `group_size`."""
    w = weight.detach().float().cpu()
    if method == "rtn":
        return rtn(w, bits, group_size)
    if method == "gptq":
        return gptq(w, stats.h, bits, group_size)
    if method == "awq":
        return awq(w, stats.h, stats.mean_abs, bits, group_size)[0]
    raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def relative_output_error(weight: torch.Tensor, rounded: torch.Tensor, stats: InputStats) -> float:
    """||x (W - W_hat)^T|| / ||x W^T|| over the calibration inputs."""
    w = weight.detach().float().cpu()
    return (output_error(w, rounded, stats.h)
            / output_error(w, torch.zeros_like(w), stats.h)) ** 0.5


@torch.no_grad()
def round_layers(model: nn.Module, stats: dict[str, InputStats], method: str, bits: int,
                 group_size: int | None = None, progress: bool = False):
    """(a copy of `model` with the layers in `stats` rounded by `method`, the relative output
    error of each of them, the seconds spent rounding: the copy and the errors not counted)."""
    out = copy.deepcopy(model)
    modules = dict(out.named_modules())
    errors, seconds = {}, 0.0
    items = stats.items()
    if progress:
        from tqdm.auto import tqdm
        items = tqdm(items, desc=f"{method} {bits}-bit", leave=False)
    for name, layer_stats in items:
        layer = modules[name]
        start = time.perf_counter()
        rounded = round_weight(layer.weight, layer_stats, method, bits, group_size)
        seconds += time.perf_counter() - start
        errors[name] = relative_output_error(layer.weight, rounded, layer_stats)
        layer.weight.copy_(rounded.to(layer.weight.dtype))
    return out, errors, seconds
