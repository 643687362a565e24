"""KV-cache bytes under MHA, GQA, MQA, MLA and a sliding window, for the published shapes."""

import pytest

from minillm.generation.kv_designs import PUBLISHED, bytes_per_token, cache_bytes
from minillm.model import ModelConfig
from minillm.generation.step_timing import kv_cache_formula_bytes

SMOLLM2 = ModelConfig(arch="llama", vocab_size=49152, hidden_size=576, n_layers=30, n_heads=9,
                      n_kv_heads=3, head_dim=64, intermediate_size=1536)


def test_gqa_is_chapter_03s_formula():
    assert bytes_per_token(PUBLISHED["SmolLM2-135M"], "GQA", 4) == \
        kv_cache_formula_bytes(SMOLLM2, 1, 4)


def test_the_published_figures():
    llama = PUBLISHED["Llama-3-8B"]
    assert bytes_per_token(llama, "GQA") == 2 * 32 * 8 * 128 * 2 == 131_072  # 128 KiB
    assert bytes_per_token(llama, "MHA") == 4 * bytes_per_token(llama, "GQA")
    assert bytes_per_token(llama, "MQA") == bytes_per_token(llama, "GQA") // 8
    deepseek = PUBLISHED["DeepSeek-V3"]
    assert bytes_per_token(deepseek, "MLA") == 61 * 576 * 2 == 70_272
    assert bytes_per_token(deepseek, "MHA") == 61 * 128 * (192 + 128) * 2
    assert bytes_per_token(deepseek, "GQA") is None
    assert bytes_per_token(llama, "MLA") is None


def test_a_sliding_window_caps_the_tokens_held():
    llama = PUBLISHED["Llama-3-8B"]
    full = cache_bytes(llama, "GQA", 32_768)
    assert cache_bytes(llama, "GQA", 32_768, window=4096) * 8 == full
    assert cache_bytes(llama, "GQA", 1000, window=4096) == cache_bytes(llama, "GQA", 1000)


@pytest.mark.parametrize("design, tokens, window, nbytes, words", [
    ("MHQ", 1, None, 2, "design must be one of"),
    ("GQA", 0, None, 2, "tokens must be a positive int"),
    ("GQA", 5, 0, 2, "window must be a positive int"),
    ("GQA", 5, None, 0, "bytes_per_value"),
])
def test_bad_arguments_are_refused(design, tokens, window, nbytes, words):
    with pytest.raises(ValueError, match=words):
        cache_bytes(PUBLISHED["SmolLM2-135M"], design, tokens, window, nbytes)
