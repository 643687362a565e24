"""Numbers that hold on a GPU, checked under the fake CUDA device: int8's bound from the bytes
its decode path really moves, the read bandwidth timed over many calls per synchronization,
the roof measured in the model's dtype."""

import pytest
import torch

from minillm.fast import optimize
from minillm.measure import bandwidth, roofline
from minillm.model.memory import bytes_per_token
from minillm.quant.linear import Int8Linear
from minillm.quant.measure import bytes_moved_per_token, int8_decode_paths
from fake_cuda import FakeCuda, Tally
from tests.test_fast import _tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _int8_weights(model) -> int:
    return sum(m.qweight.numel() for m in model.modules() if isinstance(m, Int8Linear))


def test_int8_on_a_gpu_dequantizes_and_its_bytes_count_the_float_copy():
    with FakeCuda():
        model = optimize(_tiny().to("cuda"), "int8")
        assert int8_decode_paths(model) == ["dequantize"]
        # 1 byte read, then a float32 copy written and read back: 9 bytes a weight, not 1
        assert bytes_moved_per_token(model) == bytes_per_token(model) + 8 * _int8_weights(model)


def test_int8_on_a_cpu_moves_only_what_it_stores():
    model = optimize(_tiny(), "int8")
    assert set(int8_decode_paths(model)) <= {"kernel", "fused"}
    assert bytes_moved_per_token(model) == bytes_per_token(model)
    for layer in model.modules():
        if isinstance(layer, Int8Linear):
            layer.path = "dequantize"
    assert bytes_moved_per_token(model) == bytes_per_token(model) + 8 * _int8_weights(model)


def test_the_bandwidth_waits_once_per_timing_not_once_per_sum(monkeypatch):
    waits = []
    monkeypatch.setattr(bandwidth, "best_time", lambda fn, device, repeats, warmup: (
        fn(), waits.append(1), 0.5)[-1])
    with FakeCuda():
        with Tally() as t:
            rate = bandwidth.read_bandwidth("cuda", megabytes=1, repeats=1)
    assert t.ops - 1 == 20  # twenty sums (plus the tensor's fill) inside one timing
    assert rate == 20 * 2**20 / 0.5
    assert bandwidth.read_bandwidth("cpu", megabytes=1, repeats=1, calls=3) == 3 * 2**20 / 0.5
    with pytest.raises(ValueError, match="calls"):
        bandwidth.read_bandwidth("cpu", megabytes=1, calls=0)


def test_the_roof_is_measured_in_the_dtype_asked_for(monkeypatch):
    seen = []
    monkeypatch.setattr(roofline, "peak_matmul_flops",
                        lambda device, n, dtype: (seen.append(dtype), 1e9)[-1])
    monkeypatch.setattr(roofline, "read_bandwidth", lambda device, megabytes: 1e9)
    roofline.measure_roof("cpu", dtype=torch.bfloat16)
    roofline.measure_roof("cpu")
    assert seen == [torch.bfloat16, torch.float32]
