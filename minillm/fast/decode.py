"""The fast path's decode step: one new token per row, no padding, a contiguous KV cache.

Generation spends almost all its steps here, and at batch 1 a step's arithmetic is small, so
what the step costs beyond reading the weights (Python, module calls, small tensor operations)
shows. This is the one other implementation of the Llama block's math (the readable one is
`LlamaBlock.forward`): the same layers, the same weights and the same hooks (a family's
`Attention.qk_norm`, so Qwen3 runs here unchanged), written as one loop over the layers on 2-D
tensors (rows, width), with the residual added inside the matrix multiply where the layer allows
it and the new keys and values written straight into the cache. On a CPU, RMSNorm and the
attention over the cache, RoPE with the cache write, and SiLU·mul are minillm's own kernels
(`kernels.rms_norm`, `kernels.decode_attention`, `kernels.rope_write_cache`,
`kernels.silu_mul`: one call each instead of PyTorch's general operations, whose overhead per
call is what a one-row step feels), where `kernels.dispatch.decode_step` (here `decode_plan`)
says so: it looks at the step's device first, so a GPU step never touches the C library. The
step checks its tensors for those kernels once (`FusedDecode.kernels_fit`) and then calls their
unchecked twins, so the checks are paid once per step, not at each of a layer's calls.
Where all of a CPU step's operations go to those kernels, its blocks run in one call of C
instead (minillm/fast/blocks.py: the same kernels in the same order, the same logits), unless
`c_blocks` is switched off. On CUDA a batch-1 step replays a CUDA graph of the same step
instead (minillm/fast/graph.py), unless `cuda_graph` is switched off. Prefill, padded batches and the engine's paged cache take
the module path. `tests/test_fast.py`
checks both give the same logits; `scripts/bench_fused_decode.py` measures what it saves. Each
of the step's operations is one call of a function named here, so `python -m minillm bench step`
(minillm/tools/bench/step.py) can time the step itself, operation by operation, by putting
timed functions in their place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..layers.kv_contract import KVCacheProtocol, capability
from ..kernels.activation import silu_mul_unchecked
from ..kernels.attention import decode_attention_unchecked
from ..kernels.decode_plan import DecodePlan, StepFacts, choose
from ..kernels.dispatch import DecodeKernels
from ..kernels.dispatch import decode_step as decode_plan
from ..kernels.norm import rms_norm_unchecked
from ..kernels.rope import rope_write_cache_unchecked
from ..layers import Attention
from ..layers.rope import apply_rope
from . import blocks
from .linear import FastLinear


@dataclass
class _Layer:
    """One block's parts, looked up once (nn.Module's attribute lookup is slow in a hot loop)."""

    attn_norm: nn.Module
    attn: nn.Module
    qkv: nn.Module
    o: nn.Module
    mlp_norm: nn.Module
    gate_up: nn.Module
    down: nn.Module
    joint_rope: bool  # no qk_norm of the family's own: q and k are rotated in one call


def _norm(norm: nn.Module, x: torch.Tensor, kernel: bool) -> torch.Tensor:
    """RMSNorm(x): minillm's kernel where the step's plan says so (its weights checked once per
    step), else PyTorch's fused one called directly (one operation in every float dtype), else
    the module."""
    weight = _weight(norm)
    if x.dtype is weight.dtype:
        if kernel and x.dtype is torch.float32:
            return rms_norm_unchecked(x, weight, norm.eps)
        return F.rms_norm(x, weight.shape, weight, norm.eps)
    return norm(x)


def _linear(layer: nn.Module, x: torch.Tensor, residual: torch.Tensor | None = None):
    """layer(x) (+ residual): a few float32 rows through the layer's own kernel where it has one
    (FastLinear, Int8Linear, Q41Linear: `few_rows`), else the residual added inside the multiply
    for a float FastLinear."""
    if x.dtype is torch.float32 and x.shape[0] <= getattr(layer, "few_rows_max", 0):
        y = layer.few_rows(x)
        return y if residual is None else y.add_(residual)
    if isinstance(layer, FastLinear) and layer._b is None and x.dtype == layer._same_dtype_as:
        weight = layer._w_in_out
        return torch.mm(x, weight) if residual is None else torch.addmm(residual, x, weight)
    y = layer.forward(x)
    return y if residual is None else residual + y


def _embed(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The embedding rows (rows, width) of one new token per row, after checking the ids."""
    return model.embed(checked_ids(model, input_ids))


def checked_ids(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The new token of each row (rows,), on the model's device, each checked to be in the
    vocabulary (one host sync: the check reads one boolean)."""
    vocab = model.config.vocab_size
    ids = input_ids.to(model.device)[:, 0]
    if bool(((ids < 0) | (ids >= vocab)).any()):
        bad = ids[(ids < 0) | (ids >= vocab)][0].item()
        raise ValueError(f"token id {bad} is out of range: the vocabulary has {vocab} ids "
                         f"(0 to {vocab - 1})")
    return ids


def _angles(model, pos: int, x: torch.Tensor):
    """cos, sin of position `pos`, for RoPE."""
    return model.rotary(torch.full((1, 1), pos, device=x.device), x.dtype)


def _rope_cache(plan: DecodeKernels, layer: _Layer, qkv: torch.Tensor, cos, sin, keys,
                values, pos: int) -> torch.Tensor:
    """q (rows, nq, hd) from qkv, rotated (and normed first where the family has its own
    qk_norm); the new key, rotated, and value written into the layer's cache at `pos`, in
    place."""
    if plan.rope_cache and layer.joint_rope and qkv.dtype is torch.float32 \
            and qkv.is_contiguous():  # one call: q and k rotated, k and v into the cache
        return rope_write_cache_unchecked(qkv, cos, sin, keys, values, pos, layer.attn.n_heads)
    q, k, v = _rotated(layer, qkv, cos, sin)
    keys[:, :, pos] = k
    values[:, :, pos] = v
    return q


def _rotated(layer: _Layer, qkv: torch.Tensor, cos, sin):
    """q (rows, nq, hd) and k (rows, nkv, hd) from qkv, rotated (and normed first where the
    family has its own qk_norm), and v (rows, nkv, hd)."""
    attn = layer.attn
    rows, nq, nkv, hd = qkv.shape[0], attn.n_heads, attn.n_kv_heads, attn.head_dim
    if layer.joint_rope:  # q and k side by side in qkv: one rotation for both
        qk = apply_rope(qkv[:, :(nq + nkv) * hd].view(rows, 1, nq + nkv, hd), cos, sin)
        q, k = qk[:, 0, :nq], qk[:, 0, nq:]
    else:
        q, k = attn.qk_norm(qkv[:, :nq * hd].view(rows, 1, nq, hd),
                            qkv[:, nq * hd:(nq + nkv) * hd].view(rows, 1, nkv, hd))
        q, k = apply_rope(q, cos, sin)[:, 0], apply_rope(k, cos, sin)[:, 0]
    return q, k, qkv[:, qkv.shape[1] - nkv * hd:].view(rows, nkv, hd)


def _attend(plan: DecodeKernels, q: torch.Tensor, keys, values, pos: int) -> torch.Tensor:
    """The new query (rows, nq, hd) over the cache's first pos + 1 keys and values:
    (rows, nq * hd)."""
    rows, nq, hd = q.shape
    if plan.attention:  # one call instead of PyTorch's general attention
        return decode_attention_unchecked(q.contiguous(), keys, values, pos + 1,
                                          plan.threads).view(rows, nq * hd)
    nkv = keys.shape[1]  # each key/value head's group of query heads as its queries: no copies
    return F.scaled_dot_product_attention(
        q.reshape(rows, nkv, nq // nkv, hd), keys[:, :, :pos + 1],
        values[:, :, :pos + 1]).reshape(rows, nq * hd)


def _block(plan: DecodeKernels, layer: _Layer, x: torch.Tensor, attention, *where):
    """One block on one new token per row: x (rows, width) through the layer's attention and
    MLP, each with its residual. `attention(plan, layer, qkv, *where)` writes the new key and
    value into the cache and gives the attention's output (rows, nq * hd): `_attention` here, at
    a Python position; graph.py's at a position held in a tensor."""
    qkv = _linear(layer.qkv, _norm(layer.attn_norm, x, plan.norm))
    x = _linear(layer.o, attention(plan, layer, qkv, *where), x)
    gate_up = _linear(layer.gate_up, _norm(layer.mlp_norm, x, plan.norm))
    return _linear(layer.down, _silu_mul(plan, gate_up), x)


def _attention(plan: DecodeKernels, layer: _Layer, qkv: torch.Tensor, cos, sin, keys, values,
               pos: int) -> torch.Tensor:
    """The new key and value rotated into the cache at `pos`, and the query over the cache."""
    q = _rope_cache(plan, layer, qkv, cos, sin, keys, values, pos)
    return _attend(plan, q, keys, values, pos)


def _silu_mul(plan: DecodeKernels, gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up, gate and up side by side in one tensor."""
    if plan.silu_mul and gate_up.dtype is torch.float32 and gate_up.is_contiguous():
        return silu_mul_unchecked(gate_up)
    f = gate_up.shape[1] // 2
    return F.silu(gate_up[:, :f]).mul_(gate_up[:, f:])


def _plan(fused: "FusedDecode", x: torch.Tensor, keys: torch.Tensor) -> DecodeKernels:
    """Which of the step's small operations run on minillm's kernels (the device first: no C
    for a GPU step), with the tensors they take checked, once per step."""
    return fused.kernels_fit(decode_plan(x, keys), x.shape[1])


def _weight(norm: nn.Module) -> torch.Tensor:
    """norm.weight, without nn.Module's attribute lookup (about 2 us, 61 times a step)."""
    weight = norm._parameters.get("weight")
    return norm.weight if weight is None else weight


def _head(model, x: torch.Tensor) -> torch.Tensor:
    """Logits (rows, 1, vocab) in float32 from the final norm's output."""
    return model.lm_head(x).float()[:, None, :]


class FusedDecode:
    """`model`'s decode step, for a fast (fused) Llama-family model."""

    def __init__(self, model):
        self.model = model
        self.layers = [_Layer(b.attn_norm, b.attn, b.attn.qkv_proj, b.attn.o_proj, b.mlp_norm,
                              b.mlp.gate_up_proj, b.mlp.down_proj,
                              type(b.attn).qk_norm is Attention.qk_norm)
                       for b in model.layers]
        self.norms = [m for layer in self.layers for m in (layer.attn_norm, layer.mlp_norm)]
        self.norms.append(model.norm)
        self._warned = False
        # On a CPU, every block in one C call (blocks.py) where the step's kernels allow it.
        self.c_blocks = True
        self._table: blocks.BlockTable | None = None
        self._c_shape = blocks.structure_fits(self.layers)
        # Batch-1 steps on CUDA replay a CUDA graph when `graph` is set (minillm.fast.optimize
        # sets a graph.GraphedDecode) and `cuda_graph` is on.
        self.graph = None
        self.cuda_graph = True

    @staticmethod
    def supports(model) -> bool:
        """Whether every block has the Llama family's fused parts."""
        return all(isinstance(getattr(b, "attn", None), Attention)
                   and "qkv_proj" in b.attn._modules and "gate_up_proj" in b.mlp._modules
                   and hasattr(b, "attn_norm") for b in model.layers)

    def applies(self, input_ids, cache: KVCacheProtocol | None, position_ids,
                attention_mask) -> bool:
        """Whether this step can run the pass: one new token per row, no padding, and a cache
        whose tensors it may write and read in place (the contract's `contiguous`)."""
        return (cache is not None and capability(cache, "contiguous")
                and position_ids is None and attention_mask is None
                and isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2
                and input_ids.shape[1] == 1 and input_ids.shape[0] == cache.batch_size
                and cache.n_layers == len(self.layers)
                and cache.length < min(cache.max_tokens, self.model.config.max_seq_len))

    def kernels_fit(self, plan: DecodeKernels, width: int) -> DecodeKernels:
        """The step's plan, its norm kernel kept where every norm's weight is what the
        unchecked kernel reads (`width` contiguous float32 values on the CPU, checked here once
        per step instead of at each of its calls), else left to PyTorch (said once). The plan
        (`decode_plan`) has checked the activations and the cache; the tensors the layers give
        (qkv, gate_up) are checked at their call, where it costs an attribute lookup."""
        if not plan.norm or all(w.dtype is torch.float32 and w.is_cpu and w.is_contiguous()
                                and w.dim() == 1 and w.numel() == width
                                for w in map(_weight, self.norms)):
            return plan
        if not self._warned:
            self._warned = True
            warnings.warn("a norm's weight is not the contiguous float32 vector minillm's "
                          "RMSNorm kernel reads: this model's decode steps norm with PyTorch's "
                          "kernel", RuntimeWarning, stacklevel=3)
        return replace(plan, norm=False)

    def facts(self, plan: DecodeKernels, cache, rows: int) -> StepFacts:
        """What kernels/decode_plan.choose looks at, for a step of `rows` rows over `cache`."""
        device = self.model.device.type
        one_call = self.c_blocks and self._c_shape and plan.every  # off the CPU: never (no plan)
        return StepFacts(
            device=device,
            graph_ready=device == "cuda" and self.graph is not None and self.graph.applies(cache),
            graph_on=self.cuda_graph, kernels=plan, c_blocks_on=self.c_blocks,
            blocks_alike=self._c_shape,
            rows_fit=bool(one_call) and self.block_table().takes(rows),
            cache_fits=bool(one_call) and blocks.cache_fits(cache.keys, cache.values))

    def plan(self) -> DecodePlan:
        """The path of this model's usual step, one row over its own KVCache (as `generate`
        makes it), with the reasons for each faster path not taken (`python -m minillm doctor`,
        `bench step`)."""
        from ..generation.kv_cache import KVCache

        cache = KVCache.for_model(self.model, batch_size=1, max_tokens=2)
        x = _embed(self.model, torch.zeros((1, 1), dtype=torch.long))
        return choose(self.facts(_plan(self, x, cache.keys[0]), cache, 1), explain=True)

    def block_table(self) -> blocks.BlockTable:
        """What the one C call reads of the layers, written again when they changed."""
        if self._table is None or not self._table.current():
            self._table = blocks.BlockTable(self.layers, _weight)
        return self._table

    def __call__(self, input_ids: torch.Tensor, cache: KVCacheProtocol) -> torch.Tensor:
        """Logits (rows, 1, vocab) in float32 for one new token per row, by the path
        kernels/decode_plan.choose gives this step."""
        if self.cuda_graph and self.graph is not None and self.graph.applies(cache):
            logits = self.graph(input_ids, cache)  # choose's first path, without its other facts
            if logits is not None:
                return logits
        # Each operation is one call of a module-level function: `bench step` times them so.
        model = self.model
        pos = cache.length
        x = _embed(model, input_ids)  # (rows, width)
        cos, sin = _angles(model, pos, x)
        plan = _plan(self, x, cache.keys[0])
        keys, values = cache.keys, cache.values
        if choose(self.facts(plan, cache, x.shape[0])).path == "one C call":
            x = blocks.run(self._table, x, keys, values, cos, sin, pos, plan.threads)
        else:
            for i, layer in enumerate(self.layers):
                x = _block(plan, layer, x, _attention, cos, sin, keys[i], values[i], pos)
        cache.advance(1)
        return _head(model, _norm(model.norm, x, plan.norm))
