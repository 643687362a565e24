"""A fast model's weights in 2 MB pages (Linux's transparent huge pages).

A batch-1 decode step reads every weight once, in order. In 4 KB pages that stream crosses a page
every 4 KB: the CPU's prefetcher starts again at each one and the TLB misses every 4 KB, so the
kernels read well below the memory's bandwidth. Linux backs a region with 2 MB pages where the
program asks (madvise MADV_HUGEPAGE, the setting "madvise" most distributions ship) or everywhere
("always"). `to_huge_pages` copies a model's large weights into one such region, each tensor
keeping its own storage (a tied head stays tied, sizes count as before), and says once when the
system cannot. MINILLM_HUGE_PAGES=0 in the environment leaves the weights where they are."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

from ..utils.wording import text

HUGE_PAGE = 2 * 1024 * 1024
SMALLEST = 64 * 1024  # a storage below this many bytes stays where it is
ALIGN = 4096
SWITCH = "MINILLM_HUGE_PAGES"
SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_SAID = []


def switched_on() -> bool:
    """False where MINILLM_HUGE_PAGES=0 asks to leave the weights where they are."""
    return os.environ.get(SWITCH, "1").strip() != "0"


def why_not() -> str | None:
    """Why weights cannot go into 2 MB pages here, or None when they can."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return "only Linux has transparent huge pages"
    try:
        setting = SETTING.read_text()
    except OSError:
        return f"{SETTING} cannot be read"
    if "[never]" in setting:
        return f"transparent huge pages are off ({SETTING} says never)"
    return None


def describe() -> str:
    """Where a fast model's streamed weights go here, in words."""
    if not switched_on():
        return f"4 KB pages ({SWITCH}=0)"
    reason = why_not()
    return "asked for 2 MB pages (madvise)" if reason is None else f"4 KB pages ({reason})"


def _storages(model: nn.Module) -> dict[int, list[torch.Tensor]]:
    """The storages of at least SMALLEST bytes that the layers' kernels stream (their
    `_operands`: weights, scales), each with every tensor of the model on it (a tied embedding
    table moves with its head, so it stays tied)."""
    tensors = [*model.parameters(), *model.buffers()]
    streamed = set()
    for module in model.modules():
        operands = [t for t in getattr(module, "_operands", ()) if isinstance(t, torch.Tensor)]
        tensors += operands
        streamed |= {t.untyped_storage().data_ptr() for t in operands if t.device.type == "cpu"
                     and t.untyped_storage().nbytes() >= SMALLEST}
    found: dict[int, list[torch.Tensor]] = {}
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        if key in streamed and t.device.type == "cpu":
            group = found.setdefault(key, [])
            if not any(u is t for u in group):
                group.append(t)
    return found


def _say_once(reason: str) -> None:
    if _SAID:
        return
    _SAID.append(reason)
    print(text("minillm: the weights stay in 4 KB pages ({reason}): a decode step reads them "
               "more slowly", "minillm：权重仍在 4 KB 页中（{reason}）：解码步读取权重会更慢",
               reason=reason), file=sys.stderr)


def to_huge_pages(model: nn.Module) -> int:
    """Move `model`'s large CPU weights into memory Linux backs with 2 MB pages, in place, as
    `model.to()` moves them (each parameter and buffer keeps its object, and the layers renew
    their views and routes); every tensor of one storage lands on one new storage. Returns the
    bytes moved (0 where the system cannot, said once on stderr)."""
    reason = why_not()
    groups = _storages(model)
    if not groups:
        return 0
    if reason is not None:
        if sys.platform.startswith("linux"):
            _say_once(reason)
        return 0
    sizes = {key: -(-tensors[0].untyped_storage().nbytes() // ALIGN) * ALIGN
             for key, tensors in groups.items()}
    # private: anonymous shared memory is shmem, which Linux backs with huge pages only where
    # shmem_enabled says so
    try:
        region = mmap.mmap(-1, sum(sizes.values()) + HUGE_PAGE,
                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = ctypes.c_char.from_buffer(region)
        start = -ctypes.addressof(view) % HUGE_PAGE
        del view  # the address is all it was for; the region goes with its last tensor
        region.madvise(mmap.MADV_HUGEPAGE, start, len(region) - start)
    except OSError as error:  # no memory for a second copy, or a kernel that refuses the advice
        _say_once(f"no region for them: {error}")
        return 0
    moved, offset = {}, start
    with torch.no_grad():
        for key, tensors in groups.items():
            old = tensors[0].untyped_storage()
            new = torch.frombuffer(region, dtype=torch.uint8, count=old.nbytes(), offset=offset)
            new.copy_(torch.empty(0, dtype=torch.uint8).set_(old))
            moved[key] = new.untyped_storage()
            offset += sizes[key]

    def onto_new_storage(t: torch.Tensor) -> torch.Tensor:
        storage = moved.get(t.untyped_storage().data_ptr()) if t.device.type == "cpu" else None
        if storage is None:
            return t
        return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.size(),
                                                  t.stride())

    model._apply(onto_new_storage)
    return sum(storage.nbytes() for storage in moved.values())
