"""FlashAttention's idea, in PyTorch: causal attention computed tile by tile with an online
softmax (在线 softmax), so the (queries x keys) score matrix is never held in memory.

Plain attention builds every score q·k / √d of a head at once, queries x keys numbers, before
the softmax can normalise a row. The online softmax normalises as it goes: it walks over the
keys one tile at a time and keeps, for each query row, the largest score so far (m), the sum of
exp(score − m) so far (l) and the weighted sum of values so far (o). When a later tile raises
the maximum to m', everything kept is rescaled by exp(m − m'). After the last tile, o / l is
exactly softmax(scores) @ v. Only one tile of scores exists at a time.

The real FlashAttention (Dao et al., 2022) does this inside one GPU kernel, keeping the tiles in
on-chip memory; this version loops in Python, so it is slower than PyTorch's fused attention.
It shows the arithmetic, and how much memory the tiling never allocates.

Shapes as in `attention.py`: q (batch, n_heads, queries, head_dim), k and v (batch, n_kv_heads,
keys, head_dim), the queries being the last `queries` of the `keys` positions (a prompt, a chunk
after cached tokens, or one decode step).
"""

from __future__ import annotations

import math

import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax over the last axis of `x`, reading it `block_size` entries at a time: one pass
    keeps the running maximum and the running sum of exponentials, a second writes the result.
    The sums are kept in float64 on the CPU (Apple's GPUs have no float64); the result comes
    back on `x`'s device in its dtype."""
    _check_block(block_size)
    x64 = x.cpu().double()
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    total = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for start in range(0, x.shape[-1], block_size):
        block = x64[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)
        m = m_new
    return (torch.exp(x64 - m[..., None]) / total[..., None]).to(device=x.device, dtype=x.dtype)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    block_size: int = 64) -> torch.Tensor:
    """Causal attention, softmax(q kᵀ / √d) v, computed in tiles of `block_size` queries x
    `block_size` keys with the online softmax. Equals `attention_explicit(q, k, v)`; tiles
    wholly above the diagonal (keys no query of the tile may see) are skipped."""
    _check_block(block_size)
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"q must be (batch, heads, queries, head_dim) and k, v (batch, kv_heads, "
                         f"keys, head_dim) of one shape; got q {tuple(q.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}")
    b, h, s, d = q.shape
    n_kv, t = k.shape[1], k.shape[2]
    if h % n_kv:
        raise ValueError(f"{h} query heads cannot be shared evenly by {n_kv} key/value heads")
    if s > t:
        raise ValueError(f"{s} queries but only {t} keys: the queries must be the last of the keys")
    groups, offset, dtype = h // n_kv, t - s, q.dtype
    # Each key/value head's group of query heads becomes more query rows (nothing is repeated).
    q = q.reshape(b, n_kv, groups * s, d).float() / math.sqrt(d)
    k, v = k.float(), v.float()
    position = offset + torch.arange(groups * s, device=q.device) % s  # each query row's position
    out = torch.empty_like(q)
    for start in range(0, s, block_size):
        # the query rows of tiles start..start+block_size, in every head of the group
        rows = (torch.arange(groups, device=q.device)[:, None] * s
                + torch.arange(start, min(start + block_size, s), device=q.device)).reshape(-1)
        q_tile, pos = q[:, :, rows], position[rows]
        m = torch.full((b, n_kv, len(rows)), float("-inf"), device=q.device)
        l = torch.zeros(b, n_kv, len(rows), device=q.device)
        o = torch.zeros(b, n_kv, len(rows), d, device=q.device)
        last_key = offset + min(start + block_size, s)  # no query of this tile sees beyond it
        for k_start in range(0, last_key, block_size):
            k_end = min(k_start + block_size, last_key)
            scores = q_tile @ k[:, :, k_start:k_end].transpose(-2, -1)
            seen = torch.arange(k_start, k_end, device=q.device)[None, :] <= pos[:, None]
            scores = scores.masked_fill(~seen, float("-inf"))
            m_new = torch.maximum(m, scores.amax(-1))
            p = torch.exp(scores - m_new[..., None])
            rescale = torch.exp(m - m_new)  # 0 on the first tile (m = -inf)
            l = l * rescale + p.sum(-1)
            o = o * rescale[..., None] + p @ v[:, :, k_start:k_end]
            m = m_new
        out[:, :, rows] = o / l[..., None]
    return out.reshape(b, h, s, d).to(dtype)


def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       parts: int) -> torch.Tensor:
    """One decode step's attention, softmax(q kᵀ / √d) v for the last token's queries q (batch,
    heads, 1, head_dim) over the whole cache k, v (batch, kv_heads, keys, head_dim), computed as
    Flash-Decoding does: the keys cut into `parts` parts, each part's running (m, l, o) made
    alone (on a GPU, by its own thread block), then the partial results merged."""
    if q.dim() != 4 or q.shape[2] != 1 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"q must be (batch, heads, 1, head_dim), one decode step, and k, v "
                         f"(batch, kv_heads, keys, head_dim); got q {tuple(q.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}")
    b, h, _, d = q.shape
    n_kv, t = k.shape[1], k.shape[2]
    if h % n_kv or not 1 <= parts <= t:
        raise ValueError(f"need heads divisible by kv_heads ({h}, {n_kv}) and 1 to {t} parts, "
                         f"got {parts}")
    q = q.reshape(b, n_kv, h // n_kv, d).float() / math.sqrt(d)  # a group's heads share k, v
    partial = []
    for chunk_k, chunk_v in zip(k.float().chunk(parts, dim=2), v.float().chunk(parts, dim=2)):
        scores = q @ chunk_k.transpose(-2, -1)
        m = scores.amax(-1)
        p = torch.exp(scores - m[..., None])
        partial.append((m, p.sum(-1), p @ chunk_v))
    m = torch.stack([m for m, _, _ in partial]).amax(0)  # the merge: rescale to the largest m
    l = sum(l_part * torch.exp(m_part - m) for m_part, l_part, _ in partial)
    o = sum(o_part * torch.exp(m_part - m)[..., None] for m_part, _, o_part in partial)
    return (o / l[..., None]).reshape(b, h, 1, d).to(v.dtype)


def _check_block(block_size) -> None:
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
