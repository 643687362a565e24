"""LLM.int8() emulated: the outlier columns, the int8 x int8 product, and why the decomposition
matters when a few features are large."""

import pytest
import torch

from minillm.quant.int8 import dequantize_int8, quantize_int8
from minillm.quant.llm_int8 import LLMInt8Linear, int8_matmul, outlier_columns, quantize_rows


def _data(rows=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 96, generator=g) * 0.05
    x = torch.randn(rows, 96, generator=g)
    return w, x


def test_outlier_columns_are_those_above_the_threshold():
    x = torch.zeros(3, 8)
    x[1, 2], x[0, 5], x[2, 6] = 7.0, -9.0, 5.9
    assert outlier_columns(x).tolist() == [2, 5]
    assert outlier_columns(x, threshold=5.0).tolist() == [2, 5, 6]


def test_int8_matmul_is_exact():
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-127, 128, (5, 300), generator=g, dtype=torch.int8)
    b = torch.randint(-127, 128, (300, 7), generator=g, dtype=torch.int8)
    assert torch.equal(int8_matmul(a, b), a.long().mm(b.long()).int())


def test_quantize_rows_keeps_each_rows_largest_value():
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    q, scale = quantize_rows(x)
    assert q[0].tolist() == [64, -127, 32] and scale[1] == 1.0 and q[1].abs().sum() == 0


def test_without_outliers_it_is_close_to_the_float_product():
    w, x = _data()
    layer = LLMInt8Linear(w)
    exact = x @ w.t()
    assert outlier_columns(x).numel() == 0
    assert (layer(x) - exact).abs().max() < 0.02 * exact.abs().max()


def test_the_decomposition_saves_the_other_columns_from_an_outlier():
    """Measured against the product with the int8 weight (its rounding is common to both), the
    error left is the activations' rounding: one large feature makes it large for the row."""
    w, x = _data()
    x[:, 10] = 60.0  # one large feature in every row, as in the paper's large models
    layer = LLMInt8Linear(w)
    reference = x @ dequantize_int8(*quantize_int8(w)).t()
    with_split = (layer(x) - reference).abs().mean()
    without = (layer(x, decompose=False) - reference).abs().mean()
    assert without > 10 * with_split


def test_bad_arguments_are_refused():
    w, _ = _data()
    with pytest.raises(ValueError, match="threshold"):
        LLMInt8Linear(w, threshold=0)
    with pytest.raises(ValueError, match="matrix"):
        LLMInt8Linear(w[0])
