"""minillm.kernels.dispatch, the one place that decides which kernel runs: it alone holds the row
limits and the switch; every layer re-plans after a device or dtype change, so a model converted
or moved after `optimize` keeps its logits (no kernel reads a layout or a dtype it was not built
for, and no CUDA tensor reaches C); a GPU generation never builds the library; and with the
kernels switched off the fast path gives the same greedy tokens."""

import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import minillm
from minillm.fast import FastLinear, optimize
from minillm.generation.kv_cache import KVCache
from minillm.kernels import build, dispatch, matmul
from minillm.kernels.limits import DECODE_BF16, DECODE_F32, DECODE_INT8
from minillm.model import ModelConfig, registry
from minillm.quant.linear import Int8Linear, Q41Linear
from fake_cuda import FakeCuda
from kernel_machine import layers_use_kernels
from q4_1_model import q4_1_blocks as _q4_1_blocks
from q4_1_model import with_q4_1 as _with_q4_1

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PACKAGE = Path(minillm.__file__).parent
PROMPT = [5, 9, 2, 7, 3, 11]


def test_the_row_limits_and_the_switch_live_in_dispatch_alone():
    """No other module of the engine holds a row threshold for a kernel, reads the switch, or
    names the kernels' old per-file tables."""
    pattern = re.compile(r"^\s*[A-Z_]*ROWS\s*=\s*\d|few_rows_max\s*=\s*\d|(rows|numel\(\)|"
                         r"shape\[0\])\s*<=\s*\d|KERNEL_MAX_ROWS|gemm_f32_max_rows|"
                         r"ONE_ROW_KERNELS|_kernel_reads|(environ|getenv)\W[^\n]*NO_KERNEL", re.M)
    allowed = {PACKAGE / "kernels" / "dispatch.py",
               PACKAGE / "kernels" / "limits.py"}  # what one C call takes, not a route
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if path in allowed:
            continue
        hits = [m.group(0) for m in pattern.finditer(path.read_text())]
        if hits:
            found[str(path.relative_to(PACKAGE))] = hits
    assert found == {}
    text = (PACKAGE / "kernels" / "dispatch.py").read_text()
    for name in ("F32_MAX_ROWS", "BF16_MAX_ROWS", "QUANT_MAX_ROWS", "INT8_PROMPT_MAX_ROWS",
                 "Q4_1_MAX_ROWS", "UPCAST_ROWS",
                 "MINILLM_NO_KERNEL"):
        assert name in text



@pytest.mark.parametrize("vendor, mkl, beside_mkl", [("GenuineIntel", True, True),
                                                     ("GenuineIntel", False, False),
                                                     ("AuthenticAMD", True, False),
                                                     ("", True, False)])
def test_float32_prompts_go_to_mkl_on_an_intel_cpu_alone(monkeypatch, vendor, mkl, beside_mkl):
    """On an Intel CPU whose PyTorch multiplies with MKL, a prompt's float32 rows beyond
    F32_MAX_ROWS_BESIDE_MKL go to PyTorch; elsewhere gemm_f32 keeps its level's limit."""
    monkeypatch.setattr(build, "status", lambda: build.Status(True, "AVX-512", "AVX-512", "",
                                                              "avx512"))
    monkeypatch.setattr(build, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    want = dispatch.F32_MAX_ROWS_BESIDE_MKL if beside_mkl else dispatch.F32_MAX_ROWS["AVX-512"]
    assert dispatch.f32_max_rows() == want
    assert dispatch.F32_MAX_ROWS_BESIDE_MKL < dispatch.F32_MAX_ROWS["AVX-512"]


def test_the_cpu_vendor_is_read_from_the_system():
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo here")
    with open("/proc/cpuinfo") as f:
        named = {line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")}
    assert build.cpu_vendor() in named
    assert build.cpu_field("no such field") is None

def _config(bias=False):
    return ModelConfig(arch="llama", vocab_size=96, hidden_size=64, n_layers=2, n_heads=4,
                       n_kv_heads=2, head_dim=16, intermediate_size=96, rope_theta=10000.0,
                       norm_eps=1e-6, max_seq_len=64, tie_embeddings=False, eos_token_ids=(),
                       attention_bias=bias, mlp_bias=bias)


def _tiny(bias=False, seed=0):
    torch.manual_seed(seed)
    model = registry.architecture("llama").model_class(_config(bias))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(mean=1.0 if "norm" in name else 0.0, std=0.3 if "norm" in name else 0.2)
    return model.eval().requires_grad_(False)


def _rounded(model, dtype):
    """A copy of `model` whose matrices (the ones optimize narrows on a CPU: the linear layers'
    and the LM head's weights) went through `dtype` and back."""
    import copy

    twin = copy.deepcopy(model)
    with torch.no_grad():
        for m in twin.modules():
            if isinstance(m, nn.Linear) or m is twin.lm_head:
                m.weight.copy_(m.weight.to(dtype).float())
    return twin


def _fast(fmt, model):
    return optimize(_with_q4_1(model) if fmt == "q4_1" else model, fmt)


def _reference(fmt, model, dtype):
    """A fresh optimize, in `dtype`, of the weights `optimize(model, fmt)` holds."""
    if fmt in ("bf16", "fp16"):
        model = _rounded(model, {"bf16": torch.bfloat16, "fp16": torch.float16}[fmt])
        fmt = None
    elif fmt == "fp32":
        fmt = None
    elif fmt == "q4_1":
        model = _with_q4_1(model)
    return optimize(model.to(dtype), fmt)


def _logits(model):
    """The prompt's last logits and a fused decode step's, float32."""
    cache = KVCache.for_model(model, 1, 16)
    with torch.inference_mode():
        first = model(torch.tensor([PROMPT]), cache=cache)[:, -1]
        step = model(torch.tensor([[4]]), cache=cache)[:, -1]
    return torch.cat([first, step]).float()


FORMATS = ["fp32", "bf16", "fp16", "int8", "q4_1"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float", "half"])
def test_float_and_half_of_every_fast_format_give_a_fresh_optimizes_logits(fmt, dtype):
    """`.float()` / `.half()` re-plan every layer: a bf16 layer made float32 keeps its (out, in)
    layout and so leaves the float32 kernel, which reads (in, out); a layer made float16 takes
    no kernel at all. The logits are those of a fresh `optimize` of the same weights in that
    dtype (to float32 rounding; half: to float16's)."""
    model = _tiny()
    converted = _fast(fmt, model).to(dtype)
    fresh = _reference(fmt, _tiny(), dtype)
    got, want = _logits(converted), _logits(fresh)
    tolerance = 1e-4 if dtype == torch.float32 else 0.05
    torch.testing.assert_close(got, want, atol=tolerance, rtol=0)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    for layer in converted.modules():
        if isinstance(layer, (FastLinear, Int8Linear)) and layer.route.run is not None:
            assert dtype == torch.float32  # half: no kernel takes these weights
            if layer.route.kernel.startswith("gemv_f32"):
                assert layer.layout == "in_out" and layer.weight.dtype == torch.float32


@layers_use_kernels
def test_a_bf16_layer_made_float32_leaves_the_float32_kernel():
    """The case that gave wrong logits: a bf16 FastLinear stores (out, in), the layout its
    kernel reads; made float32, the float32 kernel (which reads (in, out)) must not take it."""
    fast = optimize(_tiny(), "bf16")
    layer = fast.layers[0].mlp.down_proj
    assert layer.route.kernel == "gemv_bf16/gemm_bf16" and layer.layout == "out_in"
    layer.float()
    assert layer.weight.dtype == torch.float32 and layer.route.kernel == ""
    x = torch.randn(1, layer.in_features)
    torch.testing.assert_close(layer(x), x @ layer.matrix() + (0 if layer.bias is None
                                                                else layer.bias))
    layer.to(torch.float16)
    assert layer.route.kernel == "" and layer.few_rows_max == 0


def _counting(monkeypatch, module, *names):
    """Each named function of `module` wrapped to record the rows it is called with."""
    calls = []
    for name in names:
        def counted(x, *args, _fn=getattr(module, name), _name=name, **kwargs):
            calls.append((_name, x.shape[0]))
            return _fn(x, *args, **kwargs)
        monkeypatch.setattr(module, name, counted)
    return calls


def _table_calls(monkeypatch):
    """The rows each call through the format table (matmul.project_rows_unchecked) carries, by
    the kernel the table sends them to (c/project.c: one row to a gemv, more to a gemm)."""
    calls, real = [], matmul.project_rows_unchecked
    names = {DECODE_F32: ("gemv_f32", "gemm_f32"), DECODE_BF16: ("gemv_bf16", "gemm_bf16"),
             DECODE_INT8: ("gemm_int8", "gemm_int8")}

    def counted(kind, x, *args, **kwargs):
        calls.append((names[kind][x.shape[0] > 1], x.shape[0]))
        return real(kind, x, *args, **kwargs)

    monkeypatch.setattr(matmul, "project_rows_unchecked", counted)
    return calls


@layers_use_kernels
@pytest.mark.parametrize("kind, weight_dtype", [("f32", torch.float32), ("bf16", torch.bfloat16)])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_format_table_sends_one_row_to_gemv_and_more_to_gemm(kind, weight_dtype, rows):
    """c/project.c's table, which the layers' routes and the decode step in one C call share:
    its result is the named kernel's, to the bit (bf16's one row with the bias added after)."""
    torch.manual_seed(0)
    x, bias = torch.randn(rows, 72), torch.randn(40)
    if kind == "f32":
        weight = torch.randn(72, 40)
        got = matmul.rows_f32(x, weight, bias)
        want = matmul.gemv_f32(x, weight, bias) if rows == 1 else matmul.gemm_f32(x, weight, bias)
    else:
        weight = torch.randn(40, 72).to(weight_dtype)
        got = matmul.rows_bf16(x, weight, bias)
        want = (matmul.gemv_bf16(x, weight).add_(bias) if rows == 1
                else matmul.gemm_bf16(x, weight, bias))
    assert torch.equal(got, want)


def test_the_format_table_refuses_a_kind_it_does_not_have():
    x = torch.randn(1, 8)
    with pytest.raises(MemoryError):  # -1 from the C, named as the kernel's failure
        matmul.project_rows_unchecked(99, x, torch.randn(8, 4))


@layers_use_kernels
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 64, 512])
def test_a_bf16_layer_sends_every_float32_row_count_to_its_kernels(monkeypatch, rows):
    """Where BF16_MAX_ROWS takes them (AVX-512), a bf16 layer's float32 rows go to gemv_bf16
    (one) or gemm_bf16 (more, a prompt's included), never to PyTorch's bf16 matmul or a widened
    copy of the weight; the numbers are the widened weight's times x in float32."""
    limit = dispatch.BF16_MAX_ROWS[build.status().level]
    if limit < 512:
        pytest.skip(f"gemm_bf16 takes up to {limit} rows with {build.status().level}")
    layer = FastLinear(torch.randn(40, 72), torch.randn(40), dtype=torch.bfloat16, kernel=True)
    assert layer.route.kernel == "gemv_bf16/gemm_bf16" and layer.few_rows_max == limit
    calls = _table_calls(monkeypatch)
    x = torch.randn(rows, 72)
    want = torch.addmm(layer.bias, x, layer.matrix(torch.float32))
    torch.testing.assert_close(layer(x), want, atol=1e-4, rtol=1e-5)
    assert calls == [("gemv_bf16" if rows == 1 else "gemm_bf16", rows)]


@layers_use_kernels
def test_past_bf16_max_rows_a_bf16_layer_widens_its_weight(monkeypatch):
    """Where gemm_bf16 is not measured faster (BF16_MAX_ROWS 1, AVX2's), rows past one take
    PyTorch's paths: its bf16 matmul below UPCAST_ROWS, the widened weight from there."""
    monkeypatch.setitem(dispatch.BF16_MAX_ROWS, build.status().level, 1)
    layer = FastLinear(torch.randn(40, 72), None, dtype=torch.bfloat16, kernel=True)
    assert layer.few_rows_max == 1
    calls = _table_calls(monkeypatch)
    x = torch.randn(dispatch.UPCAST_ROWS, 72)
    torch.testing.assert_close(layer(x), x @ layer.matrix(torch.float32))
    layer(x[:1])
    assert calls == [("gemv_bf16", 1)]


@layers_use_kernels
@pytest.mark.parametrize("rows", [1, 16, 17, 512])
def test_a_q4_1_prompt_goes_through_gemm_q4_1_with_x_rounded_as_in_decoding(monkeypatch, rows):
    """Up to Q4_1_MAX_ROWS (any prompt with AVX-512) a Q41Linear's rows go to gemm_q4_1, whose
    numbers are the one-row kernel's (within float32 rounding from 16 rows: AMX's tiles' order,
    at every level); past a build's limit (AVX2's, patched in here) PyTorch
    takes them, x rounded per block as the kernel rounds it (forward_rounded) while
    q4_1_rounds_x says so: every count AVX-512's kernel takes, so that a prompt's numbers do
    not depend on the build."""
    calls = _counting(monkeypatch, matmul, "gemm_q4_1")  # before the layer plans its route
    q41 = Q41Linear(_q4_1_blocks(torch.randn(40, 96)), torch.randn(40))
    x = torch.randn(rows, 96)
    limit = dispatch.Q4_1_MAX_ROWS[build.status().level]
    got = q41(x)
    assert calls == ([("gemm_q4_1", rows)] if rows <= limit else [])
    alone = q41(x[-1:])[0]
    if rows > limit:  # PyTorch's float multiply of x rounded as the kernel rounds it
        torch.testing.assert_close(got[-1], alone, atol=1e-4, rtol=1e-4)
    elif rows >= 16:  # AMX's tiles' order, on the tiles or not: floats in another order
        torch.testing.assert_close(got[-1], alone, atol=1e-5, rtol=1e-5)
    else:
        assert torch.equal(got[-1], alone)
    torch.testing.assert_close(got, q41.forward_rounded(x), atol=1e-4, rtol=1e-4)
    assert dispatch.q4_1_rounds_x(x, rows)
    rounded = []
    original = Q41Linear.forward_rounded
    monkeypatch.setattr(Q41Linear, "forward_rounded",
                        lambda self, x: rounded.append(1) or original(self, x))
    monkeypatch.setitem(dispatch.Q4_1_MAX_ROWS, build.status().level, 16)
    q41.replan()
    del calls[:]
    q41(x)
    assert (calls, rounded) == (([("gemm_q4_1", rows)], []) if rows <= 16 else
                                ([], [1] if dispatch.q4_1_rounds_x(x, rows) else []))


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "int8", "q4_1"])
def test_an_optimized_cpu_model_moved_to_cuda_generates_there(fmt):
    """optimize on the CPU (kernels planned), then .to("cuda"): every layer re-plans to PyTorch's
    kernels, so no CUDA pointer reaches C (the fake device raises if one does), and greedy
    generation gives the CPU's tokens."""
    from minillm.model.toy import LetterTokenizer

    tok = LetterTokenizer(eos_token_ids=[])
    fast = _fast(fmt, _tiny())
    with torch.inference_mode():
        want = minillm.generate(fast, tok, PROMPT, max_new_tokens=6).token_ids
    want_logits = _logits(fast)
    with FakeCuda():
        moved = fast.to("cuda")
        assert all(layer.route.run is None for layer in moved.modules()
                   if isinstance(layer, dispatch.RoutedLinear))
        with torch.inference_mode():
            got = minillm.generate(moved, tok, PROMPT, max_new_tokens=6).token_ids
        got_logits = _logits(moved).cpu()
    if fmt == "q4_1":  # rounding steps tipped differently: see the switched-off test below
        assert len(got) == len(want)
        assert (got_logits - want_logits).norm() / want_logits.norm() < 0.05
    else:
        assert got == want


def test_a_generation_on_cuda_never_builds_the_library(monkeypatch):
    """Loading, optimizing and generating on the GPU never asks for the C library: nothing
    compiles inside a first timed GPU generation."""
    from minillm.model.toy import LetterTokenizer

    monkeypatch.setattr(build, "library", lambda: pytest.fail("the library was asked for"))
    with FakeCuda():
        model = optimize(_tiny().to("cuda"), "int8")
        with torch.inference_mode():
            minillm.generate(model, LetterTokenizer(eos_token_ids=[]), PROMPT, max_new_tokens=3)
        assert dispatch.decode_step(torch.ones(1, 4, device="cuda"),
                                    torch.ones(1, 1, 4, 4)) == dispatch.NO_DECODE_KERNELS


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "int8", "q4_1"])
def test_with_the_kernels_switched_off_the_fast_path_gives_the_same_tokens(fmt):
    """MINILLM_NO_KERNEL (dispatch.without_kernels sets it): every layer and the decode step
    take PyTorch's kernels, and greedy decoding gives the tokens the kernels give (Q4_1: x
    rounded per block in PyTorch as the kernel rounds it, so a rounding step that a last-bit
    difference tips can move a logit: on this tiny random model (two blocks a row) the tokens
    part and the logits stay within 5%; the course model's tokens are the same (the slow test
    below); bf16: PyTorch's bf16 matmul, which takes the prompt's 6 rows and the decode row
    without the kernels, rounds x and its products to bf16, so its logits differ by that
    rounding)."""
    from minillm.model.toy import LetterTokenizer

    tok = LetterTokenizer(eos_token_ids=[])
    with dispatch.without_kernels():
        plain = _fast(fmt, _tiny())
        assert all(layer.route.run is None for layer in plain.modules()
                   if isinstance(layer, dispatch.RoutedLinear))
        with torch.inference_mode():
            want = minillm.generate(plain, tok, PROMPT, max_new_tokens=12).token_ids
        want_logits = _logits(plain)
    fast = _fast(fmt, _tiny())
    with torch.inference_mode():
        got = minillm.generate(fast, tok, PROMPT, max_new_tokens=12).token_ids
    if fmt == "q4_1":
        assert (_logits(fast) - want_logits).norm() / want_logits.norm() < 0.05
        return
    assert got == want
    if fmt == "bf16":
        assert (_logits(fast) - want_logits).norm() / want_logits.norm() < 0.03
        return
    torch.testing.assert_close(_logits(fast), want_logits, rtol=0, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8", "q4_1"])
def test_the_course_model_decodes_the_same_tokens_without_the_kernels(weights, gguf_path):
    """The same greedy tokens with PyTorch's kernels. For Q4_1 up to a near tie: both round x to
    int8 per block, a step function, so the last bits in which the two paths' other operations
    (attention, norms) differ move some rounded values by a step, and the logits by far more
    than rounding (1-4 apart at each position of the tokens below, measured before and after
    AMX's tiles came in). The first, confident tokens must agree; from where they part, the
    near tie is twice the difference of the two models' logits there."""
    from minillm.generation.agreement import NEAR_TIE, agree, first_difference

    model, tokenizer = minillm.load("smollm2-135m", weights=weights)
    prompt = tokenizer.encode("The capital of France is")
    want = minillm.generate(model, tokenizer, prompt, max_new_tokens=16).token_ids
    with dispatch.without_kernels():
        plain, _ = minillm.load("smollm2-135m", weights=weights)
        got = minillm.generate(plain, tokenizer, prompt, max_new_tokens=16).token_ids
        if weights != "q4_1":
            assert agree(plain, prompt, got, want), (got, want)
            return
        parted = first_difference(got, want)
        if parted is None:
            return
        assert parted >= 4, (got, want)
        shared = torch.tensor([prompt + list(want[:parted])])
        with torch.inference_mode():
            apart = (plain(shared)[0, -1] - model(shared)[0, -1]).abs().max().item()
    rule = {"near_tie": max(NEAR_TIE, 2 * apart), "exact": False}
    assert agree(plain, prompt, got, want, **rule), (got, want, apart)


@layers_use_kernels
def test_q4_1_without_its_kernel_rounds_x_as_the_kernel_does():
    q41 = Q41Linear(_q4_1_blocks(torch.randn(40, 96)), torch.randn(40))
    x = torch.randn(3, 96)
    torch.testing.assert_close(q41.forward_rounded(x), q41(x), atol=1e-4, rtol=1e-4)
    exact = q41.forward_dequantize(x)
    assert 0 < (q41(x) - exact).norm() / exact.norm() < 0.02  # the rounding is there


@layers_use_kernels
def test_each_layer_asks_dispatch_and_shares_one_few_rows_call():
    fast = optimize(_tiny(bias=True))
    int8 = Int8Linear.from_weight(torch.randn(32, 64), torch.randn(32))
    q41 = Q41Linear(_q4_1_blocks(torch.randn(32, 64)), torch.randn(32))
    layers = [fast.layers[0].attn.qkv_proj, int8, q41]
    assert [layer.route.kernel for layer in layers] == ["gemv_f32/gemm_f32", "gemm_int8",
                                                       "gemm_q4_1"]
    assert q41.few_rows_max == dispatch.Q4_1_MAX_ROWS[build.status().level]
    assert int8.few_rows_max == dispatch.int8_max_rows() >= dispatch.QUANT_MAX_ROWS
    assert layers[0].few_rows_max == dispatch.f32_max_rows()
    for layer in layers:
        assert type(layer).few_rows is dispatch.RoutedLinear.few_rows
        x = torch.randn(3, layer.in_features)
        want = x @ (layer.matrix() if hasattr(layer, "matrix")
                    else layer.dequantized_weight().t()) + layer.bias
        got = layer.few_rows(x)
        assert (got - want).norm() / want.norm() < 0.02  # Q4_1: x rounded to int8 per block
    int8.path = "dequantize"
    assert int8.route.kernel == "" and int8.few_rows_max == 0
    int8.half()
    int8.path = "auto"
    assert int8.route.kernel == ""  # a float16 scale: no kernel takes it
