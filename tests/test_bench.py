"""The benchmark's pieces on tiny models: each engine times exactly the tokens it was asked for
(the prompt is not a token), the bandwidth bound is bytes over bandwidth, the table shows ratios."""

import os
import signal
import sys

import pytest
import torch

from minillm.measure.bandwidth import decode_bound, read_bandwidth
from minillm.tools.bench.options import build_parser
from minillm.tools.bench.run import minillm_engine, table, transformers_engine
from minillm.fast import optimize
from minillm.model.memory import bytes_per_token, weight_bytes
from tests.test_fast import _Tok, _tiny


def test_minillm_engine_times_every_token_and_ignores_eos():
    model = optimize(_tiny())
    model.config = model.config.__class__(**{**model.config.__dict__, "eos_token_ids": (0,)})
    engine = minillm_engine(model, _Tok(), "fp32")
    m = engine.decode([1, 2, 3], 9)
    assert m.n_tokens == 9 and m.prompt_tokens == 3 and m.tpot > 0
    assert engine.bytes_per_token == bytes_per_token(model)


def test_bytes_per_token_reads_one_embedding_row_unless_the_head_is_the_table():
    readable = _tiny(tied=True)
    table_bytes = readable.embed.weight.numel() * 4
    assert bytes_per_token(readable) == weight_bytes(readable)  # the tied head reads it all
    fast = optimize(readable)  # float32: the table stays the head's, read whole
    assert bytes_per_token(fast) == weight_bytes(fast) == weight_bytes(readable)
    bf16 = optimize(readable, "bf16")  # the head is a bf16 copy: the float32 table gives one row
    assert bytes_per_token(bf16) == weight_bytes(bf16) - table_bytes + 48 * 4
    int8 = optimize(readable, "int8")
    assert bytes_per_token(int8) < 0.45 * bytes_per_token(fast)


def test_transformers_engine_leaves_the_prompt_out_of_the_token_times():
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, eos_token_id=3)
    model = tf.LlamaForCausalLM(config).eval()
    m = transformers_engine(model, "fp32").decode([5, 6, 7, 8], 6)
    assert m.n_tokens == 6 and m.prompt_tokens == 4  # min_new_tokens: EOS cannot end it early


def test_bandwidth_bound():
    assert decode_bound(500, 1000.0) == 2.0
    with pytest.raises(ValueError):
        decode_bound(0, 1.0)
    with pytest.raises(ValueError):
        read_bandwidth(megabytes=0)
    assert read_bandwidth(megabytes=4, repeats=2) > 1e8  # any machine reads 100 MB/s
    tied = torch.nn.Linear(4, 4, bias=False)
    two = torch.nn.Sequential(tied, tied)  # the same weight twice is counted once
    assert weight_bytes(two) == 16 * 4


def test_table_shows_the_ratios_and_the_spread():
    from minillm.tools.bench.run import _ratios

    def row(engine, dtype, decode, prefill, low, high):
        return {"engine": engine, "dtype": dtype, "threads": 1, "ttft_ms": 90.0, "tpot_ms": 50.0,
                "decode_tok_s": decode, "decode_spread": [low, high], "prefill_tok_s": prefill,
                "prefill_spread": [prefill, prefill], "bound_tok_s": 37.0,
                "of_bound": decode / 37.0}

    rows = [row("transformers", "fp32", 14.0, 500.0, 13, 15),
            row("minillm", "fp32", 20.0, 520.0, 18, 21),
            row("minillm", "int8", 40.0, 400.0, 39, 44), row("llama.cpp", "Q4_1", 50.0, 300.0, 49, 52)]
    _ratios(rows)
    assert rows[2]["decode_x_minillm_fp32"] == 2.0 and rows[2]["decode_x_llama_cpp"] == 0.8
    assert rows[2]["decode_x_transformers"] == 40 / 14  # int8 against transformers' fp32
    assert "decode_x_minillm_fp32" not in rows[1]  # not against itself
    report = {"machine": {"device": "cpu", "cpu_count": 2, "load_average_1min": 1.0},
              "settings": {"new_tokens": 64, "short_prompt_tokens": 11,
                           "prefill_prompt_tokens": 512, "repeats": {1: 3}},
              "bandwidth_gb_s": {1: 20.0}, "seconds": 100.0, "results": rows,
              "notes": ["llama.cpp note"]}
    text = table(report)
    assert "1.43x" in text and "1.04x" in text and "minillm fp32" in text and "54%" in text
    assert "40.0 (39-44)" in text and "2.00x" in text and "0.80x" in text
    assert text.endswith("llama.cpp note")
    assert "transformers: " not in text
    report["machine"]["pytorch_cpu"] = "PyTorch's CPU capability AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2"
    assert "\ntransformers: PyTorch's CPU capability AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2\n" \
        in table(report)


def test_options_scale_down_under_ci(monkeypatch):
    import argparse

    monkeypatch.setenv("CI", "1")
    args = build_parser(argparse.ArgumentParser()).parse_args([])
    assert (args.tokens, args.prompt_tokens, args.repeats) == (8, 64, 1)
    monkeypatch.delenv("CI")
    args = build_parser(argparse.ArgumentParser()).parse_args([])
    assert (args.tokens, args.prompt_tokens, args.repeats) == (32, 512, 3)


def test_bad_settings_are_refused():
    from minillm.tools.bench.run import run

    with pytest.raises(ValueError, match="weight format"):
        run(formats=("fp8",))
    with pytest.raises(ValueError, match="tokens"):
        run(tokens=1)
    with pytest.raises(ValueError, match="threads must be a list of ints >= 1"):
        run(threads=[0])


def test_the_threads_option_reads_a_list_and_refuses_what_is_not_one(capsys):
    import argparse

    from minillm.tools.bench.options import build_parser

    parser = build_parser(argparse.ArgumentParser(prog="bench"))
    assert parser.parse_args(["--threads", "1,2"]).threads == [1, 2]
    assert parser.parse_args(["--threads", "2"]).threads == [2]
    for bad in ("0", "one", "1,x", ","):
        with pytest.raises(SystemExit):
            parser.parse_args(["--threads", bad])
        assert "positive integers separated by commas" in capsys.readouterr().err


def test_the_level_option_takes_the_kernel_levels_and_the_report_names_the_level(capsys):
    import argparse

    from minillm.kernels import build
    from minillm.tools.bench.options import KERNEL_LEVELS
    from minillm.fast import huge_pages
    from minillm.tools.bench.run import _machine

    assert KERNEL_LEVELS == (*build.LEVELS, build.NATIVE)
    parser = build_parser(argparse.ArgumentParser(prog="bench"))
    assert parser.parse_args(["--level", "avx2"]).level == "avx2"
    assert parser.parse_args([]).level is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--level", "avx9"])
    assert "invalid choice: 'avx9'" in capsys.readouterr().err
    machine = _machine(torch.device("cpu"))
    assert machine["kernel_levels_here"] == build.levels_here()
    assert machine["weight_pages"] in ("asked for 2 MB pages (madvise)",
                                       *(f"4 KB pages ({why})" for why in (
                                           "MINILLM_HUGE_PAGES=0", huge_pages.why_not())))
    if build.cannot_build() is None and not os.environ.get("MINILLM_NO_KERNEL"):
        assert machine["kernels"] == f"built, {build.status().label}"
    assert machine["pytorch_cpu"].startswith(
        f"PyTorch's CPU capability {torch.backends.cpu.get_cpu_capability()}, ")


def test_the_report_says_at_which_level_transformers_multiplied(monkeypatch):
    """A forced level compares at one level only if PyTorch's kernels and MKL's were lowered
    too: the report says which they ran at."""
    from minillm.tools.bench.run import pytorch_cpu_level

    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    assert pytorch_cpu_level().endswith(", MKL at the CPU's own level")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert pytorch_cpu_level().endswith(", MKL_ENABLE_INSTRUCTIONS=AVX2")


@pytest.mark.slow
def test_on_a_gpu_q4_1_is_left_out_with_a_note_and_the_rest_runs(gguf_path):
    """`bench latency --device cuda` on the fake GPU: q4_1 (CPU blocks only) gets a note, not
    a crash; the other formats are timed there."""
    from fake_cuda import FakeCuda
    from minillm.tools.bench.run import run

    with FakeCuda():
        report = run(formats=("fp32", "q4_1"), tokens=2, prompt_tokens=8, repeats=1,
                     device="cuda", with_transformers=False, with_llama_cpp=False,
                     progress=lambda message: None)
        with pytest.raises(ValueError, match="q4_1 runs on the CPU only"):
            run(formats=("q4_1",), device="cuda", progress=lambda message: None)
    assert [(r["engine"], r["dtype"]) for r in report["results"]] == [("minillm", "fp32")]
    assert report["settings"]["formats"] == ["fp32"]
    assert any("q4_1 has no row" in note for note in report["notes"])
    assert "q4_1 has no row" in table(report)


def test_every_name_the_bench_package_offers_resolves():
    import minillm.tools.bench as bench

    for name in bench.__all__:
        assert getattr(bench, name) is not None, name


FAKE_LLAMA_CPP = {
    "__init__.py": "from .llama import Llama\n__version__ = 'fake'\n\n"
                   "def llama_print_system_info():\n"
                   "    return b'CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | '\n",
    "llama_cpp.py": "class Params:\n    use_extra_bufts = True\n\n"
                    "def llama_model_default_params():\n    return Params()\n",
    "llama.py": "import os, signal\nfrom . import llama_cpp\n\n"
                "class Llama:\n"
                "    def __init__(self, model_path, **options):\n"
                "        self.params = llama_cpp.llama_model_default_params()\n"
                "    def tokenize(self, text):\n        return [1, 2]\n"
                "    def reset(self):\n        pass\n"
                "    def generate(self, ids, **options):\n"
                "        if self.params.use_extra_bufts and os.environ.get('FAKE_CRASH'):\n"
                "            os.kill(os.getpid(), signal.SIGSEGV)\n"
                "        while True:\n            yield 7\n",
}


@pytest.fixture
def fake_llama_cpp(tmp_path, monkeypatch):
    """A llama_cpp package that dies of SIGSEGV on its first token when FAKE_CRASH is set,
    unless its model parameters turn the extra buffer types off (as the real wheel did here)."""
    package = tmp_path / "llama_cpp"
    package.mkdir()
    for name, text in FAKE_LLAMA_CPP.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for name in [m for m in sys.modules if m == "llama_cpp" or m.startswith("llama_cpp.")]:
        monkeypatch.delitem(sys.modules, name)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return model


def test_llama_cpp_that_crashes_on_its_first_token_runs_without_its_extra_paths(
        fake_llama_cpp, monkeypatch):
    from minillm.tools.bench.run import llama_cpp_crashes, llama_cpp_engine

    assert llama_cpp_crashes(fake_llama_cpp, 64, 1) == 0
    notes = []
    llama_cpp_engine(fake_llama_cpp, 64, notes).decode([1, 2, 3], 4, threads=1)
    assert len(notes) == 1 and notes.pop().endswith("built with SSE3, AVX, AVX2")
    monkeypatch.setenv("FAKE_CRASH", "1")
    assert llama_cpp_crashes(fake_llama_cpp, 64, 1) == signal.SIGSEGV
    engine = llama_cpp_engine(fake_llama_cpp, 64, notes)
    assert len(engine.decode([1, 2, 3], 4, threads=1).token_times) == 4  # did not die here
    engine.decode([1, 2, 3], 4, threads=1)
    assert len(notes) == 2 and "built with" in notes[0]
    assert "crashed decoding its first token here" in notes[1] \
        and "use_extra_bufts=False" in notes[1] and "signal 11" in notes[1] and "at 1 thread(s)" in notes[1]
    import llama_cpp.llama

    assert llama_cpp.llama.llama_cpp.llama_model_default_params().use_extra_bufts, \
        "the defaults are put back once the Llama is made"


def test_another_llama_cpp_is_timed_from_its_folder_and_a_wrong_folder_is_refused(
        fake_llama_cpp, tmp_path):
    """--llama-cpp DIR: a llama-cpp-python built for another level, installed with pip install
    --target DIR; the note says which one ran and what its build uses."""
    from minillm.tools.bench.run import llama_cpp_engine, run

    notes = []
    folder = fake_llama_cpp.parent
    engine = llama_cpp_engine(fake_llama_cpp, 64, notes, where=str(folder))
    assert len(engine.decode([1, 2, 3], 3, threads=1).token_times) == 3
    assert notes == [f"llama.cpp fake from {folder}, built with SSE3, AVX, AVX2"]
    with pytest.raises(ValueError, match="no llama_cpp package in that folder.*pip install "
                                         "--target"):
        run(formats=("fp32",), llama_cpp_dir=str(tmp_path / "nowhere"),
            progress=lambda message: None)

