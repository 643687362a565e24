"""minillm's transformer on the real model, SmolLM2-135M from its GGUF file, against transformers
loading the same file (the `reference` fixture)."""

import pytest
import torch

import minillm
from minillm.generation.kv_cache import KVCache
from minillm.loading import load_model

pytestmark = pytest.mark.slow

TEXT = ("The weather today is sunny, and the children are playing in the park. Large language "
        "models predict the next token from the ones before it; the prompt is read in one pass. "
        "今天天气晴朗，孩子们在公园里玩。 def add(a, b):\n    return a + b\n")


@pytest.fixture(scope="module")
def model(gguf_path):
    return load_model(gguf_path, device="cpu")


@pytest.fixture(scope="module")
def long_ids(reference):
    _, tokenizer = reference
    ids = tokenizer.encode(TEXT * 20)
    assert len(ids) >= 512
    return torch.tensor([ids[:512]])


def test_config_from_gguf_metadata(model):
    c = model.config
    assert (c.arch, c.vocab_size, c.hidden_size, c.n_layers) == ("llama", 49152, 576, 30)
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.intermediate_size) == (9, 3, 64, 1536)
    assert c.rope_theta == 100000.0 and c.max_seq_len == 8192 and c.tie_embeddings
    assert c.eos_token_ids == (2,) and c.bos_token_id == 1
    assert abs(c.norm_eps - 1e-5) < 1e-9


@pytest.mark.parametrize("length", [1, 7, 64, 512])
def test_logits_match_transformers(model, reference, long_ids, length):
    ref, _ = reference
    ids = long_ids[:, :length]
    with torch.inference_mode():
        got = model(ids)
        want = ref(ids).logits
    assert got.shape == want.shape == (1, length, 49152)
    assert (got - want).abs().max().item() <= 1e-3
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_cached_decode_matches_full_forward(model, long_ids):
    ids = long_ids[:, :40]
    with torch.inference_mode():
        full = model(ids)
        cache = KVCache.for_model(model, batch_size=1, max_tokens=40)
        steps = [model(ids[:, :32], cache=cache)]
        steps += [model(ids[:, t:t + 1], cache=cache) for t in range(32, 40)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-3


def test_second_load_reads_the_converted_copy(gguf_path, model):
    from minillm.model.converted import converted_dir

    folder = converted_dir(gguf_path)
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.pt*"))
    again = load_model(gguf_path, device="cpu")
    assert again.config == model.config
    first, second = model.state_dict(), again.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_load_returns_minillm_tokenizer(model):
    loaded, tokenizer = minillm.load("smollm2-135m", device="cpu")
    assert loaded.config == model.config
    ids = tokenizer.encode("The weather today is")
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert type(tokenizer).__module__.startswith("minillm.")
