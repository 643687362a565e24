"""CUDA graphs by batch size (CUDA 图): a graph replays one recorded step of one shape, so a
serving engine captures a graph for each size in a list and pads every decode step up to the
next captured size (vLLM's `cudagraph_capture_sizes`, SGLang's `cuda_graph_bs`). A step
larger than every captured size runs without a graph. Fewer sizes cost less capture time and
memory; more sizes pad fewer rows.
"""

from __future__ import annotations

from ..utils.validate import check_int


def _sizes(capture_sizes) -> list[int]:
    sizes = [check_int("a capture size", s, 1) for s in capture_sizes]
    if not sizes:
        raise ValueError("capture_sizes is empty: list at least one batch size to capture")
    return sizes


def graph_batch_size(batch: int, capture_sizes) -> int | None:
    """The captured size a step of `batch` requests replays: the smallest one at least as large,
    or None when the batch is larger than every captured size (the step runs without a graph)."""
    check_int("batch", batch, 1)
    fitting = [size for size in _sizes(capture_sizes) if size >= batch]
    return min(fitting) if fitting else None


def padded_rows(batch_sizes, capture_sizes) -> int:
    """The empty rows the steps run, each padded to its graph's size (a step without a graph
    pads nothing)."""
    sizes = _sizes(capture_sizes)
    return sum((graph_batch_size(b, sizes) or b) - b for b in batch_sizes)


def choose_capture_sizes(batch_sizes, candidates: dict, max_graphs: int) -> str | None:
    """The name of the candidate list that pads the fewest rows over the steps `batch_sizes`,
    among those of at most `max_graphs` sizes that give every step a graph (ties: fewer graphs,
    then the first listed); None when no candidate qualifies."""
    check_int("max_graphs", max_graphs, 1)
    largest = max(batch_sizes, default=0)
    qualified = [(padded_rows(batch_sizes, sizes), len(set(sizes)), order, name)
                 for order, (name, sizes) in enumerate(candidates.items())
                 if len(set(_sizes(sizes))) <= max_graphs and max(sizes) >= largest]
    return min(qualified)[3] if qualified else None
