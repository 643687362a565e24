"""Keys and values in 8 bits (minillm.generation.kv_quant, QuantizedKVCache, the engine's
QuantizedKVPool), each checked against a float reference on tiny inputs: the rounding, the
bytes, the logits' distance from a float32 cache, and the paged pool agreeing with the
contiguous cache. (The contract cases: tests/test_kv_cache_contract.py.)"""

import pytest
import torch

from minillm.model.toy import tiny_model
from minillm.engine import Engine, PagedKVPool, QuantizedKVPool
from minillm.engine.disaggregation import copy_blocks_between
from minillm.engine.paged_cache import paged_forward
from minillm.generation.kv_cache import KVCache
from minillm.generation.kv_quant import FORMATS, HeadRanges, kv_format
from minillm.generation.quantized_kv_cache import GENERAL_PATH, QuantizedKVCache
from minillm.utils import notices

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def _ids(n=24, seed=0):
    return torch.randint(0, 64, (1, n), generator=torch.Generator().manual_seed(seed))


def _logits(model, cache, ids):
    with torch.inference_mode():
        return model(ids, cache=cache)


# --- the formats, against float64 arithmetic ------------------------------------------------------

def test_int8_per_token_rounds_to_the_nearest_step_of_its_largest_value_over_127():
    x = torch.randn(3, 2, 5, 16, generator=torch.Generator().manual_seed(1))
    fmt = FORMATS["int8"]
    scale = fmt.token_scale(x)
    back = fmt.dequantize(fmt.quantize(x, scale), scale, torch.float32)
    x64 = x.double()
    step = x64.abs().amax(-1, keepdim=True) / 127
    assert torch.allclose(back.double(), torch.round(x64 / step) * step, atol=1e-6)
    assert ((back - x).abs() <= scale / 2 + 1e-6).all()
    assert torch.equal(back.abs().amax(-1), x.abs().amax(-1))  # the largest is kept exactly


def test_fp8_e4m3_keeps_three_mantissa_bits_and_saturates_at_448():
    fmt = FORMATS["fp8_e4m3"]
    one = torch.ones(1)
    q = fmt.quantize(torch.tensor([17.3, 300.0, 1000.0, -0.5]), one)
    assert fmt.dequantize(q, one, torch.float32).tolist() == [18.0, 288.0, 448.0, -0.5]
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    scale = fmt.token_scale(x)
    back = fmt.dequantize(fmt.quantize(x, scale), scale, torch.float32)
    normal = x.abs() / scale >= 2 ** -6  # e4m3's smallest normal: below it the step is fixed
    assert ((back - x).abs()[normal] <= x.abs()[normal] / 16 + 1e-7).all()


def test_an_unknown_format_is_refused_with_the_ones_there_are():
    with pytest.raises(ValueError, match="'int8', 'fp8_e4m3', got 'int4'"):
        kv_format("int4")
    with pytest.raises(ValueError, match="got 'int4'"):
        QuantizedKVCache(2, 1, 2, 8, 4, "int4")


# --- the cache --------------------------------------------------------------------------------------

def test_the_cache_returns_what_it_stored_rounded_as_the_format_rounds(tiny):
    model = tiny[0]
    c = model.config
    cache = QuantizedKVCache.for_model(model, 1, 8, "int8")
    k = torch.randn(1, c.n_kv_heads, 5, c.head_dim, generator=torch.Generator().manual_seed(3))
    keys, values = cache.append(0, k, -k)
    step = k.abs().amax(-1, keepdim=True) / 127
    torch.testing.assert_close(keys, torch.round(k / step) * step)
    torch.testing.assert_close(values, -keys)
    assert cache.keys[0].dtype is torch.int8 and cache.keys[0].element_size() == 1


def test_per_head_scales_come_from_the_calibration_and_clip_what_lies_beyond(tiny):
    model = tiny[0]
    floats = KVCache.for_model(model, 1, 24)
    _logits(model, floats, _ids())
    ranges = HeadRanges.calibrate(floats)
    assert torch.equal(ranges.keys[1], floats.keys[1][0].abs().amax(dim=(1, 2)))
    cache = QuantizedKVCache.for_model(model, 1, 4, "int8", ranges)
    c = model.config
    big = ranges.keys[0].view(1, -1, 1, 1) * 3 * torch.ones(1, c.n_kv_heads, 1, c.head_dim)
    keys, _ = cache.append(0, big, big)
    torch.testing.assert_close(keys, big / 3)  # three times the range: clipped to the range
    with pytest.raises(ValueError, match="calibrate from a KVCache that holds tokens"):
        HeadRanges.calibrate(KVCache.for_model(model, 1, 4))
    with pytest.raises(ValueError, match="head ranges cover 2 layers"):
        QuantizedKVCache(3, 1, c.n_kv_heads, c.head_dim, 4, "int8", ranges)


def test_bytes_per_token_count_the_values_and_the_per_token_scales(tiny):
    model = tiny[0]
    c = model.config
    floats = KVCache.for_model(model, 1, 8)
    per_token = QuantizedKVCache.for_model(model, 1, 8, "fp8_e4m3")
    _logits(model, floats, _ids(8))
    _logits(model, per_token, _ids(8))
    assert floats.nbytes == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * 8
    assert per_token.bytes_per_token() == 2 * c.n_layers * c.n_kv_heads * (c.head_dim + 4)
    assert per_token.nbytes == per_token.bytes_per_token() * 8
    ranges = HeadRanges.calibrate(floats)
    per_head = QuantizedKVCache.for_model(model, 1, 8, "int8", ranges)
    assert per_head.bytes_per_token() == 2 * c.n_layers * c.n_kv_heads * c.head_dim


@pytest.mark.parametrize("fmt", FORMATS)
def test_8_bit_keys_and_values_move_the_logits_a_little_and_int8_less_than_fp8(tiny, fmt):
    """Against a float32 cache on the same tokens: close, but not equal (the rounding is
    real), and the most likely next token mostly the same."""
    model, ids = tiny[0], _ids(48)
    exact = _logits(model, KVCache.for_model(model, 1, 48), ids)
    errors = {}
    for name in FORMATS:
        got = _logits(model, QuantizedKVCache.for_model(model, 1, 48, name), ids)
        errors[name] = (got - exact).abs()
        if name == fmt:  # on this random model: int8 about 1%, fp8 about 5% of a logit
            assert 0 < errors[name].mean() < 0.1 * exact.abs().mean()
            assert (got.argmax(-1) == exact.argmax(-1)).float().mean() >= 0.9
    for measure in (torch.max, torch.mean):  # 255 levels a head against 3 mantissa bits
        assert measure(errors["int8"]) < measure(errors["fp8_e4m3"])


def test_crop_and_reorder_keep_the_scales_with_their_tokens(tiny):
    model = tiny[0]
    ids = torch.cat([_ids(10, 4), _ids(10, 5)])
    cache = QuantizedKVCache.for_model(model, 2, 10, "int8")
    _logits(model, cache, ids[:, :7])
    cache.reorder(torch.tensor([1, 0]))
    got = _logits(model, cache, ids[[1, 0], 7:])
    want = _logits(model, QuantizedKVCache.for_model(model, 2, 10, "int8"), ids[[1, 0]])
    torch.testing.assert_close(got, want[:, 7:], atol=1e-5, rtol=1e-5)
    cache.crop(4)
    got = _logits(model, cache, ids[[1, 0], 4:6])
    torch.testing.assert_close(got, want[:, 4:6], atol=1e-5, rtol=1e-5)


def test_the_general_path_is_said_once(tiny, capsys, monkeypatch):
    monkeypatch.setattr(notices, "_SAID", set())
    model = tiny[0]
    QuantizedKVCache.for_model(model, 1, 4, "int8")
    QuantizedKVCache.for_model(model, 1, 4, "int8")
    err = capsys.readouterr().err
    assert err.count(GENERAL_PATH.format(fmt="int8")) == 1
    QuantizedKVPool.for_model(model, 4, 4, "int8")
    QuantizedKVPool.for_model(model, 4, 4, "int8")
    assert capsys.readouterr().err.count("quantized KV pool (int8)") == 1


# --- the engine's pool --------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_the_paged_pool_gives_the_contiguous_caches_logits(tiny, fmt):
    """Per-token scales depend on each token alone: the pool, its blocks scattered, and the
    contiguous cache hold the same numbers and give the same logits."""
    model, ids = tiny[0], _ids(20, 6)
    pool = QuantizedKVPool.for_model(model, 8, 4, fmt)
    table = [5, 2, 7, 0, 3]
    first = paged_forward(model, pool, [table], [0], [ids[0, :13].tolist()], all_positions=True)
    step = paged_forward(model, pool, [table], [13], [ids[0, 13:14].tolist()])
    want = _logits(model, QuantizedKVCache.for_model(model, 1, 20, fmt), ids[:, :14])
    torch.testing.assert_close(first[0], want[0, :13], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step[0], want[0, 13], atol=1e-5, rtol=1e-5)
    assert pool.bytes_per_block == 4 * 2 * model.config.n_layers * model.config.n_kv_heads * (
        model.config.head_dim + 4)


def test_blocks_copy_with_their_scales_and_only_between_pools_of_one_format(tiny):
    model = tiny[0]
    src = QuantizedKVPool.for_model(model, 4, 4, "int8")
    dst = QuantizedKVPool.for_model(model, 4, 4, "int8")
    paged_forward(model, src, [[1, 2]], [0], [_ids(8)[0].tolist()])
    copy_blocks_between(src, [1, 2], dst, [3, 0])
    for s, d in zip(src.slot_tensors(), dst.slot_tensors()):
        assert torch.equal(d[12:16], s[4:8]) and torch.equal(d[0:4], s[8:12])
    with pytest.raises(ValueError, match="copy only into a pool of the same format"):
        copy_blocks_between(src, [1], PagedKVPool.for_model(model, 4, 4), [0])


def test_the_engine_with_an_int8_pool_decodes_as_the_int8_cache_does(tiny):
    model, tokenizer = tiny
    prompt = _ids(6, 7)[0].tolist()
    engine = Engine(model, tokenizer, num_blocks=8, block_size=4, kv_cache_format="int8")
    assert isinstance(engine.pool, QuantizedKVPool)
    out = engine.generate([prompt], max_new_tokens=10)[0].token_ids
    cache, ids, want = QuantizedKVCache.for_model(model, 1, 16, "int8"), prompt, []
    for _ in range(10):
        token = _logits(model, cache, torch.tensor([ids]))[0, -1].argmax().item()
        want.append(token)
        ids = [token]
    assert out == want
    with pytest.raises(ValueError, match="KV-cache format must be one of"):
        Engine(model, tokenizer, kv_cache_format="int4")


def test_the_general_path_is_said_in_the_learners_language(tiny, capsys, monkeypatch):
    from minillm.course import set_language

    monkeypatch.setattr(notices, "_SAID", set())
    set_language("zh")
    try:
        QuantizedKVCache.for_model(tiny[0], 1, 4, "int8")
        QuantizedKVPool.for_model(tiny[0], 4, 4, "int8")
    finally:
        set_language("en")
    err = capsys.readouterr().err
    assert "量化的 KV 缓存（int8）" in err and "量化的 KV 池（int8）" in err
    assert "general attention path" not in err
