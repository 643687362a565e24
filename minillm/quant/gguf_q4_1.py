"""GGUF's Q4_1 format by hand: the course model's file, decoded byte by byte.

A Q4_1 tensor is a run of blocks of 20 bytes, each holding 32 weights of one row:

    bytes 0-1    d, the scale, a float16 (little-endian)
    bytes 2-3    m, the minimum, a float16
    bytes 4-19   16 bytes of 4-bit numbers q: byte j holds weight j in its low nibble (q & 0x0F)
                 and weight j + 16 in its high nibble (q >> 4)

    weight = q * d + m        (in float32)

`decode_q4_1_block` does exactly that with Python's `struct` and integer arithmetic, one weight
at a time; the tests check it against the `gguf` package's `dequantize` on real blocks, bit for
bit. `q4_1_blocks` reads a tensor's raw blocks from the file with the `gguf` package's reader
(the same reader `minillm.model.gguf_loader` uses).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

BLOCK_WEIGHTS = 32
BLOCK_BYTES = 2 + 2 + BLOCK_WEIGHTS // 2  # d, m, packed 4-bit numbers


def decode_q4_1_block(block) -> np.ndarray:
    """The 32 float32 weights of one 20-byte Q4_1 block."""
    raw = bytes(np.asarray(block, dtype=np.uint8)) if not isinstance(block, (bytes, bytearray)) \
        else bytes(block)
    if len(raw) != BLOCK_BYTES:
        raise ValueError(f"a Q4_1 block has {BLOCK_BYTES} bytes, got {len(raw)}")
    d, m = struct.unpack("<ee", raw[:4])  # two little-endian float16 numbers
    d, m = np.float32(d), np.float32(m)
    out = np.empty(BLOCK_WEIGHTS, dtype=np.float32)
    for j, byte in enumerate(raw[4:]):
        low, high = byte & 0x0F, byte >> 4
        out[j] = np.float32(low) * d + m
        out[j + BLOCK_WEIGHTS // 2] = np.float32(high) * d + m
    return out


def block_fields(block) -> dict:
    """A block's parts, for showing: the scale, the minimum and the 32 integers 0..15."""
    raw = bytes(np.asarray(block, dtype=np.uint8))
    d, m = struct.unpack("<ee", raw[:4])
    q = [b & 0x0F for b in raw[4:]] + [b >> 4 for b in raw[4:]]
    return {"d": float(d), "m": float(m), "q": q, "hex": raw.hex(" ")}


def q4_1_blocks(path, tensor_name: str) -> np.ndarray:
    """The raw Q4_1 blocks of one tensor of a GGUF file, as uint8 (n_blocks, 20). The weights of
    row r, in file order, are blocks r * (cols / 32) to (r + 1) * (cols / 32)."""
    import gguf

    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    if tensor_name not in tensors:
        q4 = [n for n, t in tensors.items() if t.tensor_type == gguf.GGMLQuantizationType.Q4_1]
        raise ValueError(f"no tensor {tensor_name!r} in {path}; Q4_1 tensors include "
                         f"{q4[:4]}")
    t = tensors[tensor_name]
    if t.tensor_type != gguf.GGMLQuantizationType.Q4_1:
        raise ValueError(f"tensor {tensor_name!r} is {t.tensor_type.name}, not Q4_1")
    return np.asarray(t.data, dtype=np.uint8).reshape(-1, BLOCK_BYTES)


def gguf_dequantize_q4_1(blocks: np.ndarray) -> np.ndarray:
    """The `gguf` package's own dequantization of Q4_1 blocks: (n_blocks, 32) float32."""
    import gguf

    flat = np.ascontiguousarray(blocks, dtype=np.uint8)
    return gguf.quants.dequantize(flat, gguf.GGMLQuantizationType.Q4_1).reshape(-1, BLOCK_WEIGHTS)


def dequantize_q4_1(blocks) -> "torch.Tensor":
    """Q4_1 blocks laid out as rows, uint8 (rows, blocks per row x 20), to float32 weights
    (rows, blocks per row x 32), all at once with torch: w = q * d + m."""
    import torch

    if not isinstance(blocks, torch.Tensor):
        blocks = torch.from_numpy(np.array(blocks, dtype=np.uint8))  # a writable copy
    rows = blocks.shape[0]
    b = blocks.reshape(rows, -1, BLOCK_BYTES)
    d = b[..., 0:2].contiguous().view(torch.float16).float()  # (rows, n_blocks, 1)
    m = b[..., 2:4].contiguous().view(torch.float16).float()
    q = b[..., 4:]
    nibbles = torch.cat([q & 0x0F, q >> 4], dim=-1).float()  # weights 0..15, then 16..31
    return (nibbles * d + m).reshape(rows, -1)


def q4_1_minimums(blocks) -> "torch.Tensor":
    """Each block's minimum m, float32 (rows, blocks per row)."""
    import torch

    b = blocks.reshape(blocks.shape[0], -1, BLOCK_BYTES)
    return b[..., 2:4].contiguous().view(torch.float16).float()[..., 0]


def round_x_per_block(x) -> "torch.Tensor":
    """x (rows, K) rounded as llama.cpp's (and minillm's) Q4_1 kernel rounds it before the integer
    multiply: each block of 32 values to int8 steps of its own max|x| / 127."""
    import torch

    blocks = x.reshape(x.shape[0], -1, BLOCK_WEIGHTS)
    big = blocks.abs().amax(-1, keepdim=True)
    # 127 / big as C divides (PyTorch's `127.0 / big` multiplies by big's reciprocal: an ulp
    # off at times, enough to move a value that lands near a half to the other integer)
    inv = torch.where(big > 0, torch.full_like(big, 127.0) / big, torch.zeros_like(big))
    return (torch.round(blocks * inv) * (big / 127.0)).reshape(x.shape)


def q4_1_linears(path, config) -> dict:
    """The linear layers a GGUF file stores as Q4_1, as raw blocks: minillm's parameter name
    (e.g. "layers.0.attn.q_proj.weight") -> uint8 (rows, blocks per row x 20), the rows in
    minillm's order (Llama's q/k rows put back as `minillm.model.llama.unpermute` does; a row's
    blocks stay whole). Read once with the `gguf` package, then kept in minillm's cache."""
    import torch
    from safetensors.torch import load_file, save_file

    from ..files import cache_entry, writable_cache_dir
    from ..model import registry

    path = Path(path)
    st = path.stat()
    relative = Path("converted") / f"{path.stem}-{st.st_size}-{st.st_mtime_ns}.q4_1"
    cached = cache_entry(relative)
    if cached.is_file():
        return load_file(cached)
    cached = writable_cache_dir() / relative
    import gguf

    family = registry.architecture(config.arch).module()
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    found = {}
    for ours, theirs in family.gguf_weight_names(config).items():
        t = tensors.get(theirs)
        if t is None or t.tensor_type != gguf.GGMLQuantizationType.Q4_1:
            continue
        rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
        raw = np.asarray(t.data, dtype=np.uint8).reshape(rows, -1)
        found[ours] = torch.from_numpy(np.array(family.gguf_weight(ours, raw, config)))
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".partial-{os.getpid()}")
    save_file({k: v.contiguous() for k, v in found.items()}, partial)
    os.replace(partial, cached)  # atomic: a parallel reader never sees half a file
    return found
