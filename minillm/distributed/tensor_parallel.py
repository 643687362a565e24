"""Tensor parallelism (张量并行): one layer's matrices split across processes.

Megatron-LM's recipe, for the Llama family:
- attention: the query, key and value projections are split by heads (column-parallel: each rank
  computes its own heads, whole); the output projection is split by its input columns
  (row-parallel: each rank multiplies its heads' part), so the ranks hold partial sums of the
  output, added up by one all-reduce.
- feed-forward: gate and up are split by their output rows (column-parallel), down by its input
  columns (row-parallel): one more all-reduce.
So each block costs exactly two all-reduces of the hidden state, one per half. The embedding, the
norms and the LM head are replicated: every rank ends with the same logits.

Heads are split by key/value head, each with its group of query heads, so grouped-query attention
needs no communication. When the heads do not divide evenly (SmolLM2 has 3 key/value heads; two
ranks get 2 and 1), the split is uneven but the result is the same.

`shard_model(model, rank, world_size)` does this to a minillm model in place, by slicing the
weights of its own layers (minillm.layers; `shard_attention`, `shard_mlp`): the column-parallel
projections keep their rows, the row-parallel ones become `RowParallelLinear` (their columns,
then the all-reduce). The blocks,
the attention and the forward pass stay the family's own code; any family the registry marks
"tensor_parallel" can be split (Llama, Qwen2, Qwen3).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist
import torch.nn as nn

from ..layers.linear import plain_linear


def split_evenly(total: int, parts: int) -> list[range]:
    """`total` items in `parts` contiguous ranges whose sizes differ by at most one."""
    if parts < 1 or parts > total:
        raise ValueError(f"cannot split {total} items over {parts} ranks: use 1 to {total} ranks")
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


@dataclass
class CommStats:
    """All-reduce calls and the bytes each rank contributed, counted as they happen."""

    calls: int = 0
    bytes: int = 0
    sizes: list = field(default_factory=list)

    def all_reduce(self, tensor: torch.Tensor, group=None) -> torch.Tensor:
        self.calls += 1
        self.bytes += tensor.numel() * tensor.element_size()
        if dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(tensor, group=group)
        return tensor


def all_reduce_cost(config, tokens: int, bytes_per_value: int = 4) -> tuple[int, int]:
    """(calls, bytes per rank) a tensor-parallel forward over `tokens` needs: two all-reduces of
    the (tokens x hidden) state per block."""
    calls = 2 * config.n_layers
    return calls, calls * tokens * config.hidden_size * bytes_per_value


class RowParallelLinear(nn.Module):
    """This rank's input columns of a linear layer. Each rank's product is a partial sum of the
    full output; rank 0 adds the bias (once), then one all-reduce adds the ranks' parts up."""

    def __init__(self, linear: nn.Linear, cols: range, rank: int, comm: CommStats | None = None,
                 group=None):
        super().__init__()
        self.linear = plain_linear(linear.weight.detach()[:, cols.start:cols.stop].contiguous())
        keep_bias = linear.bias is not None and rank == 0
        self.bias = nn.Parameter(linear.bias.detach(), requires_grad=False) if keep_bias else None
        self.comm, self.group = comm if comm is not None else CommStats(), group

    def forward(self, x):
        y = self.linear(x)
        if self.bias is not None:
            y = y + self.bias
        return self.comm.all_reduce(y, self.group)


def _rows(linear: nn.Linear, rows: range) -> nn.Linear:
    """A column-parallel share: the output rows `rows` (and their biases)."""
    cut = slice(rows.start, rows.stop)
    bias = None if linear.bias is None else linear.bias.detach()[cut].contiguous()
    return plain_linear(linear.weight.detach()[cut].contiguous(), bias)


def _share(module: nn.Module) -> nn.Module:
    """A new module of the same class and settings, sharing the submodules it does not replace."""
    part = copy.copy(module)
    part._modules, part._parameters = dict(module._modules), dict(module._parameters)
    part._buffers = dict(module._buffers)
    return part


def shard_mlp(mlp, rows: range, rank: int, comm: CommStats | None = None, group=None):
    """Rank `rank`'s share of a SwiGLU block (minillm.layers.GatedMLP): gate and up keep the
    hidden features `rows` (column-parallel), down keeps the same features as its input columns
    (row-parallel), so the rank's output is a partial sum; `comm` adds the ranks' parts up
    (without a process group, the part itself is returned)."""
    part = _share(mlp)
    part.gate_proj, part.up_proj = _rows(mlp.gate_proj, rows), _rows(mlp.up_proj, rows)
    part.down_proj = RowParallelLinear(mlp.down_proj, rows, rank, comm, group)
    part.intermediate_size = len(rows)
    return part


def shard_attention(attn, kv_heads: range, rank: int, comm: CommStats | None = None,
                    group=None):
    """Rank `rank`'s share of an attention layer (minillm.layers.Attention or a family's
    subclass): the key/value heads `kv_heads`, each with its group of query heads (q, k and v
    column-parallel), and those heads' columns of the output projection (row-parallel). Grouped
    queries need no communication: a rank's query heads read only its own key/value heads."""
    groups, d = attn.n_heads // attn.n_kv_heads, attn.head_dim
    q_rows = range(kv_heads.start * groups * d, kv_heads.stop * groups * d)
    kv_rows = range(kv_heads.start * d, kv_heads.stop * d)
    part = _share(attn)
    part.q_proj = _rows(attn.q_proj, q_rows)
    part.k_proj, part.v_proj = _rows(attn.k_proj, kv_rows), _rows(attn.v_proj, kv_rows)
    part.o_proj = RowParallelLinear(attn.o_proj, q_rows, rank, comm, group)
    part.n_heads, part.n_kv_heads = len(kv_heads) * groups, len(kv_heads)
    return part


def shard_model(model, rank: int, world_size: int, group=None):
    """Make `model` (a readable minillm model: `minillm.load(..., fast=False)`) this rank's
    share of a `world_size`-way tensor-parallel run, in place, and return it: every layer's
    attention and feed-forward replaced by their shares (`shard_attention`, `shard_mlp`). It
    keeps the same forward contract (the KV cache included: the cache holds this rank's
    key/value heads, as `model.config`, now this rank's view, says). `model.comm` counts the
    all-reduces; `model.full_config` is the whole model's config."""
    from ..model import registry

    config = model.config
    registry.require(config, "tensor_parallel")
    if getattr(model, "weight_format", None) is not None:
        raise TypeError("split the readable model (minillm.load(..., fast=False)); optimize "
                        "each rank's share afterwards")
    kv_heads = split_evenly(config.n_kv_heads, world_size)[rank]
    ffn_rows = split_evenly(config.intermediate_size, world_size)[rank]
    comm = CommStats()
    for layer in model.layers:
        layer.attn = shard_attention(layer.attn, kv_heads, rank, comm, group)
        layer.mlp = shard_mlp(layer.mlp, ffn_rows, rank, comm, group)
    model.full_config = config
    model.config = replace(config, n_kv_heads=len(kv_heads),
                           n_heads=len(kv_heads) * config.n_groups,
                           intermediate_size=len(ffn_rows))
    model.comm, model.rank, model.world_size = comm, rank, world_size
    model.kv_heads, model.ffn_rows = kv_heads, ffn_rows
    return model
