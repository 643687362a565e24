"""The tiled attention with the online softmax (minillm/model/flash_attention.py) and the split-KV
decode step against the explicit attention, and the memory it never allocates
(minillm/measure/memory_peak.py)."""

import pytest
import torch
import torch.nn.functional as F

from minillm.measure.memory_peak import peak_bytes
from minillm.layers.attention import attention_explicit
from minillm.model.flash_attention import flash_attention, online_softmax, split_kv_attention


def _qkv(batch, heads, kv_heads, queries, keys, dim=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, queries, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, keys, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, keys, dim, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("heads, kv_heads, queries, keys, block", [
    (4, 4, 50, 50, 16),    # a prompt, tiles that do not divide it
    (9, 3, 64, 64, 64),    # grouped-query heads, one tile
    (9, 3, 1, 37, 8),      # a decode step after 36 cached tokens
    (6, 2, 7, 30, 4),      # a chunk after cached tokens
    (2, 1, 33, 33, 1),     # tiles of a single key (multi-query attention)
    (4, 2, 10, 10, 128),   # a tile larger than the sequence
])
def test_flash_attention_equals_the_explicit_attention(heads, kv_heads, queries, keys, block):
    q, k, v = _qkv(2, heads, kv_heads, queries, keys)
    expected = attention_explicit(q, k, v)
    got = flash_attention(q, k, v, block_size=block)
    assert got.shape == expected.shape and got.dtype == q.dtype
    assert (got - expected).abs().max().item() < 1e-5


def test_large_scores_do_not_overflow():
    """The running maximum is what keeps exp() finite: scores of several hundred would overflow
    a naive sum of exponentials in float32."""
    q, k, v = _qkv(1, 2, 2, 40, 40)
    q, k = 30 * q, 30 * k
    got = flash_attention(q, k, v, block_size=8)
    assert torch.isfinite(got).all()
    assert (got - attention_explicit(q, k, v)).abs().max().item() < 1e-5


def test_online_softmax_equals_softmax():
    x = torch.randn(3, 5, 101, generator=torch.Generator().manual_seed(1)) * 20
    for block in (1, 7, 101, 500):
        assert torch.allclose(online_softmax(x, block), x.softmax(-1), atol=1e-6)


def test_the_tiles_never_hold_the_score_matrix():
    peaks = {}
    for n in (512, 1024):
        q, k, v = _qkv(1, 4, 2, n, n, dim=32)
        scores = 4 * n * n * 4  # one float32 score per query head, query and key
        peaks[n] = peak_bytes(attention_explicit, q, k, v)[1], \
            peak_bytes(flash_attention, q, k, v, block_size=64)[1]
        assert peaks[n][0] >= scores > 4 * peaks[n][1]
    # twice the tokens: the plain scores take 4x the memory, the tiles about 2x (q, out grow)
    assert peaks[1024][0] >= 3.5 * peaks[512][0]
    assert peaks[1024][1] <= 2.5 * peaks[512][1]


def test_peak_bytes_counts_live_storage_only():
    def two_then_one(n):
        a = torch.ones(n)
        b = a + 1
        del a
        return b * 2  # b and the result alive: still two

    result, peak = peak_bytes(two_then_one, 1000)
    assert peak == 2 * 1000 * 4 and result[0].item() == 4.0
    x = torch.ones(1000)
    assert peak_bytes(lambda: x.mul_(2))[1] == 0  # in place: nothing new
    assert peak_bytes(lambda: x.view(10, 100))[1] == 0  # a view: nothing new


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_block_sizes_are_refused(bad):
    q, k, v = _qkv(1, 2, 2, 4, 4)
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(q, k, v, block_size=bad)
    with pytest.raises(ValueError, match="block_size"):
        online_softmax(q, bad)


def test_bad_shapes_are_refused():
    q, k, v = _qkv(1, 3, 2, 4, 4)
    with pytest.raises(ValueError, match="shared evenly"):
        flash_attention(q, k, v)
    q, k, v = _qkv(1, 2, 2, 5, 4)
    with pytest.raises(ValueError, match="last of the keys"):
        flash_attention(q, k, v)
    with pytest.raises(ValueError, match="batch, heads"):
        flash_attention(q[0], k, v)


@pytest.mark.parametrize("heads, kv_heads, keys, parts", [(9, 3, 1000, 7), (4, 4, 33, 33),
                                                        (8, 2, 5, 1), (6, 1, 64, 16)])
def test_split_kv_attention_equals_one_pass_whatever_the_parts(heads, kv_heads, keys, parts):
    gen = torch.Generator().manual_seed(keys)
    q = torch.randn(2, heads, 1, 16, generator=gen)
    k, v = (torch.randn(2, kv_heads, keys, 16, generator=gen) for _ in range(2))
    group = heads // kv_heads
    whole = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                           v.repeat_interleave(group, 1))
    torch.testing.assert_close(split_kv_attention(q, k, v, parts), whole, atol=1e-6, rtol=1e-5)


def test_split_kv_attention_keeps_large_scores_finite():
    q = torch.full((1, 2, 1, 8), 40.0)
    k, v = torch.randn(1, 2, 50, 8) * 30, torch.randn(1, 2, 50, 8)
    assert torch.isfinite(split_kv_attention(q, k, v, 5)).all()


@pytest.mark.parametrize("q_shape, parts, words", [((1, 4, 2, 8), 2, "one decode step"),
                                                   ((1, 3, 1, 8), 2, "heads divisible"),
                                                   ((1, 4, 1, 8), 0, "1 to 10 parts"),
                                                   ((1, 4, 1, 8), 11, "1 to 10 parts")])
def test_split_kv_attention_refuses_what_it_cannot_split(q_shape, parts, words):
    with pytest.raises(ValueError, match=words):
        split_kv_attention(torch.zeros(q_shape), torch.zeros(1, 2, 10, 8),
                           torch.zeros(1, 2, 10, 8), parts)
