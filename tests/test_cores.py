"""minillm.utils.cores: torch's threads fitted to the cores other programs leave free."""

import multiprocessing
import time

import pytest
import torch

from minillm.utils import cores


def _spin():
    while True:
        pass


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_a_core_more_than_half_busy_costs_one_thread():
    assert cores.free_core_threads(2, 1.02, cores=2) == 1
    assert cores.free_core_threads(2, 0.4, cores=2) == 2, "a browser idling beside is not a core"
    assert cores.free_core_threads(8, 2.6, cores=8) == 5
    assert cores.free_core_threads(2, 3.5, cores=2) == 1, "at least one thread"
    assert cores.free_core_threads(4, 0.0, cores=16) == 4, "never more threads than torch had"
    assert cores.free_core_threads(2, None, cores=2) == 2, "unmeasured: unchanged"


@pytest.mark.skipif(cores._machine_busy_ticks() is None, reason="no /proc/stat on this system")
def test_a_spinning_process_is_counted_as_a_busy_core():
    spinner = multiprocessing.Process(target=_spin, daemon=True)
    spinner.start()
    try:
        time.sleep(0.3)
        busy = cores.others_busy_cores(0.5)
    finally:
        spinner.terminate()
        spinner.join()
    assert busy is not None and busy >= 0.6, busy  # the other test worker may add to it


def test_threads_are_taken_away_only_for_busy_cores_and_said(monkeypatch, threads):
    monkeypatch.delenv(cores.THREADS_VARIABLE, raising=False)
    monkeypatch.setattr(cores.os, "cpu_count", lambda: 2)
    torch.set_num_threads(2)
    monkeypatch.setattr(cores, "others_busy_cores", lambda seconds=0.5: 1.02)
    line = cores.use_free_cores()
    assert torch.get_num_threads() == 1
    assert "1.0 of 2 cores busy" in line and "1 thread(s) instead of 2" in line
    torch.set_num_threads(2)
    monkeypatch.setattr(cores, "others_busy_cores", lambda seconds=0.5: 0.05)
    assert cores.use_free_cores() == "torch threads: 2" and torch.get_num_threads() == 2


def test_the_threads_variable_chooses_and_a_bad_value_says_what_is_allowed(monkeypatch,
                                                                             threads):
    monkeypatch.setenv(cores.THREADS_VARIABLE, "1")
    assert cores.use_free_cores() == f"torch threads: 1, as {cores.THREADS_VARIABLE} asks"
    assert torch.get_num_threads() == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(cores.THREADS_VARIABLE, bad)
        with pytest.raises(ValueError, match="whole number of threads, 1 or more"):
            cores.use_free_cores()
