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
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..model.attention import attention
from ..model.inputs import prepare
from ..model.llama import apply_rope, rms_norm, rope_cos_sin


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


class TPAttention(nn.Module):
    def __init__(self, full, config, kv_heads: range, layer_idx: int):
        super().__init__()
        d, groups = config.head_dim, config.n_groups
        q_rows = slice(kv_heads.start * groups * d, kv_heads.stop * groups * d)
        kv_rows = slice(kv_heads.start * d, kv_heads.stop * d)
        self.layer_idx, self.head_dim = layer_idx, d
        self.n_heads, self.n_kv_heads = len(kv_heads) * groups, len(kv_heads)
        self.wq, self.bq = full.q_proj.weight[q_rows], _bias(full.q_proj, q_rows)
        self.wk, self.bk = full.k_proj.weight[kv_rows], _bias(full.k_proj, kv_rows)
        self.wv, self.bv = full.v_proj.weight[kv_rows], _bias(full.v_proj, kv_rows)
        self.wo = full.o_proj.weight[:, q_rows]  # row-parallel: this rank's input columns
        self.bo = full.o_proj.bias  # added once, by rank 0, before the all-reduce

    def forward(self, x, cos, sin, mask, cache, rank):
        b, s, _ = x.shape
        q = F.linear(x, self.wq, self.bq).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = F.linear(x, self.wk, self.bk).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = F.linear(x, self.wv, self.bv).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(self.layer_idx, k, v)
        out = attention(q, k, v, mask).transpose(1, 2).reshape(b, s, -1)
        return F.linear(out, self.wo, self.bo if rank == 0 else None)  # a partial sum


class TPFeedForward(nn.Module):
    def __init__(self, full, rows: range):
        super().__init__()
        cut = slice(rows.start, rows.stop)
        self.w_gate, self.b_gate = full.gate_proj.weight[cut], _bias(full.gate_proj, cut)
        self.w_up, self.b_up = full.up_proj.weight[cut], _bias(full.up_proj, cut)
        self.w_down, self.b_down = full.down_proj.weight[:, cut], full.down_proj.bias

    def forward(self, x, rank):
        h = F.silu(F.linear(x, self.w_gate, self.b_gate)) * F.linear(x, self.w_up, self.b_up)
        return F.linear(h, self.w_down, self.b_down if rank == 0 else None)  # a partial sum


def _bias(linear, rows):
    return None if linear.bias is None else linear.bias[rows]


class TensorParallelLlama(nn.Module):
    """This rank's share of a Llama-family model. Called like the full model (same forward
    contract, KV cache included: the cache holds this rank's key/value heads only)."""

    def __init__(self, model, rank: int, world_size: int, group=None):
        super().__init__()
        config = model.config
        if config.arch not in ("llama", "qwen2"):
            raise ValueError(f"tensor parallelism here splits llama and qwen2 models, "
                             f"not {config.arch!r}")
        self.rank, self.world_size, self.group = rank, world_size, group
        self.kv_heads = split_evenly(config.n_kv_heads, world_size)[rank]
        # This rank's view: its own heads only, so KVCache.for_model and generate() work as they are.
        self.full_config = config
        self.config = replace(config, n_kv_heads=len(self.kv_heads),
                              n_heads=len(self.kv_heads) * config.n_groups)
        self.ffn_rows = split_evenly(config.intermediate_size, world_size)[rank]
        self.embed, self.norm_weight = model.embed.weight, model.norm.weight
        self.head = model.embed.weight if model.lm_head is None else model.lm_head.weight
        self.blocks = [(layer.attn_norm.weight, TPAttention(layer.attn, config, self.kv_heads, i),
                        layer.mlp_norm.weight, TPFeedForward(layer.mlp, self.ffn_rows))
                       for i, layer in enumerate(model.layers)]
        self.comm = CommStats()

    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None):
        c = self.config
        position_ids, mask = prepare(c, input_ids, cache, position_ids, attention_mask)
        x = F.embedding(input_ids, self.embed)
        cos, sin = rope_cos_sin(position_ids, c.head_dim, c.rope_theta, x.dtype)
        for attn_norm, attn, mlp_norm, mlp in self.blocks:
            x = x + self.comm.all_reduce(attn(rms_norm(x, attn_norm, c.norm_eps), cos, sin, mask,
                                              cache, self.rank), self.group)
            x = x + self.comm.all_reduce(mlp(rms_norm(x, mlp_norm, c.norm_eps), self.rank),
                                         self.group)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        return F.linear(rms_norm(x, self.norm_weight, c.norm_eps), self.head).float()

    def parameters(self, recurse: bool = True):  # for KVCache.for_model: dtype and device
        yield self.embed
