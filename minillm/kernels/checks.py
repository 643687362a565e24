"""What every wrapper checks before a tensor's address reaches C.

A tensor the kernel cannot read raises a ValueError that names it, says what it is and what the
kernel takes. A tensor off the CPU (CUDA, MPS) never reaches C: its address points into the
GPU's memory, and the C code would read garbage or crash the process."""

from __future__ import annotations

import torch

_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.int8: "int8",
          torch.uint8: "uint8", torch.int64: "int64"}


def on_cpu(name: str, t: torch.Tensor, dtype: torch.dtype, contiguous: bool = True) -> None:
    """`t` is a `dtype` tensor on the CPU (and contiguous, if asked); else a ValueError."""
    if getattr(t, "dtype", None) is dtype and t.is_cpu and (not contiguous or t.is_contiguous()):
        return
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if not t.is_cpu:
        raise ValueError(f"{name} is on {t.device}: minillm's kernels run on the CPU and never "
                         f"take a tensor on another device (move it with .cpu(), or let "
                         f"minillm.kernels.dispatch send it to PyTorch's kernels)")
    kind = _NAMES.get(dtype, str(dtype))
    if t.dtype is not dtype:
        raise ValueError(f"{name} must be {kind}, got {t.dtype}")
    raise ValueError(f"{name} must be contiguous (call .contiguous() first)")


def matrix(name: str, t: torch.Tensor, dtype: torch.dtype, layout: str) -> torch.Size:
    """The shape of a contiguous 2-D `dtype` matrix on the CPU; else a ValueError."""
    on_cpu(name, t, dtype)
    shape = t.shape
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D {_NAMES.get(dtype, dtype)} matrix {layout}, got "
                         f"shape {tuple(shape)}")
    return shape


def vector(name: str, t: torch.Tensor | None, n: int) -> None:
    """`t` is None or n contiguous float32 values on the CPU; else a ValueError."""
    if t is None:
        return
    on_cpu(name, t, torch.float32)
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"{name} must be {n} float32 values, got shape {tuple(t.shape)}")


def rows(name: str, x: torch.Tensor, k: int, contiguous: bool = True) -> torch.Tensor:
    """x as (rows, k) float32 on the CPU (any leading dimensions folded into rows); else a
    ValueError."""
    on_cpu(name, x, torch.float32, contiguous)
    if x.dim() != 2:
        if x.dim() == 0 or x.shape[-1] != k:
            raise ValueError(f"{name} must hold rows of {k} float32 values, got shape "
                             f"{tuple(x.shape)}")
        x = x.reshape(-1, k)
    if x.shape[1] != k or x.shape[0] < 1:
        raise ValueError(f"{name} must be 1 or more rows of {k} float32 values, got shape "
                         f"{tuple(x.shape)}")
    return x


def output(out: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """`out`, checked: contiguous float32 of `shape` on the CPU."""
    on_cpu("out", out, torch.float32)
    if tuple(out.shape) != shape:
        raise ValueError(f"out must have shape {shape}, got {tuple(out.shape)}")
    return out


def threads(count: int | None) -> int:
    """An OpenMP thread count: `count`, or PyTorch's."""
    if count is None:
        return torch.get_num_threads()
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"threads must be a positive int or None (PyTorch's count), got "
                         f"{count!r}")
    return count


def address(t: torch.Tensor | None) -> int | None:
    """A checked tensor's address for C (None for an absent optional argument)."""
    return None if t is None else t.data_ptr()
