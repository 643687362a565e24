"""minillm.fast: the optimized model gives the plain model's logits and greedy tokens.

Tolerances: float32 logits within 1e-4 (absolute, on logits of size ~1-10; the fused matrices
add the same products in a different order); bfloat16 logits within 0.15 of the float32 model's
on the tiny models (bf16 keeps 8 bits of mantissa); int8 within 0.6 (weights and, in a decode
step, activations in 8 bits)."""

import pytest
import torch
import torch.nn.functional as F

import minillm
from minillm.fast import FastLinear, is_optimized, optimize, time_layouts
from minillm.generation.kv_cache import KVCache
from minillm.loading import load_model
from minillm.model import ModelConfig, registry
from kernel_machine import layers_use_kernels


def _tiny(arch="llama", tied=True, bias=False, seed=0, max_seq_len=64, **widths):
    """`widths` overrides hidden_size, n_heads, head_dim, intermediate_size."""
    torch.manual_seed(seed)
    widths = {"hidden_size": 48, "n_heads": 6, "head_dim": 8, "intermediate_size": 40} | widths
    config = ModelConfig(arch=arch, vocab_size=80, n_layers=3, n_kv_heads=2,
                         rope_theta=10000.0, norm_eps=1e-6, max_seq_len=max_seq_len,
                         tie_embeddings=tied, eos_token_ids=(), attention_bias=bias,
                         mlp_bias=bias, **widths)
    model = registry.architecture(arch).model_class(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(mean=1.0 if "norm" in name else 0.0, std=0.3 if "norm" in name else 0.2)
    return model.eval().requires_grad_(False)


class _Tok:
    eos_token_ids = ()

    def encode(self, text):
        return [ord(c) % 80 for c in text]

    def decode(self, ids):
        return "".join(chr(65 + i % 26) for i in ids)


CASES = [("llama", True, False), ("llama", False, False), ("qwen2", True, False),
         ("llama", False, True)]


@pytest.mark.parametrize("arch,tied,bias", CASES)
@pytest.mark.parametrize("layout", ["in_out", "out_in"])
def test_logits_match_the_plain_model_through_prefill_and_decode(arch, tied, bias, layout):
    model = _tiny(arch, tied, bias)
    fast = optimize(model, layout=layout)
    ids = torch.randint(0, 80, (1, 7), generator=torch.Generator().manual_seed(1))
    c1, c2 = KVCache.for_model(model, 1, 20), KVCache.for_model(fast, 1, 20)
    with torch.inference_mode():
        torch.testing.assert_close(fast(ids, cache=c2), model(ids, cache=c1), atol=1e-4, rtol=0)
        for t in [3, 17, 42, 0]:
            step = torch.tensor([[t]])
            torch.testing.assert_close(fast(step, cache=c2), model(step, cache=c1),
                                       atol=1e-4, rtol=0)
        assert c1.length == c2.length == 11
        torch.testing.assert_close(fast(ids), model(ids), atol=1e-4, rtol=0)  # no cache


@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_a_fast_model_can_be_deep_copied_and_the_copy_decodes_the_same(weights):
    """Lessons copy fast models (chapter 07 copies the int8 one to switch its path): nothing the
    fast path keeps may refuse a deep copy (a ctypes function would)."""
    import copy

    fast = optimize(_tiny(), weights)
    twin = copy.deepcopy(fast)
    ids = torch.tensor([[5, 9, 2, 7]])
    outs = []
    for m in (fast, twin):
        c = KVCache.for_model(m, 1, 12)
        with torch.inference_mode():
            m(ids, cache=c)
            outs.append(m(torch.tensor([[3]]), cache=c))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_decode_step_of_a_batch_and_a_padded_batch():
    model, tok = _tiny(), _Tok()
    fast = optimize(model)
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]  # same length: the lean decode path, batch 2
    a = minillm.generate(model, tok, prompts, max_new_tokens=10)
    b = minillm.generate(fast, tok, prompts, max_new_tokens=10)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    ragged = [[5, 6, 7, 8, 9, 10], [11, 12]]  # left padding: the general path with a mask
    a = minillm.generate(model, tok, ragged, max_new_tokens=10)
    b = minillm.generate(fast, tok, ragged, max_new_tokens=10)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_generate_runs_the_fast_model_unchanged_and_gives_the_same_greedy_tokens():
    model, tok = _tiny(), _Tok()
    fast = optimize(model)
    a = minillm.generate(model, tok, [1, 2, 3], max_new_tokens=30)
    b = minillm.generate(fast, tok, [1, 2, 3], max_new_tokens=30)
    assert a.token_ids == b.token_ids and len(b.token_ids) == 30
    assert b.metrics.n_tokens == 30


def test_last_logits_only_gives_the_last_position():
    model = _tiny()
    fast = optimize(model)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        out = fast(ids, logits_to_keep=1)
        assert out.shape == (1, 1, 80)
        torch.testing.assert_close(out[:, -1], model(ids)[:, -1], atol=1e-4, rtol=0)


def test_the_fast_model_is_the_same_class_with_fused_named_layers():
    model = _tiny()
    fast = optimize(model)
    assert type(fast) is type(model) and is_optimized(fast) and not is_optimized(model)
    attn, mlp = fast.layers[0].attn, fast.layers[0].mlp
    assert attn.is_fused and mlp.is_fused and not hasattr(attn, "q_proj")
    assert isinstance(attn.qkv_proj, FastLinear) and isinstance(fast.lm_head, FastLinear)
    c = model.config
    assert attn.qkv_proj.out_features == (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    assert mlp.gate_up_proj.out_features == 2 * c.intermediate_size
    assert fast.weight_format == "fp32" and fast.layout in ("in_out", "out_in")


def test_registered_parameters_move_and_save_with_the_model():
    """Biases included: .to() and state_dict() see every tensor the fast model computes with."""
    model = _tiny("qwen2", tied=False, bias=True)
    fast = optimize(model)
    state = fast.state_dict()
    assert "layers.0.attn.qkv_proj.bias" in state and "lm_head.weight" in state
    wide = fast.to(torch.float64)
    assert all(t.dtype == torch.float64 for t in wide.state_dict().values())
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        torch.testing.assert_close(wide(ids).float(), model(ids), atol=1e-4, rtol=0)


@pytest.mark.parametrize("kernel", [False, "auto"])
def test_bfloat16_stays_close_to_float32(kernel):
    model = _tiny()
    fast = optimize(model, torch.bfloat16, kernel=kernel)
    assert fast.weight_format == "bf16" and fast.lm_head.weight.dtype == torch.bfloat16
    assert fast.dtype == torch.float32  # on a CPU only the stored weights narrow
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    c = KVCache.for_model(fast, 1, 10)
    assert c.keys[0].dtype == torch.float32
    with torch.inference_mode():
        got = fast(ids, cache=c)
        step = fast(torch.tensor([[7]]), cache=c)
        want = model(torch.tensor([[1, 2, 3, 4, 5, 6, 7]]))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want[:, :6], atol=0.15, rtol=0)
    torch.testing.assert_close(step, want[:, 6:], atol=0.15, rtol=0)


def test_int8_weights_stay_close_to_float32():
    model = _tiny()
    fast = optimize(model, "int8")
    assert fast.weight_format == "int8"
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    c = KVCache.for_model(fast, 1, 10)
    with torch.inference_mode():
        got = fast(ids, cache=c)
        step = fast(torch.tensor([[7]]), cache=c)
        want = model(torch.tensor([[1, 2, 3, 4, 5, 6, 7]]))
    torch.testing.assert_close(got, want[:, :6], atol=0.6, rtol=0)
    torch.testing.assert_close(step, want[:, 6:], atol=0.6, rtol=0)


def test_the_original_model_is_left_alone_and_bad_arguments_are_refused():
    model = _tiny()
    before = {n: p.clone() for n, p in model.state_dict().items()}
    fast = optimize(model)
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    assert hasattr(model.layers[0].attn, "q_proj")
    with pytest.raises(TypeError, match="already optimized"):
        optimize(fast)
    with pytest.raises(TypeError, match="minillm model"):
        optimize(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="layout"):
        optimize(model, layout="diagonal")
    with pytest.raises(ValueError, match="weights must be one of fp32, bf16, fp16, int8"):
        optimize(model, "int4")
    with pytest.raises(TypeError, match="weights must be one of"):
        optimize(model, torch.int32)
    with pytest.raises(ValueError, match="kernel must be"):
        optimize(model, kernel="yes")
    with pytest.raises(ValueError, match="out of range"):
        fast(torch.tensor([[99]]))


def test_cache_overflow_is_a_clear_error():
    model = _tiny()
    fast = optimize(model)
    c = KVCache.for_model(fast, 1, 3)
    with torch.inference_mode():
        fast(torch.tensor([[1, 2, 3]]), cache=c)
        with pytest.raises(ValueError, match="full"):
            fast(torch.tensor([[4]]), cache=c)


def test_time_layouts_measures_both():
    times = time_layouts(torch.float32, shape=(16, 32), repeats=2)
    assert set(times) == {"in_out", "out_in"} and all(t > 0 for t in times.values())


def test_smollm2_greedy_tokens_and_logits_match(gguf_path):
    model, tok = minillm.load("smollm2-135m", device="cpu", fast=False)
    fast = optimize(model)
    a = minillm.generate(model, tok, "The capital of France is", max_new_tokens=12)
    b = minillm.generate(fast, tok, "The capital of France is", max_new_tokens=12)
    assert a.token_ids == b.token_ids
    ids = torch.tensor([a.prompt_token_ids + a.token_ids])
    with torch.inference_mode():
        torch.testing.assert_close(fast(ids), model(ids), atol=2e-3, rtol=0)


class _Counting:
    """A fused decode step that counts the steps it ran."""

    def __init__(self, fused):
        self.fused, self.calls = fused, 0

    def applies(self, *args):
        return self.fused.applies(*args)

    def __call__(self, *args):
        self.calls += 1
        return self.fused(*args)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("weights,atol", [("fp32", 1e-4), ("bf16", 2e-2), ("int8", 2e-2)])
def test_the_fused_decode_step_gives_the_module_paths_logits(arch, weights, atol):
    """Two rows, several steps: the fast model's own decode step (fast/decode.py) against the
    same fast model's layers run as modules (LlamaBlock.forward); qwen3 takes its q/k norm hook.
    bf16 and int8 differ only in the order of the products (one matrix multiply with the
    residual added inside, or the layer then the addition)."""
    fast = optimize(_tiny(arch), weights)
    fused = fast.fused_decode = _Counting(fast.fused_decode)
    prompt = torch.randint(0, 80, (2, 5), generator=torch.Generator().manual_seed(3))
    c1, c2 = KVCache.for_model(fast, 2, 20), KVCache.for_model(fast, 2, 20)
    with torch.inference_mode():
        fast(prompt, cache=c1)
        fast(prompt, cache=c2)
        for t in [3, 17, 42, 0]:
            step = torch.tensor([[t], [(t * 7) % 80]])
            assert fused.applies(step, c1, None, None)
            got = fast(step, cache=c1)
            del fast.fused_decode  # the module path
            want = fast(step, cache=c2)
            fast.fused_decode = fused
            torch.testing.assert_close(got, want, atol=atol, rtol=0)
            torch.testing.assert_close(c1.keys[0][:, :, :c1.length], c2.keys[0][:, :, :c2.length],
                                       atol=atol, rtol=0)
    assert fused.calls == 4 and c1.length == c2.length == 9


def test_the_fused_decode_step_leaves_padded_batches_and_bad_ids_to_the_rules():
    fast = optimize(_tiny())
    fused = fast.fused_decode
    cache = KVCache.for_model(fast, 2, 8)
    step = torch.tensor([[1], [2]])
    assert fused.applies(step, cache, None, None)
    assert not fused.applies(step, cache, None, torch.ones(2, 1))  # a padded batch: the modules
    assert not fused.applies(step, cache, torch.tensor([[0], [0]]), None)
    assert not fused.applies(torch.tensor([[1, 2]]), KVCache.for_model(fast, 1, 8), None, None)
    assert not fused.applies(step, KVCache.for_model(fast, 1, 8), None, None)  # rows differ
    with torch.inference_mode(), pytest.raises(ValueError, match="token id 80 is out of range"):
        fast(torch.tensor([[1], [80]]), cache=cache)
    assert cache.length == 0
    full = KVCache.for_model(fast, 2, 2)
    with torch.inference_mode():
        fast(torch.tensor([[1, 2], [3, 4]]), cache=full)
    assert not fused.applies(step, full, None, None)  # a full cache: the module path's error


@layers_use_kernels
def test_bf16_kernel_matches_torch_where_it_can_be_built():
    from minillm import kernels as kernel

    gen = torch.Generator().manual_seed(0)
    for n, k in [(7, 5), (96, 48), (300, 576), (40, 1537)]:  # tails shorter than 16 values too
        w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
        x = torch.randn(k, generator=gen)
        torch.testing.assert_close(kernel.gemv_bf16(x, w), w.float() @ x, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="bfloat16"):
        kernel.gemv_bf16(x, w.float())
    with pytest.raises(ValueError, match="float32"):
        kernel.gemv_bf16(x[:3], w)
    model = _tiny()
    fast = optimize(model, "bf16", kernel=True)
    assert fast.layout == "out_in" and fast.lm_head.kernel
    c = KVCache.for_model(fast, 1, 10)
    with torch.inference_mode():
        fast(torch.tensor([[1, 2, 3]]), cache=c)
        step = fast(torch.tensor([[4]]), cache=c)  # the kernel's decode step
        want = model(torch.tensor([[1, 2, 3, 4]]))[:, -1:]
    torch.testing.assert_close(step, want, atol=0.15, rtol=0)


@layers_use_kernels
@pytest.mark.parametrize("bias", [False, True])
def test_float32_decode_rows_go_through_minillms_kernels_and_match_torch(bias, monkeypatch):
    """A float32 FastLinear multiplies as many rows as dispatch routes to minillm's kernels
    (gemv_f32 for one, gemm_f32 for more; module path and fused decode step alike); more rows,
    or kernel=False, stay with PyTorch; logits agree."""
    from minillm.fast.linear import FastLinear
    from minillm.kernels import dispatch

    model = _tiny(bias=bias)
    fast, plain = optimize(model), optimize(model, kernel=False)
    assert fast.layers[0].attn.qkv_proj.kernel and fast.lm_head.kernel
    assert not plain.layers[0].attn.qkv_proj.kernel
    rows = []
    real = FastLinear.few_rows
    monkeypatch.setattr(FastLinear, "few_rows", lambda self, x: rows.append(x.shape[0])
                        or real(self, x))
    ids = torch.tensor([[5, 9, 2, 7]])
    for m in (fast, plain):
        rows.clear()
        c = KVCache.for_model(m, 2, 12)
        with torch.inference_mode():
            m(ids.repeat(2, 1), cache=c)
            two = m(torch.tensor([[3], [4]]), cache=c)  # two rows: the fused step
            c = KVCache.for_model(m, 1, 12)
            m(ids, cache=c)
            one = m(torch.tensor([[3]]), cache=c)  # one row: the fused step
            full = m.forward(torch.tensor([[5, 9, 2, 7, 3]]), logits_to_keep=1)
        want = model(torch.tensor([[5, 9, 2, 7, 3]]))[:, -1:]
        for got in (two[:1], one, full):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        if m is fast:
            assert {1, 2, 4, 8} <= set(rows)  # decode rows, and the prompts' 4 and 2 x 4
        else:
            assert not rows
    monkeypatch.setitem(dispatch.F32_MAX_ROWS, "AVX-512", 8)  # as with AVX2
    capped = optimize(model)
    rows.clear()
    long = torch.randint(0, 80, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(capped.forward(long), model(long), atol=1e-4, rtol=1e-4)
        capped.forward(long[:, :4])
    assert rows and max(rows) == 8  # 10 rows: PyTorch; 8: the kernel
    layer = fast.layers[1].mlp.down_proj
    x = torch.randn(1, 3, layer.in_features)
    torch.testing.assert_close(layer(x), F.linear(x, layer.matrix().t(), layer.bias),
                               atol=1e-5, rtol=1e-5)
    assert two.shape == (2, 1, 80)


@layers_use_kernels
def test_int8_kernel_matches_the_dequantized_product_where_it_can_be_built():
    from minillm import kernels
    from minillm.quant import Int8Linear

    gen = torch.Generator().manual_seed(0)
    for n, k, rows in [(7, 5, 1), (96, 48, 3), (300, 576, 1), (40, 1537, 5), (64, 64, 16)]:
        q = torch.randint(-127, 128, (n, k), generator=gen).to(torch.int8)
        scale, bias = torch.rand(n, generator=gen), torch.randn(n, generator=gen)
        x = torch.randn(rows, k, generator=gen)
        want = x @ (q.float() * scale[:, None]).t() + bias
        got = kernels.gemm_int8(x, q, scale, bias)
        # the kernel rounds each row of x to int16 (steps of max|x| / 32767, coarser for long rows)
        torch.testing.assert_close(got, want, atol=1e-4 * want.abs().max().item(), rtol=1e-4)
    layer = Int8Linear(q, scale, bias, path="kernel")
    want = layer.forward_dequantize(x[None])
    torch.testing.assert_close(layer(x[None]), want, atol=1e-4 * want.abs().max().item(),
                               rtol=1e-4)
    with pytest.raises(ValueError, match="int8"):
        kernels.gemm_int8(x, q.float(), scale)
    with pytest.raises(ValueError, match="x must be float32"):
        kernels.gemm_int8(x.double(), q, scale)
    many = torch.randn(70, 64, generator=gen)  # more rows than one call of the kernel takes
    q64 = torch.randint(-127, 128, (8, 64), generator=gen).to(torch.int8)
    s64 = torch.rand(8, generator=gen)
    want = many @ (q64.float() * s64[:, None]).t()
    torch.testing.assert_close(kernels.gemm_int8(many, q64, s64), want,
                               atol=1e-4 * want.abs().max().item(), rtol=1e-4)


def test_a_quantized_model_is_refused_with_a_clear_error():
    from minillm.model import ModelConfig, build_model
    from minillm.fast import optimize
    from minillm.quant import quantize

    config = ModelConfig(arch="llama", vocab_size=40, hidden_size=64, n_layers=1, n_heads=2,
                         n_kv_heads=1, head_dim=32, intermediate_size=64, max_seq_len=32)
    with torch.device("meta"):
        shapes = registry.architecture("llama").model_class(config).state_dict()
    model = build_model(config, {n: torch.randn(t.shape) for n, t in shapes.items()})
    with pytest.raises(TypeError, match="Quantize or optimize, not both"):
        optimize(quantize(model, "int8"))


@pytest.mark.parametrize("length", [1, 5, 16, 17, 40])
def test_blockwise_causal_attention_equals_the_masked_whole(length):
    """Blocks of 16 queries here: lengths below, at and past a block edge."""
    from minillm.layers import causal_attention

    gen = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, 8, generator=gen) for _ in range(3))
    whole = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(causal_attention(q, k, v, chunk=16), whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("length", [5, 16, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_key_value_heads_are_read_as_they_are(length, dtype):
    """Fewer key/value heads than query heads (each serving a group of 3): the same bits as the
    heads repeated, block by block."""
    from minillm.layers import causal_attention
    from minillm.layers.attention import repeat_kv

    gen = torch.Generator().manual_seed(length)
    q = torch.randn(1, 6, length, 8, generator=gen).to(dtype)
    k, v = (torch.randn(1, 2, length, 8, generator=gen).to(dtype) for _ in range(2))
    want = causal_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), chunk=16)
    assert torch.equal(causal_attention(q, k, v, chunk=16), want)


@layers_use_kernels
def test_a_fast_prompt_runs_its_activation_through_the_decode_kernel(monkeypatch):
    """Where the kernels run, a fast model's SiLU·mul takes a prompt's rows to the C the decode
    step calls (one pass, the rows split between threads), PyTorch's bits: the logits are those
    of the same model without the kernel, to the bit. MINILLM_NO_KERNEL, read at each call,
    sends the rows to PyTorch; the readable model never has the hook."""
    from minillm.kernels import activation, dispatch

    calls = []
    kernel = activation.silu_mul_unchecked
    monkeypatch.setattr(activation, "silu_mul_unchecked",
                        lambda gate_up: calls.append(gate_up.shape) or kernel(gate_up))
    model = _tiny()
    fast = optimize(model)
    assert {layer.mlp.silu_mul for layer in model.layers} == {None}
    ids = torch.randint(0, 80, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        got = fast(ids)
        assert calls == [(60, 80)] * 3  # 2 x 30 rows of gate and up (40 each), every layer
        with dispatch.without_kernels():
            assert torch.equal(fast(ids), got) and len(calls) == 3
        for layer in fast.layers:
            layer.mlp.silu_mul = None
        assert torch.equal(fast(ids), got) and len(calls) == 3


def test_a_prompt_attends_in_bf16_where_its_projections_multiply_in_bf16():
    """A fast bf16 model on a CPU with bf16 tiles rounds x to bf16 for its projections' products,
    and its whole-prompt attention takes q, k and v rounded to bf16 too, as transformers' bf16
    does; its result comes back in float32, laid out so that the output projection reads it
    without another copy. Elsewhere (float32 weights, no tiles) attention stays float32, and a
    decode step (a mask, or cached keys) ignores the setting."""
    from minillm.kernels import dispatch
    from minillm.layers.attention import attention

    model = _tiny(hidden_size=64)  # 6 query heads, 2 key/value heads; 64 inputs, as the tiles take
    for weights in ("fp32", "bf16"):
        fast = optimize(model, weights)
        want = torch.bfloat16 if weights == "bf16" and dispatch.bf16_arithmetic("cpu") else None
        assert {layer.attn.prompt_dtype for layer in fast.layers} == {want}
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 6, 20, 16, generator=gen)
    k, v = (torch.randn(1, 2, 20, 16, generator=gen) for _ in range(2))
    got = attention(q, k, v, prompt_dtype=torch.bfloat16)
    rounded = attention(q.bfloat16(), k.bfloat16(), v.bfloat16()).float()
    assert got.dtype is torch.float32 and torch.equal(got, rounded)
    assert got.transpose(1, 2).is_contiguous()
    one = q[:, :, -1:]  # a decode step over cached keys: float32 as before
    assert torch.equal(attention(one, k, v, prompt_dtype=torch.bfloat16), attention(one, k, v))
    alone = (t[:, :, :1] for t in (q, k, v))  # a prompt of one token: as its one row, float32
    assert torch.equal(attention(*alone, prompt_dtype=torch.bfloat16),
                       attention(*(t[:, :, :1] for t in (q, k, v))))


def test_the_attention_layer_passes_its_projections_products_dtype_on(monkeypatch):
    """Wherever the machine: a layer whose q/k/v projection says its products take bf16 hands
    that to `attention`, and its prompt's logits move by bf16's rounding, no more."""
    import importlib

    attention_module = importlib.import_module("minillm.layers.attention")  # not the function

    fast = optimize(_tiny())
    ids = torch.randint(0, 80, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        before = fast(ids)
        seen = []
        plain = attention_module.attention
        monkeypatch.setattr(attention_module, "attention",  # the layers' calls: 5 arguments
                            lambda *a, **kw: len(a) == 5 and seen.append(a[4]) or plain(*a, **kw))
        for layer in fast.layers:
            layer.attn.qkv_proj.products_dtype = torch.bfloat16
        after = fast(ids)
    assert seen == [torch.bfloat16] * 3
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, before, atol=0.1, rtol=0)  # logits up to about 5 here


def test_a_prompt_longer_than_one_attention_block_matches_the_plain_model():
    model = _tiny(max_seq_len=160)
    fast = optimize(model)
    ids = torch.randint(0, 80, (2, 150), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        torch.testing.assert_close(fast(ids), model(ids), atol=1e-4, rtol=0)


def test_loading_gives_the_fast_path_by_default_and_the_readable_model_on_request(tmp_path):
    import transformers as tf

    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=40,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, max_position_embeddings=64))
    hf.save_pretrained(tmp_path)
    fast, _ = minillm.load(tmp_path, device="cpu")
    readable, _ = minillm.load(tmp_path, device="cpu", fast=False)
    int8 = load_model(tmp_path, device="cpu", weights="int8")
    assert is_optimized(fast) and not is_optimized(readable) and int8.weight_format == "int8"
    assert hasattr(readable.layers[0].attn, "q_proj")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        torch.testing.assert_close(fast(ids), readable(ids), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="weights= chooses the fast path"):
        load_model(tmp_path, device="cpu", fast=False, weights="int8")
    with pytest.raises(TypeError, match="fast must be True"):
        load_model(tmp_path, device="cpu", fast="yes")


@pytest.mark.parametrize("layout", ["in_out", "out_in"])
def test_a_tied_embedding_stays_tied_in_float32(layout):
    """The fast model holds the tied table once, as the readable one does: its embedding reads
    the head's weight in either layout, its parameter count and bytes are the readable model's,
    and it still is after a move and a copy."""
    import copy

    from minillm.fast.linear import HeadEmbedding
    from minillm.model.memory import bytes_per_token, weight_bytes

    model = _tiny()
    fast = optimize(model, layout=layout, kernel=False)
    assert isinstance(fast.embed, HeadEmbedding)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(fast) == count(model) and weight_bytes(fast) == weight_bytes(model)
    assert bytes_per_token(fast) == bytes_per_token(model) == weight_bytes(model)
    ids = torch.tensor([[3, 7, 79, 0]])
    assert torch.equal(fast.embed(ids), model.embed(ids))
    assert fast.embed.weight.untyped_storage().data_ptr() == \
        fast.lm_head.weight.untyped_storage().data_ptr()
    twin = copy.deepcopy(fast)
    assert twin.embed._head[0] is twin.lm_head
    fast.to(torch.float64)
    assert fast.embed.weight.dtype is torch.float64 and fast.dtype is torch.float64
    torch.testing.assert_close(fast(ids), model.double()(ids))


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_a_narrower_head_is_a_copy_of_the_table_and_counted(weights):
    """bf16 (on a CPU) and int8 heads are the table in another format: the float32 embedding
    stays, and the bytes count both."""
    from minillm.model.memory import weight_bytes

    model = _tiny()
    fast = optimize(model, weights)
    assert isinstance(fast.embed, torch.nn.Embedding)
    table = model.embed.weight
    assert weight_bytes(fast) > table.numel() * table.element_size() + weight_bytes(
        fast, linear_only=True)
