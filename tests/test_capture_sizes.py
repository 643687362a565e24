"""CUDA graphs by batch size: the captured size a step replays, the rows padding adds, and the
choice of a capture list under a limit on graphs (minillm/engine/capture_sizes.py)."""

import pytest

from minillm.engine.capture_sizes import choose_capture_sizes, graph_batch_size, padded_rows


@pytest.mark.parametrize("batch, sizes, want", [
    (1, [1, 2, 4, 8], 1), (3, [1, 2, 4, 8], 4), (8, [1, 2, 4, 8], 8), (9, [1, 2, 4, 8], None),
    (5, [16, 1, 8, 4], 8),  # the list need not be sorted
    (13, [1, 2, 4] + list(range(8, 257, 8)), 16),  # vLLM's default list begins so
])
def test_a_step_replays_the_smallest_captured_size_that_holds_it(batch, sizes, want):
    before = list(sizes)
    assert graph_batch_size(batch, sizes) == want
    assert sizes == before


def test_padding_counts_the_empty_rows_and_an_eager_step_pads_nothing():
    assert padded_rows([8, 7, 5, 3, 1], [1, 2, 4, 8]) == 0 + 1 + 3 + 1 + 0
    assert padded_rows([12, 3], [1, 2, 4, 8]) == 1  # 12 runs eagerly
    assert padded_rows([], [1]) == 0


def test_the_choice_trades_graphs_for_padding():
    steps = [16] * 3 + [12] * 5 + [5] * 4 + [1] * 2
    lists = {"dense": list(range(1, 17)), "pow2": [1, 2, 4, 8, 16], "ends": [1, 16],
             "small": [1, 2, 4, 8]}
    assert choose_capture_sizes(steps, lists, 16) == "dense"
    assert choose_capture_sizes(steps, lists, 5) == "pow2"
    assert choose_capture_sizes(steps, lists, 2) == "ends"
    assert choose_capture_sizes(steps, lists, 1) is None  # none gives every step a graph


def test_ties_go_to_fewer_graphs_then_to_the_first_listed():
    steps = [4, 4, 2]
    assert choose_capture_sizes(steps, {"a": [1, 2, 4, 8], "b": [2, 4]}, 8) == "b"
    assert choose_capture_sizes(steps, {"a": [2, 4], "b": [4, 2]}, 8) == "a"


@pytest.mark.parametrize("call, error", [
    (lambda: graph_batch_size(0, [1, 2]), "batch must be"),
    (lambda: graph_batch_size(2.5, [1, 2]), "batch must be"),
    (lambda: graph_batch_size(2, []), "capture_sizes is empty"),
    (lambda: graph_batch_size(2, [1, 0]), "a capture size must be"),
    (lambda: choose_capture_sizes([1], {"a": [1]}, 0), "max_graphs must be"),
])
def test_bad_input_says_what_is_allowed(call, error):
    with pytest.raises((ValueError, TypeError), match=error):
        call()
