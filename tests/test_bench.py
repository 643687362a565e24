"""The benchmark's pieces on tiny models: each engine times exactly the tokens it was asked for
(the prompt is not a token), the bandwidth bound is bytes over bandwidth, the table shows ratios."""

import pytest
import torch

from minillm.bench.bandwidth import decode_bound, read_bandwidth, weight_bytes
from minillm.bench.options import build_parser
from minillm.bench.run import minillm_engine, table, transformers_engine
from minillm.fast import optimize
from tests.test_fast import _Tok, _tiny


def test_minillm_engine_times_every_token_and_ignores_eos():
    model = optimize(_tiny())
    model.config = model.config.__class__(**{**model.config.__dict__, "eos_token_ids": (0,)})
    engine = minillm_engine(model, _Tok(), "fp32")
    m = engine.decode([1, 2, 3], 9)
    assert m.n_tokens == 9 and m.prompt_tokens == 3 and m.tpot > 0
    assert engine.bytes_per_token == model.weight_bytes


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
    two = torch.nn.Sequential(tied, tied)  # the same weight twice is read once
    assert weight_bytes(two) == 16 * 4


def test_table_shows_the_ratios():
    report = {
        "machine": {"device": "cpu", "torch_threads": 2, "cpu_count": 2, "load_average_1min": 1.0},
        "settings": {"new_tokens": 64, "short_prompt_tokens": 11, "prefill_prompt_tokens": 512,
                     "repeats": 3},
        "bandwidth_gb_s": 20.0, "seconds": 100.0,
        "results": [
            {"engine": "transformers", "dtype": "fp32", "ttft_ms": 100.0, "tpot_ms": 70.0,
             "decode_tok_s": 14.0, "prefill_tok_s": 500.0, "decode_x_transformers": 1.0,
             "prefill_x_transformers": 1.0, "bound_tok_s": 37.0, "of_bound": 0.38},
            {"engine": "minillm", "dtype": "fp32", "ttft_ms": 90.0, "tpot_ms": 50.0,
             "decode_tok_s": 20.0, "prefill_tok_s": 520.0, "decode_x_transformers": 20 / 14,
             "prefill_x_transformers": 1.04, "bound_tok_s": 37.0, "of_bound": 0.54}]}
    text = table(report)
    assert "1.43x" in text and "1.04x" in text and "minillm fp32" in text and "54%" in text


def test_options_scale_down_under_ci(monkeypatch):
    import argparse

    monkeypatch.setenv("CI", "1")
    args = build_parser(argparse.ArgumentParser()).parse_args([])
    assert (args.tokens, args.prompt_tokens, args.repeats) == (8, 64, 1)
    monkeypatch.delenv("CI")
    args = build_parser(argparse.ArgumentParser()).parse_args([])
    assert (args.tokens, args.prompt_tokens, args.repeats) == (32, 512, 3)


def test_bad_settings_are_refused():
    from minillm.bench.run import run

    with pytest.raises(ValueError, match="dtype"):
        run(dtypes=("fp8",))
    with pytest.raises(ValueError, match="tokens"):
        run(tokens=1)
