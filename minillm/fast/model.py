"""FastLlama: the Llama network of `minillm.model.llama`, rearranged for speed.

The same weights and the same forward contract,
`model(input_ids, cache=None, position_ids=None, attention_mask=None) -> logits`, so
`minillm.generate` runs it unchanged. What changes:

1. Fused weights. q, k and v are one matrix (one multiply instead of three); so are the
   feed-forward's gate and up projections.
2. Each matrix is stored in the layout that multiplies fastest for its dtype on this machine
   (`layout.best_layout` times both): (in, out) for `x @ W`, or (out, in) for `F.linear`.
3. Tables computed once: the RoPE cos/sin of every position, the LM head in its layout.
4. A lean decode step (one new token per row, no padding): 2-D tensors, no input checks beyond
   the cheap ones, the residual added inside the matrix multiply (`addmm`), the keys and values
   written straight into the preallocated `KVCache`, attention over the cache as it is (the
   query heads of a group fold into the query axis, so keys and values are never repeated).
5. A prefill that skips work the plain model does: RoPE as two in-place half updates (no
   rotated copy), and on a CPU causal attention a block of queries at a time, each reading only
   the keys before it (`causal_attention`).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model.attention import attention, repeat_kv
from ..model.inputs import prepare
from .layout import best_layout


def _rope_tables(head_dim: int, theta: float, max_positions: int, dtype):
    """cos and sin, (max_positions, head_dim), exactly as `minillm.model.llama.rope_cos_sin`."""
    exponents = torch.arange(0, head_dim, 2).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    angles = torch.arange(max_positions).float()[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x (..., heads, head_dim) rotated: x * cos + rotate_half(x) * sin, with rotate_half(x) =
    cat(-x[half:], x[:half]) written as two in-place halves (no concatenated copy, no matmul)."""
    half = x.shape[-1] // 2
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


@functools.lru_cache(maxsize=16)
def _causal_blocks(length: int, chunk: int, dtype, device) -> tuple:
    """(start, end, additive mask of the block's queries over keys 0..end) for each block after
    the first; built once per prompt length and reused by every layer."""
    positions = torch.arange(length, device=device)
    blocks = []
    for start in range(chunk, length, chunk):
        end = min(start + chunk, length)
        mask = torch.zeros(end - start, end, dtype=dtype, device=device)
        mask.masked_fill_(positions[None, :end] > positions[start:end, None], float("-inf"))
        blocks.append((start, end, mask))
    return tuple(blocks)


def causal_attention(q, k, v, chunk: int = 64):
    """Causal self-attention of a whole prompt, q, k, v (b, heads, s, head_dim), a block of
    `chunk` queries at a time. Each block reads only the keys up to its last position: PyTorch's
    CPU kernel splits the keys into blocks of 512, so for prompts up to that length it computes
    the whole masked upper triangle; skipping it halves the work."""
    s = q.shape[2]
    if s <= chunk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = torch.empty_like(q)
    out[:, :, :chunk] = F.scaled_dot_product_attention(q[:, :, :chunk], k[:, :, :chunk],
                                                       v[:, :, :chunk], is_causal=True)
    for start, end, mask in _causal_blocks(s, chunk, q.dtype, q.device):
        out[:, :, start:end] = F.scaled_dot_product_attention(q[:, :, start:end], k[:, :, :end],
                                                              v[:, :, :end], attn_mask=mask)
    return out


class FastLlama(nn.Module):
    """Build with `minillm.fast.optimize(model)`; see the module docstring."""

    def __init__(self, model, dtype=None, layout: str = "auto", logits: str = "all",
                 kernel="auto"):
        super().__init__()
        config = model.config
        if config.arch not in ("llama", "qwen2"):
            raise ValueError(f"minillm.fast runs the llama and qwen2 architectures, not "
                             f"{config.arch!r}")
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' (every position, the forward contract) or "
                             f"'last' (only the last position, as transformers' generate does "
                             f"in prefill), got {logits!r}")
        source_dtype = model.embed.weight.dtype
        dtype = source_dtype if dtype is None else dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype (torch.float32, "
                            f"torch.bfloat16, ...), got {dtype!r}")
        device = model.embed.weight.device
        self.config = config
        self.logits = logits
        # bf16 on a CPU without bf16 arithmetic: our own matrix-vector kernel (kernel.py) for the
        # batch-1 decode step, which wants rows of W contiguous ("out_in").
        self._kernel = None
        if dtype == torch.bfloat16 and device.type == "cpu" and kernel in ("auto", True):
            from .kernel import load

            self._kernel = load()
            if kernel is True and self._kernel is None:
                raise RuntimeError("the bf16 kernel cannot be built here (it needs an x86-64 "
                                   "AVX2 CPU and a C compiler); use kernel='auto'")
        if self._kernel is not None and layout == "auto":
            layout = "out_in"
        self.layout = best_layout(dtype, device) if layout == "auto" else layout
        if self.layout not in ("in_out", "out_in"):
            raise ValueError(f"layout must be 'auto', 'in_out' or 'out_in', got {layout!r}")
        self.n_heads, self.n_kv, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.eps = config.norm_eps
        self.scale = 1.0 / math.sqrt(self.head_dim)

        def w(*tensors):  # one matrix (out, in) from one or more Linear weights, in our layout
            m = torch.cat([t.detach() for t in tensors], dim=0).to(dtype)
            m = m.t() if self.layout == "in_out" else m
            return nn.Parameter(m.contiguous(), requires_grad=False)

        def b(*biases):
            if biases[0] is None:
                return None
            return nn.Parameter(torch.cat([t.detach() for t in biases]).to(dtype),
                                requires_grad=False)

        self.embed = nn.Parameter(model.embed.weight.detach().to(dtype), requires_grad=False)
        self.wqkv, self.bqkv, self.wo, self.bo = (nn.ParameterList(), [], nn.ParameterList(), [])
        self.wgu, self.wd, self.norms = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        self.mlp_bias = []
        for layer in model.layers:
            a, m = layer.attn, layer.mlp
            self.wqkv.append(w(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight))
            self.bqkv.append(b(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias))
            self.wo.append(w(a.o_proj.weight))
            self.bo.append(b(a.o_proj.bias))
            self.wgu.append(w(m.gate_proj.weight, m.up_proj.weight))
            self.wd.append(w(m.down_proj.weight))
            self.mlp_bias.append((b(m.gate_proj.bias, m.up_proj.bias), b(m.down_proj.bias)))
            self.norms.append(nn.Parameter(layer.attn_norm.weight.detach().to(dtype),
                                           requires_grad=False))
            self.norms.append(nn.Parameter(layer.mlp_norm.weight.detach().to(dtype),
                                           requires_grad=False))
        self.final_norm = nn.Parameter(model.norm.weight.detach().to(dtype), requires_grad=False)
        head = model.embed.weight if model.lm_head is None else model.lm_head.weight
        self.head = w(head)
        cos, sin = _rope_tables(self.head_dim, config.rope_theta, config.max_seq_len, dtype)
        self.register_buffer("cos", cos.to(device), persistent=False)
        self.register_buffer("sin", sin.to(device), persistent=False)
        self.intermediate = config.intermediate_size
        self.q_size = self.n_heads * self.head_dim
        self.kv_size = self.n_kv * self.head_dim
        # Plain tuples for the hot loop (indexing a ParameterList costs more than the lookup).
        self._layers = [(self.wqkv[i], self.bqkv[i], self.wo[i], self.bo[i], self.norms[2 * i],
                         self.norms[2 * i + 1], self.wgu[i], self.mlp_bias[i][0], self.wd[i],
                         self.mlp_bias[i][1]) for i in range(len(self.wqkv))]
        self._upcast = dtype in (torch.bfloat16, torch.float16) and device.type == "cpu"
        self._upcast_rows = 8  # measured on AVX2: even at 11 rows, 4x faster at 128
        if self._kernel is not None:
            if self.layout != "out_in":
                raise ValueError("the bf16 kernel needs layout 'out_in' (or 'auto')")
            f32 = (lambda t: None if t is None else t.float())
            self._f32 = {"cos": self.cos.float(), "sin": self.sin.float(),
                         "final_norm": self.final_norm.float(),
                         "layers": [(f32(bqkv), f32(bo), n1.float(), n2.float(), f32(gb), f32(db))
                                    for (_, bqkv, _, bo, n1, n2, _, gb, _, db) in self._layers]}
        self.eval()

    # --- pieces ----------------------------------------------------------------------------
    def _mm(self, x, w, bias=None, residual=None):
        """x (rows, in) times the stored matrix, plus `bias` and `residual` when given."""
        w = w if self.layout == "in_out" else w.t()
        if self._upcast and x.shape[0] >= self._upcast_rows:
            # Many rows (prefill) on a CPU without native bf16/fp16 arithmetic: the multiply is
            # compute-bound and float32's kernels are several times faster, so widen the weights
            # for it (the bytes read once per pass matter little here).
            out = x.float() @ w.float()
            if residual is not None:
                out += residual
            if bias is not None:
                out += bias
            return out.to(x.dtype)
        if residual is not None:
            out = torch.addmm(residual, x, w)
            return out if bias is None else out.add_(bias)
        if bias is not None:
            return torch.addmm(bias, x, w)
        return x @ w

    def _norm(self, x, weight):
        if x.dtype == torch.float32:  # one fused kernel
            return F.rms_norm(x, weight.shape, weight, self.eps)
        # The same arithmetic as minillm.model.llama.rms_norm: in float32, cast, then the weight.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    # --- forward ---------------------------------------------------------------------------
    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None):
        """Logits (batch, seq, vocab) in float32 (only the last position when built with
        logits="last")."""
        b, s = input_ids.shape if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 \
            else (0, 0)
        if (s == 1 and attention_mask is None and position_ids is None and cache is not None
                and cache.length < min(cache.max_tokens, self.config.max_seq_len)
                and b == cache.batch_size and cache.n_layers == len(self._layers)):
            return self._decode(input_ids, cache)
        return self._general(input_ids, cache, position_ids, attention_mask)

    def _decode_kernel(self, input_ids, cache):
        """The decode step with bf16 weights on a CPU without bf16 arithmetic: activations in
        float32, each matrix-vector product by the kernel of kernel.py (it reads the bf16 weights
        and widens them in registers). Batch 1 only."""
        pos, gemv, f = cache.length, self._gemv, self._f32
        x = self.embed[input_ids[0, 0]].float()[None]  # (1, d)
        cos, sin = f["cos"][pos], f["sin"][pos]
        nq, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        for i, (wqkv, _, wo, _, _, _, wgu, _, wd, _) in enumerate(self._layers):
            bqkv, bo, n1, n2, gb, db = f["layers"][i]
            h = F.rms_norm(x, n1.shape, n1, self.eps)
            qkv = gemv(h, wqkv, bqkv)
            qk = qkv[:, :self.q_size + self.kv_size].view(1, nq + nkv, hd)
            qk = apply_rope(qk, cos, sin)
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, pos] = qk[:, nq:]
            values[:, :, pos] = qkv[:, self.q_size + self.kv_size:].view(1, nkv, hd)
            q = qk[:, :nq].reshape(1, nkv, nq // nkv, hd)
            out = F.scaled_dot_product_attention(q, keys[:, :, :pos + 1].float(),
                                                 values[:, :, :pos + 1].float())
            x = x + gemv(out.reshape(1, nq * hd), wo, bo)
            h = F.rms_norm(x, n2.shape, n2, self.eps)
            gu = gemv(h, wgu, gb)
            act = F.silu(gu[:, :self.intermediate]).mul_(gu[:, self.intermediate:])
            x = x + gemv(act, wd, db)
        cache.advance(1)
        x = F.rms_norm(x, f["final_norm"].shape, f["final_norm"], self.eps)
        return gemv(x, self.head)[:, None, :]

    def _gemv(self, x, w, bias=None):
        out = torch.empty(1, w.shape[0], dtype=torch.float32)
        self._kernel(w.data_ptr(), x.contiguous().data_ptr(), out.data_ptr(), w.shape[0],
                     w.shape[1], torch.get_num_threads())
        return out if bias is None else out.add_(bias)

    def _decode(self, input_ids, cache):
        """One new token per row, no padding: the hot path of generation."""
        if self._kernel is not None and input_ids.shape[0] == 1:
            return self._decode_kernel(input_ids, cache)
        b, pos = input_ids.shape[0], cache.length
        x = self.embed[input_ids[:, 0]]  # (b, d)
        cos, sin = self.cos[pos], self.sin[pos]
        nq, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        for i, (wqkv, bqkv, wo, bo, n1, n2, wgu, gb, wd, db) in enumerate(self._layers):
            h = self._norm(x, n1)
            qkv = self._mm(h, wqkv, bqkv)  # (b, (nq + 2 nkv) hd)
            qk = apply_rope(qkv[:, :self.q_size + self.kv_size].view(b, nq + nkv, hd), cos, sin)
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, pos] = qk[:, nq:]
            values[:, :, pos] = qkv[:, self.q_size + self.kv_size:].view(b, nkv, hd)
            q = qk[:, :nq].reshape(b, nkv, nq // nkv, hd)  # a group's query heads as queries
            out = F.scaled_dot_product_attention(q, keys[:, :, :pos + 1], values[:, :, :pos + 1])
            x = self._mm(out.reshape(b, nq * hd), wo, bo, residual=x)
            h = self._norm(x, n2)
            gu = self._mm(h, wgu, gb)
            act = F.silu(gu[:, :self.intermediate]).mul_(gu[:, self.intermediate:])
            x = self._mm(act, wd, db, residual=x)
        cache.advance(1)
        x = self._norm(x, self.final_norm)
        return self._mm(x, self.head).float()[:, None, :]

    def _general(self, input_ids, cache, position_ids, attention_mask):
        """Any input: prefill, padded batches, no cache. Checked like the plain model."""
        position_ids, mask = prepare(self.config, input_ids, cache, position_ids, attention_mask)
        b, s = input_ids.shape
        nq, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        groups = nq // nkv
        cos = self.cos[position_ids][:, :, None]  # (b, s, 1, hd)
        sin = self.sin[position_ids][:, :, None]
        start = cache.length if cache is not None else 0
        x = self.embed[input_ids].reshape(b * s, -1)
        for i in range(len(self.wqkv)):
            h = self._norm(x, self.norms[2 * i])
            qkv = self._mm(h, self.wqkv[i], self.bqkv[i]).view(b, s, nq + 2 * nkv, hd)
            qk = apply_rope(qkv[:, :, :nq + nkv], cos, sin)
            q = qk[:, :, :nq].transpose(1, 2)
            k = qk[:, :, nq:].transpose(1, 2)
            v = qkv[:, :, nq + nkv:].transpose(1, 2)
            if cache is not None:
                k, v = cache.append(i, k, v)
            if mask is not None or start > 0:  # query groups folded, keys never copied
                out = attention(q, k, v, mask)
            else:
                k, v = repeat_kv(k, groups), repeat_kv(v, groups)
                if x.device.type == "cpu":
                    out = causal_attention(q, k, v)
                else:
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = self._mm(out.transpose(1, 2).reshape(b * s, nq * hd), self.wo[i], self.bo[i],
                         residual=x)
            h = self._norm(x, self.norms[2 * i + 1])
            gb, db = self.mlp_bias[i]
            gu = self._mm(h, self.wgu[i], gb)
            act = F.silu(gu[:, :self.intermediate]).mul_(gu[:, self.intermediate:])
            x = self._mm(act, self.wd[i], db, residual=x)
        if cache is not None:
            cache.advance(s)
        x = x.view(b, s, -1)
        if self.logits == "last":
            x = x[:, -1:]
        x = self._norm(x, self.final_norm)
        keep = x.shape[1]
        return self._mm(x.reshape(b * keep, -1), self.head).float().view(b, keep, -1)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights one decode step reads: every matrix, and the norms (the
        embedding table only as the LM head's copy, plus one row)."""
        total = sum(p.numel() * p.element_size() for p in self.parameters())
        if self.head.data_ptr() != self.embed.data_ptr():
            total -= self.embed.numel() * self.embed.element_size()
        return total + self.embed.shape[1] * self.embed.element_size()
