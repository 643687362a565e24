"""The KV-cache contract (minillm.generation.kv_cache), held against every cache minillm has:
`KVCache`, `RingKVCache`, the engine's `PagedBatch`, and the 8-bit caches (`QuantizedKVCache`,
a `PagedBatch` over a `QuantizedKVPool`) run through the same cases on a tiny random Llama
(readable and fast). A float cache is checked against the model run without a cache; an 8-bit
one against the whole sequence run in one pass through a fresh cache of its kind (rounding
keys and values changes the logits: tests/test_kv_quant.py measures by how much). The
capabilities each cache claims are pinned in CLAIMS; one it does not claim must refuse with a
clear error."""

import pytest
import torch

from minillm.model.toy import tiny_model
from minillm.engine import BlockManager, PagedBatch, PagedKVPool, QuantizedKVPool
from minillm.fast import optimize
from minillm.generation.kv_cache import KVCache, KVCacheBase, KVCacheProtocol, capability
from minillm.generation.kv_quant import HeadRanges
from minillm.generation.quantized_kv_cache import QuantizedKVCache
from minillm.generation.sliding_window import RingKVCache
from minillm.kernels import dispatch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOKENS = 12  # every case runs at most this many tokens per row
ROWS = 2


@pytest.fixture(scope="module")
def models():
    tiny = tiny_model()[0]
    return {"readable": tiny, "fast": optimize(tiny)}


# --- each cache, as a model's passes see it -------------------------------------------------------
# A factory gives the cache the next forward pass runs on, after `done` tokens per row. A KVCache
# or a ring is one object for the whole sequence; the engine makes a PagedBatch per pass over
# its pool, each row's blocks scattered through it.

def contiguous(model):
    cache = KVCache.for_model(model, ROWS, TOKENS)
    return lambda done, new: cache


def ring(model):  # a window as long as the text: the ring never wraps, attention is all causal
    cache = RingKVCache.for_model(model, ROWS, window=TOKENS)
    return lambda done, new: cache


def paged(model, pool=None):
    pool = pool or PagedKVPool.for_model(model, num_blocks=16, block_size=4)
    blocks, tables = BlockManager(16, 4), [[] for _ in range(ROWS)]
    for length in range(1, TOKENS + 1):  # rows take turns: their blocks interleave in the pool
        for table in tables:
            blocks.grow(table, length)
    return lambda done, new: PagedBatch(pool, tables, [done] * ROWS, [new] * ROWS)


def head_ranges(model):
    """Per-head ranges calibrated on the tests' tokens, at least 5 (append's random keys fit)."""
    cache = KVCache.for_model(model, ROWS, TOKENS)
    with torch.inference_mode():
        model(_ids(), cache=cache)
    ranges = HeadRanges.calibrate(cache)
    return HeadRanges([k.clamp(min=5.0) for k in ranges.keys],
                      [v.clamp(min=5.0) for v in ranges.values])


def int8_per_token(model):
    cache = QuantizedKVCache.for_model(model, ROWS, TOKENS, "int8")
    return lambda done, new: cache


def fp8_per_head(model):
    cache = QuantizedKVCache.for_model(model, ROWS, TOKENS, "fp8_e4m3", head_ranges(model))
    return lambda done, new: cache


def paged_fp8_per_token(model):
    return paged(model, QuantizedKVPool.for_model(model, 16, 4, "fp8_e4m3"))


def paged_int8_per_head(model):
    return paged(model, QuantizedKVPool.for_model(model, 16, 4, "int8", head_ranges(model)))


CACHES = {"KVCache": contiguous, "RingKVCache": ring, "PagedBatch": paged,
          "QuantizedKVCache int8 per token": int8_per_token,
          "QuantizedKVCache fp8 per head": fp8_per_head,
          "PagedBatch fp8 per token": paged_fp8_per_token,
          "PagedBatch int8 per head": paged_int8_per_head}
QUANTIZED = {name for name in CACHES if " " in name}
CLAIMS = {  # what each cache says it can do beyond the required part
    "KVCache": {"contiguous", "crop", "reorder"},
    "RingKVCache": {"reorder"},
    "PagedBatch": {"attends"},  # a decode step on the CPU, where minillm's kernel is built
    # 8-bit: neither contiguous (the fused step writes float32) nor attending (the C kernel
    # reads float32 slots); every step goes through append, which dequantizes
    "QuantizedKVCache int8 per token": {"crop", "reorder"},
    "QuantizedKVCache fp8 per head": {"crop", "reorder"},
    "PagedBatch fp8 per token": set(),
    "PagedBatch int8 per head": set(),
}


def _ids(seed=0):
    return torch.randint(0, 64, (ROWS, TOKENS), generator=torch.Generator().manual_seed(seed))


def _run(model, cache_for, ids, chunks, done=0):
    """Run `ids`' columns in passes of `chunks` tokens after `done`; the logits of every
    position run, (rows, positions, vocab). Each pass's cache must say `done` as its length."""
    logits = []
    with torch.inference_mode():
        for new in chunks:
            cache = cache_for(done, new)
            assert cache.length == done
            logits.append(model(ids[:, done:done + new], cache=cache))
            done += new
    return torch.cat(logits, dim=1)


def _uncached(model, ids):
    with torch.inference_mode():
        return model(ids)


def _reference(model, name, ids):
    """What passes through cache `name` must give: the uncached logits for a float cache; for
    an 8-bit one, the whole sequence in one pass through a fresh cache of its kind (a key's
    rounding depends on that key alone, or on fixed per-head scales, not on the chunking)."""
    if name not in QUANTIZED:
        return _uncached(model, ids)
    return _run(model, CACHES[name](model), ids, [ids.shape[1]])


# --- the required part ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", CACHES)
def test_every_cache_keeps_the_protocol_and_declares_the_optional_part(models, name):
    cache = CACHES[name](models["readable"])(0, 3)
    assert isinstance(cache, KVCacheProtocol) and isinstance(cache, KVCacheBase)
    assert (cache.n_layers, cache.batch_size, cache.length) == (2, ROWS, 0)
    claimed = {c for c in ("attends", "contiguous") if capability(cache, c)}
    assert claimed <= CLAIMS[name]


@pytest.mark.parametrize("kind", ["readable", "fast"])
@pytest.mark.parametrize("chunks", [[5, 1, 1, 1, 1, 1, 1, 1], [1] * TOKENS, [4, 3, 1, 4]])
@pytest.mark.parametrize("name", CACHES)
def test_passes_through_the_cache_give_the_uncached_logits(models, kind, chunks, name):
    """A prefill, then decode steps or chunks: each position's logits equal the model's on the
    whole sequence without a cache (the fast model's fused decode step included, where the cache
    lets it run)."""
    model, ids = models[kind], _ids()
    got = _run(model, CACHES[name](model), ids, chunks)
    torch.testing.assert_close(got, _reference(model, name, ids), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", CACHES)
def test_append_returns_every_key_so_far_with_the_new_ones_last(models, name):
    model = models["readable"]
    cache_for = CACHES[name](model)
    _run(model, cache_for, _ids(), [5])
    cache, c = cache_for(5, 3), model.config
    k = torch.randn(ROWS, c.n_kv_heads, 3, c.head_dim)
    v = torch.randn(ROWS, c.n_kv_heads, 3, c.head_dim)
    keys, values = cache.append(1, k, v)
    assert keys.shape == values.shape == (ROWS, c.n_kv_heads, 8, c.head_dim)
    assert keys.dtype == values.dtype == k.dtype
    if name not in QUANTIZED:
        assert torch.equal(keys[:, :, -3:], k) and torch.equal(values[:, :, -3:], v)
    for got, sent in ((keys[:, :, -3:], k), (values[:, :, -3:], v)):  # fp8: 1/16 of a value
        assert ((got - sent).abs() <= sent.abs() / 16 + 5.0 / 127).all()


# --- the optional capabilities: claimed and working, or refused plainly ---------------------------

@pytest.mark.parametrize("name", CACHES)
def test_a_cache_attends_itself_only_where_it_claims_to(models, name):
    model = models["readable"]
    cache_for = CACHES[name](model)
    _run(model, cache_for, _ids(), [5])
    step = cache_for(5, 1)
    if not capability(step, "attends"):
        c = model.config
        q = torch.zeros(ROWS, c.n_heads, 1, c.head_dim)
        k = torch.zeros(ROWS, c.n_kv_heads, 1, c.head_dim)
        with pytest.raises(NotImplementedError,
                           match=f"{type(step).__name__} does not attend itself"):
            step.attend(0, q, k, k)
    else:  # its logits: test_passes_through_the_cache_give_the_uncached_logits
        assert "attends" in CLAIMS[name]
    if name.startswith("PagedBatch"):
        assert capability(step, "attends") == dispatch.paged_attention(step.pool.keys[0])


@pytest.mark.parametrize("name", CACHES)
def test_the_fused_decode_step_runs_on_contiguous_caches_only(models, name):
    fast = models["fast"]
    cache_for = CACHES[name](fast)
    _run(fast, cache_for, _ids(), [5])
    step = cache_for(5, 1)
    runs = fast.fused_decode.applies(_ids()[:, 5:6], step, None, None)
    assert runs == ("contiguous" in CLAIMS[name]) == capability(step, "contiguous")
    if runs:  # token p of every row at index p, as the step writes and reads them
        plain = Minimal(2, ROWS)
        _run(fast, lambda done, new: plain, _ids(), [5])
        for layer in range(2):
            torch.testing.assert_close(step.keys[layer][:, :, :5], plain.keys[layer])
            torch.testing.assert_close(step.values[layer][:, :, :5], plain.values[layer])


@pytest.mark.parametrize("name", CACHES)
def test_crop_forgets_the_tokens_after_a_length_or_refuses(models, name):
    """Speculative decoding's rollback: run 9 tokens, crop to 6, run tokens 6.. again."""
    model, ids = models["readable"], _ids(1)
    cache_for = CACHES[name](model)
    _run(model, cache_for, ids, [6, 3])
    cache = cache_for(9, 1)
    if "crop" not in CLAIMS[name]:
        with pytest.raises(NotImplementedError, match=f"{type(cache).__name__} cannot crop"):
            cache.crop(6)
        return
    cache.crop(6)
    assert cache.length == 6
    got = _run(model, cache_for, ids, [2, 1, 1, 2], done=6)
    torch.testing.assert_close(got, _reference(model, name, ids)[:, 6:], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="cannot crop a cache of 12 tokens to 13"):
        cache.crop(13)


@pytest.mark.parametrize("name", CACHES)
def test_reorder_keeps_the_rows_in_a_new_order_or_refuses(models, name):
    """Beam search's step: after 7 tokens the rows swap places; the next tokens, fed in the new
    order, give the logits of the swapped sequences."""
    model, ids = models["readable"], _ids(2)
    cache_for = CACHES[name](model)
    _run(model, cache_for, ids, [7])
    cache = cache_for(7, 1)
    swap = torch.tensor([1, 0])
    if "reorder" not in CLAIMS[name]:
        with pytest.raises(NotImplementedError, match=f"{type(cache).__name__} cannot reorder"):
            cache.reorder(swap)
        return
    cache.reorder(swap)
    swapped = ids[swap]
    got = _run(model, cache_for, swapped, [1, 2, 2], done=7)
    torch.testing.assert_close(got, _reference(model, name, swapped)[:, 7:], atol=1e-4,
                               rtol=1e-4)


# --- a cache that keeps only the required part --------------------------------------------------

class Minimal:
    """The required part and nothing else (no KVCacheBase): lists of keys, concatenated."""

    def __init__(self, n_layers, batch_size):
        self.n_layers, self.batch_size, self.length = n_layers, batch_size, 0
        self.keys, self.values = [None] * n_layers, [None] * n_layers

    def append(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def advance(self, new_tokens):
        self.length += new_tokens


@pytest.mark.parametrize("kind", ["readable", "fast"])
def test_a_cache_with_only_the_required_part_gets_the_defaults_and_runs(models, kind):
    model, ids = models[kind], _ids(3)
    cache = Minimal(2, ROWS)
    assert isinstance(cache, KVCacheProtocol) and not isinstance(cache, KVCacheBase)
    assert capability(cache, "attends") is False and capability(cache, "contiguous") is False
    got = _run(model, lambda done, new: cache, ids, [4, 1, 1, 3, 1])
    torch.testing.assert_close(got, _uncached(model, ids)[:, :10], atol=1e-4, rtol=1e-4)
