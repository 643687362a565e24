"""The fast path's decode step on a CPU: all its blocks in one call of C (`decode_blocks`,
minillm/kernels/c/decode_blocks.c).

decode.py's step calls about ten functions per block, each into C or PyTorch; at one row their
arithmetic is small and the calls themselves cost a fifth to a third of the step. Where every
block's operations would go to minillm's kernels anyway (the step's plan says so, and each
projection has a kernel route that takes the step's rows), the same kernels run in the same
order from one C call: the same logits, bit for bit. What the C reads is written down once, as
the addresses of each block's tensors (`BlockTable`), and written again when a layer plans a
new route or holds a tensor at another address (a move, a dtype change, a new weight).
"""

from __future__ import annotations

import operator

import torch

from ..kernels import build
from ..kernels.dispatch import DecodeKernels
from ..kernels.limits import DECODE_BLOCK_WORDS, DECODE_KINDS


_PROJECTIONS = ("qkv", "o", "gate_up", "down")


def _operands(layer) -> tuple:
    """The tensors a projection's kernel takes after x (as its `few_rows` passes them): weight,
    int8 scale (None for the others), bias (or None)."""
    operands = getattr(layer, "_operands", ())
    return operands if len(operands) == 3 else (*operands[:1], None, *operands[1:2])


def _address(t) -> int:
    return 0 if t is None else t.data_ptr()


class BlockTable:
    """What decode_blocks reads of a fused step's layers: (layers, DECODE_BLOCK_WORDS) int64
    words (`table`, None where some block is not for the C), and the most rows every
    projection's kernel takes. It keeps no tensor (not even a weak reference, which would stop
    PyTorch from swapping a moved parameter): `current` checks that the layers still have the
    routes and the tensor addresses it was written from, which is all the C depends on."""

    def __init__(self, layers, weight_of_norm):
        self._weight = weight_of_norm
        self.layers = layers
        self._modules = [getattr(layer, name) for layer in layers for name in _PROJECTIONS]
        self._norms = [n for layer in layers for n in (layer.attn_norm, layer.mlp_norm)]
        self.routes = [getattr(m, "route", None) for m in self._modules]
        self.addresses = self._addresses()
        self.table, self.max_rows = None, 0
        first = layers[0]
        shape = (first.attn.n_heads, first.attn.n_kv_heads, first.attn.head_dim,
                 first.attn_norm.eps)
        words = []
        for i, layer in enumerate(layers):
            if not layer.joint_rope or layer.mlp_norm.eps != shape[3] or shape != (
                    layer.attn.n_heads, layer.attn.n_kv_heads, layer.attn.head_dim,
                    layer.attn_norm.eps):
                return  # a family's own qk_norm, or blocks unlike each other: not in the C
            row = [_address(self._weight(layer.attn_norm)),
                   _address(self._weight(layer.mlp_norm))]
            for module in self._modules[4 * i:4 * i + 4]:
                kind = DECODE_KINDS.get(getattr(getattr(module, "route", None), "kernel", ""))
                if kind is None or module.few_rows_max < 1:
                    return
                row += [kind, *map(_address, _operands(module))]
            words.append(row)
        self.table = torch.tensor(words, dtype=torch.int64)
        assert self.table.shape[1] == DECODE_BLOCK_WORDS
        self.max_rows = min(m.few_rows_max for m in self._modules)

    def _addresses(self) -> list[int]:
        """The addresses of the norms' weights and of every tensor the projections' kernels
        take, as the layers hold them now."""
        out = [w.data_ptr() for w in map(self._weight, self._norms)]
        for module in self._modules:
            out += [t.data_ptr() for t in getattr(module, "_operands", ()) if t is not None]
        return out

    def takes(self, rows: int) -> bool:
        """Whether a step of `rows` rows can run as one decode_blocks call."""
        return self.table is not None and rows <= self.max_rows

    def current(self) -> bool:
        """Whether the layers still have the routes and tensor addresses the table was written
        from (a move, a new route or a new weight changes one of them)."""
        return (all(map(operator.is_, [m.route for m in self._modules], self.routes))
                and self._addresses() == self.addresses)


def planned(plan: DecodeKernels) -> bool:
    """Whether the step's plan sends every small operation to minillm's kernels (else the
    step stays in Python)."""
    return plan.norm and plan.attention and plan.rope_cache and plan.silu_mul


def run(table: BlockTable, x: torch.Tensor, keys, values, cos, sin, pos: int,
        threads: int) -> torch.Tensor:
    """x (rows, width) float32 after every block: one call of decode_blocks. keys, values: the
    cache's per-layer tensors (rows, kv_heads, max_tokens, head_dim), contiguous float32 (the
    step's plan checked them)."""
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
        raise MemoryError(f"decode_blocks could not allocate its buffers ({rows} rows)")
    return x
