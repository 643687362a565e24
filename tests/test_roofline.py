"""The roofline: its two roofs, the cost of a forward step, and how rows move the intensity."""

from pathlib import Path

import pytest
import torch

from minillm.kernels import dispatch
from minillm.measure import bandwidth, roofline
from minillm.model import ModelConfig
from minillm.measure.roofline import Roof, matmul_weights, measure_roof, step_cost

SMOLLM2 = ModelConfig(arch="llama", vocab_size=49152, hidden_size=576, n_layers=30, n_heads=9,
                      n_kv_heads=3, head_dim=64, intermediate_size=1536, tie_embeddings=True)


def test_the_two_roofs_meet_at_the_ridge():
    roof = Roof(peak_flops=100e9, bandwidth=20e9)
    assert roof.ridge == 5.0
    assert roof.attainable(1.0) == 20e9            # bandwidth-bound: intensity x bandwidth
    assert roof.attainable(5.0) == 100e9           # the ridge
    assert roof.attainable(50.0) == 100e9          # compute-bound: the flat roof


def test_smollm2s_weights_per_token():
    per_layer = 576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536
    assert matmul_weights(SMOLLM2) == 30 * per_layer + 49152 * 576


def test_a_decode_step_at_batch_1_does_half_a_flop_per_float32_byte():
    flops, n_bytes = step_cost(SMOLLM2, rows=1, context=0)
    assert flops / n_bytes == pytest.approx(0.5)
    flops, n_bytes = step_cost(SMOLLM2, rows=1, context=0, bytes_per_weight=2)
    assert flops / n_bytes == pytest.approx(1.0)


def test_rows_multiply_the_work_not_the_weights():
    one = step_cost(SMOLLM2, rows=1, context=0)
    eight = step_cost(SMOLLM2, rows=8, context=0)
    assert eight[0] == 8 * one[0] and eight[1] == one[1]


def test_a_long_context_adds_the_cache_reads():
    flops0, bytes0 = step_cost(SMOLLM2, rows=2, context=0)
    flops, n_bytes = step_cost(SMOLLM2, rows=2, context=1000)
    kv_per_token = 2 * 30 * 3 * 64 * 4
    assert n_bytes - bytes0 == 2 * 1000 * kv_per_token
    assert flops - flops0 == 2 * 4 * 30 * 9 * 64 * 1000


def test_the_measured_roof_is_positive():
    roof = measure_roof("cpu", megabytes=16, n=256)
    assert roof.peak_flops > 1e8 and roof.bandwidth > 1e8


@pytest.mark.parametrize("kwargs, words", [
    (dict(rows=0, context=0), "rows"),
    (dict(rows=1, context=-1), "context"),
    (dict(rows=1, context=0, bytes_per_weight=0), "bytes_per_weight"),
])
def test_bad_step_arguments_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        step_cost(SMOLLM2, **kwargs)


def test_bad_roofs_are_refused():
    with pytest.raises(ValueError, match="peak_flops"):
        Roof(0, 1e9)
    with pytest.raises(ValueError, match="bandwidth"):
        Roof(1e9, -1)
    with pytest.raises(ValueError, match="intensity"):
        Roof(1e9, 1e9).attainable(0)


def test_the_flat_roof_is_the_fastest_kernels(monkeypatch):
    """A prefill through minillm's gemm_f32 can outrun PyTorch's matmul (an AMD EPYC's: its
    library takes the AVX2 path there): the roof is the faster of the two, and says which."""
    peak = roofline.fastest_matmul("cpu", n=128, repeats=2)
    assert peak.flops > 1e8
    if dispatch.cpu_kernels("cpu"):
        monkeypatch.setattr(roofline, "best_time",
                            lambda fn, *a, **k: 2.0 - any(n.startswith("gemm") for n in fn.__code__.co_names))
        assert roofline.fastest_matmul("cpu", n=64).kernel == "minillm's gemm_f32"
        assert roofline.fastest_matmul("cpu", n=64, dtype=torch.bfloat16).kernel == \
            "minillm's gemm_bf16"
    with dispatch.without_kernels():
        assert roofline.fastest_matmul("cpu", n=64).kernel == "PyTorch's matmul"


def test_the_bandwidth_buffer_is_larger_than_the_caches(monkeypatch):
    """A buffer a cache holds measures the cache: four times the largest cache, at least 256 MB."""
    found = bandwidth.last_level_cache_bytes()
    if Path("/sys/devices/system/cpu/cpu0/cache/index0/size").is_file():
        assert found >= 32 << 10
    monkeypatch.setattr(bandwidth, "last_level_cache_bytes", lambda: 256 << 20)
    assert bandwidth.beyond_caches_megabytes("cpu") == 1024
    monkeypatch.setattr(bandwidth, "last_level_cache_bytes", lambda: None)
    assert bandwidth.beyond_caches_megabytes("cpu") == 256
