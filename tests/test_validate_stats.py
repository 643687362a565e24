"""The shared helpers: argument checks, the one percentile, and device-synchronized timers."""

import math

import numpy as np
import pytest
import torch

from minillm.utils.devices import Timer, best_time, model_device, synchronize
from minillm.utils.stats import percentile, spread
from minillm.utils.validate import check_int, check_number, is_int, is_number


def test_check_int_accepts_numpy_ints_and_names_the_range():
    assert check_int("n", np.int64(3), 1, 5) == 3 and type(check_int("n", np.int64(3))) is int
    assert check_int("n", None, allow_none=True) is None
    with pytest.raises(ValueError, match=r"n must be an int from 1 to 5, got 6"):
        check_int("n", 6, 1, 5)
    with pytest.raises(TypeError, match=r"n must be an int >= 1, got True \(bool\)"):
        check_int("n", True, 1)
    with pytest.raises(TypeError, match=r"n must be an int <= 2, got 1.5 \(float\)"):
        check_int("n", 1.5, high=2)
    with pytest.raises(ValueError, match="n must be a power of two"):
        check_int("n", 3, allowed="a power of two", low=4)


def test_check_number_rejects_nan_inf_and_bools():
    assert check_number("p", np.float32(0.5), 0, 1) == 0.5
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="p must be a number"):
            check_number("p", bad)
    with pytest.raises(TypeError):
        check_number("p", False)
    with pytest.raises(ValueError, match="p must be > 0"):
        check_number("p", 0.0, ok=lambda v: v > 0, allowed="> 0")
    assert is_int(np.int8(1)) and not is_int(True) and is_number(np.float64(1)) and not is_number("1")


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101])
def test_percentile_is_numpys(n):
    values = np.random.default_rng(n).random(n).tolist()
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-12)


def test_percentile_leaves_out_nans_and_checks_q():
    assert percentile([1.0, math.nan, 3.0], 50) == 2.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="q must be a number from 0 to 100"):
        percentile([1.0], 101)
    assert spread([3.0, 1.0, math.nan, 2.0]) == {"n": 3, "min": 1.0, "median": 2.0, "max": 3.0}


def test_model_device_and_timers():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

    assert model_device(Tiny()) == torch.device("cpu")
    assert model_device(object()) == torch.device("cpu")
    synchronize("cpu"), synchronize(Tiny()), synchronize(None)
    with Timer("cpu") as t:
        sum(range(1000))
    assert t.seconds >= 0
    with pytest.raises(RuntimeError, match="has not finished"):
        Timer().seconds
    calls = []
    assert best_time(lambda: calls.append(1), "cpu", repeats=3, warmup=2) >= 0
    assert len(calls) == 5
