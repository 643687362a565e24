"""Checkers for exercises/09_scaling_out.ipynb: sharing features out among ranks, splitting a
linear layer both ways for tensor parallelism, the tensor-parallel feed-forward block, and a load
test's percentiles, compared with `minillm.distributed.tensor_parallel` and `minillm.utils.stats`."""

from __future__ import annotations

import random

import torch

from ...distributed.tensor_parallel import shard_mlp, split_evenly
from ...utils.stats import percentile as reference_percentile
from ._base import (CheckFailed, as_int, call, checker, expect, expect_raises, is_close,
                    matching_mistake, number_or_none, passed, short)

# --- 1 · sharing features out among ranks ---------------------------------------------------------

SPLITS = [(6, 2), (10, 3), (7, 4), (5, 5), (9, 1), (100, 8), (576, 3), (1536, 7), (3, 2), (13, 5)]


def _as_ranges(got, what, parts):
    expect(isinstance(got, (list, tuple)), f"{what} returned {type(got).__name__} {short(got)}; "
                                           "return a list of ranges, one per rank")
    out = []
    for part in got:
        if isinstance(part, range):
            if part.step != 1:
                raise CheckFailed(f"{what} returned {part!r}; each rank's share is contiguous "
                                  "(step 1)")
            out.append((part.start, part.stop))
        elif isinstance(part, (list, tuple)) and len(part) == 2:
            out.append((as_int(part[0], what), as_int(part[1], what)))
        else:
            raise CheckFailed(f"{what} returned {short(part)} for a rank; return range(start, "
                              "stop) (or a (start, stop) pair)")
    return out


def _split_variant(total, parts, kind):
    if kind == "rest to last":
        base = total // parts
        bounds = [i * base for i in range(parts)] + [total]
    elif kind == "floor":
        base = total // parts
        bounds = [i * base for i in range(parts + 1)]
    elif kind == "ceil":
        base = -(-total // parts)
        bounds = [min(i * base, total) for i in range(parts + 1)]
    else:  # the extra ones to the last ranks
        base, extra = divmod(total, parts)
        sizes = [base + (1 if i >= parts - extra else 0) for i in range(parts)]
        bounds = [sum(sizes[:i]) for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


@checker
def check_split_evenly(split) -> None:
    """`split(total, parts)`: `parts` contiguous ranges covering 0..total-1 whose sizes differ by
    at most one, the larger ones first; ValueError when parts is not from 1 to total."""
    answers = []
    for total, parts in SPLITS:
        what = f"split_evenly({total}, {parts})"
        answers.append(_as_ranges(call(split, total, parts, what=what), what, parts))
    wants = [[(r.start, r.stop) for r in split_evenly(t, p)] for t, p in SPLITS]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if wrong:
        i = wrong[0]
        hint = matching_mistake(answers, [
            ("the last rank took all the leftover items; give them out one each to the first "
             "ranks, so sizes differ by at most one", [_split_variant(t, p, "rest to last")
                                                       for t, p in SPLITS]),
            ("the leftover items (total % parts) were dropped: every item must go to some rank",
             [_split_variant(t, p, "floor") for t, p in SPLITS]),
            ("rounding the share up leaves the last ranks short (or empty); give the first "
             "total % parts ranks one item more than the others",
             [_split_variant(t, p, "ceil") for t, p in SPLITS]),
            ("the larger shares go to the FIRST ranks (rank 0 first), as minillm does",
             [_split_variant(t, p, "last ranks") for t, p in SPLITS]),
        ], list.__eq__)
        total, parts = SPLITS[i]
        raise CheckFailed(f"split_evenly({total}, {parts}) returned "
                          f"{[range(a, b) for a, b in answers[i]]}, expected "
                          f"{split_evenly(total, parts)}" + (f": {hint}" if hint else ""))
    for total, parts in ((3, 4), (5, 0)):
        expect_raises(split, total, parts, error=ValueError,
                      why=f"{total} items cannot go to {parts} ranks (1 to {total} can share "
                          "them)")
    passed("split_evenly", len(SPLITS) + 2)


# --- 2, 3 · column- and row-parallel linear layers ------------------------------------------------

# (batch, seq, in_features, out_features, world_size): even and uneven splits
SHAPES = [(1, 3, 8, 6, 2), (2, 4, 12, 10, 3), (1, 1, 5, 7, 2), (1, 2, 9, 4, 4), (1, 2, 6, 6, 1),
          (2, 1, 16, 16, 4), (1, 5, 7, 11, 3)]


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


@checker
def check_column_parallel(column_parallel_parts) -> None:
    """`column_parallel_parts(x, weight, world_size)`: rank r's output features,
    x @ weight[rows_r].T, with rows_r = split_evenly(out_features, world_size)[r]."""
    for n, shape in enumerate(SHAPES):
        x, w, world = _case(shape, n)
        what = f"column_parallel_parts(x {tuple(x.shape)}, weight {tuple(w.shape)}, {world})"
        parts = _parts(call(column_parallel_parts, x, w, world, what=what), world, what)
        full = x @ w.T
        for r, (part, rows) in enumerate(zip(parts, split_evenly(w.shape[0], world))):
            want = x @ w[rows.start:rows.stop].T
            if part.shape == full.shape and world > 1:
                raise CheckFailed(f"{what}: rank {r}'s part has the full output's shape "
                                  f"{tuple(full.shape)}; a column-parallel rank computes only "
                                  f"its own output features ({len(rows)} of {w.shape[0]})")
            if part.shape != want.shape and part.shape[:-1] == want.shape[:-1] \
                    and part.shape[-1] == len(split_evenly(w.shape[1], world)[r]):
                raise CheckFailed(f"{what}: rank {r}'s part has shape {tuple(part.shape)}; it "
                                  "looks split by input features. Column-parallel splits the "
                                  "weight's rows (the output features): weight[rows]")
            expect(part.shape == want.shape,
                   f"{what}: rank {r}'s part has shape {tuple(part.shape)}, expected "
                   f"{tuple(want.shape)} (rows {rows.start}..{rows.stop - 1} of the weight)")
            expect(torch.allclose(part.to(want.dtype), want, atol=1e-9),
                   f"{what}: rank {r}'s part differs from x @ weight[{rows.start}:{rows.stop}].T")
        expect(torch.allclose(torch.cat(parts, -1).to(full.dtype), full, atol=1e-9),
               f"{what}: the parts, concatenated, do not give x @ weight.T")
    passed("column_parallel_parts", len(SHAPES))


@checker
def check_row_parallel(row_parallel_parts) -> None:
    """`row_parallel_parts(x, weight, world_size)`: rank r's partial sum,
    x[..., cols_r] @ weight[:, cols_r].T, with cols_r = split_evenly(in_features, world_size)[r]."""
    for n, shape in enumerate(SHAPES):
        x, w, world = _case(shape, 100 + n)
        what = f"row_parallel_parts(x {tuple(x.shape)}, weight {tuple(w.shape)}, {world})"
        parts = _parts(call(row_parallel_parts, x, w, world, what=what), world, what)
        full = x @ w.T
        for r, (part, cols) in enumerate(zip(parts, split_evenly(w.shape[1], world))):
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
        expect(torch.allclose(sum(parts).to(full.dtype), full, atol=1e-9),
               f"{what}: the parts, added up (the all-reduce), do not give x @ weight.T")
    passed("row_parallel_parts", len(SHAPES))


# --- 4 · the tensor-parallel feed-forward block ---------------------------------------------------

# (hidden, ffn, ranks): even splits, and 10 features over 3 ranks, where split_evenly's 4, 3, 3
# and torch.chunk's 4, 4, 2 differ
FFN_CASES = [(16, 24, 2), (8, 12, 3), (10, 7, 2), (12, 32, 4), (6, 5, 1), (8, 10, 3)]


def _ffn(hidden, ffn, seed):
    from ...layers import GatedMLP
    from ...model.config import ModelConfig

    torch.manual_seed(seed)
    config = ModelConfig("llama", 10, hidden, 1, 2, 2, 2, ffn)
    mlp = GatedMLP(config).double().eval()
    x = torch.randn(2, 3, hidden, dtype=torch.float64)
    return mlp, x


def _ffn_variant(x, mlp, world, *, chunk=False, act=None, silu_after=False, down_of=None):
    """Each rank's partial output, computed with one of the usual mistakes (None when that
    mistake cannot run on this case). `down_of(r, world)`: the share whose columns of down rank
    r uses (r itself when right)."""
    import torch.nn.functional as F

    act = act or F.silu
    ffn = mlp.gate_proj.weight.shape[0]
    if chunk:
        size = -(-ffn // world)
        shares = [range(i, min(i + size, ffn)) for i in range(0, ffn, size)]
    else:
        shares = split_evenly(ffn, world)
    if len(shares) != world:
        return None
    parts = []
    for r, rows in enumerate(shares):
        cols = shares[down_of(r, world) if down_of else r]
        if len(cols) != len(rows):
            return None
        gate = x @ mlp.gate_proj.weight[rows.start:rows.stop].T
        up = x @ mlp.up_proj.weight[rows.start:rows.stop].T
        hidden = act(gate * up) if silu_after else act(gate) * up
        parts.append(hidden @ mlp.down_proj.weight[:, cols.start:cols.stop].T)
    return parts


def _same_parts(got, want) -> bool:
    return want is not None and len(got) == len(want) and all(
        g.shape == w.shape and torch.allclose(g.to(w.dtype), w, atol=1e-9)
        for g, w in zip(got, want))


def _check_ffn_shapes(what, parts, full, world) -> None:
    for r, part in enumerate(parts):
        expect(part.shape == full.shape,
               f"{what}: rank {r}'s part has shape {tuple(part.shape)}; each rank gives a "
               f"partial sum of the whole output {tuple(full.shape)} (down_proj is "
               "row-parallel)")
        if world > 1 and torch.allclose(part.to(full.dtype), full, atol=1e-9):
            raise CheckFailed(f"{what}: rank {r}'s part is already the whole output; each rank "
                              "uses only its own share of the hidden features")


@checker
def check_tp_feed_forward(tp_feed_forward_parts) -> None:
    """`tp_feed_forward_parts(x, mlp, world_size)`: rank r's partial output of the SwiGLU block
    `mlp`: gate and up column-parallel, down row-parallel, over r's share of the hidden
    features (split_evenly), as minillm's shard_mlp."""
    cases, answers, wants, failure = [], [], [], None
    with torch.no_grad():
        for i, (hidden, ffn, world) in enumerate(FFN_CASES):
            mlp, x = _ffn(hidden, ffn, seed=i)
            what = (f"tp_feed_forward_parts(x {tuple(x.shape)}, mlp with {ffn} hidden features, "
                    f"{world})")
            try:
                parts = _parts(call(tp_feed_forward_parts, x, mlp, world, what=what), world,
                               what)
                _check_ffn_shapes(what, parts, mlp(x), world)
            except CheckFailed as error:  # reported unless an earlier case was already wrong
                failure = error
                break
            cases.append((what, x, mlp, world, ffn))
            answers.append(parts)
            wants.append([shard_mlp(mlp, rows, r)(x)
                          for r, rows in enumerate(split_evenly(ffn, world))])
        wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _same_parts(g, w)]
        if not wrong:
            if failure is not None:
                raise failure
            passed("tp_feed_forward_parts", len(FFN_CASES))
            return
        import torch.nn.functional as F

        same = ("the gate's and up's rows and down's columns are the SAME hidden features: rank "
                "r uses share r of all three")
        mistakes = [
            ("the hidden features are shared out as split_evenly does (10 over 3 ranks: 4, 3, 3); "
             "torch.chunk gives 4, 4, 2", dict(chunk=True)),
            ("the activation is SiLU, x * sigmoid(x) (F.silu), not ReLU", dict(act=F.relu)),
            ("SiLU goes on the gate alone: silu(gate x) * (up x), not silu(gate x * up x)",
             dict(silu_after=True)),
            (same, dict(down_of=lambda r, world: (r + 1) % world)),
            (same, dict(down_of=lambda r, world: world - 1 - r)),
        ]
        hint = None
        for words, kind in mistakes:
            # the mistake, where it can run, gives the learner's parts on every case, the first
            # wrong one included
            models = [_ffn_variant(x, mlp, world, **kind) for _, x, mlp, world, _ in cases]
            if models[wrong[0]] is not None and all(
                    m is None or _same_parts(a, m) for a, m in zip(answers, models)):
                hint = words
                break
    i = wrong[0]
    what, _, _, world, ffn = cases[i]
    for r, (part, want) in enumerate(zip(answers[i], wants[i])):
        if not torch.allclose(part.to(want.dtype), want, atol=1e-9):
            rows = split_evenly(ffn, world)[r]
            a, b = rows.start, rows.stop
            raise CheckFailed(f"{what}: rank {r}'s part differs from down[:, {a}:{b}] applied to "
                              f"silu(gate[{a}:{b}] x) * up[{a}:{b}] x"
                              + (f": {hint}" if hint else ""))
    raise CheckFailed(f"{what}: the parts, added up, do not give mlp(x)")


# --- 5 · a load test's percentile -----------------------------------------------------------------

def _percentile_cases():
    rng = random.Random(9)
    cases = [([5.0], 99), ([1.0, 2.0], 50), ([3.0, 1.0, 2.0], 50), ([1.0, 2.0, 3.0, 4.0], 90),
             ([4.0, 1.0, 3.0, 2.0], 0), ([4.0, 1.0, 3.0, 2.0], 100), ([2.0, 2.0, 9.0], 75)]
    cases += [([rng.expovariate(1.0) for _ in range(n)], q)
              for n, q in ((10, 99), (101, 99), (37, 50), (200, 90), (7, 25), (1000, 99.9))]
    return cases


def _percentile_variant(values, q, kind):
    data = sorted(values) if kind != "unsorted" else list(values)
    n = len(data)
    if kind == "nearest":
        return data[min(n - 1, int(q / 100 * n))]
    position = (n - 1) * q / 100 if kind != "n not n-1" else n * q / 100
    low = min(int(position), n - 1)
    high = min(low + 1, n - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


@checker
def check_percentile(percentile) -> None:
    """`percentile(values, q)`: numpy's default (linear between closest ranks), as
    minillm.utils.stats.percentile."""
    cases = _percentile_cases()
    answers = []
    for values, q in cases:
        shown = values if len(values) <= 4 else f"<{len(values)} latencies>"
        what = f"percentile({shown}, {q})"
        got = call(percentile, values, q, what=what)
        value = number_or_none(got)
        if value is None:
            raise CheckFailed(f"{what} returned {type(got).__name__} {short(got)}; return a "
                              "number")
        answers.append(value)
    wants = [reference_percentile(v, q) for v, q in cases]
    same = lambda a, b: is_close(a, b, rel=1e-5, abs_=1e-6)  # noqa: E731 (float32 quantile ok)
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not same(g, w)]
    if not wrong:
        passed("percentile", len(cases))
        return
    i = wrong[0]
    values, q = cases[i]
    hint = matching_mistake(answers, [
        ("that is the nearest rank; interpolate linearly between the two values around "
         "position (n - 1) x q / 100", [_percentile_variant(v, q, "nearest") for v, q in cases]),
        ("the position is (n - 1) x q / 100 (the first value is the 0th percentile, the last the "
         "100th), not n x q / 100", [_percentile_variant(v, q, "n not n-1") for v, q in cases]),
        ("sort the values first (sorted(values) makes a sorted copy)",
         [_percentile_variant(v, q, "unsorted") for v, q in cases]),
    ], same)
    shown = values if len(values) <= 4 else f"<{len(values)} latencies>"
    raise CheckFailed(f"percentile({shown}, {q}) returned {answers[i]!r}, expected {wants[i]!r}"
                      + (f": {hint}" if hint else ": sort, find position (n - 1) x q / 100, and "
                                                  "interpolate between the values on either side"))
