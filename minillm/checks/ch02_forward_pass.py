"""Checkers for exercises/02_forward_pass.ipynb: RMSNorm, RoPE, causal grouped-query attention and
one transformer block, each compared with minillm's own modules on random tensors."""

from __future__ import annotations

import math

import torch

from ..model import (LlamaBlock, ModelConfig, apply_rope, attention_explicit, rms_norm,
                     rope_cos_sin)
from ._base import CheckFailed, call, expect, passed


def _tensor(got, what, shape):
    expect(isinstance(got, torch.Tensor),
           f"{what} returned {type(got).__name__}; return a torch.Tensor")
    expect(tuple(got.shape) == tuple(shape),
           f"{what} returned shape {tuple(got.shape)}; expected {tuple(shape)}")
    expect(bool(torch.isfinite(got).all()), f"{what} returned NaN or inf values")


def _close(got, want, tol=1e-4):
    return (got - want).abs().max().item() <= tol * max(1.0, want.abs().max().item())


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---- 1: RMSNorm ----

def check_rms_norm(fn) -> None:
    """`fn(x, weight, eps)` must equal x / sqrt(mean(x², last axis) + eps) * weight."""
    cases = [((2, 5, 8), 1e-5), ((3, 16), 1e-6), ((1, 1, 4), 1.0)]
    for i, (shape, eps) in enumerate(cases):
        x, weight = _rand(*shape, seed=i) * 3, _rand(shape[-1], seed=10 + i)
        what = f"rms_norm(x of shape {shape}, weight, eps={eps})"
        got = call(fn, x.clone(), weight.clone(), eps)
        _tensor(got, what, shape)
        want = rms_norm(x, weight, eps)
        if _close(got, want):
            continue
        if _close(got, rms_norm(x, torch.ones_like(weight), eps)):
            raise CheckFailed(f"{what}: the result is right before the scale; multiply by "
                              "`weight` at the end")
        centred = torch.nn.functional.layer_norm(x, shape[-1:], weight, None, eps)
        if _close(got, centred):
            raise CheckFailed(f"{what}: you subtracted the mean (that is LayerNorm); RMSNorm "
                              "divides by the root mean square and never centres x")
        rms = x.pow(2).mean(-1, keepdim=True).sqrt()
        if _close(got, x / (rms + eps) * weight):
            raise CheckFailed(f"{what}: eps goes inside the square root: "
                              "x / sqrt(mean(x²) + eps)")
        if _close(got, x / x.pow(2).sum(-1, keepdim=True).add(eps).sqrt() * weight):
            raise CheckFailed(f"{what}: you summed the squares; take their mean over the last "
                              "axis")
        raise CheckFailed(f"{what}: largest difference from the reference "
                          f"{(got - want).abs().max().item():.3g}; compute the mean of x² over "
                          "the last axis only (keepdim=True)")
    passed("rms_norm", len(cases))


# ---- 2: RoPE ----

def _rope_interleaved(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    ang = positions.float()[..., None] * inv
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def check_rope(fn) -> None:
    """`fn(x, position_ids, theta)` must rotate pair (i, i + d/2) of each head's dimensions by
    the angle position x theta^(-2i/d), as minillm's `apply_rope` does."""
    cases = [((1, 2, 5, 8), 10000.0), ((2, 3, 4, 16), 100000.0), ((1, 1, 3, 4), 10.0)]
    for i, (shape, theta) in enumerate(cases):
        b, h, s, d = shape
        x = _rand(*shape, seed=20 + i)
        positions = torch.arange(s).expand(b, s) + 3 * torch.arange(b)[:, None]
        what = f"rope(x of shape {shape}, position_ids, theta={theta})"
        got = call(fn, x.clone(), positions.clone(), theta)
        _tensor(got, what, shape)
        want = apply_rope(x, *rope_cos_sin(positions, d, theta))
        if _close(got, want):
            continue
        if _close(got, _rope_interleaved(x, positions, theta)):
            raise CheckFailed(f"{what}: you rotated neighbouring pairs (0, 1), (2, 3), ...; "
                              "this course (like Hugging Face) pairs dimension i with i + d/2: "
                              "use rotate_half")
        if _close(got, apply_rope(x, *rope_cos_sin(-positions, d, theta))):
            raise CheckFailed(f"{what}: you rotated the wrong way round; check the signs: "
                              "(x1·cos − x2·sin, x2·cos + x1·sin)")
        zero = torch.zeros(b, s, dtype=torch.long)
        back = call(fn, x.clone(), zero, theta)
        if not _close(back, x):
            raise CheckFailed(f"{what}: at position 0 the angle is 0, so x must come back "
                              "unchanged, but it did not")
        if not torch.allclose(got.norm(dim=-1), x.norm(dim=-1), atol=1e-4):
            raise CheckFailed(f"{what}: a rotation keeps each head vector's length, but yours "
                              "changed it: check the signs (x·cos + rotate_half(x)·sin, with "
                              "rotate_half(x) = (-x2, x1))")
        raise CheckFailed(f"{what}: differs from the reference by up to "
                          f"{(got - want).abs().max().item():.3g}; the angle of pair i is "
                          "position / theta^(2i/d)")
    passed("rope", len(cases))


# ---- 3: causal attention with grouped-query heads ----

def check_causal_attention(fn) -> None:
    """`fn(q, k, v)` with q (b, heads, s, d) and k, v (b, kv_heads, s, d) must give
    softmax(q kᵀ/√d + causal mask) v, each query head using key/value head head // group."""
    cases = [(1, 2, 2, 5, 8), (2, 6, 2, 7, 16), (1, 4, 1, 3, 4)]
    for i, (b, h, kv, s, d) in enumerate(cases):
        q, k, v = (_rand(b, n, s, d, seed=30 + 3 * i + j) for j, n in enumerate((h, kv, kv)))
        what = f"causal_attention(q {tuple(q.shape)}, k/v {tuple(k.shape)})"
        got = call(fn, q.clone(), k.clone(), v.clone())
        _tensor(got, what, q.shape)
        want = attention_explicit(q, k, v)
        if _close(got, want):
            continue
        full = torch.softmax(q @ k.repeat_interleave(h // kv, 1).transpose(-2, -1)
                             / math.sqrt(d), -1) @ v.repeat_interleave(h // kv, 1)
        if _close(got, full):
            raise CheckFailed(f"{what}: every query sees every key; mask the future: query i "
                              "may only look at keys 0..i (set the others to -inf before softmax)")
        if kv < h and _close(got, attention_explicit(q, k.repeat(1, h // kv, 1, 1),
                                                     v.repeat(1, h // kv, 1, 1))):
            raise CheckFailed(f"{what}: query head j must use key/value head j // {h // kv} "
                              "(heads 0..group-1 share kv head 0); use repeat_interleave, not "
                              "repeat")
        unscaled = attention_explicit(q * math.sqrt(d), k, v)
        if _close(got, unscaled):
            raise CheckFailed(f"{what}: divide the scores q kᵀ by √head_dim before the softmax")
        if not _close(got[:, :, 0], v.repeat_interleave(h // kv, 1)[:, :, 0]):
            raise CheckFailed(f"{what}: the first query can only see the first key, so its "
                              "output must equal the first value vector of its head")
        raise CheckFailed(f"{what}: differs from the reference by up to "
                          f"{(got - want).abs().max().item():.3g}; softmax over the keys axis "
                          "(the last one)")
    passed("causal_attention", len(cases))


# ---- 4: one transformer block ----

def random_block(config: ModelConfig, seed: int = 0) -> LlamaBlock:
    """A LlamaBlock with random weights, norms included, for the exercises."""
    torch.manual_seed(seed)
    block = LlamaBlock(config, layer_idx=0).eval()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    return block


def check_transformer_block(fn) -> None:
    """`fn(x, block, config, position_ids)` must compute a Llama block with the weights of
    `block`: x + attention(rms_norm(x)), then + SwiGLU(rms_norm(...))."""
    configs = [ModelConfig("llama", 50, 16, 1, 4, 2, 4, 24, rope_theta=10000.0),
               ModelConfig("llama", 50, 24, 1, 3, 3, 8, 20, rope_theta=100.0, norm_eps=1e-6)]
    for i, config in enumerate(configs):
        block = random_block(config, seed=i)
        x = _rand(2, 6, config.hidden_size, seed=40 + i)
        positions = torch.arange(6).expand(2, 6)
        what = (f"transformer_block(x {tuple(x.shape)}, block with {config.n_heads} heads / "
                f"{config.n_kv_heads} kv heads)")
        with torch.no_grad():
            got = call(fn, x.clone(), block, config, positions.clone())
            _tensor(got, what, x.shape)
            want = block(x, *rope_cos_sin(positions, config.head_dim, config.rope_theta))
            attn_half = x + block.attn(block.attn_norm(x),
                                       *rope_cos_sin(positions, config.head_dim,
                                                     config.rope_theta))
        if _close(got, want):
            continue
        if _close(got, attn_half):
            raise CheckFailed(f"{what}: you stopped after attention; add the feed-forward part: "
                              "h + down(silu(gate(rms_norm(h))) * up(rms_norm(h)))")
        raise CheckFailed(f"{what}: differs from minillm's block by up to "
                          f"{(got - want).abs().max().item():.3g}; norm before each part, RoPE "
                          "on q and k only, o_proj after attention, SiLU on the gate, and each part "
                          "adds its result to its input (x = x + attn(...); x = x + mlp(...))")
    passed("transformer_block", len(configs))


def check_whole_model(fn, model, token_ids) -> None:
    """Run the real model with `fn` in place of every one of its blocks; the logits must match
    minillm's own forward pass."""
    config = model.config
    ids = torch.as_tensor(token_ids).reshape(1, -1)
    positions = torch.arange(ids.shape[1])[None]
    with torch.inference_mode():
        x = model.embed(ids)
        for layer in model.layers:
            x = call(fn, x, layer, config, positions)
        got = torch.nn.functional.linear(model.norm(x), model.embed.weight)
        want = model(ids)
    diff = (got - want).abs().max().item()
    expect(diff < 1e-3, f"with your transformer_block in all {config.n_layers} layers the logits "
                        f"differ from minillm's by up to {diff:.3g} (allowed: 1e-3)")
    expect(torch.equal(got.argmax(-1), want.argmax(-1)),
           "the top-1 next token differs from minillm's at some position")
    print(f"max logit difference over {ids.shape[1]} positions: {diff:.2g}")
    passed("whole model with your block", 1)
