"""minillm.quant's grid, GPTQ, AWQ and calibration, on tiny inputs.

References: GPTQ against the paper's column-by-column form written out here (the explicit inverse
Hessian, downdated after each column, in float64: no Cholesky factor, no blocks); RTN against
`basics.zeropoint_quantize` where a group divides the row; AWQ at alpha = 0 against RTN."""

import pytest
import torch

from minillm.quant import calibration as cal
from minillm.quant.awq import awq, awq_scales
from minillm.quant.basics import zeropoint_dequantize, zeropoint_quantize
from minillm.quant.gptq import gptq, hessian
from minillm.quant.grid import fit, group_ranges, output_error, rtn, snap
from test_quant import _tiny


def _correlated_inputs(tokens, features, seed):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(features, features, generator=g) / features ** 0.5
    x = torch.randn(tokens, features, generator=g) @ (torch.eye(features) + 2 * mix)
    x[:, 1] *= 8.0  # one feature much larger than the rest, as in a real layer
    return x


def _gptq_by_the_paper(w, h, bits, group_size, damp=0.01):
    """Quantize column i, spread its error over columns > i with the current inverse, then
    remove column i from the inverse (OBS's update), one column at a time."""
    w, h = w.double().clone(), h.double().clone()
    cols = w.shape[1]
    h += damp * h.diagonal().mean() * torch.eye(cols, dtype=torch.float64)
    hinv = torch.linalg.inv(h)
    grid = fit(w, bits) if group_size is None else None
    for i in range(cols):
        if group_size is not None and i % group_size == 0:
            grid = fit(w[:, i:i + group_size], bits)
        q = snap(w[:, i:i + 1], *grid, bits)[:, 0]
        error = (w[:, i] - q) / hinv[i, i]
        w[:, i + 1:] -= error[:, None] * hinv[i, i + 1:][None, :]
        w[:, i] = q
        hinv = hinv - hinv[:, i:i + 1] @ hinv[i:i + 1, :] / hinv[i, i]
    return w


@pytest.mark.parametrize("bits,group_size", [(3, None), (4, 8), (2, 16), (3, 12)])
def test_gptq_matches_the_column_by_column_form(bits, group_size):
    torch.manual_seed(0)
    w = torch.randn(6, 24)
    h = hessian(_correlated_inputs(200, 24, seed=1))
    ours = gptq(w, h, bits, group_size)
    want = _gptq_by_the_paper(w, h, bits, group_size).float()
    assert torch.allclose(ours, want, atol=1e-4), (ours - want).abs().max()


def test_gptq_lands_on_the_grid_and_beats_rtn_on_the_output():
    torch.manual_seed(2)
    w = torch.randn(16, 32)
    x = _correlated_inputs(400, 32, seed=3)
    h = hessian(x)
    for bits, group_size in ((3, None), (4, 8)):
        ours = gptq(w, h, bits, group_size)
        for start, end in group_ranges(32, group_size):  # at most 2^bits values a row and group
            for row in ours[:, start:end]:
                assert row.unique().numel() <= 2 ** bits
        near = rtn(w, bits, group_size)
        assert output_error(w, ours, h.float()) < 0.7 * output_error(w, near, h.float())


def test_gptq_ignores_features_the_calibration_never_saw():
    x = _correlated_inputs(100, 8, seed=4)
    x[:, 3] = 0.0
    w = torch.randn(4, 8)
    out = gptq(w, hessian(x), 4)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"H must be \(8, 8\)"):
        gptq(w, torch.eye(7), 4)


def test_rtn_is_zeropoint_rounding_and_keeps_a_short_last_group():
    torch.manual_seed(5)
    w = torch.randn(5, 64)
    q, scale, lo = zeropoint_quantize(w, 3, "group", 16)
    assert torch.allclose(rtn(w, 3, 16), zeropoint_dequantize(q, scale, lo, w.shape), atol=1e-6)
    assert group_ranges(576, 128)[-1] == (512, 576)
    w = torch.randn(3, 40)
    out = rtn(w, 4, 16)
    assert torch.equal(out[:, 32:], rtn(w[:, 32:], 4))  # the last 8 columns: a group of their own
    with pytest.raises(ValueError, match="group_size"):
        rtn(w, 4, 0)


def test_awq_at_alpha_zero_is_rtn_and_its_choice_is_never_worse():
    torch.manual_seed(6)
    w = torch.randn(12, 32)
    x = _correlated_inputs(300, 32, seed=7)
    h, mean_abs = hessian(x), x.abs().mean(0)
    assert torch.allclose(awq_scales(mean_abs, 0.0), torch.ones(32, dtype=torch.float64))
    s = awq_scales(mean_abs, 0.5)
    assert torch.isclose(s.max() * s.min(), torch.tensor(1.0, dtype=torch.float64))
    out, alpha = awq(w, h, mean_abs, 3, 8)
    assert 0.0 <= alpha <= 1.0
    assert output_error(w, out, h.float()) <= output_error(w, rtn(w, 3, 8), h.float()) + 1e-9
    # the large feature (column 1) is protected: its weights move less than under RTN
    assert alpha > 0
    assert (out - w)[:, 1].abs().mean() < (rtn(w, 3, 8) - w)[:, 1].abs().mean()
    _, alpha0 = awq(w, h, mean_abs, 3, 8, n_grid=1)
    assert alpha0 in (0.0, 1.0)
    with pytest.raises(ValueError, match="mean_abs"):
        awq(w, h, mean_abs[:5], 3, 8)


def test_calibration_stats_and_rounded_layers_on_a_tiny_model():
    model = _tiny()
    names = cal.linear_names(model, blocks=[0])
    assert names and all(n.startswith("layers.0.") for n in names)
    ids = list(range(1, 41))
    stats = cal.input_stats(model, ids, names, window=40)  # stops after layers.0.mlp.down_proj
    seen = []
    hook = model.layers[0].mlp.down_proj.register_forward_pre_hook(
        lambda m, a: seen.append(a[0][0].double()))
    with torch.inference_mode():
        model(torch.tensor([ids]))
    hook.remove()
    down = stats["layers.0.mlp.down_proj"]
    assert down.tokens == 40
    assert torch.allclose(down.h, hessian(seen[0]), rtol=1e-5, atol=1e-6)
    assert torch.allclose(down.mean_abs, seen[0].abs().mean(0), rtol=1e-5)
    assert cal.input_stats(model, ids, names, window=16)["layers.0.mlp.down_proj"].tokens == 40
    for method in cal.METHODS:
        rounded, errors, seconds = cal.round_layers(model, stats, method, 4, 16)
        assert seconds > 0
        assert set(errors) == set(names)
        assert all(0 < e < 0.3 for e in errors.values()), (method, errors)
        w = model.layers[0].mlp.gate_proj.weight
        assert not torch.equal(rounded.layers[0].mlp.gate_proj.weight, w)
        assert torch.equal(rounded.layers[1].mlp.gate_proj.weight, model.layers[1].mlp.gate_proj.weight)
    with pytest.raises(ValueError, match="method"):
        cal.round_layers(model, stats, "nearest", 4)
    with pytest.raises(ValueError, match="no linear layers"):
        cal.linear_names(model, blocks=[7])


# --- SmoothQuant, W8A8 and fp8 ----------------------------------------------------------------

def test_smoothing_leaves_the_product_unchanged_and_tames_an_outlier_feature():
    from minillm.quant.smoothquant import smooth_scales, w8a8

    x = _correlated_inputs(64, 32, seed=8)
    x[:, 5] *= 60.0  # an outlier feature, as LLM.int8() finds in large models
    w = torch.randn(16, 32, generator=torch.Generator().manual_seed(9)) * 0.1
    s = smooth_scales(x.abs().amax(0), w)
    assert torch.allclose((x / s) @ (w * s).T, x @ w.T, rtol=1e-4, atol=1e-4)
    exact = x @ w.T
    plain = (w8a8(x, w) - exact).norm() / exact.norm()
    smooth = (w8a8(x, w, s) - exact).norm() / exact.norm()
    assert smooth < plain / 2
    with pytest.raises(ValueError, match="alpha"):
        smooth_scales(x.abs().amax(0), w, alpha=1.5)


def test_fp8_roundtrip_keeps_relative_steps_and_names_its_formats():
    from minillm.quant.fp8 import fp8_roundtrip

    t = torch.tensor([1000.0, 1.0, 0.1, -0.3])  # all in e4m3's normal range once scaled
    back = fp8_roundtrip(t, "e4m3")
    assert back[0] == 1000.0  # the largest lands exactly on the format's largest
    assert ((back - t).abs() / t.abs()).max() < 2 ** -3  # 3 stored mantissa bits
    assert torch.equal(fp8_roundtrip(torch.zeros(3)), torch.zeros(3))
    assert ((fp8_roundtrip(t, "e5m2") - t).abs() / t.abs()).max() < 2 ** -2
    with pytest.raises(ValueError, match="e4m3"):
        fp8_roundtrip(t, "e3m4")
