"""The paged KV cache's tensors, and attention that reads them through block tables.

`PagedKVPool` holds, per layer, one key tensor and one value tensor of shape
(num_blocks * block_size, kv_heads, head_dim): slot `block * block_size + offset` holds one token.

`PagedBatch` is what the model sees for one forward pass over a batch of sequences, each with
`context` tokens already in the pool and `new` tokens to run now. It keeps the KV-cache contract (minillm.generation.kv_cache:
`append(layer, k, v)` returns the keys and values to attend over, `advance(n)`), so the model code
is unchanged:

- the batch's new tokens are left-padded to the longest (`seq`), and each row's keys are laid out
  so that its last key sits at the end: row i's keys occupy the last `context_i + new_i` of
  `length + seq` key positions, with `length = max(context_i + new_i) - seq`;
- `append` writes the new keys and values into their slots, then gathers each row's keys through
  its block table into that layout; `attention_mask` hides the padding, `position_ids` count each
  row's own tokens. The model's causal mask then lets each new token see its context and itself.

A decode step (one new token per row) on the CPU skips the gather: `attends` (a capability of the
contract) is true and the attention layer calls `attend`, which runs minillm.kernels' paged attention over each row's own
slots, reading its keys and values once, where they lie (what vLLM's paged attention kernel does
on a GPU). Elsewhere (prefill chunks, a GPU, no C compiler) the gather path runs.
"""

from __future__ import annotations

import torch

from .. import kernels
from ..layers.kv_contract import KVCacheBase
from ..kernels import dispatch
from ..utils.devices import model_device, model_dtype


class PagedKVPool:
    """Every layer's keys and values, in `num_blocks` blocks of `block_size` token slots."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, n_kv_heads: int,
                 head_dim: int, dtype=torch.float32, device="cpu"):
        shape = (num_blocks * block_size, n_kv_heads, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.num_blocks, self.block_size = num_blocks, block_size
        self.device, self.dtype = torch.device(device), dtype  # dtype: what attention reads
        self._scratch = (self.keys[0][:0], self.values[0][:0])

    def scratch(self, rows: int):
        """Two buffers of `rows` slots for one layer's gathered keys and values. The same memory
        every call (grown when too small): what a layer gathers is read before the next layer
        gathers, so one pair serves a whole forward pass."""
        if self._scratch[0].shape[0] < rows:
            shape = (rows, *self.keys[0].shape[1:])
            self._scratch = (torch.empty(shape, dtype=self.dtype, device=self.device),
                             torch.empty(shape, dtype=self.dtype, device=self.device))
        return self._scratch[0][:rows], self._scratch[1][:rows]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one layer's keys and values, (n, kv_heads, head_dim) each, in pool `slots`."""
        self.keys[layer].index_copy_(0, slots, k.to(self.keys[layer].dtype))
        self.values[layer].index_copy_(0, slots, v.to(self.values[layer].dtype))

    def read(self, layer: int, slots: torch.Tensor):
        """One layer's keys and values at pool `slots` (a flat index), (n, kv_heads, head_dim)
        each in `dtype`, in the scratch buffers."""
        k_out, v_out = self.scratch(slots.numel())
        # index_select copies whole slots (rows of kv_heads x head_dim), much faster than pk[idx],
        # into the pool's scratch buffers, reused by every layer and pass (no fresh pages each time)
        torch.index_select(self.keys[layer], 0, slots, out=k_out)
        torch.index_select(self.values[layer], 0, slots, out=v_out)
        return k_out, v_out

    def slot_layout(self) -> tuple:
        """What a slot holds: ("float",) here; a quantized pool names its format and grain."""
        return ("float",)

    def slot_tensors(self) -> list[torch.Tensor]:
        """Every tensor with one entry per slot (keys and values; a quantized pool adds its
        scales): what copying a block copies and what a block's bytes count."""
        return [*self.keys, *self.values]

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int = 16) -> "PagedKVPool":
        c = model.config
        return cls(c.n_layers, num_blocks, block_size, c.n_kv_heads, c.head_dim,
                   model_dtype(model), model_device(model))

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    @property
    def bytes_per_block(self) -> int:
        """2 (keys, values) x layers x kv_heads x head_dim x block_size x bytes per value (plus
        the scales of a quantized pool)."""
        return self.block_size * sum(t[0].nelement() * t.element_size()
                                     for t in self.slot_tensors())

    @property
    def nbytes(self) -> int:
        return self.bytes_per_block * self.num_blocks

    def slots(self, table: list[int], start: int, stop: int) -> torch.Tensor:
        """Pool slots of token positions start..stop-1 of a sequence with block table `table`."""
        pos = torch.arange(start, stop)
        blocks = torch.tensor(table, dtype=torch.long)[pos // self.block_size]
        return blocks * self.block_size + pos % self.block_size

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy every layer's keys and values of block `src` into block `dst`, for each
        (src, dst) pair (copy-on-write: see BlockManager.copy_on_write)."""
        if not pairs:
            return
        bs = self.block_size
        src = torch.cat([torch.arange(s * bs, (s + 1) * bs) for s, _ in pairs]).to(self.device)
        dst = torch.cat([torch.arange(d * bs, (d + 1) * bs) for _, d in pairs]).to(self.device)
        for tensor in self.slot_tensors():
            tensor[dst] = tensor[src]

    def gather(self, layer: int, table: list[int], length: int):
        """Keys and values of the first `length` tokens of one sequence, (kv_heads, length,
        head_dim) each: read block by block through its table (the lesson's walk-through)."""
        idx = self.slots(table, 0, length).to(self.device)
        return (self.keys[layer][idx].transpose(0, 1), self.values[layer][idx].transpose(0, 1))


class PagedBatch(KVCacheBase):
    """One forward pass's view of the pool (see the module docstring). Of the contract's
    optional capabilities it has `attends` (a decode step on the CPU); it is not contiguous, and
    it neither crops nor reorders: the engine keeps each sequence's length and blocks."""

    def __init__(self, pool: PagedKVPool, tables: list[list[int]], contexts: list[int],
                 news: list[int], rows: list[list[int]] | None = None, pad_id: int = 0):
        if not (len(tables) == len(contexts) == len(news)) or not tables:
            raise ValueError("tables, contexts and news must be non-empty and of equal length")
        if min(news) < 1:
            raise ValueError(f"every row must run at least one new token, got {news}")
        self.pool = pool
        bs = pool.block_size
        b, seq = len(tables), max(news)
        totals = [c + n for c, n in zip(contexts, news)]
        keys = max(totals)
        self.length = keys - seq
        ctx = torch.tensor(contexts)
        new = torch.tensor(news)
        total = ctx + new
        width = max(len(t) for t in tables)
        table = torch.zeros((b, width), dtype=torch.long)
        for row, t in enumerate(tables):
            if len(t) * bs < totals[row]:
                raise ValueError(f"row {row}'s block table holds {len(t) * bs} tokens, "
                                 f"it needs {totals[row]}")
            table[row, :len(t)] = torch.tensor(t, dtype=torch.long)
        # key position j of row i holds that row's token j - offset_i (or padding when < 0)
        offset = (keys - total)[:, None]
        pos = torch.arange(keys)[None, :] - offset  # (b, keys)
        real = pos >= 0
        pos = pos.clamp(min=0)
        slot = table.gather(1, pos // bs) * bs + pos % bs
        # the new tokens: query slot q of row i is that row's token context_i + q - (seq - new_i)
        qpos = torch.arange(seq)[None, :] - (seq - new)[:, None] + ctx[:, None]  # (b, seq)
        new_mask = torch.arange(seq)[None, :] >= (seq - new)[:, None]
        write_pos = qpos[new_mask]
        at = torch.arange(b)[:, None].expand(b, seq)[new_mask]
        # Every index the pass needs goes to the device in one copy (from pinned memory on a
        # GPU, so the host does not wait), and the new tokens are picked by their flat
        # positions, not by a boolean mask (whose result size the host would have to wait for).
        self.batch, self.seq = b, seq
        parts = {"gather_index": torch.where(real, slot, torch.zeros_like(slot)),
                 "attention_mask": real.long(),
                 "position_ids": torch.where(new_mask, qpos, torch.zeros_like(qpos)),
                 "new_index": new_mask.flatten().nonzero()[:, 0],
                 "write_index": table[at, write_pos // bs] * bs + write_pos % bs}
        if rows is not None:
            parts["ids"] = self._padded(rows, pad_id)
        for name, tensor in zip(parts, _to_device(list(parts.values()), pool.device)):
            setattr(self, name, tensor)
        self.attends = seq == 1 and dispatch.paged_attention(pool.keys[0])
        if self.attends:  # row i's key slots in order, its first `total_i` entries
            first = torch.minimum(torch.arange(keys)[None, :], (total - 1)[:, None])
            self.decode_slots = table.gather(1, first // bs) * bs + first % bs
            self.lengths = total

    # --- the KV-cache contract ----------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        return self.pool.n_layers

    @property
    def batch_size(self) -> int:
        return self.batch

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write this pass's keys and values (batch, kv_heads, seq, head_dim) into their slots,
        then return each row's keys and values so far, read through its block table."""
        self.pool.write(layer, self.write_index, self._new(k), self._new(v))
        k_out, v_out = self.pool.read(layer, self.gather_index.view(-1))
        shape = (*self.gather_index.shape, *k_out.shape[1:])
        return k_out.view(shape).transpose(1, 2), v_out.view(shape).transpose(1, 2)

    def _new(self, t: torch.Tensor) -> torch.Tensor:
        """The real (not padding) new tokens' rows of `t` (batch, kv_heads, seq, head_dim), as
        (tokens, kv_heads, head_dim) in the order `write_index` names their slots."""
        flat = t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[3])
        return flat.index_select(0, self.new_index)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """A decode step's attention (q (batch, heads, 1, head_dim)) straight from the pool: write
        the new keys and values into their slots, then read each row's through its own slots."""
        if not self.attends:  # a prefill chunk, a GPU, or no kernels: the contract's refusal
            return super().attend(layer, q, k, v)
        self.pool.write(layer, self.write_index, k[:, :, 0], v[:, :, 0])
        pk, pv = self.pool.keys[layer], self.pool.values[layer]
        out = kernels.paged_decode_attention(q[:, :, 0], pk, pv, self.decode_slots, self.lengths)
        return out[:, :, None]

    def advance(self, new_tokens: int) -> None:
        """Nothing to count here: the engine tracks each sequence's length itself."""

    def input_ids(self, rows: list[list[int]], pad_id: int = 0) -> torch.Tensor:
        """The rows' new tokens, left-padded to (batch, seq) like the keys (`ids` when the
        batch was made with its rows: copied to the device with the indices)."""
        return self._padded(rows, pad_id).to(self.pool.device)

    def _padded(self, rows: list[list[int]], pad_id: int) -> torch.Tensor:
        ids = torch.full((self.batch, self.seq), pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, self.seq - len(r):] = torch.tensor(r, dtype=torch.long)
        return ids


def _to_device(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """`tensors` (int64, on the CPU) on `device`, in one copy: packed into one buffer, pinned on
    a CUDA device so that the copy does not make the host wait, then viewed apart again."""
    if device.type == "cpu":
        return tensors
    packed = torch.cat([t.reshape(-1) for t in tensors])
    if device.type == "cuda":
        packed = packed.pin_memory()
    packed = packed.to(device, non_blocking=device.type == "cuda")
    out, at = [], 0
    for t in tensors:
        out.append(packed[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return out


def paged_forward(model, pool: PagedKVPool, tables, contexts, rows: list[list[int]], *,
                  all_positions: bool = False):
    """Run `model` on each row's new tokens `rows[i]`, after `contexts[i]` tokens already in the
    pool; returns the logits of each row's last token, (batch, vocab). With `all_positions`, the
    logits of every position, (batch, longest row, vocab), rows left-padded: row i's own are
    its last len(rows[i])."""
    batch = PagedBatch(pool, tables, contexts, [len(r) for r in rows], rows=rows)
    logits = model(batch.ids, cache=batch, position_ids=batch.position_ids,
                   attention_mask=batch.attention_mask, logits_to_keep=0 if all_positions else 1)
    return logits if all_positions else logits[:, -1, :]
