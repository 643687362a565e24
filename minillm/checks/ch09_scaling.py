"""Checkers for exercises/09_scaling_out.ipynb: splitting a linear layer for tensor parallelism, the
communication a tensor- or pipeline-parallel forward needs, and a load test's percentiles."""

from __future__ import annotations

import random

import torch

from ._base import CheckFailed, call, expect, expect_close, passed

# (batch, seq, in_features, out_features, world_size): even and uneven splits
SHAPES = [(1, 3, 8, 6, 2), (2, 4, 12, 10, 3), (1, 1, 5, 7, 2), (1, 2, 9, 4, 4), (1, 2, 6, 6, 1)]


def _ranges(total: int, parts: int) -> list[range]:
    from ..distributed.tensor_parallel import split_evenly

    return split_evenly(total, parts)


def _case(shape, seed):
    b, s, n_in, n_out, world = shape
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s, n_in, generator=g, dtype=torch.float64),
            torch.randn(n_out, n_in, generator=g, dtype=torch.float64), world)


def _parts(got, world, what):
    if isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} returned one tensor; return a list with one tensor per rank "
                          f"({world} of them), before they are put together")
    expect(isinstance(got, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in got),
           f"{what} returned {type(got).__name__}; return a list of tensors, one per rank")
    expect(len(got) == world, f"{what} returned {len(got)} parts for world_size={world}; "
                              "give one part per rank")
    return list(got)


def check_column_parallel(column_parallel_parts) -> None:
    """`column_parallel_parts(x, weight, world_size)`: rank r's output features,
    x @ weight[rows_r].T, with rows_r = split_evenly(out_features, world_size)[r]."""
    for n, shape in enumerate(SHAPES):
        x, w, world = _case(shape, n)
        what = f"column_parallel_parts(x {tuple(x.shape)}, weight {tuple(w.shape)}, {world})"
        parts = _parts(call(column_parallel_parts, x.clone(), w.clone(), world), world, what)
        full = x @ w.T
        for r, (part, rows) in enumerate(zip(parts, _ranges(w.shape[0], world))):
            want = x @ w[rows.start:rows.stop].T
            if part.shape == full.shape and world > 1:
                raise CheckFailed(f"{what}: rank {r}'s part has the full output's shape "
                                  f"{tuple(full.shape)}; a column-parallel rank computes only "
                                  f"its own output features ({len(rows)} of {w.shape[0]})")
            if part.shape[-1] == w.shape[1] // world and part.shape != want.shape:
                raise CheckFailed(f"{what}: rank {r}'s part has shape {tuple(part.shape)}; it "
                                  "looks split by input features. Column-parallel splits the "
                                  "weight's rows (the output features): weight[rows]")
            expect(part.shape == want.shape,
                   f"{what}: rank {r}'s part has shape {tuple(part.shape)}, expected "
                   f"{tuple(want.shape)} (rows {rows.start}..{rows.stop - 1} of the weight)")
            expect(torch.allclose(part.to(want.dtype), want, atol=1e-9),
                   f"{what}: rank {r}'s part differs from x @ weight[{rows.start}:{rows.stop}].T")
        expect(torch.allclose(torch.cat(parts, -1), full, atol=1e-9),
               f"{what}: the parts, concatenated, do not give x @ weight.T")
    passed("column_parallel_parts", len(SHAPES))


def check_row_parallel(row_parallel_parts) -> None:
    """`row_parallel_parts(x, weight, world_size)`: rank r's partial sum,
    x[..., cols_r] @ weight[:, cols_r].T, with cols_r = split_evenly(in_features, world_size)[r]."""
    for n, shape in enumerate(SHAPES):
        x, w, world = _case(shape, 100 + n)
        what = f"row_parallel_parts(x {tuple(x.shape)}, weight {tuple(w.shape)}, {world})"
        parts = _parts(call(row_parallel_parts, x.clone(), w.clone(), world), world, what)
        full = x @ w.T
        for r, (part, cols) in enumerate(zip(parts, _ranges(w.shape[1], world))):
            want = x[..., cols.start:cols.stop] @ w[:, cols.start:cols.stop].T
            if part.shape != full.shape:
                raise CheckFailed(f"{what}: rank {r}'s part has shape {tuple(part.shape)}; a "
                                  "row-parallel rank makes a partial sum of the *whole* output "
                                  f"{tuple(full.shape)} from its input features")
            if world > 1 and torch.allclose(part.to(full.dtype), full, atol=1e-9):
                raise CheckFailed(f"{what}: rank {r}'s part is already the full output; each "
                                  "rank must use only its own input features "
                                  f"x[..., {cols.start}:{cols.stop}] and weight[:, "
                                  f"{cols.start}:{cols.stop}]")
            expect(torch.allclose(part.to(want.dtype), want, atol=1e-9),
                   f"{what}: rank {r}'s part differs from x[..., {cols.start}:{cols.stop}] @ "
                   f"weight[:, {cols.start}:{cols.stop}].T")
        expect(torch.allclose(sum(parts), full, atol=1e-9),
               f"{what}: the parts, added up (the all-reduce), do not give x @ weight.T")
    passed("row_parallel_parts", len(SHAPES))


# (n_layers, hidden_size, bytes_per_value): SmolLM2 fp32 and bf16, a 7B Llama, GPT-3
COMM_CASES = [(30, 576, 4), (30, 576, 2), (32, 4096, 2), (96, 12288, 2), (1, 8, 4)]


def check_all_reduce_bytes(all_reduce_bytes_per_token) -> None:
    """`all_reduce_bytes_per_token(n_layers, hidden_size, bytes_per_value)`: the bytes one
    rank contributes to all-reduces for one token: 2 all-reduces per block of a hidden vector."""
    from types import SimpleNamespace

    from ..distributed import all_reduce_cost

    for layers, hidden, nbytes in COMM_CASES:
        what = f"all_reduce_bytes_per_token({layers}, {hidden}, {nbytes})"
        got = call(all_reduce_bytes_per_token, layers, hidden, nbytes)
        _, want = all_reduce_cost(SimpleNamespace(n_layers=layers, hidden_size=hidden), 1,
                                  nbytes)
        if isinstance(got, (int, float)) and got == want // 2:
            raise CheckFailed(f"{what} = {got}: that is one all-reduce per block; a block has "
                              "two (after attention and after the feed-forward)")
        if isinstance(got, (int, float)) and got == want // nbytes:
            raise CheckFailed(f"{what} = {got}: that counts values; multiply by the bytes per "
                              "value")
        expect_close(got, want, what)
    passed("all_reduce_bytes_per_token", len(COMM_CASES))


def check_pipeline_bytes(pipeline_bytes_per_token) -> None:
    """`pipeline_bytes_per_token(hidden_size, bytes_per_value, stages)`: bytes sent from stage to
    stage for one token: one hidden vector across each of the stages - 1 boundaries."""
    cases = [(576, 4, 2), (576, 2, 4), (4096, 2, 8), (8, 4, 1)]
    for hidden, nbytes, stages in cases:
        what = f"pipeline_bytes_per_token({hidden}, {nbytes}, {stages})"
        got = call(pipeline_bytes_per_token, hidden, nbytes, stages)
        want = (stages - 1) * hidden * nbytes
        if isinstance(got, (int, float)) and got == stages * hidden * nbytes and stages > 0:
            raise CheckFailed(f"{what} = {got}: {stages} stages have {stages - 1} boundaries "
                              "between them; the last stage sends nothing on")
        expect_close(got, want, what)
    passed("pipeline_bytes_per_token", len(cases))


def check_percentile(percentile) -> None:
    """`percentile(values, q)`: numpy's default (linear between closest ranks)."""
    import numpy as np

    rng = random.Random(9)
    cases = [([5.0], 99), ([1.0, 2.0], 50), ([3.0, 1.0, 2.0], 50), ([1.0, 2.0, 3.0, 4.0], 90)]
    cases += [([rng.expovariate(1.0) for _ in range(n)], q)
              for n, q in ((10, 99), (101, 99), (37, 50), (200, 90))]
    for values, q in cases:
        want = float(np.percentile(values, q))
        shown = values if len(values) <= 4 else f"<{len(values)} latencies>"
        got = call(percentile, list(values), q)
        if len(values) > 1 and isinstance(got, (int, float)) and q != 50:
            ranked = sorted(values)
            nearest = ranked[min(len(ranked) - 1, int(q / 100 * len(ranked)))]
            if got == nearest and not np.isclose(got, want):
                raise CheckFailed(f"percentile({shown}, {q}) = {got}: that is the nearest "
                                  f"rank; interpolate linearly between the two values around "
                                  f"position (n - 1) x q / 100 ({want!r})")
        expect_close(got, want, f"percentile({shown}, {q})", rel=1e-9)
    passed("percentile", len(cases))
