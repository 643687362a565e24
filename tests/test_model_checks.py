"""The chapter 02 checkers: a right answer passes, each common mistake gets its own plain message."""

import math

import pytest
import torch
import torch.nn.functional as F

from minillm.checks import ch02_forward_pass as checks
from minillm.checks._base import CheckFailed


def rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, position_ids, theta, interleaved=False, sign=1):
    d = x.shape[-1]
    angles = position_ids.float()[..., None] / theta ** (torch.arange(0, d, 2).float() / d)
    cos, sin = angles.cos()[:, None], sign * angles.sin()[:, None]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(q, k, v, causal=True, interleave=True, scale=True):
    g = q.shape[1] // k.shape[1]
    if interleave:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    else:
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def block(x, blk, config, pos, with_mlp=True):
    b, s, _ = x.shape
    a, m = blk.attn, blk.mlp

    def heads(t, n):
        return t.view(b, s, n, config.head_dim).transpose(1, 2)

    h = rms_norm(x, blk.attn_norm.weight, config.norm_eps)
    q = rope(heads(h @ a.q_proj.weight.T, config.n_heads), pos, config.rope_theta)
    k = rope(heads(h @ a.k_proj.weight.T, config.n_kv_heads), pos, config.rope_theta)
    v = heads(h @ a.v_proj.weight.T, config.n_kv_heads)
    x = x + attention(q, k, v).transpose(1, 2).reshape(b, s, -1) @ a.o_proj.weight.T
    if not with_mlp:
        return x
    h = rms_norm(x, blk.mlp_norm.weight, config.norm_eps)
    return x + (F.silu(h @ m.gate_proj.weight.T) * (h @ m.up_proj.weight.T)) @ m.down_proj.weight.T


def test_right_answers_pass(capsys):
    checks.check_rms_norm(rms_norm)
    checks.check_rope(rope)
    checks.check_causal_attention(attention)
    checks.check_transformer_block(block)
    assert capsys.readouterr().out.count("✅") == 4


@pytest.mark.parametrize("check,wrong,words", [
    (checks.check_rms_norm, lambda x, w, e: rms_norm(x, torch.ones_like(w), e), "multiply by"),
    (checks.check_rms_norm,
     lambda x, w, e: F.layer_norm(x, x.shape[-1:], w, None, e), "subtracted the mean"),
    (checks.check_rms_norm,
     lambda x, w, e: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + e) * w, "inside the square"),
    (checks.check_rms_norm, lambda x, w, e: x[..., :1], "shape"),
    (checks.check_rope, lambda x, p, t: rope(x, p, t, interleaved=True), "neighbouring pairs"),
    (checks.check_rope, lambda x, p, t: rope(x, p, t, sign=-1), "signs"),
    (checks.check_rope, lambda x, p, t: rope(x, p + 1, t), "position 0"),
    (checks.check_causal_attention, lambda q, k, v: attention(q, k, v, causal=False),
     "every query sees every key"),
    (checks.check_causal_attention, lambda q, k, v: attention(q, k, v, interleave=False),
     "repeat_interleave"),
    (checks.check_causal_attention, lambda q, k, v: attention(q, k, v, scale=False), "√head_dim"),
    (checks.check_transformer_block, lambda *a: block(*a, with_mlp=False), "stopped after"),
    (checks.check_transformer_block, lambda x, *a: block(x, *a) - x, "adds its result"),
])
def test_mistakes_get_their_message(check, wrong, words):
    with pytest.raises(CheckFailed, match=words):
        check(wrong)


def test_stub_gets_not_written_yet():
    def rms_norm(x, weight, eps):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_rms_norm(rms_norm)
