"""`minillm serve --weights fp32|bf16|int8|q4_1`: the option reaches the engine and is named where
clients look (/v1/models, /metrics); bad values are refused before the server listens; an int8
and a Q4_1 engine give the tokens the same quantized model gives alone, their batched passes
multiply through the format's multi-row kernel, and the passes that do not are named once."""

import subprocess
import sys

import httpx
import pytest
import torch

import minillm
from minillm.model.toy import tiny_model
from minillm.engine import Engine
from minillm.engine import engine as engine_module
from minillm.engine.weights import batched_fallback, kernel_rows
from minillm.fast import optimize
from minillm.generation.agreement import NEAR_TIE, agree, first_difference
from minillm.generation.kv_cache import KVCache
from minillm.kernels import build, dispatch
from minillm.quant.linear import Int8Linear, Q41Linear, QuantizedLinear
from minillm.tools.cli import build_parser
from minillm.tools.server import ServerProcess, ServerThread, make_engine
from kernel_machine import layers_use_kernels
from q4_1_model import with_q4_1

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["abc", "hello", "xyzzy q", "the cat sat"]  # 3 to 11 letters: passes of few rows


def test_the_option_parses_with_fp32_as_default():
    parser = build_parser()
    assert parser.parse_args(["serve"]).weights == "fp32"
    for fmt in ("fp32", "bf16", "int8", "q4_1"):
        assert parser.parse_args(["serve", "--weights", fmt]).weights == fmt


def test_an_unknown_format_is_refused_naming_the_allowed_ones(capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["serve", "--weights", "int4"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--weights" in err and "'int4'" in err
    assert all(f"'{fmt}'" in err for fmt in ("fp32", "bf16", "int8", "q4_1"))
    with pytest.raises(ValueError, match="weights must be one of fp32, bf16, int8, q4_1"):
        make_engine(tiny=True, weights="fp16")


@pytest.mark.parametrize("args, words", [
    (["--tiny", "--weights", "q4_1"], ["'q4_1'", "GGUF", "fp32, bf16, int8"]),
    (["--weights", "q4_1", "--device", "meta"], ["q4_1", "device='cpu'"]),
])
def test_a_format_load_refuses_stops_the_server_before_it_listens(args, words):
    """The command exits 2 with the reason on stderr, and never prints its startup line."""
    done = subprocess.run([sys.executable, "-m", "minillm", "serve", "--port", "0", *args],
                          capture_output=True, text=True, timeout=300,
                          env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert all(word in done.stderr for word in words), done.stderr
    assert "http://" not in done.stderr


@pytest.mark.parametrize("fmt, layer", [("fp32", None), ("bf16", None), ("int8", Int8Linear)])
def test_the_option_reaches_the_engine(fmt, layer):
    engine = make_engine(tiny=True, weights=fmt)
    assert engine.weights == fmt
    if layer is not None:
        assert isinstance(engine.model.layers[0].attn.qkv_proj, layer)


def test_models_and_metrics_name_the_weights_served():
    with ServerThread(make_engine(tiny=True, weights="int8"), "tiny") as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        card = client.get("/v1/models").json()["data"][0]
        assert card["id"] == "tiny" and card["weights"] == "int8"
        metrics = client.get("/metrics").text
        assert 'minillm_model_info{model_name="tiny",weights="int8"} 1.0' in metrics


def test_the_startup_line_names_the_weights(tmp_path):
    log = tmp_path / "serve.log"
    with open(log, "w") as sink, ServerProcess(["--tiny", "--weights", "int8", "--threads", "1"],
                                               log=sink) as server:
        assert httpx.get(server.url + "/v1/models").json()["data"][0]["weights"] == "int8"
    assert f"minillm serve: tiny (int8 weights) on {server.url}" in log.read_text()


# --- the engine on quantized weights ----------------------------------------------------------

def quantized(fmt):
    model, tok = tiny_model()
    return optimize(with_q4_1(model) if fmt == "q4_1" else model, fmt), tok


def engine_for(model, tok, budget=12, max_num_seqs=4):
    # a budget of 12 tokens keeps every pass at most 15 rows (a group pads by at most a quarter):
    # each prompt's rows take the kernel path, as they do when the prompt runs alone
    return Engine(model, tok, num_blocks=64, block_size=4, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=budget)


@pytest.mark.parametrize("fmt", ["int8", "q4_1"])
def test_a_quantized_engine_gives_the_tokens_of_the_model_alone(fmt):
    model, tok = quantized(fmt)
    outs = engine_for(model, tok).generate(PROMPTS, max_new_tokens=10, ignore_eos=True)
    for prompt, out in zip(PROMPTS, outs):
        alone = minillm.generate(model, tok, prompt, max_new_tokens=10, ignore_eos=True)
        assert len(out.token_ids) == 10
        ids = tok.encode(prompt)
        rule = q4_1_rule(model, ids, out.token_ids, alone.token_ids) if fmt == "q4_1" else {}
        assert agree(model, ids, out.token_ids, alone.token_ids, **rule), (prompt, rule)


def decode_step_logits(model, ids):
    """The logits after `ids` as a decode step computes them: a prefill of all but the last
    token, then that token alone (a one-row pass)."""
    cache = KVCache.for_model(model, 1, len(ids))
    with torch.inference_mode():
        model(torch.tensor([ids[:-1]]), cache=cache)
        return model(torch.tensor([ids[-1:]]), cache=cache)[0, -1]


def q4_1_rule(model, prompt, a, b):
    """Q4_1 rounds x to int8 per block, a step function: the last bits in which the engine's
    passes (rows of several requests, paged attention) and a request's own decode steps differ
    move some rounded values by a step, and the logits by far more than rounding. Which
    positions that reaches depends on the kernel path (it reaches none on AMX, one token of the
    prompts here on AVX-512 with VNNI). The first, confident tokens must agree; from where they
    part, the near tie is twice the difference of a decode step's logits and a whole pass's."""
    parted = first_difference(a, b)
    if parted is None:
        return {}
    assert parted >= 4, (a, b)
    ids = list(prompt) + list(b[:parted])
    with torch.inference_mode():
        whole = model(torch.tensor([ids]))[0, -1]
    apart = (decode_step_logits(model, ids) - whole).abs().max().item()
    return {"near_tie": max(NEAR_TIE, 2 * apart), "exact": False}


def record_passes(monkeypatch):
    """Every multiply of a quantized layer: ("kernel", its kernel, rows) through few_rows, or
    ("float", class, rows) where the float weight is rebuilt (both of Q4_1's PyTorch paths)."""
    calls = []
    few_rows = dispatch.RoutedLinear.few_rows

    def counted(self, x):
        calls.append(("kernel", self.route.kernel, x.shape[0]))
        return few_rows(self, x)

    def rebuilt(original):
        def run(self, x):
            calls.append(("float", type(self).__name__, x.numel() // self.in_features))
            return original(self, x)
        return run

    monkeypatch.setattr(dispatch.RoutedLinear, "few_rows", counted)
    monkeypatch.setattr(QuantizedLinear, "forward_dequantize",
                        rebuilt(QuantizedLinear.forward_dequantize))
    monkeypatch.setattr(Q41Linear, "forward_rounded", rebuilt(Q41Linear.forward_rounded))
    return calls


@layers_use_kernels
@pytest.mark.parametrize("fmt, kernel", [("int8", "gemm_int8"), ("q4_1", "gemm_q4_1")])
def test_batched_steps_multiply_through_the_formats_multi_row_kernel(fmt, kernel, monkeypatch):
    model, tok = quantized(fmt)
    calls = record_passes(monkeypatch)
    engine_for(model, tok).generate(PROMPTS, max_new_tokens=6, ignore_eos=True)
    assert not [c for c in calls if c[0] == "float"]  # no float weight rebuilt
    rows = {c[2] for c in calls if c[1] == kernel}
    assert 4 in rows  # decode steps of the four requests at once
    assert max(rows) > 4  # prompt chunks of several tokens
    assert {c[1] for c in calls} == {kernel, "gemm_int8"}  # Q4_1's LM head is int8


@layers_use_kernels
@pytest.mark.parametrize("fmt", ["int8", "q4_1"])
def test_a_pass_past_the_kernels_rows_rebuilds_the_float_weight_and_is_named_once(
        fmt, monkeypatch):
    """int8: past QUANT_MAX_ROWS, decode steps and prompt chunks alike. q4_1: a prompt chunk's
    rows go through gemm_q4_1 (Q4_1_MAX_ROWS; the int8 LM head takes its last row alone), and
    only decode steps of more requests than the int8 LM head's kernel takes rebuild a weight."""
    # int8 as if gemm_int8 took only a decode step's rows (it takes every pass: the test below)
    monkeypatch.setattr(dispatch, "INT8_PROMPT_MAX_ROWS", dispatch.QUANT_MAX_ROWS)
    model, tok = quantized(fmt)
    limit = dispatch.QUANT_MAX_ROWS
    assert kernel_rows(model)[1] == limit
    chunk_limit = limit if fmt == "int8" else dispatch.Q4_1_MAX_ROWS[build.status().level]
    said = []
    monkeypatch.setattr(engine_module, "say_once", said.append)
    engine = engine_for(model, tok, budget=64, max_num_seqs=limit + 1)
    sentence = batched_fallback(model, limit + 1, 64)
    assert said == [sentence]
    assert f"'{fmt}'" in sentence and f"up to {limit} rows" in sentence
    assert (f"prompt chunks of more than {limit} tokens" in sentence) == (chunk_limit < 64)
    assert f"decode steps of more than {limit} requests" in sentence
    calls = record_passes(monkeypatch)
    engine.generate(["a" * (limit + 8)], max_new_tokens=2, ignore_eos=True)
    if chunk_limit < limit + 8:
        assert ("float", "Int8Linear" if fmt == "int8" else "Q41Linear", limit + 8) in calls
    else:
        assert ("kernel", "gemm_q4_1", limit + 8) in calls
        assert not [c for c in calls if c[0] == "float"]
    assert batched_fallback(model, limit, limit) is None  # no pass can be longer: nothing to say


@layers_use_kernels
def test_every_int8_pass_goes_through_gemm_int8_and_nothing_is_said(
        monkeypatch):
    model, tok = quantized("int8")
    assert kernel_rows(model) == (["gemm_int8"], dispatch.INT8_PROMPT_MAX_ROWS)
    assert batched_fallback(model, 64, 512) is None
    calls = record_passes(monkeypatch)
    engine_for(model, tok, budget=64).generate(["a" * 40], max_new_tokens=2, ignore_eos=True)
    assert not [c for c in calls if c[0] == "float"]
    assert max(c[2] for c in calls) > dispatch.QUANT_MAX_ROWS  # the prompt in one pass


def test_fp32_passes_never_rebuild_a_weight_so_nothing_is_said():
    model, _ = tiny_model()
    assert batched_fallback(optimize(model), 64, 512) is None
    assert batched_fallback(model, 64, 512) is None  # the readable model: no routed layer


@layers_use_kernels
def test_bf16_passes_past_one_row_are_named(monkeypatch):
    """Where gemm_bf16 takes every pass (AVX-512) nothing is said; where it takes one row (the
    AVX2 limit), the passes past it are named."""
    model, _ = tiny_model()
    limit = dispatch.BF16_MAX_ROWS[build.status().level]
    assert (batched_fallback(optimize(model, "bf16"), 4, 512) is None) == (limit >= 512)
    monkeypatch.setitem(dispatch.BF16_MAX_ROWS, build.status().level, 1)
    sentence = batched_fallback(optimize(model, "bf16"), 4, 512)
    assert "gemv_bf16" in sentence and "bf16 matmul" in sentence
    assert f"{dispatch.UPCAST_ROWS} rows or more" in sentence
