"""FP8 and FP4 emulation (minillm.quant.float_formats): each format's grid and scale rule, the
bits a scheme costs, and weights and activations rounded inside a block and put back after it."""

import pytest
import torch

from minillm.quant.float_formats import (E2M1, SCHEMES, Scheme, activations_in_int8,
                                         fake_quantize, round_rows_int8, round_to, weights_in)


def test_fp4_rounds_to_the_nearest_of_its_eight_magnitudes_and_keeps_the_sign():
    x = torch.tensor([0.2, 0.3, 0.74, 0.76, 2.4, 2.6, 4.9, 5.1, 9.0, -1.3, -7.0])
    assert round_to(x, "e2m1").tolist() == [0.0, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 6.0, -1.5,
                                            -6.0]
    assert set(round_to(torch.linspace(-8, 8, 1001), "e2m1").abs().tolist()) == set(E2M1.tolist())


def test_int4_is_symmetric_from_minus_7_to_7():
    assert round_to(torch.tensor([-9.0, -6.6, 0.4, 3.5, 8.0]), "int4").tolist() == [-7, -7, 0, 4,
                                                                                     7]


def test_a_block_s_largest_number_lands_on_the_format_s_largest():
    w = torch.tensor([[1.0, -3.0, 0.5, 2.0], [0.1, 0.2, 0.3, 0.4]])
    got = fake_quantize(w, Scheme("e2m1", (1, None)))  # a scale per row: 3 -> 6, 0.4 -> 6
    assert got[0, 1] == -3.0 and got[1, 3] == pytest.approx(0.4)
    assert got[0].tolist() == [1.0, -3.0, 0.5, 2.0]  # 1, 0.5, 2 are on the scaled grid too


def test_the_mx_scale_is_a_power_of_two_that_leaves_the_top_of_the_range_unused():
    w = torch.tensor([[5.0, 1.0, 0.3, -2.0]])
    mx = fake_quantize(w, Scheme("e2m1", (1, 4), "e8m0"))  # scale 2^(floor(log2 5) - 2) = 1
    assert mx.tolist() == [[4.0, 1.0, 0.5, -2.0]]  # 5 rounds to 4 on a grid of step 1 up there
    exact = fake_quantize(w, Scheme("e2m1", (1, 4), "fp32"))  # scale 5 / 6
    assert exact[0, 0] == pytest.approx(5.0)


def test_finer_blocks_and_scales_err_less_on_a_weight_with_outliers():
    torch.manual_seed(0)
    w = torch.randn(256, 256) * torch.rand(256, 1) ** 3
    w[3, 17] = 40.0

    def error(name):
        return ((fake_quantize(w, SCHEMES[name]) - w).norm() / w.norm()).item()

    assert error("NVFP4") < error("MXFP4")
    assert error("fp4, blocks of 32, fp16 scale") < error("MXFP4")
    assert error("fp8 e4m3, per channel") < error("fp8 e5m2, per channel")
    assert error("int4, blocks of 16") < error("int4, blocks of 32")


def test_a_tile_that_does_not_divide_the_weight_takes_the_rest_as_a_smaller_tile():
    w = torch.randn(130, 70)
    got = fake_quantize(w, SCHEMES["fp8 e4m3, 128x128 blocks"])
    assert got.shape == w.shape and torch.isfinite(got).all()
    assert ((got - w).norm() / w.norm()) < 0.05


def test_the_bits_count_each_weight_s_share_of_the_scales():
    shape = (1536, 576)
    assert SCHEMES["MXFP4"].bits(shape) == 4.25
    assert SCHEMES["NVFP4"].bits(shape) == pytest.approx(4.5 + 32 / (1536 * 576))
    assert SCHEMES["int4, blocks of 32"].bits(shape) == 4.5
    assert SCHEMES["fp8 e4m3, per channel"].bits(shape) == pytest.approx(8 + 32 / 576)


def test_a_scheme_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="fmt must be one of e4m3, e5m2, e2m1, int4"):
        Scheme("e3m2", (1, 32))
    with pytest.raises(ValueError, match="scale must be one of fp32, fp16, e8m0, e4m3"):
        Scheme("e2m1", (1, 32), "bf16")


def _tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_weights_are_rounded_inside_the_block_and_put_back_after_it():
    model, x = _tiny(), torch.randn(5, 8)
    before = [p.detach().clone() for p in model.parameters()]
    exact = model(x)
    with weights_in(model, SCHEMES["MXFP4"]):
        assert not torch.equal(model(x), exact)
        assert model[0].weight.equal(fake_quantize(before[0], SCHEMES["MXFP4"]))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    with pytest.raises(RuntimeError, match="inside"):  # an error inside still puts them back
        with weights_in(model, lambda w: w * 0):
            raise RuntimeError("inside")
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_activations_are_rounded_per_token_inside_the_block_only():
    model, x = _tiny(), torch.randn(5, 8)
    x[0] *= 100  # one loud token sets only its own scale
    exact = model(x)
    with activations_in_int8(model):
        rounded = model(x)
    want = model[2](round_rows_int8(torch.relu(model[0](round_rows_int8(x)))))
    torch.testing.assert_close(rounded, want)
    assert torch.equal(model(x), exact)
    row = round_rows_int8(x)
    assert ((row - x).abs().amax(-1) <= x.abs().amax(-1) / 254 + 1e-6).all()
