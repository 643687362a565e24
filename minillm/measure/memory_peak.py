"""How much memory a piece of PyTorch code allocates at its peak, on any device.

A CUDA GPU keeps its own count (`torch.cuda.max_memory_allocated`); a CPU keeps none. So
`peak_bytes` watches every tensor operation run inside it (a `TorchDispatchMode`) and adds up the
storages they create while those storages live: the high-water mark of the memory the code
allocated, not counting the tensors it was given.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _StorageCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}  # storage data pointer -> bytes, while it lives
        self.current = 0
        self.peak = 0

    def _freed(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or key in self.live or key in inputs:  # a view, or written in place
                continue
            self.live[key] = size
            self.current += size
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._freed, key)
        return out


def peak_bytes(fn, *args, **kwargs):
    """Run `fn(*args, **kwargs)`; return `(its result, the most bytes of new tensor storage alive
    at once while it ran)`. The result's own storage counts while `fn` runs."""
    counter = _StorageCounter()
    with counter:
        result = fn(*args, **kwargs)
    return result, counter.peak
