"""The chapter 02 checkers: a right answer passes, each common mistake gets its own plain message,
and no other mistake gets that message."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from minillm.course.checks import ch02_forward_pass as checks
from minillm.course.checks._base import CheckFailed

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


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


def attention(q, k, v):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def block(x, blk, config, pos, eps=None, positions_from_zero=False):
    b, s, _ = x.shape
    a, m = blk.attn, blk.mlp
    eps = config.norm_eps if eps is None else eps
    if positions_from_zero:
        pos = torch.arange(s).expand(b, s)

    def heads(t, n):
        return t.view(b, s, n, config.head_dim).transpose(1, 2)

    h = rms_norm(x, blk.attn_norm.weight, eps)
    q = rope(heads(h @ a.q_proj.weight.T, config.n_heads), pos, config.rope_theta)
    k = rope(heads(h @ a.k_proj.weight.T, config.n_kv_heads), pos, config.rope_theta)
    v = heads(h @ a.v_proj.weight.T, config.n_kv_heads)
    x = x + attention(q, k, v).transpose(1, 2).reshape(b, s, -1) @ a.o_proj.weight.T
    h = rms_norm(x, blk.mlp_norm.weight, eps)
    return x + (F.silu(h @ m.gate_proj.weight.T) * (h @ m.up_proj.weight.T)) @ m.down_proj.weight.T


def test_right_answers_pass(capsys):
    checks.check_rms_norm(rms_norm)
    checks.check_rope(rope)
    checks.check_causal_attention(attention)
    checks.check_transformer_block(block)
    assert capsys.readouterr().out.count("✅") == 4


def rms_variant(**kind):
    return lambda x, w, e: checks._rms_variant(x, w, e, **kind)


RMS_MISTAKES = {
        "no weight": (rms_variant(weight=False), "multiply by `weight`"),
        "layer norm": (lambda x, w, e: F.layer_norm(x, x.shape[-1:], w, None, e),
                       "subtracted the mean"),
        "eps outside": (rms_variant(eps_inside=False), "inside the square root"),
        "sum": (rms_variant(mean=False), "you summed the squares"),
        "eps 1e-5": (lambda x, w, e: rms_norm(x, w, 1e-5), "not a fixed 1e-5"),
        "eps 1e-6": (lambda x, w, e: rms_norm(x, w, 1e-6), "not a fixed 1e-6"),
        "no eps": (lambda x, w, e: rms_norm(x, w, 0.0), "leaving it out divides by zero"),
        "wrong axis": (rms_variant(axis=0), "last axis only"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_rms_norm_hints_are_specific(hidden):
    check = functools.partial(checks.check_rms_norm, hidden=hidden)
    assert_hints_are_specific(check, RMS_MISTAKES)


def test_rms_norm_in_place_is_named():
    def in_place(x, weight, eps):
        x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
        return x * weight

    with pytest.raises(CheckFailed, match="changed its argument `x`"):
        checks.check_rms_norm(in_place)


def test_rms_norm_wrong_shape_is_named():
    with pytest.raises(CheckFailed, match="shape"):
        checks.check_rms_norm(lambda x, w, e: x[..., :1])


def rope_variant(**kind):
    return lambda x, p, t: checks._rope_variant(x, p, t, **kind)


ROPE_MISTAKES = {
        "interleaved": (lambda x, p, t: rope(x, p, t, interleaved=True), "neighbouring pairs"),
        "sign": (lambda x, p, t: rope(x, p, t, sign=-1), "wrong way round"),
        "positions ignored": (lambda x, p, t: rope(x, torch.arange(x.shape[2]).expand(
            x.shape[0], -1), t), "must come from `position_ids`"),
        "off by one": (lambda x, p, t: rope(x, p + 1, t), "off by one"),
        "exponent": (rope_variant(exponent_step=1), "steps by 2/d"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_rope_hints_are_specific(hidden):
    check = functools.partial(checks.check_rope, hidden=hidden)
    assert_hints_are_specific(check, ROPE_MISTAKES)


@pytest.mark.parametrize("hidden", [False, True])
def test_rope_that_stretches_vectors_is_named(hidden):
    with pytest.raises(CheckFailed, match="keeps each head vector's length"):
        checks.check_rope(lambda x, p, t: 1.5 * rope(x, p, t), hidden=hidden)


def attention_variant(**kind):
    return lambda q, k, v: checks._attention_variant(q, k, v, **kind)


ATTENTION_MISTAKES = {
        "no mask": (attention_variant(causal=False), "every query sees every key"),
        "repeat": (attention_variant(interleave=False), "repeat_interleave, not repeat"),
        "no scale": (attention_variant(scale="none"), "you did not scale them"),
        "divide by d": (attention_variant(scale="d"), "the square root, not by head_dim"),
        "softmax axis": (attention_variant(axis=-2), "the last axis (dim=-1)"),
        "no diagonal": (attention_variant(diagonal=False), "look at its own key"),
        "future": (attention_variant(future=True), "the wrong way round"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_attention_hints_are_specific(hidden):
    check = functools.partial(checks.check_causal_attention, hidden=hidden)
    assert_hints_are_specific(check, ATTENTION_MISTAKES)


@pytest.mark.parametrize("hidden", [False, True])
def test_dividing_by_d_is_not_blamed_on_the_softmax_axis(hidden):
    with pytest.raises(CheckFailed) as failure:
        checks.check_causal_attention(attention_variant(scale="d"), hidden=hidden)
    assert "softmax over" not in str(failure.value) and "axis" not in str(failure.value)


def masks_own_key(fill):
    """A learner's attention whose mask hides the diagonal too: triu(diagonal=0)."""
    def attention_(q, k, v):
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(0), fill)
        return torch.softmax(s, -1) @ v

    return attention_


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("fill", [float("-inf"), -1e9])
def test_masking_the_diagonal_gets_the_triu_hint(hidden, fill):
    """With -inf query 0's row is NaN (no key left), with -1e9 the mean of every value: the hint
    fires either way, where the NaN check would have spoken first."""
    with pytest.raises(CheckFailed) as failure:
        checks.check_causal_attention(masks_own_key(fill), hidden=hidden)
    message = str(failure.value)
    assert "triu(diagonal=1)" in message and "look at its own key" in message, message
    assert ("returned NaN for query 0" in message) == (fill == float("-inf")), message
    for _, (_, other) in ATTENTION_MISTAKES.items():
        assert other == "look at its own key" or other not in message, message


def test_masking_the_diagonal_gets_the_triu_hint_in_chinese(chinese):
    with pytest.raises(CheckFailed) as failure:
        checks.check_causal_attention(masks_own_key(float("-inf")))
    message = str(failure.value)
    assert "查询可以看它自己的键" in message and "在查询 0 上返回了 NaN" in message, message
    assert "own key" not in message, message


def test_other_nan_answers_still_get_the_nan_message():
    with pytest.raises(CheckFailed, match="returned NaN or inf values"):
        checks.check_causal_attention(lambda q, k, v: attention(q, k, v) * float("nan"))


def block_variant(**kind):
    return lambda x, b, c, p: checks._block_variant(x, b, c, p, **kind)


BLOCK_MISTAKES = {
        "no mlp": (block_variant(mlp=False), "stopped after attention"),
        "no residual": (block_variant(residual=False), "the residual connection"),
        "positions ignored": (lambda *a: block(*a, positions_from_zero=True),
                              "must use the `position_ids`"),
        "eps 1e-5": (lambda *a: block(*a, eps=1e-5), "not a fixed 1e-5"),
        "eps 1e-6": (lambda *a: block(*a, eps=1e-6), "not a fixed 1e-6"),
        "rope on v": (block_variant(rope_on_v=True), "v is used as it comes"),
        "mlp on x": (block_variant(mlp_on_x=True), "not x itself"),
        "silu on up": (block_variant(silu_on_up=True), "SiLU goes on the gate"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_block_hints_are_specific(hidden):
    check = functools.partial(checks.check_transformer_block, hidden=hidden)
    assert_hints_are_specific(check, BLOCK_MISTAKES)


def test_a_crash_inside_the_block_gets_a_plain_message():
    def wrong_view(x, blk, config, pos):
        return x.view(-1, 7)

    with pytest.raises(CheckFailed, match="raised RuntimeError"):
        checks.check_transformer_block(wrong_view)


def test_stub_gets_not_written_yet():
    def rms_norm(x, weight, eps):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_rms_norm(rms_norm)


class TinyModel(torch.nn.Module):
    """A two-layer minillm Llama with random weights, for check_whole_model."""

    def __init__(self):
        super().__init__()
        from minillm.model import LlamaModel, ModelConfig

        torch.manual_seed(0)
        self.inner = LlamaModel(ModelConfig("llama", 64, 16, 2, 4, 2, 4, 32,
                                            rope_theta=1000.0, max_seq_len=128)).eval()
        for p in self.inner.parameters():
            torch.nn.init.normal_(p, 0, 0.3)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def test_whole_model_passes_the_right_block_and_catches_ignored_positions(capsys):
    model = TinyModel()
    checks.check_whole_model(block, model, [3, 14, 15, 9, 26])
    assert "✅" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="at positions 37, 39, 41.*must use position_ids"):
        checks.check_whole_model(lambda *a: block(*a, positions_from_zero=True), model,
                                 [3, 14, 15, 9, 26])


def test_whole_model_asks_for_the_readable_model_when_given_the_fast_path():
    from minillm.fast import optimize

    fast = optimize(TinyModel().inner)
    with pytest.raises(CheckFailed, match=r"fast path's model .*fast=False"):
        checks.check_whole_model(block, fast, [3, 14, 15])


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_rms_norm(rms_norm, hidden=True)
    checks.check_rope(rope, hidden=True)
    checks.check_causal_attention(attention, hidden=True)
    checks.check_transformer_block(block, hidden=True)
    checks.check_whole_model(block, TinyModel(), [3, 14, 15, 9, 26], hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 5 and "whole model with your block: all 2 cases pass" in out


def test_the_hidden_whole_model_catches_ignored_positions_elsewhere():
    with pytest.raises(CheckFailed, match="at positions 23, 26, 29.*must use position_ids"):
        checks.check_whole_model(lambda *a: block(*a, positions_from_zero=True), TinyModel(),
                                 [3, 14, 15, 9, 26], hidden=True)


def test_the_hidden_whole_model_runs_another_prompt():
    """The hidden run feeds the prompt reversed: other residual streams reach the block."""
    model = TinyModel()
    seen = []

    def remembers(x, blk, config, pos):
        seen.append(x[0, 0].clone())
        return block(x, blk, config, pos)

    checks.check_whole_model(remembers, model, [3, 14, 15, 9, 26])
    visible_first = seen[0]
    seen.clear()
    checks.check_whole_model(remembers, model, [3, 14, 15, 9, 26], hidden=True)
    assert not torch.equal(seen[0], visible_first)


RIGHT = [(checks.check_rms_norm, rms_norm), (checks.check_rope, rope),
         (checks.check_causal_attention, attention)]


@pytest.mark.parametrize("check, right", RIGHT, ids=[c.__name__ for c, _ in RIGHT])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def _block_inputs(cases, first_seed):
    return [(tuple(c.__dict__.items()), b, s, kind, scale, first_seed + i)
            for i, (c, b, s, kind, scale) in enumerate(cases)]


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """Other shapes, numbers and seeds; still an epsilon that matters, grouped-query heads and
    one key/value head, a single token, and positions that do not start at 0."""
    for visible, hidden in ((checks.RMS_CASES, checks.HIDDEN_RMS_CASES),
                            (checks.ROPE_CASES, checks.HIDDEN_ROPE_CASES),
                            (checks.ATTENTION_CASES, checks.HIDDEN_ATTENTION_CASES)):
        assert not set(visible) & set(hidden)
    assert not set(_block_inputs(checks.BLOCK_CASES, 0)) & set(
        _block_inputs(checks.HIDDEN_BLOCK_CASES, 100))
    for cases in (checks.RMS_CASES, checks.HIDDEN_RMS_CASES):
        assert any(eps >= 1.0 for _, eps, _ in cases)
        assert any(scale ** 2 < 100 * eps for _, eps, scale in cases if eps < 1)
        assert any(len(shape) == 1 for shape, _, _ in cases)
    for cases in (checks.ROPE_CASES, checks.HIDDEN_ROPE_CASES):
        starts = [checks._positions(b, s, kind) for (b, _, s, _), _, kind in cases]
        assert any(p.min() > 0 for p in starts)
        assert any(b > 1 and not torch.equal(p[0], p[1]) for p, ((b, *_), _, _)
                   in zip(starts, cases))
        assert any(s == 1 for (_, _, s, _), _, _ in cases)
    for cases in (checks.ATTENTION_CASES, checks.HIDDEN_ATTENTION_CASES):
        assert any(kv == 1 for _, _, kv, _, _ in cases)
        assert any(h == kv for _, h, kv, _, _ in cases)
        assert any(1 < kv < h for _, h, kv, _, _ in cases)
        assert any(s == 1 for _, _, _, s, _ in cases)
    for cases in (checks.BLOCK_CASES, checks.HIDDEN_BLOCK_CASES):
        assert any(kind != "from 0" for _, _, _, kind, _ in cases)
        assert any(c.n_kv_heads < c.n_heads for c, *_ in cases)
        assert any(c.norm_eps >= 1e-2 for c, *_ in cases)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_rms_norm, checks.check_rope,
                                   checks.check_causal_attention, checks.check_transformer_block,
                                   lambda fn, **kw: checks.check_whole_model(
                                       fn, TinyModel(), [3, 14, 15], **kw)],
                         ids=["rms_norm", "rope", "causal_attention", "transformer_block",
                              "whole_model"])
def test_an_unwritten_stub_says_so(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


ZH_WORDS = {  # the Chinese words of each hint; the English hint must not show
    "no weight": "最后还要乘以 `weight`", "layer norm": "你减去了均值",
    "eps outside": "eps 要放在平方根里面", "sum": "你把平方加起来了",
    "eps 1e-5": "而不是固定的 1e-5", "eps 1e-6": "而不是固定的 1e-6",
    "no eps": "遇到全零向量就会除以零", "wrong axis": "只在最后一个轴上取平均",
    "interleaved": "你旋转的是相邻的维度对", "sign": "你转反了方向",
    "positions ignored": "必须由 `position_ids` 算出", "off by one": "位置差了一",
    "exponent": "指数每次增加 2/d",
    "no mask": "每个查询都看到了所有的键", "repeat": "而不是 repeat",
    "no scale": "你没有做这个缩放", "divide by d": "即它的平方根",
    "softmax axis": "权重之和必须为 1", "no diagonal": "查询可以看它自己的键",
    "future": "掩码的方向反了",
    "no mlp": "你在注意力之后就停下了", "no residual": "也就是残差连接",
    "block positions ignored": "RoPE 必须用传进来的 `position_ids`",
    "block eps 1e-5": "两个归一化都要用 `config.norm_eps`，而不是固定的 1e-5",
    "block eps 1e-6": "两个归一化都要用 `config.norm_eps`，而不是固定的 1e-6",
    "rope on v": "RoPE 只旋转 q 和 k", "mlp on x": "而不是 x 本身",
    "silu on up": "SiLU 作用在门控上",
}
ZH_CASES = [(check, prefix + name, wrong, words)
            for check, mistakes, prefix in [(checks.check_rms_norm, RMS_MISTAKES, ""),
                                            (checks.check_rope, ROPE_MISTAKES, ""),
                                            (checks.check_causal_attention, ATTENTION_MISTAKES, ""),
                                            (checks.check_transformer_block, BLOCK_MISTAKES,
                                             "block ")]
            for name, (wrong, words) in mistakes.items()]


@pytest.mark.parametrize("check, name, wrong, english", ZH_CASES, ids=[c[1] for c in ZH_CASES])
def test_each_hint_comes_in_chinese(chinese, check, name, wrong, english):
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert ZH_WORDS.get(name, ZH_WORDS.get(name.removeprefix("block "))) in message, message
    assert english not in message, message
    assert "最多相差" in message and "differs" not in message, message


def test_the_checkers_own_messages_come_in_chinese(chinese, capsys):
    with pytest.raises(CheckFailed, match="返回的形状是"):
        checks.check_rms_norm(lambda x, w, e: x[..., :1])
    with pytest.raises(CheckFailed, match="旋转不会改变每个头向量的长度"):
        checks.check_rope(lambda x, p, t: 1.5 * rope(x, p, t))
    model = TinyModel()
    with pytest.raises(CheckFailed, match="（位置 37, 39, 41.*RoPE 必须用 position_ids"):
        checks.check_whole_model(lambda *a: block(*a, positions_from_zero=True), model,
                                 [3, 14, 15, 9, 26])
    from minillm.fast import optimize

    with pytest.raises(CheckFailed, match="这是快速路径的模型"):
        checks.check_whole_model(block, optimize(TinyModel().inner), [3, 14, 15])
    checks.check_whole_model(block, model, [3, 14, 15, 9, 26])
    out = capsys.readouterr().out
    assert "个位置上 logits 的最大差异（两轮）" in out
    assert "✅ 用你的块跑整个模型：全部 2 个用例通过" in out and "your block" not in out
