"""minillm.quant: int8 and int4 formats, the quantized layers, quantize(model, scheme), bad input.

References: exact formulas on small tensors, the `gguf` package's Q4_1 quantizer, and the float
model's own logits on tiny random Llama models. Tolerances: int8 per-channel round trip within
half a step (scale / 2) per weight; Int8Linear's fused kernel within 1e-4 of dequantize-then-matmul
(same products, other order)."""

import numpy as np
import pytest
import torch
import torch.nn as nn

import minillm
from minillm.layers import LMHead
from minillm.model import LlamaModel, ModelConfig
from minillm.quant import (Int4Linear, Int8Linear, absmax_quantize, dequantize_int4,
                           dequantize_int8, evaluate, fused_int8_available, is_quantized,
                           magnitude_prune, quantize, quantize_int4, quantize_int8, roundtrip,
                           set_int8_path, weight_bytes, zeropoint_quantize)
from minillm.quant.int4 import pack_nibbles, unpack_nibbles


def _tiny(tied=True, bias=False, seed=0, hidden=64, inter=96):
    torch.manual_seed(seed)
    config = ModelConfig(arch="llama", vocab_size=80, hidden_size=hidden, n_layers=2, n_heads=4,
                         n_kv_heads=2, head_dim=16, intermediate_size=inter, rope_theta=10000.0,
                         norm_eps=1e-6, max_seq_len=64, tie_embeddings=tied, eos_token_ids=(),
                         attention_bias=bias, mlp_bias=bias)
    model = LlamaModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(mean=1.0 if "norm" in name else 0.0, std=0.1 if "norm" in name else 0.2)
    return model.eval().requires_grad_(False)


# --- the formats ----------------------------------------------------------------------------------

def test_int8_per_channel_formula_and_error_bound():
    torch.manual_seed(1)
    w = torch.randn(7, 33) * torch.logspace(-2, 1, 7)[:, None]  # rows of very different size
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (7,)
    torch.testing.assert_close(scale, w.abs().amax(1) / 127)
    assert q.abs().max() == 127  # every row's largest weight lands on ±127
    err = (dequantize_int8(q, scale) - w).abs()
    assert (err <= scale[:, None] / 2 + 1e-7).all()


def test_int8_zero_row_stays_zero():
    w = torch.zeros(2, 4)
    w[1] = torch.tensor([1.0, -2.0, 0.5, 0.0])
    q, scale = quantize_int8(w)
    assert torch.equal(dequantize_int8(q, scale)[0], torch.zeros(4))


def test_per_channel_beats_per_tensor_and_groups_beat_channels():
    torch.manual_seed(2)
    w = torch.randn(16, 128)
    w[3] *= 50  # an outlier row spoils a per-tensor scale
    w[5, 7] = 40.0  # an outlier weight spoils its channel's scale
    errs = [(roundtrip(w, "absmax", 8, g, 32) - w).pow(2).mean() for g in
            ("tensor", "channel", "group")]
    assert errs[0] > errs[1] > errs[2]


def test_zeropoint_fits_a_shifted_range_better_than_absmax():
    x = torch.linspace(5.0, 6.0, 64)  # all positive: absmax wastes half its codes
    za = (roundtrip(x, "zeropoint", 4, "tensor") - x).abs().max()
    ab = (roundtrip(x, "absmax", 4, "tensor") - x).abs().max()
    assert za < ab
    q, scale, lo = zeropoint_quantize(x, 4, "tensor")
    assert q.min() == 0 and q.max() == 15 and lo.item() == 5.0


def test_nibble_packing_round_trip_and_q4_1_layout():
    q = torch.arange(32).remainder(16).reshape(1, 32)
    packed = pack_nibbles(q, 32)
    assert packed.shape == (1, 16)
    assert packed[0, 0].item() == (0 | (0 << 4))  # weight 0 low, weight 16 high
    assert packed[0, 1].item() == (1 | (1 << 4))
    assert torch.equal(unpack_nibbles(packed, 32), q.to(torch.uint8))


def test_int4_equals_gguf_q4_1_exactly():
    gguf = pytest.importorskip("gguf")
    torch.manual_seed(3)
    w = torch.randn(6, 128)
    w[0, :32] = 0.25  # a constant group: d = 0
    ours = dequantize_int4(*quantize_int4(w, 32)).numpy()
    Q = gguf.GGMLQuantizationType.Q4_1
    theirs = gguf.quants.dequantize(gguf.quants.quantize(w.numpy(), Q), Q)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_int4_storage_is_five_bits_a_weight():
    layer = Int4Linear.from_linear(nn.Linear(64, 8, bias=False), 32)
    assert layer.weight_bytes() * 8 / (64 * 8) == 5.0


# --- the layers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [False, True])
def test_int8_linear_paths_agree(bias):
    torch.manual_seed(4)
    lin = nn.Linear(48, 24, bias=bias)
    layer = Int8Linear.from_linear(lin, path="dequantize")
    x = torch.randn(2, 3, 48)
    w = dequantize_int8(layer.qweight, layer.scale)
    want = torch.nn.functional.linear(x, w, lin.bias)
    torch.testing.assert_close(layer(x), want)
    if fused_int8_available():
        layer.path = "fused"
        torch.testing.assert_close(layer(x), want, atol=1e-4, rtol=1e-4)
    assert (layer(x) - lin(x)).abs().max() < 0.05


def test_int8_linear_path_checks():
    layer = Int8Linear.from_linear(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="path must be one of"):
        layer.path = "fast"
    with pytest.raises(TypeError, match="nn.Linear"):
        Int8Linear.from_linear(nn.Conv1d(2, 2, 1))
    if fused_int8_available():
        layer.path = "fused"
        with pytest.raises(ValueError, match="float32 or bfloat16"):
            layer(torch.randn(1, 8, dtype=torch.float16))


# --- quantize(model, scheme) ----------------------------------------------------------------------

@pytest.mark.parametrize("scheme, tol", [("fp32", 0.0), ("bf16", 0.1), ("fp16", 0.01),
                                         ("int8", 0.1), ("int4", 0.6)])
def test_quantize_keeps_the_model_close(scheme, tol):
    """Largest logit error relative to the largest logit (random weights: int4's 16 levels per
    group are coarse on a 64-wide Gaussian layer)."""
    model = _tiny()
    ids = torch.tensor([[1, 5, 9, 2, 33, 7]])
    small = quantize(model, scheme)
    assert small.quant_scheme == scheme
    want = model(ids)
    err = (small(ids) - want).abs().max().item() / want.abs().max().item()
    assert err <= tol, err
    assert not is_quantized(model)  # the original is left as it was
    assert all(type(m) is nn.Linear for n, m in model.named_modules() if n.endswith("proj"))


def test_fewer_bits_more_error():
    model = _tiny()
    ids = torch.tensor([[1, 5, 9, 2, 33, 7, 8, 40]])
    want = model(ids)
    err = {s: (quantize(model, s)(ids) - want).abs().mean().item() for s in ("fp16", "int8", "int4")}
    assert err["fp16"] < err["int8"] < err["int4"]


def test_quantize_replaces_the_linear_layers_and_shrinks_the_weights():
    model = _tiny(tied=False, bias=True)
    int8, int4 = quantize(model, "int8"), quantize(model, "int4")
    assert sum(isinstance(m, Int8Linear) for m in int8.modules()) == 2 * 7
    assert sum(isinstance(m, Int4Linear) for m in int4.modules()) == 2 * 7
    assert isinstance(int8.lm_head, LMHead)  # not quantized by quantize(): optimize(m, "int8") is
    full = weight_bytes(model, linear_only=True)
    assert weight_bytes(int8, linear_only=True) < 0.3 * full
    assert weight_bytes(int4, linear_only=True) < 0.2 * full
    assert weight_bytes(quantize(model, "bf16")) == weight_bytes(model) // 2


def test_weight_bytes_counts_tied_weights_once():
    model = _tiny(tied=True)
    assert weight_bytes(model) == sum(p.numel() * 4 for p in model.parameters())


def test_quantized_model_generates():
    model = _tiny()

    class Tok:
        eos_token_ids = ()

        def encode(self, text):
            return [ord(c) % 80 for c in text]

        def decode(self, ids):
            return "".join(chr(65 + i % 26) for i in ids)

    ref = minillm.generate(model, Tok(), [3, 4, 5], max_new_tokens=5, ignore_eos=True)
    for scheme in ("int8", "int4"):
        out = minillm.generate(quantize(model, scheme), Tok(), [3, 4, 5], max_new_tokens=5,
                               ignore_eos=True)
        assert len(out.token_ids) == 5
        assert out.metrics.decode_tokens_per_second > 0
    assert len(ref.token_ids) == 5


def test_set_int8_path_switches_every_layer():
    small = quantize(_tiny(), "int8", int8_path="dequantize")
    ids = torch.tensor([[1, 2, 3]])
    a = small(ids)
    if fused_int8_available():
        set_int8_path(small, "fused")
        assert {m.path for m in small.modules() if isinstance(m, Int8Linear)} == {"fused"}
        torch.testing.assert_close(small(ids), a, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="no Int8Linear"):
        set_int8_path(_tiny(), "fused")


def test_evaluate_perplexity_and_errors():
    model = _tiny()
    ids = torch.randint(0, 80, (50,), generator=torch.Generator().manual_seed(0))
    ref = evaluate(model, ids, window=16, keep_logits=True)
    same = evaluate(model, ids, window=16, reference=ref.logits)
    assert same.perplexity == pytest.approx(ref.perplexity)
    assert same.max_logit_error == 0.0 and same.top1_agreement == 1.0
    assert ref.tokens == 50 - 4  # 4 windows (16, 16, 16, 2), each loses its first token
    logits = model(ids[None])[0]
    nll = torch.nn.functional.cross_entropy(logits[:15], ids[1:16]).item()
    one = evaluate(model, ids[:16], window=16)
    assert one.perplexity == pytest.approx(np.exp(nll), rel=1e-5)
    q = evaluate(quantize(model, "int4"), ids, window=16, reference=ref.logits)
    assert 0 < q.mean_logit_error <= q.max_logit_error and 0 <= q.top1_agreement <= 1


def test_magnitude_prune_zeroes_the_smallest():
    model = _tiny()
    pruned = magnitude_prune(model, 0.5)
    w, p = model.layers[0].mlp.up_proj.weight, pruned.layers[0].mlp.up_proj.weight
    assert (p == 0).float().mean().item() == pytest.approx(0.5, abs=0.02)
    kept = p != 0
    assert torch.equal(p[kept], w[kept])
    for row in range(w.shape[0]):  # in each row, every zeroed weight was no larger than a kept one
        assert w[row].abs()[~kept[row]].max() <= w[row].abs()[kept[row]].min()


# --- bad input ------------------------------------------------------------------------------------

def test_unknown_scheme():
    with pytest.raises(ValueError, match="unknown scheme 'int3'.*fp32, bf16, fp16, int8, int4"):
        quantize(_tiny(), "int3")


def test_group_size_must_divide_the_row():
    with pytest.raises(ValueError, match="group_size 48 does not divide the row length 64"):
        quantize(_tiny(), "int4", group_size=48)
    with pytest.raises(ValueError, match="does not divide"):
        quantize_int4(torch.randn(2, 40), 32)
    with pytest.raises(ValueError, match="even"):
        quantize_int4(torch.randn(2, 9), 3)
    with pytest.raises(ValueError, match="group_size applies to the int4 scheme only"):
        quantize(_tiny(), "int8", group_size=16)
    with pytest.raises(ValueError, match="does not divide"):
        absmax_quantize(torch.randn(2, 10), 8, "group", 4)


def test_quantizing_twice_is_an_error():
    once = quantize(_tiny(), "int8")
    with pytest.raises(ValueError, match="already quantized"):
        quantize(once, "int4")
    with pytest.raises(ValueError, match="already quantized"):
        quantize(quantize(_tiny(), "bf16"), "int8")


def test_not_a_model():
    with pytest.raises(TypeError, match="nn.Module"):
        quantize("smollm2", "int8")
    with pytest.raises(TypeError, match="no nn.Linear"):
        quantize(nn.Sequential(nn.ReLU()), "int8")
    with pytest.raises(TypeError, match="floating-point"):
        quantize_int8(torch.ones(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="2-D"):
        quantize_int8(torch.ones(3))
