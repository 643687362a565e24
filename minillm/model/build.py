"""`build_model`: a config and its weights -> minillm's model, checked, on its device."""

from __future__ import annotations

import torch

from . import registry
from .config import ModelConfig


def resolve_device(device) -> torch.device:
    """"auto" is a CUDA GPU when there is one, then Apple's MPS, else the CPU."""
    from ..utils.devices import pick_device

    return pick_device("auto" if device is None else device)


def build_model(config: ModelConfig, weights: dict[str, torch.Tensor],
                dtype=torch.float32, device="cpu") -> torch.nn.Module:
    """minillm's model for `config`, holding `weights` (minillm's names), in eval mode.

    The model is first built on the "meta" device (shapes only, no memory, no random init), so the
    weights are checked against the config's shapes and then used as they are."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {dtype!r}")
    with torch.device("meta"):
        model = registry.architecture(config.arch).model_class(config)
    expected = model.state_dict()
    missing = [n for n in expected if n not in weights]
    if missing:
        raise ValueError(f"missing tensor(s) {missing[:5]} for a {config.arch} model")
    unexpected = [n for n in weights if n not in expected]
    if unexpected:
        raise ValueError(f"unexpected tensor(s) {unexpected[:5]} for this {config.arch} config")
    for name, want in expected.items():
        got = tuple(weights[name].shape)
        if got != tuple(want.shape):
            raise ValueError(f"the config disagrees with the weights: tensor {name} has shape "
                             f"{got}, the config implies {tuple(want.shape)}")
    device = resolve_device(device)
    weights = {n: w.to(device=device, dtype=dtype) for n, w in weights.items()}
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval().requires_grad_(False)
