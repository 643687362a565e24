"""The fast path's decode step on a CPU: all its blocks in one call of C (`decode_blocks`,
minillm/kernels/c/decode_blocks.c).

decode.py's step calls about ten functions per block, each into C or PyTorch; at one row their
arithmetic is small and the calls themselves cost a fifth to a third of the step. Where every
block's operations would go to minillm's kernels anyway (the step's plan says so, and each
projection has a kernel route that takes the step's rows), the same kernels run in the same
order from one C call: the same logits, bit for bit. What the C reads is written down once, as
the addresses of each block's tensors (`BlockTable`), after checking every tensor is what its
kernel reads (the checks the Python step's wrappers make), and written again when a layer plans
a new route or holds a tensor at another address (a move, a dtype change, a new weight).
"""

from __future__ import annotations

import operator

import torch

from ..kernels import build
from ..kernels.limits import (DECODE_BF16, DECODE_BLOCK_WORDS, DECODE_F32, DECODE_INT8,
                              DECODE_KINDS, DECODE_Q4_1, Q4_1_BLOCK_BYTES, Q4_1_BLOCK_WEIGHTS)

_PROJECTIONS = ("qkv", "o", "gate_up", "down")


def structure_fits(layers) -> bool:
    """Whether the blocks are alike and the C computes them: no family's own qk_norm (q and k
    rotated together), one shape of attention, one norm eps, one MLP width."""
    def shape(layer):  # None where a projection is not a layer the C knows (a parallel one)
        mlp = getattr(layer.down, "in_features", None)
        return mlp and (layer.attn.n_heads, layer.attn.n_kv_heads, layer.attn.head_dim,
                        layer.attn_norm.eps, layer.mlp_norm.eps, mlp)

    first = shape(layers[0])
    return bool(first) and first[3] == first[4] and all(
        layer.joint_rope and shape(layer) == first for layer in layers)


def _operands(layer) -> tuple:
    """The tensors a projection's kernel takes after x (as its `few_rows` passes them): weight,
    int8 scale (None for the others), bias (or None)."""
    operands = getattr(layer, "_operands", ())
    return operands if len(operands) == 3 else (*operands[:1], None, *operands[1:2])


def _is(t, dtype, shape) -> bool:
    return (isinstance(t, torch.Tensor) and t.dtype is dtype and t.is_cpu
            and tuple(t.shape) == shape and t.is_contiguous())


def _takes(kind: int, operands: tuple, n: int, k: int) -> bool:
    """Whether a projection's tensors are what its kernel reads for an (n out, k in) product."""
    weight, scale, bias = operands
    if bias is not None and not _is(bias, torch.float32, (n,)):
        return False
    if kind == DECODE_F32:
        return _is(weight, torch.float32, (k, n)) and scale is None  # (in, out)
    if kind == DECODE_BF16:
        return _is(weight, torch.bfloat16, (n, k)) and scale is None  # (out, in)
    if kind == DECODE_INT8:
        return _is(weight, torch.int8, (n, k)) and _is(scale, torch.float32, (n,))
    return (kind == DECODE_Q4_1 and scale is None and k % Q4_1_BLOCK_WEIGHTS == 0
            and _is(weight, torch.uint8, (n, k // Q4_1_BLOCK_WEIGHTS * Q4_1_BLOCK_BYTES)))


def _address(t) -> int:
    return 0 if t is None else t.data_ptr()


class BlockTable:
    """What decode_blocks reads of a fused step's layers: (layers, DECODE_BLOCK_WORDS) int64
    words (`table`, None where some tensor is not what the C reads), and the most rows every
    projection's kernel takes. It keeps no tensor (not even a weak reference, which would stop
    PyTorch from swapping a moved parameter): `current` checks that the layers still have the
    routes, row limits and tensor addresses it was written from. A tensor replaced by another
    view of the same memory keeps its address: the C then reads the memory as the table was
    written, within the storage it was checked in."""

    def __init__(self, layers, weight_of_norm):
        self._weight = weight_of_norm
        self.layers = layers
        self._modules = [getattr(layer, name) for layer in layers for name in _PROJECTIONS]
        self._norms = [n for layer in layers for n in (layer.attn_norm, layer.mlp_norm)]
        self.routes, self.limits = self._routes()
        self.addresses = self._addresses()
        self.table, self.max_rows = None, 0
        attn = layers[0].attn
        width, mlp = self._weight(layers[0].attn_norm).numel(), layers[0].down.in_features
        heads = attn.n_heads * attn.head_dim
        sizes = {"qkv": ((attn.n_heads + 2 * attn.n_kv_heads) * attn.head_dim, width),
                 "o": (width, heads), "gate_up": (2 * mlp, width), "down": (width, mlp)}
        words = []
        for layer in layers:
            norms = [self._weight(layer.attn_norm), self._weight(layer.mlp_norm)]
            if not all(_is(w, torch.float32, (width,)) for w in norms):
                return
            row = [w.data_ptr() for w in norms]
            for name in _PROJECTIONS:
                module = getattr(layer, name)
                kind = DECODE_KINDS.get(getattr(getattr(module, "route", None), "kernel", ""))
                operands = _operands(module)
                if kind is None or getattr(module, "few_rows_max", 0) < 1 \
                        or not _takes(kind, operands, *sizes[name]):
                    return
                row += [kind, *map(_address, operands)]
            words.append(row)
        self.table = torch.tensor(words, dtype=torch.int64)
        assert self.table.shape[1] == DECODE_BLOCK_WORDS
        self.max_rows = min(self.limits)

    def _routes(self) -> tuple[list, list[int]]:
        return ([getattr(m, "route", None) for m in self._modules],
                [getattr(m, "few_rows_max", 0) for m in self._modules])

    def _addresses(self) -> list[int]:
        """The addresses of the norms' weights and of every tensor the projections' kernels
        take, as the layers hold them now."""
        out = [_address(w) for w in map(self._weight, self._norms)]
        for module in self._modules:
            out += [t.data_ptr() for t in getattr(module, "_operands", ()) if t is not None]
        return out

    def takes(self, rows: int) -> bool:
        """Whether a step of `rows` rows can run as one decode_blocks call."""
        return self.table is not None and rows <= self.max_rows

    def current(self) -> bool:
        """Whether the layers still have the routes, row limits and tensor addresses the table
        was written from (a move, a new route or a new weight changes one of them)."""
        routes, limits = self._routes()
        return (all(map(operator.is_, routes, self.routes)) and limits == self.limits
                and self._addresses() == self.addresses)


def cache_fits(keys, values) -> bool:
    """Whether every layer's cache has the first layer's shape and lies contiguous, as the C
    reads them (the step's plan checked the first layer's keys: float32 on the CPU)."""
    shape = keys[0].shape
    return all(k.shape == shape and v.shape == shape and k.is_contiguous()
               and v.is_contiguous() and v.dtype is torch.float32 and k.dtype is torch.float32
               for k, v in zip(keys, values))


def run(table: BlockTable, x: torch.Tensor, keys, values, cos, sin, pos: int,
        threads: int) -> torch.Tensor:
    """x (rows, width) float32 after every block: one call of decode_blocks. keys, values: the
    cache's per-layer tensors (rows, kv_heads, max_tokens, head_dim), as `cache_fits` checked."""
    x = x.clone()  # the C works in place
    rows, width = x.shape
    key_at = torch.tensor([k.data_ptr() for k in keys], dtype=torch.int64)
    value_at = torch.tensor([v.data_ptr() for v in values], dtype=torch.int64)
    head_dim, max_tokens = keys[0].shape[3], keys[0].shape[2]
    first = table.layers[0]
    attn, mlp, eps = first.attn, first.down.in_features, first.attn_norm.eps
    if build.function("decode_blocks")(
            x.data_ptr(), table.table.data_ptr(), key_at.data_ptr(), value_at.data_ptr(),
            cos.data_ptr(), sin.data_ptr(), len(table.layers), rows, width, attn.n_heads,
            attn.n_kv_heads, head_dim, mlp, max_tokens, pos, eps, head_dim ** -0.5,
            threads) != 0:
        raise MemoryError(f"decode_blocks stopped part-way ({rows} rows): a kernel could not "
                          f"allocate its buffers")
    return x
