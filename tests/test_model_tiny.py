"""minillm's transformer against transformers on tiny random-weight models saved to a temporary
folder (Llama with grouped-query heads, Qwen2, GPT-2; tied and untied), plus the KV cache, the padding
mask, the two attention implementations, and the errors for bad input."""

import json

import pytest
import torch

from minillm.generation.kv_cache import KVCache
from minillm.loading import load, load_model
from minillm.model import ModelConfig, attention, attention_explicit, build_model
from minillm.model.llama import unpermute

VOCAB = 96


def _hf_model(kind: str, tied: bool, **extra):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        config = tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                               tie_word_embeddings=tied, initializer_range=0.2, **extra)
        model = tf.GPT2LMHeadModel(config)
    else:
        common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=tied, initializer_range=0.2, rms_norm_eps=1e-6,
                      eos_token_id=[3, 5], bos_token_id=1, **extra)
        if kind == "llama":
            model = tf.LlamaForCausalLM(tf.LlamaConfig(head_dim=16, **common))
        else:
            model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    model.eval()
    # Random biases and norm weights too, so a bug in any of them shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or ".ln_" in name:
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
    return model


CASES = [("llama", True, {}), ("llama", False, {}), ("qwen2", True, {}), ("qwen2", False, {}),
         ("gpt2", True, {}), ("gpt2", False, {}),
         ("llama", False, {"attention_bias": True, "mlp_bias": True})]


@pytest.fixture(scope="module", params=CASES,
                ids=lambda c: f"{c[0]}-{'tied' if c[1] else 'untied'}{'-bias' if c[2] else ''}")
def tiny(request, tmp_path_factory):
    kind, tied, extra = request.param
    hf = _hf_model(kind, tied, **extra)
    folder = tmp_path_factory.mktemp(f"tiny-{kind}")
    hf.save_pretrained(folder)
    return hf, load_model(folder, device="cpu"), folder


def _ids(batch, seq, seed=1):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def test_logits_match_transformers(tiny):
    hf, model, _ = tiny
    ids = _ids(2, 23)
    with torch.inference_mode():
        want = hf(ids).logits
        got = model(ids)
    assert got.shape == (2, 23, VOCAB) and got.dtype == torch.float32
    assert (got - want).abs().max().item() <= 1e-5


def test_config_read_from_folder(tiny):
    hf, model, _ = tiny
    c = model.config
    assert c.vocab_size == VOCAB and c.n_layers == 2 and c.n_heads == 4
    assert c.tie_embeddings == hf.config.tie_word_embeddings
    if c.arch != "gpt2":
        assert c.n_kv_heads == 2 and c.eos_token_ids == (3, 5) and c.bos_token_id == 1
        assert c.max_seq_len == 64
    assert not model.training


def test_cache_prefill_then_one_token_at_a_time_matches_full_forward(tiny):
    _, model, _ = tiny
    ids = _ids(2, 12, seed=2)
    with torch.inference_mode():
        full = model(ids)
        cache = KVCache.for_model(model, batch_size=2, max_tokens=16)
        steps = [model(ids[:, :5], cache=cache)]
        for t in range(5, 12):
            steps.append(model(ids[:, t:t + 1], cache=cache))
    assert cache.length == 12
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-5


def test_cache_chunks_of_several_tokens(tiny):
    _, model, _ = tiny
    ids = _ids(1, 12, seed=3)
    with torch.inference_mode():
        full = model(ids)
        cache = KVCache.for_model(model, batch_size=1, max_tokens=12)
        parts = [model(ids[:, a:b], cache=cache) for a, b in [(0, 4), (4, 9), (9, 12)]]
    assert (torch.cat(parts, dim=1) - full).abs().max().item() <= 1e-5


def test_left_padded_batch_matches_each_prompt_alone(tiny):
    """Batches are left-padded: row 1 has 3 padding tokens. With the attention mask and positions
    counted from the first real token, its real positions match the prompt run alone, both in the
    prefill and in the cached decode step after it."""
    _, model, _ = tiny
    long, short = _ids(1, 9, seed=4)[0], _ids(1, 6, seed=5)[0]
    pad = 3
    ids = torch.stack([long, torch.cat([torch.zeros(pad, dtype=torch.long), short])])
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :pad] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    nxt = torch.tensor([[7], [8]])
    with torch.inference_mode():
        cache = KVCache.for_model(model, batch_size=2, max_tokens=10)
        batch = model(ids, cache=cache, position_ids=positions, attention_mask=mask)
        step = model(nxt, cache=cache, position_ids=positions[:, -1:] + 1,
                     attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1))
        alone = model(torch.cat([short, torch.tensor([8])])[None])
        first = model(torch.cat([long, torch.tensor([7])])[None])
    assert torch.isfinite(batch).all()
    assert (batch[1, pad:] - alone[0, :6]).abs().max().item() <= 1e-5
    assert (step[1, 0] - alone[0, 6]).abs().max().item() <= 1e-5
    assert (batch[0] - first[0, :9]).abs().max().item() <= 1e-5
    assert (step[0, 0] - first[0, 9]).abs().max().item() <= 1e-5


def test_bf16_load_runs_and_stays_close(tiny):
    hf, _, folder = tiny
    model = load_model(folder, dtype=torch.bfloat16, device="cpu")
    assert model.embed.weight.dtype == torch.bfloat16
    ids = _ids(1, 8)
    with torch.inference_mode():
        got, want = model(ids), hf(ids).logits
    assert got.dtype == torch.float32
    assert (got - want).abs().max().item() < 0.1 * want.abs().max().item()


def test_load_folder_without_tokenizer_gives_none(tiny):
    _, _, folder = tiny
    model, tokenizer = load(folder, device="cpu")
    assert tokenizer is None and model.config.vocab_size == VOCAB


# ---- attention: the explicit matrix math and the fused kernel agree ----

@pytest.mark.parametrize("queries,keys,heads,kv_heads", [
    (7, 7, 4, 4), (7, 7, 6, 2), (1, 9, 6, 3), (1, 1, 4, 1), (3, 10, 4, 2)])
def test_explicit_attention_matches_sdpa(queries, keys, heads, kv_heads):
    g = torch.Generator().manual_seed(queries * 100 + keys)
    q = torch.randn(2, heads, queries, 16, generator=g)
    k = torch.randn(2, kv_heads, keys, 16, generator=g)
    v = torch.randn(2, kv_heads, keys, 16, generator=g)
    assert (attention(q, k, v) - attention_explicit(q, k, v)).abs().max().item() < 1e-5
    mask = torch.rand(2, 1, queries, keys, generator=g) > 0.3
    mask[..., -1] = True  # every query sees at least one key
    assert (attention(q, k, v, mask) - attention_explicit(q, k, v, mask)).abs().max() < 1e-5


@pytest.mark.parametrize("mask_shape", [(7, 10), (1, 1, 7, 10), (2, 1, 7, 10), (2, 6, 7, 10)])
def test_grouped_query_folding_takes_every_mask_shape(mask_shape):
    """With a mask, each kv head's query heads are folded into the query axis instead of the keys
    being repeated; every mask shape SDPA takes must mean the same, and the keys may be a strided
    view (the paged cache hands over (batch, keys, kv_heads, dim) transposed)."""
    g = torch.Generator().manual_seed(len(mask_shape))
    q = torch.randn(2, 6, 7, 16, generator=g)
    k = torch.randn(2, 10, 2, 16, generator=g).transpose(1, 2)
    v = torch.randn(2, 10, 2, 16, generator=g).transpose(1, 2)
    mask = torch.rand(*mask_shape, generator=g) > 0.4
    mask[..., -1] = True
    want = attention_explicit(q, k, v, mask.expand(2, 6, 7, 10))
    assert (attention(q, k, v, mask) - want).abs().max() < 1e-5


def test_explicit_attention_is_causal():
    """Changing a later token's key and value leaves earlier queries' outputs unchanged."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4], v2[:, :, 4] = 9.0, -9.0
    a, b = attention_explicit(q, k, v), attention_explicit(q, k2, v2)
    assert torch.equal(a[:, :, :4], b[:, :, :4]) and not torch.equal(a[:, :, 4], b[:, :, 4])


# ---- the GGUF row permutation ----

def _llama_cpp_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, copied for the test."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


@pytest.mark.parametrize("shape", [(24, 5), (24,)])
def test_unpermute_undoes_llama_cpp_permute(shape):
    import numpy as np

    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    assert np.array_equal(unpermute(_llama_cpp_permute(w, 3), 3), w)
    assert not np.array_equal(_llama_cpp_permute(w, 3), w)


# ---- bad input ----

@pytest.fixture(scope="module")
def small():
    config = ModelConfig(arch="llama", vocab_size=10, hidden_size=8, n_layers=1, n_heads=2,
                         n_kv_heads=1, head_dim=4, intermediate_size=12, max_seq_len=6)
    torch.manual_seed(0)
    weights = {n: torch.randn(p.shape) for n, p in
               __import__("minillm.model", fromlist=["LlamaModel"]).LlamaModel(config)
               .state_dict().items()}
    return build_model(config, weights)


@pytest.mark.parametrize("ids,error,words", [
    (torch.tensor([[1, 10]]), ValueError, "token id 10 is out of range"),
    (torch.tensor([[-1, 2]]), ValueError, "token id -1 is out of range"),
    (torch.zeros(1, 0, dtype=torch.long), ValueError, "empty"),
    (torch.zeros(1, 7, dtype=torch.long), ValueError, "context window of 6"),
    (torch.zeros(1, 3), TypeError, "integer token ids"),
    (torch.zeros(3, dtype=torch.long), ValueError, "shape (batch, seq)"),
    ([[1, 2]], TypeError, "torch.LongTensor"),
])
def test_bad_input_ids(small, ids, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        small(ids)


def test_cache_overflowing_the_context_window(small):
    cache = KVCache.for_model(small, batch_size=1, max_tokens=8)
    small(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="7 tokens \\(5 cached \\+ 2 new\\)"):
        small(torch.zeros(1, 2, dtype=torch.long), cache=cache)


def test_bad_attention_mask_shape(small):
    with pytest.raises(ValueError, match="attention_mask must have shape"):
        small(torch.zeros(1, 3, dtype=torch.long), attention_mask=torch.ones(1, 2))


@pytest.mark.parametrize("keep", [1, 2, 4])
def test_logits_to_keep_returns_the_last_positions_unchanged(small, keep):
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    torch.testing.assert_close(small(ids, logits_to_keep=keep), small(ids)[:, -keep:],
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("keep, error", [(-1, ValueError), (1.0, TypeError), (True, TypeError),
                                         ("1", TypeError)])
def test_bad_logits_to_keep(small, keep, error):
    with pytest.raises(error, match="logits_to_keep must be an int >= 0"):
        small(torch.zeros(1, 3, dtype=torch.long), logits_to_keep=keep)


def _copy_folder(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _tiny_llama_folder(tmp_path):
    folder = tmp_path / "llama"
    _hf_model("llama", tied=False).save_pretrained(folder)
    return folder


def test_unsupported_architecture(tmp_path):
    folder = _tiny_llama_folder(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "mixtral"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported architecture 'mixtral'"):
        load_model(folder, device="cpu")


def test_config_disagreeing_with_tensor_shapes(tmp_path):
    folder = _tiny_llama_folder(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["intermediate_size"] = 40
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config disagrees .*gate_proj.weight has shape "
                                         r"\(48, 32\), the config implies \(40, 32\)"):
        load_model(folder, device="cpu")


def test_missing_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _tiny_llama_folder(tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="'model.layers.1.mlp.up_proj.weight' is missing"):
        load_model(folder, device="cpu")


def test_pickle_weights_are_refused(tmp_path):
    folder = _tiny_llama_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors only"):
        load_model(folder, device="cpu")


def test_not_a_model(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path, device="cpu")
    with pytest.raises(ValueError, match="neither an existing path nor a known model name"):
        load_model("no-such-model", device="cpu")
    with pytest.raises(TypeError, match="dtype must be a floating"):
        build_model(ModelConfig("gpt2", 4, 4, 1, 1, 1, 4, 4), {}, dtype=torch.int8)


def test_config_checks_its_fields():
    with pytest.raises(ValueError, match="unsupported architecture 'bert'"):
        ModelConfig("bert", 4, 4, 1, 1, 1, 4, 4)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        ModelConfig("llama", 4, 4, 1, 3, 2, 4, 4)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        ModelConfig("llama", 4, 4, 0, 1, 1, 4, 4)
