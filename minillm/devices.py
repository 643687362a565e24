"""Which device to run on: a CUDA GPU when there is one, then Apple's MPS, else the CPU."""

from __future__ import annotations

import torch


def pick_device(device: str | torch.device = "auto") -> torch.device:
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto' or a torch device name, not {type(device).__name__}")
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda', 'cuda:N' or "
                         "'mps'") from error


def describe() -> dict:
    """The versions and the device a lesson reports at its start."""
    import platform

    chosen = pick_device()
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(chosen),
        "cpu threads": torch.get_num_threads(),
    }
    if chosen.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(chosen)
    return info
