"""measure.compare: both sides interleaved, a verdict only when every repetition agrees."""

import pytest

from minillm.measure import TOO_NOISY, Comparison, compare, load_average


def test_ratios_are_b_over_a_per_repetition_and_the_ratio_is_their_median():
    c = Comparison(a=(1.0, 2.0, 1.0), b=(2.0, 3.0, 1.5))
    assert c.ratios == [2.0, 1.5, 1.5]
    assert c.ratio == 1.5
    assert c.spread_text() == "1.50x (1.50-2.00 over 3 interleaved repetitions)"


def test_a_verdict_needs_every_repetition_on_the_same_side():
    assert Comparison(a=(1, 1, 1), b=(2, 1.5, 1.1)).above(1.0) is True
    assert Comparison(a=(1, 1, 1), b=(0.5, 0.9, 0.99)).above(1.0) is False
    assert Comparison(a=(1, 1, 1), b=(2, 0.9, 1.5)).above(1.0) is None  # the load moved it
    assert Comparison(a=(1, 1), b=(3, 2.5)).above(2.0) is True


def test_two_sides_within_the_tolerance_of_the_threshold_are_about_even():
    """Repetitions on both sides of the threshold but all close to it are a finding (about
    even), not noise; spread beyond the tolerance they are noise."""
    close = Comparison(a=(1, 1, 1), b=(0.95, 1.02, 0.99))
    assert close.above(1.0) is None and close.near(1.0)
    assert not Comparison(a=(1, 1, 1), b=(0.8, 1.02, 0.99)).near(1.0)
    assert Comparison(a=(1, 1, 1), b=(2.39, 2.72, 2.53)).near(2.7)  # 0.885 to 1.007 of it
    assert not close.near(1.0, tolerance=0.01)
    with pytest.raises(ValueError, match="tolerance"):
        close.near(1.0, tolerance=-1)


def test_compare_interleaves_the_two_sides_and_alternates_which_goes_first():
    calls = []
    c = compare(lambda: calls.append("a"), lambda: calls.append("b"), repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert len(c.a) == len(c.b) == 3 and all(t >= 0 for t in c.a + c.b)


def test_compare_refuses_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        compare(lambda: None, lambda: None, repeats=0)
    with pytest.raises(ValueError, match="threshold"):
        Comparison(a=(1,), b=(1,)).above(-1)


def test_the_noisy_verdict_tells_the_learner_what_to_do():
    assert "rerun this cell" in TOO_NOISY
    assert load_average() == "" or load_average().startswith("load average ")
