"""Run a function on several processes joined by torch.distributed, the way torchrun does.

Every process runs `fn(rank, world_size, *args)`; the return values come back as a list, one per
rank. The processes talk over 127.0.0.1 with the backend that fits where the ranks' tensors live:
gloo for CPU tensors, nccl when they are on GPUs and every rank has its own."""

from __future__ import annotations

import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..utils.validate import check_int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(world_size: int, device="cpu") -> str:
    """gloo for ranks whose tensors are on the CPU (whatever GPUs the machine has: nccl moves
    only GPU tensors); nccl for ranks on CUDA when every rank has a GPU of its own."""
    kind = torch.device(device).type
    if kind == "cpu":
        return "gloo"
    if kind != "cuda":
        raise ValueError(f"the ranks' tensors must be on 'cpu' or 'cuda', got {device!r}")
    if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
        raise ValueError(f"{world_size} ranks on cuda need {world_size} GPUs, this machine has "
                         f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    return "nccl"


def _portable(value, to_numpy: bool):
    """Tensors cross process boundaries by value: torch's shared-memory handles would die with
    the worker process that made them."""
    if isinstance(value, dict):
        return {k: _portable(v, to_numpy) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_portable(v, to_numpy) for v in value)
    if to_numpy and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    if not to_numpy and type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return torch.from_numpy(value)
    return value


def _worker(rank, world_size, backend, port, fn, args, results, threads):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    try:
        dist.init_process_group(backend, rank=rank, world_size=world_size)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        results.put((rank, "ok", _portable(fn(rank, world_size, *args), to_numpy=True)))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_distributed(fn, world_size: int = 2, args: tuple = (), backend: str | None = None,
                    timeout: float = 600, device="cpu"):
    """Run `fn(rank, world_size, *args)` on `world_size` processes; return their results by rank.
    `fn` must be importable (defined in a module, not in a notebook cell). `device`: where the
    ranks keep their tensors ("cpu", or "cuda": rank r on cuda:r), which picks the backend."""
    check_int("world_size", world_size, 1, allowed="a positive int")
    backend = backend or default_backend(world_size, device)
    threads = max(1, (os.cpu_count() or 1) // world_size)
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_worker, daemon=True,
                                 args=(rank, world_size, backend, port, fn, args, results, threads))
                 for rank in range(world_size)]
    for p in processes:
        p.start()
    collected = {}
    try:
        for _ in range(world_size):
            rank, status, value = results.get(timeout=timeout)
            if status == "error":
                raise RuntimeError(f"rank {rank} of {world_size} failed:\n{value}")
            collected[rank] = _portable(value, to_numpy=False)
    finally:
        for p in processes:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    return [collected[r] for r in range(world_size)]
