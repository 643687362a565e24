"""Sliding-window attention: the window mask, the ring-buffer KV cache against full attention with
the window mask on a tiny random Llama model, and the cache's constant size."""

import pytest
import torch

from minillm.generation.kv_cache import KVCache
from minillm.model import LlamaModel, ModelConfig
from minillm.generation.sliding_window import RingKVCache, sliding_window_mask, window_forward

CONFIG = ModelConfig(arch="llama", vocab_size=64, hidden_size=32, n_layers=2, n_heads=4,
                     n_kv_heads=2, head_dim=8, intermediate_size=48, max_seq_len=128)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return LlamaModel(CONFIG).eval().requires_grad_(False)


def _ids(n, seed=0):
    return torch.randint(0, CONFIG.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))


def test_the_mask_is_causal_and_at_most_window_back():
    mask = sliding_window_mask(5, 5, 3).int().tolist()
    assert mask == [[1, 0, 0, 0, 0],
                    [1, 1, 0, 0, 0],
                    [1, 1, 1, 0, 0],
                    [0, 1, 1, 1, 0],
                    [0, 0, 1, 1, 1]]
    # two queries after three cached keys: positions 3 and 4
    assert sliding_window_mask(2, 5, 2).int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]


@pytest.mark.parametrize("window, prompt", [(6, 4), (6, 6), (1, 1), (5, 1)])
def test_ring_cache_decode_equals_full_attention_with_the_window_mask(tiny, window, prompt):
    ids = _ids(20)
    reference = window_forward(tiny, ids, window)
    ring = RingKVCache.for_model(tiny, batch_size=1, window=window)
    with torch.inference_mode():
        logits = [tiny(ids[:, :prompt], cache=ring)]
        for t in range(prompt, ids.shape[1]):
            logits.append(tiny(ids[:, t:t + 1], cache=ring))
    got = torch.cat(logits, dim=1)
    assert (got - reference).abs().max().item() < 1e-5
    assert ring.length == 20 and ring.nbytes == ring.capacity_bytes


def test_a_window_longer_than_the_text_is_plain_causal_attention(tiny):
    ids = _ids(12, seed=3)
    with torch.inference_mode():
        full = tiny(ids)
    assert (window_forward(tiny, ids, 50) - full).abs().max().item() < 1e-5
    assert (window_forward(tiny, ids, 4) - full).abs().max().item() > 1e-3  # the window matters


def test_the_ring_holds_window_tokens_and_no_more(tiny):
    ring = RingKVCache.for_model(tiny, 1, window=4)
    per_token = 2 * CONFIG.n_layers * CONFIG.n_kv_heads * CONFIG.head_dim * 4
    assert ring.capacity_bytes == 4 * per_token and ring.nbytes == 0
    with torch.inference_mode():
        tiny(_ids(3), cache=ring)
        assert ring.nbytes == 3 * per_token
        for t in range(10):
            tiny(_ids(1, seed=t), cache=ring)
    assert ring.nbytes == 4 * per_token and ring.length == 13
    full = KVCache.for_model(tiny, 1, 13)
    with torch.inference_mode():
        tiny(_ids(13), cache=full)
    assert full.nbytes == 13 * per_token


def test_a_pass_that_would_wrap_the_ring_is_refused(tiny):
    ring = RingKVCache.for_model(tiny, 1, window=4)
    with torch.inference_mode():
        tiny(_ids(3), cache=ring)
        with pytest.raises(ValueError, match="one at a time"):
            tiny(_ids(2), cache=ring)


@pytest.mark.parametrize("bad", [0, -1, 2.0, None, True])
def test_bad_windows_are_refused(bad):
    with pytest.raises(ValueError, match="window must be an int"):
        sliding_window_mask(3, 3, bad)
    with pytest.raises(ValueError, match="window must be an int"):
        RingKVCache(1, 1, 1, 4, bad)
