"""measure.compare: both sides interleaved, a verdict only when every repetition agrees."""

import os

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


def test_a_one_thread_run_whose_wall_time_load_split_is_judged_by_its_cpu_time():
    """Another program's work lengthens wall time, never this process's CPU time: a one-thread
    comparison whose wall-time repetitions disagree takes its verdict from CPU time, and says
    so with the wall-time spread beside it."""
    wall_a, wall_b = (1.0, 1.0, 1.0), (2.0, 0.9, 1.8)   # a busy core landed on b's 2nd run
    cpu_a, cpu_b = (0.9, 0.9, 0.9), (1.6, 1.7, 1.6)
    c = Comparison(wall_a, wall_b, cpu_a, cpu_b, threads=1)
    assert c.by_cpu_time and c.above(1.0) is True and c.ratio == pytest.approx(1.6 / 0.9)
    assert "of this process's CPU time" in c.spread_text()
    assert "wall time 0.90-2.00x, disturbed by other programs" in c.spread_text()
    # two threads: CPU time counts both threads and their waiting, so wall time decides
    assert Comparison(wall_a, wall_b, cpu_a, cpu_b, threads=2).above(1.0) is None
    # the work was elsewhere (a server process, a sleep): CPU time is not the cost
    idle = Comparison(wall_a, wall_b, (0.01, 0.01, 0.01), (0.02, 0.02, 0.02), threads=1)
    assert not idle.by_cpu_time and idle.above(1.0) is None
    # wall times that agree keep the verdict and the wording of wall time
    steady = Comparison((1.0, 1.0), (1.5, 1.52), (0.9, 0.9), (1.3, 1.4), threads=1)
    assert not steady.by_cpu_time and "CPU" not in steady.spread_text()


def _loop(n):
    total = 0
    for i in range(n):
        total += i
    return total


def _spin():
    # another program at the lowest priority: it takes every cycle the scheduler has spare, but
    # leaves this process its share when the other test worker is busy too (at full priority,
    # a spinner beside a busy worker left the timed process 28% of its wall time, where
    # comparison.CPU_SHARE rightly reads the run as work done elsewhere)
    os.nice(19)
    while True:
        pass


def test_twice_the_work_is_called_twice_the_work_beside_a_busy_core(monkeypatch):
    """A real comparison, one thread, with a second process spinning on a core (and, under
    `make test`, the other test worker busy too): the verdict holds."""
    import multiprocessing

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    spinner = multiprocessing.Process(target=_spin, daemon=True)
    spinner.start()
    try:
        c = compare(lambda: _loop(200_000), lambda: _loop(400_000), repeats=5)
    finally:
        spinner.terminate()
        spinner.join()
        torch.set_num_threads(before)
    assert c.threads == 1 and len(c.cpu_a) == 5
    assert c.above(1.5) is True, (c.ratios, c.cpu_ratios)


def test_microsecond_timings_keep_wall_time_whatever_their_spread():
    """Below a millisecond the clocks' own jitter spreads the ratios: that is not load."""
    tiny = Comparison((1e-4, 1e-4, 1e-4), (1e-6, 3e-6, 2e-6), (1e-4, 1e-4, 1e-4),
                      (1e-6, 1e-6, 1e-6), threads=1)
    assert not tiny.by_cpu_time and "CPU" not in tiny.spread_text()


def test_a_side_that_took_no_cpu_time_does_not_divide_by_zero():
    """A side whose work was elsewhere (a sleep, another process) has CPU time 0: its CPU ratios
    spread without bound, so wall time keeps the verdict."""
    c = Comparison((0.01, 0.01, 0.01), (0.02, 0.012, 0.03), (0.01, 0.01, 0.01),
                   (0.0, 0.01, 0.01), threads=1)
    assert not c.by_cpu_time and c.above(1.0) is True
