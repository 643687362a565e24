"""Which device to run on, which device a model is on, and clocks that wait for that device.

A CUDA GPU or Apple's MPS runs work asynchronously: a call returns as soon as its kernels are
queued. A timer that reads the clock without waiting measures the queueing, not the work. Every
timed region in minillm goes through `synchronize`, `Timer` or `best_time`, which wait for the
device before reading the clock (on a CPU they cost nothing).
"""

from __future__ import annotations

import time

import torch


FLOAT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The float dtypes minillm names, by the short names the commands and reports use."""


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """"auto" is a CUDA GPU when there is one, then Apple's MPS, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto' or a torch device name, not {type(device).__name__}")
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda', 'cuda:N' or "
                         "'mps'") from error


def model_device(model) -> torch.device:
    """The device a model computes on: its `device` attribute when it has one, else where its
    first parameter (or buffer) lives; the CPU for an object without tensors (a test double)."""
    device = getattr(model, "device", None)
    if isinstance(device, (torch.device, str)):
        return torch.device(device)
    for tensors in ("parameters", "buffers"):
        if hasattr(model, tensors):
            for t in getattr(model, tensors)():
                return t.device
    return torch.device("cpu")


def model_dtype(model) -> torch.dtype:
    """The dtype of a model's activations (and so of its KV cache): its `dtype` attribute when
    it has one, else its first floating parameter's; float32 for an object without tensors."""
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    for p in model.parameters() if hasattr(model, "parameters") else ():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def synchronize(device=None) -> None:
    """Wait until every kernel queued on `device` (a torch.device, a name, or a model) has run;
    without a device, on every GPU this process may have used (CUDA's, Apple's MPS). Nothing to
    wait for on a CPU."""
    if device is not None and not isinstance(device, (torch.device, str)):
        device = model_device(device)
    device = torch.device(device) if device is not None else None
    if device is None or device.type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize(device)
    if device is None or device.type == "mps":
        if _mps_available():
            torch.mps.synchronize()


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def now(device=None) -> float:
    """`time.perf_counter()` once `device` has finished its queued work."""
    synchronize(device)
    return time.perf_counter()


class Timer:
    """Seconds of the work inside a `with` block, on `device` (a device, a name or a model):

        with Timer(model) as t:
            model(ids)
        t.seconds

    The device is synchronized on entry (so earlier queued work is not charged to this block)
    and on exit (so this block's work is)."""

    def __init__(self, device=None):
        self.device = device
        self.start = self.end = None

    def __enter__(self) -> "Timer":
        self.start = now(self.device)
        return self

    def __exit__(self, *exc) -> None:
        self.end = now(self.device)

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None:
            raise RuntimeError("the timer has not finished: use it as `with Timer(...) as t:`")
        return self.end - self.start


def best_time(fn, device=None, repeats: int = 3, warmup: int = 0) -> float:
    """The fastest of `repeats` timed calls of `fn()` on `device`, after `warmup` untimed ones."""
    from .validate import check_int

    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        with Timer(device) as t:
            fn()
        best = min(best, t.seconds)
    return best


def describe() -> dict:
    """The versions and the device a lesson reports at its start, by label: "device" and "cpu
    threads" are Chinese under use_language("zh"); "python", "torch" and "gpu" are the same in
    both. The labels line up by screen columns in a format spec (`f"{key:>12}"`)."""
    import platform

    from .columns import Label
    from .wording import text

    chosen = pick_device()
    info = {
        Label("python"): platform.python_version(),
        Label("torch"): torch.__version__,
        Label(text("device", "设备")): str(chosen),
        Label(text("cpu threads", "CPU 线程数")): torch.get_num_threads(),
    }
    if chosen.type == "cuda":
        info[Label("gpu")] = torch.cuda.get_device_name(chosen)
    return info
