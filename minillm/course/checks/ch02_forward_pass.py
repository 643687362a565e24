"""Checkers for exercises/02_forward_pass.ipynb: RMSNorm, RoPE, causal grouped-query attention and
one transformer block, each compared with minillm's own modules on random tensors: several
shapes, epsilons that matter, and positions that do not start at 0. A hint names a mistake only
when the learner's outputs equal that mistake's outputs on every case. Every message says both
languages side by side (`say`), chosen by the notebook's set_language."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...model import (LlamaBlock, ModelConfig, apply_rope, attention_explicit, rms_norm,
                     rope_cos_sin)
from ..language import say
from ._base import CheckFailed, call, checker, end_check, expect, passed


def _tensor(got, what, shape):
    expect(isinstance(got, torch.Tensor),
           say(f"{what} returned {type(got).__name__}; return a torch.Tensor",
               f"{what} 返回了 {type(got).__name__}；请返回一个 torch.Tensor"))
    expect(tuple(got.shape) == tuple(shape),
           say(f"{what} returned shape {tuple(got.shape)}; expected {tuple(shape)}",
               f"{what} 返回的形状是 {tuple(got.shape)}；应为 {tuple(shape)}"))
    expect(got.is_floating_point(),
           say(f"{what} returned a {got.dtype} tensor; return floats",
               f"{what} 返回了 {got.dtype} 类型的张量；请返回浮点数"))
    expect(bool(torch.isfinite(got).all()),
           say(f"{what} returned NaN or inf values", f"{what} 返回了 NaN 或 inf"))
    return got.detach().float()


def _close(got, want, tol=1e-4):
    return (got.shape == want.shape
            and (got - want).abs().max().item() <= tol * max(1.0, want.abs().max().item()))


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _largest_difference(got, want) -> str:
    return f"{(got - want).abs().max().item():.3g}"


def _differs(what: str, got, want, hint: str) -> str:
    """The failure of the call `what` whose answer `got` is not the reference's `want`."""
    return say(f"{what} differs from the reference by up to {_largest_difference(got, want)}: ",
               f"{what} 与参考实现最多相差 {_largest_difference(got, want)}：") + hint


# ---- 1: RMSNorm ----

RMS_CASES = [((2, 5, 8), 1e-5, 3.0), ((3, 16), 1e-6, 1.0), ((1, 1, 4), 1.0, 1.0),
             ((4, 6), 1e-2, 0.01), ((2, 3, 7, 12), 0.1, 0.2), ((5,), 1e-5, 2.0)]
HIDDEN_RMS_CASES = [((3, 4, 10), 1e-4, 5.0), ((2, 24), 1e-6, 0.5), ((1, 2, 6), 2.0, 1.0),
                    ((5, 3), 1e-3, 0.02), ((2, 2, 3, 5), 0.3, 0.3), ((9,), 1e-5, 1.5)]


def _rms_inputs(seed, shape, scale):
    return _rand(*shape, seed=seed) * scale, 1 + 0.5 * _rand(shape[-1], seed=10 + seed)


def _rms_variant(x, w, eps, *, weight=True, centre=False, eps_inside=True, mean=True,
                 fixed_eps=None, axis=-1):
    eps = eps if fixed_eps is None else fixed_eps
    if centre:
        x = x - x.mean(-1, keepdim=True)
    squares = x.pow(2)
    total = squares.mean(axis, keepdim=True) if mean else squares.sum(axis, keepdim=True)
    out = x / (total + eps).sqrt() if eps_inside else x / (total.sqrt() + eps)
    return out * w if weight else out


def _rms_mistakes(inputs):
    def model(**kind):
        return [_rms_variant(x, w, eps, **kind) for x, w, eps in inputs]

    return [
        (say("the result is right before the scale: multiply by `weight` at the end",
             "乘上缩放之前的结果是对的：最后还要乘以 `weight`"),
         model(weight=False)),
        (say("you subtracted the mean (that is LayerNorm); RMSNorm divides by the root mean "
             "square and never centres x",
             "你减去了均值（那是 LayerNorm）；均方根归一化（RMSNorm）只除以均方根，从不把 x 中心化"),
         model(centre=True)),
        (say("eps goes inside the square root: x / sqrt(mean(x²) + eps)",
             "eps 要放在平方根里面：x / sqrt(mean(x²) + eps)"), model(eps_inside=False)),
        (say("you summed the squares; take their mean over the last axis",
             "你把平方加起来了；应当在最后一个轴上取它们的平均"), model(mean=False)),
        (say("use the `eps` you are given, not a fixed 1e-5",
             "用传进来的 `eps`，而不是固定的 1e-5"), model(fixed_eps=1e-5)),
        (say("use the `eps` you are given, not a fixed 1e-6",
             "用传进来的 `eps`，而不是固定的 1e-6"), model(fixed_eps=1e-6)),
        (say("use the `eps` you are given; leaving it out divides by zero on an all-zero vector",
             "用传进来的 `eps`；不加它，遇到全零向量就会除以零"),
         model(fixed_eps=0.0)),
        (say("take the mean over the last axis only (dim=-1, keepdim=True), the features of one "
             "vector",
             "只在最后一个轴上取平均（dim=-1, keepdim=True），也就是一个向量自己的各个特征"),
         model(axis=0)),
    ]


@checker
def check_rms_norm(fn, *, hidden=False) -> None:
    """`fn(x, weight, eps)` must equal x / sqrt(mean(x², last axis) + eps) * weight."""
    cases = HIDDEN_RMS_CASES if hidden else RMS_CASES
    inputs, answers = [], []
    for i, (shape, eps, scale) in enumerate(cases):
        x, weight = _rms_inputs(200 + i if hidden else i, shape, scale)
        what = _rms_call(shape, eps)
        answers.append(_tensor(call(fn, x, weight, eps, what=what), what, shape))
        inputs.append((x, weight, eps))
    wants = [rms_norm(x, w, eps) for x, w, eps in inputs]
    end_check("rms_norm", answers, wants, cases, _rms_failure, _close,
              lambda: _rms_mistakes(inputs))


def _rms_call(shape, eps) -> str:
    return say(f"rms_norm(x of shape {shape}, weight, eps={eps})",
               f"rms_norm(形状为 {shape} 的 x, weight, eps={eps})")


def _rms_failure(case, got, want, hint) -> str:
    shape, eps, _ = case
    return _differs(_rms_call(shape, eps), got, want,
                    hint or say("compute x / sqrt(mean of x² over the last axis + eps), then "
                                "multiply by weight",
                                "先算 x / sqrt(x² 在最后一个轴上的平均 + eps)，再乘以 weight"))


# ---- 2: RoPE ----

ROPE_CASES = [((1, 2, 5, 8), 10000.0, "from 0"), ((2, 3, 4, 16), 100000.0, "rows apart"),
              ((1, 1, 3, 4), 10.0, "from 0"), ((2, 2, 6, 8), 500.0, "late"),
              ((1, 4, 1, 32), 10000.0, "one late token"), ((3, 1, 5, 6), 1000.0, "scattered")]
HIDDEN_ROPE_CASES = [((2, 2, 3, 12), 10000.0, "rows far apart"), ((1, 3, 7, 8), 50000.0, "later"),
                     ((1, 1, 2, 2), 10.0, "from 0"), ((2, 1, 4, 20), 2000.0, "scattered"),
                     ((3, 2, 1, 16), 10000.0, "one later token"), ((1, 2, 6, 10), 300.0, "from 0")]


def _positions(b, s, kind):
    if kind == "from 0":
        return torch.arange(s).expand(b, s).clone()
    if kind == "rows apart":
        return torch.arange(s).expand(b, s) + 3 * torch.arange(b)[:, None]
    if kind == "rows far apart":
        return torch.arange(s).expand(b, s) + 11 * torch.arange(b)[:, None]
    if kind == "late":
        return torch.arange(s).expand(b, s) + 100
    if kind == "later":
        return torch.arange(s).expand(b, s) + 251
    if kind == "one late token":
        return torch.full((b, s), 517)
    if kind == "one later token":
        return torch.full((b, s), 1023)
    return torch.randint(0, 2000, (b, s), generator=torch.Generator().manual_seed(b * 100 + s))


def _rope_variant(x, positions, theta, *, interleaved=False, sign=1, ignore_positions=False,
                  shift=0, exponent_step=2):
    b, h, s, d = x.shape
    if ignore_positions:
        positions = torch.arange(s).expand(b, s)
    inv = 1.0 / theta ** (torch.arange(0, d // 2).float() * exponent_step / d)
    angles = (positions + shift).float()[..., None] * inv
    cos, sin = angles.cos()[:, None], sign * angles.sin()[:, None]
    if interleaved:
        a, c = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - c * sin, a * sin + c * cos], dim=-1).flatten(-2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _rope_mistakes(inputs):
    def model(**kind):
        return [_rope_variant(x, p, t, **kind) for x, p, t in inputs]

    return [
        (say("you rotated neighbouring pairs (0, 1), (2, 3), ...; this course (like Hugging "
             "Face) pairs dimension i with i + d/2: x1 = x[..., :d/2], x2 = x[..., d/2:]",
             "你旋转的是相邻的维度对 (0, 1)、(2, 3)……；本课程（和 Hugging Face 一样）把第 i 维"
             "和第 i + d/2 维配成一对：x1 = x[..., :d/2]，x2 = x[..., d/2:]"),
         model(interleaved=True)),
        (say("you rotated the wrong way round; check the signs: (x1·cos − x2·sin, "
             "x2·cos + x1·sin)",
             "你转反了方向；检查一下正负号：(x1·cos − x2·sin, x2·cos + x1·sin)"),
         model(sign=-1)),
        (say("the angles must come from `position_ids`, not from 0, 1, 2, ...: a token's "
             "position is not its index in this call (a decode step, a second row)",
             "角度必须由 `position_ids` 算出，而不是 0, 1, 2, ……：词元的位置并不等于它在这次"
             "调用里的下标（比如一个解码步，或者第二行）"),
         model(ignore_positions=True)),
        (say("the positions are off by one: position p turns pair i by p · theta^(-2i/d), and "
             "position 0 by nothing",
             "位置差了一：位置 p 把第 i 对旋转 p · theta^(-2i/d)，位置 0 则完全不转"),
         model(shift=1)),
        (say("the angle of pair i is position · theta^(-2i/d): the exponent steps by 2/d, "
             "torch.arange(0, d, 2) / d",
             "第 i 对的角度是 position · theta^(-2i/d)：指数每次增加 2/d，即 "
             "torch.arange(0, d, 2) / d"), model(exponent_step=1)),
    ]


@checker
def check_rope(fn, *, hidden=False) -> None:
    """`fn(x, position_ids, theta)` must rotate pair (i, i + d/2) of each head's dimensions by
    the angle position x theta^(-2i/d), as minillm's `apply_rope` does."""
    cases = HIDDEN_ROPE_CASES if hidden else ROPE_CASES
    inputs, answers = [], []
    for i, (shape, theta, kind) in enumerate(cases):
        b, h, s, d = shape
        x, positions = _rand(*shape, seed=(220 if hidden else 20) + i), _positions(b, s, kind)
        what = _rope_call(x, positions, theta)
        answers.append(_tensor(call(fn, x, positions, theta, what=what), what, shape))
        inputs.append((x, positions, theta))
    wants = [apply_rope(x, *rope_cos_sin(p, x.shape[-1], t)) for x, p, t in inputs]
    end_check("rope", answers, wants, inputs, _rope_failure, _close,
              lambda: _rope_mistakes(inputs))


def _rope_call(x, positions, theta) -> str:
    return say(f"rope(x of shape {tuple(x.shape)}, position_ids {positions.tolist()}, "
               f"theta={theta})",
               f"rope(形状为 {tuple(x.shape)} 的 x, position_ids {positions.tolist()}, "
               f"theta={theta})")


def _rope_failure(case, got, want, hint) -> str:
    x, positions, theta = case
    if hint is None and not torch.allclose(got.norm(dim=-1), x.norm(dim=-1), atol=1e-4):
        hint = say("a rotation keeps each head vector's length, but yours changed it: each pair "
                   "(x1[i], x2[i]) must become (x1·cos − x2·sin, x2·cos + x1·sin) with the same "
                   "angle in both",
                   "旋转不会改变每个头向量的长度，你的结果却改变了它：每一对 (x1[i], x2[i]) 都必须"
                   "变成 (x1·cos − x2·sin, x2·cos + x1·sin)，两处用同一个角度")
    return _differs(_rope_call(x, positions, theta), got, want,
                    hint or say("the angle of pair i is position / theta^(2i/d)",
                                "第 i 对的角度是 position / theta^(2i/d)"))


# ---- 3: causal attention with grouped-query heads ----

ATTENTION_CASES = [(1, 2, 2, 5, 8), (2, 6, 2, 7, 16), (1, 4, 1, 3, 4), (1, 3, 3, 1, 8),
                   (2, 8, 4, 9, 6)]
HIDDEN_ATTENTION_CASES = [(2, 4, 2, 6, 8), (1, 6, 3, 4, 12), (1, 2, 1, 8, 4), (2, 4, 4, 1, 6),
                          (1, 9, 3, 5, 10)]


def _attention_variant(q, k, v, *, causal=True, interleave=True, scale="sqrt", axis=-1,
                       diagonal=True, future=False):
    group = q.shape[1] // k.shape[1]
    if interleave:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    else:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / {"sqrt": math.sqrt(d), "none": 1.0, "d": d}[scale]
    s = scores.shape[-1]
    if causal:
        hidden = torch.ones(s, s, dtype=torch.bool).triu(1 if diagonal else 0)
        if future:
            hidden = torch.ones(s, s, dtype=torch.bool).tril(-1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, axis)) @ v


def _own_key_hint() -> str:
    return say("a query may look at its own key: mask only the keys after it, triu(diagonal=1); "
               "masking the diagonal too leaves query 0 no key at all (a row of -inf, whose "
               "softmax is NaN)",
               "查询可以看它自己的键：只遮住它之后的键，即 triu(diagonal=1)；连对角线也遮住的话，"
               "查询 0 一个键也看不到（整行都是 -inf，softmax 得到 NaN）")


def _masks_own_key(raw, inputs) -> bool:
    """Whether every answer is the attention that also hides each query's own key: equal to it
    from query 1 on, whatever query 0 holds (NaN after a row of -inf, or the mean of the values
    after a large negative number)."""
    for got, (q, k, v) in zip(raw, inputs):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(q.shape):
            return False
        if q.shape[2] == 1:
            continue  # one query, no later ones to compare
        want = _attention_variant(q, k, v, diagonal=False)
        later = got.detach().float()[..., 1:, :]
        if not (bool(torch.isfinite(later).all()) and _close(later, want[..., 1:, :])):
            return False
    return any(q.shape[2] > 1 for q, _, _ in inputs)


def _attention_mistakes(inputs):
    def model(**kind):
        return [_attention_variant(q, k, v, **kind) for q, k, v in inputs]

    return [
        (say("every query sees every key; mask the future: query i may only look at keys 0..i "
             "(set the others to -inf before the softmax)",
             "每个查询都看到了所有的键；要用因果掩码（causal mask）遮住未来：查询 i 只能看键 "
             "0..i（在 softmax 之前把其余的设为 -inf）"), model(causal=False)),
        (say("query head j must use key/value head j // group (heads 0..group-1 share kv head "
             "0); use repeat_interleave, not repeat",
             "第 j 个查询头必须用第 j // group 个键/值头（第 0..group-1 个头共用第 0 个键/值头）；"
             "用 repeat_interleave，而不是 repeat"), model(interleave=False)),
        (say("divide the scores q kᵀ by √head_dim before the softmax; you did not scale them",
             "在 softmax 之前要把得分 q kᵀ 除以 √head_dim；你没有做这个缩放"),
         model(scale="none")),
        (say("divide the scores by √head_dim, the square root, not by head_dim",
             "得分要除以 √head_dim，即它的平方根，而不是 head_dim 本身"), model(scale="d")),
        (say("take the softmax over the keys, the last axis (dim=-1): each query's weights must "
             "add up to 1",
             "softmax 要沿着键所在的最后一个轴（dim=-1）做：每个查询的权重之和必须为 1"),
         model(axis=-2)),
        (say("the mask is the wrong way round: query i may see keys 0..i (the past), not the "
             "keys after it",
             "掩码的方向反了：查询 i 能看到的是键 0..i（过去），而不是它之后的键"),
         model(future=True)),
    ]


@checker
def check_causal_attention(fn, *, hidden=False) -> None:
    """`fn(q, k, v)` with q (b, heads, s, d) and k, v (b, kv_heads, s, d) must give
    softmax(q kᵀ/√d + causal mask) v, each query head using key/value head head // group."""
    cases = HIDDEN_ATTENTION_CASES if hidden else ATTENTION_CASES
    first_seed = 230 if hidden else 30
    inputs, raw, shown = [], [], []
    for i, (b, h, kv, s, d) in enumerate(cases):
        q, k, v = (_rand(b, n, s, d, seed=first_seed + 3 * i + j)
                   for j, n in enumerate((h, kv, kv)))
        shown.append(_attention_call(q, k))
        raw.append(call(fn, q, k, v, what=shown[-1]))
        inputs.append((q, k, v))
    if _masks_own_key(raw, inputs):  # before _tensor, which would stop at query 0's NaN
        i = next(i for i, (q, _, _) in enumerate(inputs) if q.shape[2] > 1)
        got, want = raw[i].detach().float(), attention_explicit(*inputs[i])
        if bool(torch.isfinite(got).all()):
            raise CheckFailed(_differs(shown[i], got, want, _own_key_hint()))
        raise CheckFailed(say(f"{shown[i]} returned NaN for query 0 and differs from the "
                              "reference at the later queries: ",
                              f"{shown[i]} 在查询 0 上返回了 NaN，之后的查询也与参考实现不同：")
                          + _own_key_hint())
    answers = [_tensor(got, what, q.shape) for got, what, (q, _, _) in zip(raw, shown, inputs)]
    wants = [attention_explicit(q, k, v) for q, k, v in inputs]
    end_check("causal_attention", answers, wants, inputs, _attention_failure, _close,
              lambda: _attention_mistakes(inputs))


def _attention_call(q, k) -> str:
    return f"causal_attention(q {tuple(q.shape)}, k/v {tuple(k.shape)})"


def _attention_failure(case, got, want, hint) -> str:
    q, k, _ = case
    return _differs(_attention_call(q, k), got, want,
                    hint or say("repeat each key/value head for its group of query heads, "
                                "scores = q kᵀ / √d, -inf above the diagonal, softmax over the "
                                "keys, then weights @ v",
                                "把每个键/值头复制给它那一组查询头，得分 = q kᵀ / √d，"
                                "对角线以上设为 -inf，沿键的方向做 softmax，再算 权重 @ v"))


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


BLOCK_CASES = [  # (config, batch, seq, position kind, scale of x)
    (ModelConfig("llama", 50, 16, 1, 4, 2, 4, 24, rope_theta=10000.0), 2, 6, "from 0", 1.0),
    (ModelConfig("llama", 50, 24, 1, 3, 3, 8, 20, rope_theta=100.0, norm_eps=1e-6), 2, 6,
     "rows apart", 1.0),
    (ModelConfig("llama", 50, 16, 1, 4, 1, 4, 32, rope_theta=1000.0, norm_eps=0.5), 1, 5,
     "late", 0.3),
    (ModelConfig("llama", 50, 32, 1, 8, 2, 4, 40, rope_theta=500.0, norm_eps=1e-2), 2, 4,
     "scattered", 0.05),
]
HIDDEN_BLOCK_CASES = [
    (ModelConfig("llama", 50, 24, 1, 6, 2, 4, 28, rope_theta=5000.0), 1, 7, "later", 1.0),
    (ModelConfig("llama", 50, 12, 1, 2, 1, 6, 16, rope_theta=10000.0, norm_eps=1e-6), 3, 5,
     "rows far apart", 1.0),
    (ModelConfig("llama", 50, 20, 1, 5, 5, 4, 36, rope_theta=300.0, norm_eps=0.2), 2, 3,
     "scattered", 0.5),
    (ModelConfig("llama", 50, 16, 1, 4, 2, 4, 24, rope_theta=2000.0, norm_eps=1e-2), 1, 8,
     "from 0", 0.04),
]


def _block_variant(x, block, config, positions, *, mlp=True, residual=True,
                   ignore_positions=False, eps=None, rope_on_v=False, mlp_on_x=False,
                   silu_on_up=False):
    b, s, _ = x.shape
    eps = config.norm_eps if eps is None else eps
    if ignore_positions:
        positions = torch.arange(s).expand(b, s)
    cos, sin = rope_cos_sin(positions, config.head_dim, config.rope_theta)
    attn, ffn = block.attn, block.mlp

    def heads(t, n):
        return t.view(b, s, n, config.head_dim).transpose(1, 2)

    h = rms_norm(x, block.attn_norm.weight, eps)
    q = apply_rope(heads(attn.q_proj(h), config.n_heads), cos, sin)
    k = apply_rope(heads(attn.k_proj(h), config.n_kv_heads), cos, sin)
    v = heads(attn.v_proj(h), config.n_kv_heads)
    if rope_on_v:
        v = apply_rope(v, cos, sin)
    delta = attn.o_proj(attention_explicit(q, k, v).transpose(1, 2).reshape(b, s, -1))
    x2 = x + delta if residual else delta
    if not mlp:
        return x2
    h = x2 if mlp_on_x else rms_norm(x2, block.mlp_norm.weight, eps)
    gate, up = ffn.gate_proj(h), ffn.up_proj(h)
    if silu_on_up:
        gate, up = up, gate
    out = ffn.down_proj(F.silu(gate) * up)
    return x2 + out if residual else out


def _block_mistakes(inputs):
    def model(**kind):
        with torch.no_grad():
            return [_block_variant(*args, **kind) for args in inputs]

    return [
        (say("you stopped after attention; add the feed-forward part: "
             "h + down(silu(gate(rms_norm(h))) * up(rms_norm(h)))",
             "你在注意力之后就停下了；还要加上前馈网络（feed-forward network）部分："
             "h + down(silu(gate(rms_norm(h))) * up(rms_norm(h)))"), model(mlp=False)),
        (say("each part adds its result to its input, the residual connection: "
             "x = x + attn(...), then x = x + mlp(...)",
             "每个部分都要把结果加到它的输入上，也就是残差连接："
             "x = x + attn(...)，然后 x = x + mlp(...)"), model(residual=False)),
        (say("RoPE must use the `position_ids` you are given, not 0, 1, 2, ...: the tokens of a "
             "decode step or of a second row do not start at position 0",
             "RoPE 必须用传进来的 `position_ids`，而不是 0, 1, 2, ……：一个解码步或者第二行的"
             "词元并不从位置 0 开始"),
         model(ignore_positions=True)),
        (say("use `config.norm_eps` in both norms, not a fixed 1e-5",
             "两个归一化都要用 `config.norm_eps`，而不是固定的 1e-5"), model(eps=1e-5)),
        (say("use `config.norm_eps` in both norms, not a fixed 1e-6",
             "两个归一化都要用 `config.norm_eps`，而不是固定的 1e-6"), model(eps=1e-6)),
        (say("RoPE turns q and k only; v is used as it comes out of v_proj",
             "RoPE 只旋转 q 和 k；v 从 v_proj 出来后直接使用"), model(rope_on_v=True)),
        (say("the feed-forward part reads rms_norm(x) with block.mlp_norm's weight, not x itself",
             "前馈部分读的是用 block.mlp_norm 的权重算出的 rms_norm(x)，而不是 x 本身"),
         model(mlp_on_x=True)),
        (say("SiLU goes on the gate: down(silu(gate(h)) * up(h)), not on up",
             "SiLU 作用在门控上：down(silu(gate(h)) * up(h))，而不是作用在 up 上"),
         model(silu_on_up=True)),
    ]


@checker
def check_transformer_block(fn, *, hidden=False) -> None:
    """`fn(x, block, config, position_ids)` must compute a Llama block with the weights of
    `block`: x + attention(rms_norm(x)), then + SwiGLU(rms_norm(...))."""
    cases = HIDDEN_BLOCK_CASES if hidden else BLOCK_CASES
    first_seed = 100 if hidden else 0
    inputs, answers = [], []
    for i, (config, b, s, kind, scale) in enumerate(cases):
        block = random_block(config, seed=first_seed + i)
        x = _rand(b, s, config.hidden_size, seed=first_seed + 40 + i) * scale
        positions = _positions(b, s, kind)
        what = _block_call(x, config, positions)
        with torch.no_grad():
            answers.append(_tensor(call(fn, x, block, config, positions, what=what), what,
                                   x.shape))
        inputs.append((x, block, config, positions))
    with torch.no_grad():
        wants = [block(x, *rope_cos_sin(p, c.head_dim, c.rope_theta)) for x, block, c, p in inputs]
    end_check("transformer_block", answers, wants, inputs, _block_failure, _close,
              lambda: _block_mistakes(inputs))


def _block_call(x, config, positions) -> str:
    return say(f"transformer_block(x {tuple(x.shape)}, block with {config.n_heads} heads / "
               f"{config.n_kv_heads} kv heads, norm_eps={config.norm_eps}, position_ids "
               f"{positions.tolist()})",
               f"transformer_block(x {tuple(x.shape)}, 有 {config.n_heads} 个头 / "
               f"{config.n_kv_heads} 个键值头的块, norm_eps={config.norm_eps}, position_ids "
               f"{positions.tolist()})")


def _block_failure(case, got, want, hint) -> str:
    x, _, config, positions = case
    what = _block_call(x, config, positions)
    return (say(f"{what} differs from minillm's block by up to {_largest_difference(got, want)}: ",
                f"{what} 与 minillm 的块最多相差 {_largest_difference(got, want)}：")
            + (hint or say("norm before each part (with config.norm_eps), RoPE on q and k at "
                           "position_ids, o_proj after attention, SiLU on the gate, and each "
                           "part adds its result to its input",
                           "每个部分之前先归一化（用 config.norm_eps），按 position_ids "
                           "对 q 和 k 做 RoPE，注意力之后接 o_proj，SiLU 作用在门控上，"
                           "每个部分都把结果加到它的输入上")))


@checker
def check_whole_model(fn, model, token_ids, *, hidden=False) -> None:
    """Run the real model with `fn` in place of every one of its blocks, at positions 0, 1, 2, ...
    and at other positions (37, 39, 41, ...: as if tokens were left out); the logits must match
    minillm's own forward pass at the same positions. With hidden=True: the tokens in reverse
    order, at 0, 1, 2, ... and at 23, 26, 29, ...: as many passes, as cheap."""
    from ...fast import is_optimized

    expect(not is_optimized(model),
           say("this is the fast path's model (its attention has one fused qkv_proj, not q_proj, "
               "k_proj and v_proj): load the readable one, minillm.load(..., fast=False)",
               "这是快速路径的模型（它的注意力只有一个融合的 qkv_proj，没有 q_proj、k_proj 和 "
               "v_proj）：请加载可读版的模型，minillm.load(..., fast=False)"))
    config = model.config
    ids = torch.as_tensor(token_ids).reshape(1, -1)
    if hidden:
        ids = ids.flip(1)
    s = ids.shape[1]
    diffs = []
    for start, step in ((0, 1), (23, 3)) if hidden else ((0, 1), (37, 2)):
        positions = torch.arange(start, start + step * s, step)[None]
        shown = ", ".join(str(p) for p in positions[0, :3].tolist()) + ", ..."
        with torch.inference_mode():
            x = model.embed(ids)
            for n, layer in enumerate(model.layers):
                what = say(f"transformer_block in layer {n} of the real model (positions "
                           f"{shown})",
                           f"真实模型第 {n} 层里的 transformer_block（位置 {shown}）")
                x = call(fn, x, layer, config, positions, what=what)
                _tensor(x, what, (1, s, config.hidden_size))
            got = model.logits(x)  # the final norm and the LM head
            want = model(ids, position_ids=positions)
        diff = (got - want).abs().max().item()
        where = "" if start == 0 else say(f" at positions {shown}", f"（位置 {shown}）")
        expect(diff < 1e-3, say(f"with your transformer_block in all {config.n_layers} layers "
                                f"the logits{where} differ from minillm's by up to {diff:.3g} "
                                "(allowed: 1e-3)" + (": RoPE must use position_ids" if start
                                                     else ""),
                                f"全部 {config.n_layers} 层都用你的 transformer_block 时，"
                                f"logits{where or ' '}与 minillm 的最多相差 {diff:.3g}（允许 1e-3）"
                                + ("：RoPE 必须用 position_ids" if start else "")))
        expect(torch.equal(got.argmax(-1), want.argmax(-1)),
               say(f"the top-1 next token{where} differs from minillm's at some position",
                   f"概率最高的下一个词元{where}在某些位置上与 minillm 的不同"))
        diffs.append(diff)
    print(say(f"max logit difference over {s} positions, twice: {max(diffs):.2g}",
              f"{s} 个位置上 logits 的最大差异（两轮）：{max(diffs):.2g}"))
    passed(say("whole model with your block", "用你的块跑整个模型"), 2)
