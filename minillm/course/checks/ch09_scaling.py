"""Checkers for exercises/09_scaling_out.ipynb: sharing features out among ranks, splitting a
linear layer both ways for tensor parallelism, the tensor-parallel feed-forward block, a load
test's percentiles, and (lesson 09b) top-k routing with a capacity and the choice of a capacity
factor, compared with `minillm.distributed.tensor_parallel`, `minillm.utils.stats` and
`minillm.distributed.moe`.
Every message says both languages side by side (`say`)."""

from __future__ import annotations

import random

import torch

from ...distributed.moe import capacity_of, route
from ...distributed.tensor_parallel import shard_mlp, split_evenly
from ...utils.stats import percentile as reference_percentile
from ..language import say
from ._base import (CheckFailed, _is_array, _is_tensor, as_int, call, checker, end_check,
                    end_variant_check, expect, expect_raises, is_close, matching_mistake,
                    number_or_none, passed, short, with_hint)

# --- 1 · sharing features out among ranks ---------------------------------------------------------

SPLITS = [(6, 2), (10, 3), (7, 4), (5, 5), (9, 1), (100, 8), (576, 3), (1536, 7), (3, 2), (13, 5)]
HIDDEN_SPLITS = [(8, 3), (11, 4), (4, 4), (7, 1), (2, 2), (50, 6), (960, 7), (2560, 3), (5, 2),
                 (17, 5)]


def _as_ranges(got, what, parts):
    expect(isinstance(got, (list, tuple)),
           say("{what} returned {kind} {got}; return a list of ranges, one per rank",
               "{what} 返回了 {kind} {got}；请返回一个由 range 组成的列表，每个进程一个",
               what=what, kind=type(got).__name__, got=short(got)))
    out = []
    for part in got:
        if isinstance(part, range):
            if part.step != 1:
                raise CheckFailed(say("{what} returned {part!r}; each rank's share is "
                                      "contiguous (step 1)",
                                      "{what} 返回了 {part!r}；每个进程分到的是一段连续的范围"
                                      "（步长为 1）", what=what, part=part))
            out.append((part.start, part.stop))
        elif isinstance(part, (list, tuple)) and len(part) == 2:
            out.append((as_int(part[0], what), as_int(part[1], what)))
        else:
            raise CheckFailed(say("{what} returned {part} for a rank; return range(start, "
                                  "stop) (or a (start, stop) pair)",
                                  "{what} 为某个进程返回了 {part}；请返回 range(start, stop)"
                                  "（或一个 (start, stop) 二元组）", what=what, part=short(part)))
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
def check_split_evenly(split, *, hidden=False) -> None:
    """`split(total, parts)`: `parts` contiguous ranges covering 0..total-1 whose sizes differ by
    at most one, the larger ones first; ValueError when parts is not from 1 to total."""
    splits = HIDDEN_SPLITS if hidden else SPLITS
    answers = []
    for total, parts in splits:
        what = f"split_evenly({total}, {parts})"
        answers.append(_as_ranges(call(split, total, parts, what=what), what, parts))
    wants = [[(r.start, r.stop) for r in split_evenly(t, p)] for t, p in splits]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if wrong:
        i = wrong[0]
        hint = matching_mistake(answers, [
            (say("the last rank took all the leftover items; give them out one each to the "
                 "first ranks, so sizes differ by at most one",
                 "剩下的零头全给了最后一个进程；应该从前面的进程开始每个多分一个，让各份的大小"
                 "最多相差一"), [_split_variant(t, p, "rest to last") for t, p in splits]),
            (say("the leftover items (total % parts) were dropped: every item must go to some "
                 "rank", "剩下的零头（total % parts）被丢掉了：每一项都必须分给某个进程"),
             [_split_variant(t, p, "floor") for t, p in splits]),
            (say("rounding the share up leaves the last ranks short (or empty); give the first "
                 "total % parts ranks one item more than the others",
                 "把每份向上取整，会让最后几个进程分得太少（甚至为空）；应让前 total % parts 个"
                 "进程各比其他进程多分一个"),
             [_split_variant(t, p, "ceil") for t, p in splits]),
            (say("the larger shares go to the FIRST ranks (rank 0 first), as minillm does",
                 "较大的那几份要分给*前面*的进程（从进程 0 开始），minillm 就是这么做的"),
             [_split_variant(t, p, "last ranks") for t, p in splits]),
        ], list.__eq__)
        total, parts = splits[i]
        raise CheckFailed(with_hint(
            say("split_evenly({total}, {parts}) returned {got}, expected {want}",
                "split_evenly({total}, {parts}) 返回了 {got}，应为 {want}",
                total=total, parts=parts, got=[range(a, b) for a, b in answers[i]],
                want=split_evenly(total, parts)),
            hint))
    for total, parts in ((2, 5), (6, -1)) if hidden else ((3, 4), (5, 0)):
        expect_raises(split, total, parts, error=ValueError,
                      why=say("{total} items cannot go to {parts} ranks (1 to {total} can share "
                              "them)", "{total} 项不能分给 {parts} 个进程（1 到 {total} 个进程"
                              "才能分）", total=total, parts=parts))
    passed("split_evenly", len(splits) + 2)


# --- 2, 3 · column- and row-parallel linear layers ------------------------------------------------

# (batch, seq, in_features, out_features, world_size): even and uneven splits
SHAPES = [(1, 3, 8, 6, 2), (2, 4, 12, 10, 3), (1, 1, 5, 7, 2), (1, 2, 9, 4, 4), (1, 2, 6, 6, 1),
          (2, 1, 16, 16, 4), (1, 5, 7, 11, 3)]
HIDDEN_SHAPES = [(1, 2, 10, 7, 2), (2, 3, 6, 13, 4), (1, 4, 12, 5, 5), (1, 1, 3, 8, 3),
                 (3, 1, 8, 8, 1), (1, 2, 20, 14, 6), (2, 2, 7, 3, 3)]


def _case(shape, seed):
    b, s, n_in, n_out, world = shape
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s, n_in, generator=g, dtype=torch.float64),
            torch.randn(n_out, n_in, generator=g, dtype=torch.float64), world)


def _parts(got, world, what):
    if isinstance(got, torch.Tensor):
        raise CheckFailed(say("{what} returned one tensor; return a list with one tensor per "
                              "rank ({world} of them), before they are put together",
                              "{what} 只返回了一个张量；请返回一个列表，每个进程一个张量（共 "
                              "{world} 个），不要先把它们合起来", what=what, world=world))
    expect(isinstance(got, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in got),
           say("{what} returned {kind}; return a list of tensors, one per rank",
               "{what} 返回了 {kind}；请返回一个由张量组成的列表，每个进程一个",
               what=what, kind=type(got).__name__))
    expect(len(got) == world,
           say("{what} returned {n} parts for world_size={world}; give one part per rank",
               "{what} 在 world_size={world} 时返回了 {n} 份；每个进程应有一份",
               what=what, n=len(got), world=world))
    return list(got)


def _split_cases(name, fn, shapes, seed):
    """Each case of a tensor-parallel split: (x, weight, world size, the call as text, the
    parts `fn(x, weight, world_size)` returned, the whole x @ weight.T)."""
    for n, shape in enumerate(shapes):
        x, w, world = _case(shape, seed + n)
        what = f"{name}(x {tuple(x.shape)}, weight {tuple(w.shape)}, {world})"
        yield x, w, world, what, _parts(call(fn, x, w, world, what=what), world, what), x @ w.T


@checker
def check_column_parallel(column_parallel_parts, *, hidden=False) -> None:
    """`column_parallel_parts(x, weight, world_size)`: rank r's output features,
    x @ weight[rows_r].T, with rows_r = split_evenly(out_features, world_size)[r]."""
    shapes = HIDDEN_SHAPES if hidden else SHAPES
    for x, w, world, what, parts, full in _split_cases(
            "column_parallel_parts", column_parallel_parts, shapes, 200 if hidden else 0):
        for r, (part, rows) in enumerate(zip(parts, split_evenly(w.shape[0], world))):
            want = x @ w[rows.start:rows.stop].T
            if part.shape == full.shape and world > 1:
                raise CheckFailed(say(
                    "{what}: rank {r}'s part has the full output's shape {shape}; a "
                    "column-parallel rank computes only its own output features ({mine} of "
                    "{all})",
                    "{what}：进程 {r} 的那一份是完整输出的形状 {shape}；列并行的进程只计算它自己"
                    "的输出特征（{all} 个中的 {mine} 个）",
                    what=what, r=r, shape=tuple(full.shape), mine=len(rows), all=w.shape[0]))
            if part.shape != want.shape and part.shape[:-1] == want.shape[:-1] \
                    and part.shape[-1] == len(split_evenly(w.shape[1], world)[r]):
                raise CheckFailed(say(
                    "{what}: rank {r}'s part has shape {shape}; it looks split by input "
                    "features. Column-parallel splits the weight's rows (the output features): "
                    "weight[rows]",
                    "{what}：进程 {r} 的那一份形状是 {shape}；看起来是按输入特征切的。列并行切的"
                    "是权重的行（也就是输出特征）：weight[rows]",
                    what=what, r=r, shape=tuple(part.shape)))
            expect(part.shape == want.shape,
                   say("{what}: rank {r}'s part has shape {shape}, expected {want} (rows "
                       "{a}..{b} of the weight)",
                       "{what}：进程 {r} 的那一份形状是 {shape}，应为 {want}（权重的第 "
                       "{a}..{b} 行）", what=what, r=r, shape=tuple(part.shape),
                       want=tuple(want.shape), a=rows.start, b=rows.stop - 1))
            expect(torch.allclose(part.to(want.dtype), want, atol=1e-9),
                   say("{what}: rank {r}'s part differs from x @ weight[{a}:{b}].T",
                       "{what}：进程 {r} 的那一份与 x @ weight[{a}:{b}].T 不同",
                       what=what, r=r, a=rows.start, b=rows.stop))
        expect(torch.allclose(torch.cat(parts, -1).to(full.dtype), full, atol=1e-9),
               say("{what}: the parts, concatenated, do not give x @ weight.T",
                   "{what}：把各份拼接起来，得不到 x @ weight.T", what=what))
    passed("column_parallel_parts", len(shapes))


@checker
def check_row_parallel(row_parallel_parts, *, hidden=False) -> None:
    """`row_parallel_parts(x, weight, world_size)`: rank r's partial sum,
    x[..., cols_r] @ weight[:, cols_r].T, with cols_r = split_evenly(in_features, world_size)[r]."""
    shapes = HIDDEN_SHAPES if hidden else SHAPES
    for x, w, world, what, parts, full in _split_cases(
            "row_parallel_parts", row_parallel_parts, shapes, 300 if hidden else 100):
        for r, (part, cols) in enumerate(zip(parts, split_evenly(w.shape[1], world))):
            want = x[..., cols.start:cols.stop] @ w[:, cols.start:cols.stop].T
            if part.shape != full.shape:
                raise CheckFailed(say(
                    "{what}: rank {r}'s part has shape {shape}; a row-parallel rank makes a "
                    "partial sum of the *whole* output {full} from its input features",
                    "{what}：进程 {r} 的那一份形状是 {shape}；行并行的进程用它自己的输入特征，"
                    "算出*整个*输出 {full} 的一个部分和",
                    what=what, r=r, shape=tuple(part.shape), full=tuple(full.shape)))
            if world > 1 and torch.allclose(part.to(full.dtype), full, atol=1e-9):
                raise CheckFailed(say(
                    "{what}: rank {r}'s part is already the full output; each rank must use "
                    "only its own input features x[..., {a}:{b}] and weight[:, {a}:{b}]",
                    "{what}：进程 {r} 的那一份已经是完整的输出了；每个进程只能用它自己的输入"
                    "特征 x[..., {a}:{b}] 和 weight[:, {a}:{b}]",
                    what=what, r=r, a=cols.start, b=cols.stop))
            expect(torch.allclose(part.to(want.dtype), want, atol=1e-9),
                   say("{what}: rank {r}'s part differs from x[..., {a}:{b}] @ "
                       "weight[:, {a}:{b}].T",
                       "{what}：进程 {r} 的那一份与 x[..., {a}:{b}] @ weight[:, {a}:{b}].T 不同",
                       what=what, r=r, a=cols.start, b=cols.stop))
        expect(torch.allclose(sum(parts).to(full.dtype), full, atol=1e-9),
               say("{what}: the parts, added up (the all-reduce), do not give x @ weight.T",
                   "{what}：把各份加起来（即全归约），得不到 x @ weight.T", what=what))
    passed("row_parallel_parts", len(shapes))


# --- 4 · the tensor-parallel feed-forward block ---------------------------------------------------

# (hidden, ffn, ranks): even splits, and 10 features over 3 ranks, where split_evenly's 4, 3, 3
# and torch.chunk's 4, 4, 2 differ
FFN_CASES = [(16, 24, 2), (8, 12, 3), (10, 7, 2), (12, 32, 4), (6, 5, 1), (8, 10, 3)]
# 10 over 3 again, 7 over 3 (3, 2, 2 against chunk's 3, 3, 1), 14 over 4 (4, 4, 3, 3 against
# 4, 4, 4, 2)
HIDDEN_FFN_CASES = [(8, 16, 4), (12, 10, 3), (6, 7, 3), (16, 12, 2), (4, 6, 1), (10, 14, 4)]


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
               say("{what}: rank {r}'s part has shape {shape}; each rank gives a partial sum of "
                   "the whole output {full} (down_proj is row-parallel)",
                   "{what}：进程 {r} 的那一份形状是 {shape}；每个进程给出的是整个输出 {full} 的"
                   "一个部分和（down_proj 是行并行的）",
                   what=what, r=r, shape=tuple(part.shape), full=tuple(full.shape)))
        if world > 1 and torch.allclose(part.to(full.dtype), full, atol=1e-9):
            raise CheckFailed(say("{what}: rank {r}'s part is already the whole output; each "
                                  "rank uses only its own share of the hidden features",
                                  "{what}：进程 {r} 的那一份已经是整个输出了；每个进程只用它"
                                  "自己分到的那部分隐藏特征", what=what, r=r))


@checker
def check_tp_feed_forward(tp_feed_forward_parts, *, hidden=False) -> None:
    """`tp_feed_forward_parts(x, mlp, world_size)`: rank r's partial output of the SwiGLU block
    `mlp`: gate and up column-parallel, down row-parallel, over r's share of the hidden
    features (split_evenly), as minillm's shard_mlp."""
    cases, answers, wants, failure = [], [], [], None
    with torch.no_grad():
        ffn_cases = HIDDEN_FFN_CASES if hidden else FFN_CASES
        for i, (width, ffn, world) in enumerate(ffn_cases):
            mlp, x = _ffn(width, ffn, seed=(50 if hidden else 0) + i)
            what = say("tp_feed_forward_parts(x {shape}, mlp with {ffn} hidden features, "
                       "{world})",
                       "tp_feed_forward_parts(x {shape}, 有 {ffn} 个隐藏特征的 mlp, {world})",
                       shape=tuple(x.shape), ffn=ffn, world=world)
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
            passed("tp_feed_forward_parts", len(ffn_cases))
            return
        import torch.nn.functional as F

        same = say("the gate's and up's rows and down's columns are the SAME hidden features: "
                   "rank r uses share r of all three",
                   "gate 和 up 的行、down 的列对应的是*同一批*隐藏特征：进程 r 在三者中用的都是"
                   "第 r 份")
        mistakes = [
            (say("the hidden features are shared out as split_evenly does (10 over 3 ranks: 4, "
                 "3, 3); torch.chunk gives 4, 4, 2",
                 "隐藏特征要按 split_evenly 的方式来分（10 个分给 3 个进程：4、3、3）；"
                 "torch.chunk 分出来的是 4、4、2"), dict(chunk=True)),
            (say("the activation is SiLU, x * sigmoid(x) (F.silu), not ReLU",
                 "激活函数是 SiLU，即 x * sigmoid(x)（F.silu），不是 ReLU"), dict(act=F.relu)),
            (say("SiLU goes on the gate alone: silu(gate x) * (up x), not silu(gate x * up x)",
                 "SiLU 只作用在 gate 上：silu(gate x) * (up x)，而不是 silu(gate x * up x)"),
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
            raise CheckFailed(with_hint(
                say("{what}: rank {r}'s part differs from down[:, {a}:{b}] applied to "
                    "silu(gate[{a}:{b}] x) * up[{a}:{b}] x",
                    "{what}：进程 {r} 的那一份与把 down[:, {a}:{b}] 作用在 "
                    "silu(gate[{a}:{b}] x) * up[{a}:{b}] x 上的结果不同",
                    what=what, r=r, a=a, b=b),
                hint))
    raise CheckFailed(say("{what}: the parts, added up, do not give mlp(x)",
                          "{what}：把各份加起来，得不到 mlp(x)", what=what))


# --- 5 · a load test's percentile -----------------------------------------------------------------

def _percentile_cases(hidden=False):
    if hidden:
        rng = random.Random(19)
        cases = [([7.5], 50), ([3.0, 1.0], 100), ([2.0, 1.0], 0), ([10.0, 20.0, 30.0], 99),
                 ([5.0, 1.0, 4.0, 2.0], 25), ([2.0, 8.0, 4.0, 6.0], 62.5),
                 ([1.0, 1.0, 1.0, 5.0], 90)]
        sizes = ((12, 95), (250, 99), (45, 50), (99, 75), (5, 10), (500, 99.5))
    else:
        rng = random.Random(9)
        cases = [([5.0], 99), ([1.0, 2.0], 50), ([3.0, 1.0, 2.0], 50), ([1.0, 2.0, 3.0, 4.0], 90),
                 ([4.0, 1.0, 3.0, 2.0], 0), ([4.0, 1.0, 3.0, 2.0], 100), ([2.0, 2.0, 9.0], 75)]
        sizes = ((10, 99), (101, 99), (37, 50), (200, 90), (7, 25), (1000, 99.9))
    cases += [([rng.expovariate(1.0) for _ in range(n)], q) for n, q in sizes]
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
def check_percentile(percentile, *, hidden=False) -> None:
    """`percentile(values, q)`: numpy's default (linear between closest ranks), as
    minillm.utils.stats.percentile."""
    cases = _percentile_cases(hidden)
    answers = []
    for values, q in cases:
        shown = values if len(values) <= 4 else say("<{n} latencies>", "<{n} 个延迟值>",
                                                    n=len(values))
        what = f"percentile({shown}, {q})"
        got = call(percentile, values, q, what=what)
        value = number_or_none(got)
        if value is None:
            raise CheckFailed(say("{what} returned {kind} {got}; return a number",
                                  "{what} 返回了 {kind} {got}；请返回一个数",
                                  what=what, kind=type(got).__name__, got=short(got)))
        answers.append(value)
    wants = [reference_percentile(v, q) for v, q in cases]
    same = lambda a, b: is_close(a, b, rel=1e-5, abs_=1e-6)  # noqa: E731 (float32 quantile ok)
    end_check("percentile", answers, wants, cases, _percentile_failure, same, lambda: [
        (say("that is the nearest rank; interpolate linearly between the two values around "
             "position (n - 1) x q / 100",
             "这是“最近秩”法；应在位置 (n - 1) x q / 100 两侧的两个值之间做线性插值"),
         [_percentile_variant(v, q, "nearest") for v, q in cases]),
        (say("the position is (n - 1) x q / 100 (the first value is the 0th percentile, the last "
             "the 100th), not n x q / 100",
             "位置是 (n - 1) x q / 100（第一个值是第 0 百分位，最后一个值是第 100 百分位），"
             "而不是 n x q / 100"), [_percentile_variant(v, q, "n not n-1") for v, q in cases]),
        (say("sort the values first (sorted(values) makes a sorted copy)",
             "先把数值排序（sorted(values) 会返回一份排好序的副本）"),
         [_percentile_variant(v, q, "unsorted") for v, q in cases]),
    ])


def _percentile_failure(case, got, want, hint) -> str:
    values, q = case
    shown = values if len(values) <= 4 else say("<{n} latencies>", "<{n} 个延迟值>",
                                                n=len(values))
    return with_hint(say("percentile({shown}, {q}) returned {got!r}, expected {want!r}",
                         "percentile({shown}, {q}) 返回了 {got!r}，应为 {want!r}",
                         shown=shown, q=q, got=got, want=want),
                     hint, say(": sort, find position (n - 1) x q / 100, and interpolate "
                               "between the values on either side",
                               "：先排序，找到位置 (n - 1) x q / 100，再在它两侧的值之间插值"))


# --- 6 · top-k routing with a capacity (09b) ------------------------------------------------------

def _routing_cases(hidden=False):
    """(scores, k, capacity): a few by hand, then random scores with a skew toward some experts
    (as a real router's), so that capacity turns some tokens away."""
    by_hand = ([([[3.0, 2.0, 0.0]] * 4, 2, 3), ([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0],
                                                 [0.0, 3.0, 0.0]], 2, 1)] if not hidden else
               [([[0.0, 1.0, 2.0]] * 3, 1, 2), ([[2.0, 1.0], [1.0, 2.0], [2.0, 1.0]], 2, 2)])
    cases = [(torch.tensor(s), k, c) for s, k, c in by_hand]
    seed = torch.Generator().manual_seed(91 if hidden else 9)
    shapes = (((40, 8, 2, 8), (64, 16, 4, 12), (9, 4, 1, 3), (30, 6, 3, 40), (128, 16, 2, 20))
              if hidden else ((32, 8, 2, 8), (50, 16, 4, 10), (12, 4, 1, 2), (20, 5, 3, 20),
                              (100, 16, 2, 12)))
    for tokens, experts, k, capacity in shapes:
        skew = torch.linspace(0.0, 1.5, experts)[torch.randperm(experts, generator=seed)]
        cases.append((torch.randn(tokens, experts, generator=seed) + skew, k, capacity))
    return cases


def _routing_variant(scores, k, capacity, kind):
    experts = scores.topk(k, -1, largest=kind != "lowest").indices
    if kind == "no capacity":
        return experts.tolist(), [[True] * k for _ in range(len(scores))]
    order = experts.flatten() if kind == "token-major" else experts.T.flatten()
    seen, kept = {}, []
    for e in order.tolist():
        seen[e] = seen.get(e, 0) + 1
        kept.append(seen[e] <= capacity + (kind == "off by one"))
    kept = torch.tensor(kept).reshape(len(scores), k) if kind == "token-major" else \
        torch.tensor(kept).reshape(k, len(scores)).T
    return experts.tolist(), kept.tolist()


def _as_table(got, rows, cols, what, name, kind):
    if _is_tensor(got) or _is_array(got):
        got = got.tolist()
    expect(isinstance(got, (list, tuple)) and len(got) == rows
           and all(isinstance(r, (list, tuple)) and len(r) == cols for r in got),
           say("{what}: {name} should be {rows} rows of {cols} ({kind}), got {got}",
               "{what}：{name} 应该是 {rows} 行、每行 {cols} 个（{kind}），得到的是 {got}",
               what=what, name=name, rows=rows, cols=cols, kind=kind, got=short(got)))
    return [[(bool(v) if kind == "bool" else as_int(v, what)) for v in r] for r in got]


ROUTING_MISTAKES = [  # (the variant, its hint in English and Chinese)
    ("lowest", ("take the k largest scores: topk(k, dim=-1) (largest first)",
                "要取得分最高的 k 个：topk(k, dim=-1)（从大到小）")),
    ("no capacity", ("an expert takes at most `capacity` tokens: mark the later ones kept=False",
                     "每个专家最多接收 `capacity` 个词元：排在后面的要标成 kept=False")),
    ("token-major", ("serve every token's first choice before any second choice: walk the "
                     "choices column by column (experts.T), not token by token",
                     "先满足所有词元的第一选择，再轮到第二选择：按列（experts.T）而不是按词元逐行"
                     "排队")),
    ("off by one", ("an expert with capacity c keeps its first c tokens, not c + 1: places 0 to "
                    "c - 1", "容量为 c 的专家只留下前 c 个词元，而不是 c + 1 个：位置 0 到 c - 1")),
]


@checker
def check_route_with_capacity(route_with_capacity, *, hidden=False) -> None:
    """`route_with_capacity(scores, k, capacity)` -> (experts, kept), as
    minillm.distributed.moe.route: top k per token, first choices served before second ones,
    earlier tokens first, at most `capacity` tokens an expert."""
    cases = _routing_cases(hidden)
    answers = []
    for scores, k, capacity in cases:
        what = (f"route_with_capacity(<{scores.shape[0]} x {scores.shape[1]} scores>, {k}, "
                f"{capacity})")
        got = call(route_with_capacity, scores.clone(), k, capacity, what=what)
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               say("{what} returned {got}; return two things: (experts, kept)",
                   "{what} 返回了 {got}；要返回两样东西：(experts, kept)",
                   what=what, got=short(got)))
        tokens = scores.shape[0]
        answers.append((_as_table(got[0], tokens, k, what, "experts", "int"),
                        _as_table(got[1], tokens, k, what, "kept", "bool")))
    end_variant_check("route_with_capacity", answers, cases, _routing_variant, ROUTING_MISTAKES,
                      _routing_failure)


def _routing_failure(case, got, want, hint) -> str:
    scores, k, capacity = case
    part = "experts" if got[0] != want[0] else "kept"
    return with_hint(say("route_with_capacity(<{t} x {e} scores>, {k}, {c}): {part} is wrong "
                         "(expected {want}, got {got})",
                         "route_with_capacity(<{t} x {e} 个得分>, {k}, {c})：{part} 不对"
                         "（应为 {want}，得到 {got}）",
                         t=scores.shape[0], e=scores.shape[1], k=k, c=capacity, part=part,
                         want=short(want[part == "kept"]), got=short(got[part == "kept"])),
                     hint)


def _factor_cases(hidden=False):
    """(scores, k, max_dropped): skewed random scores, each with the limits 0 (where `<=`
    decides), 1 %, and just above what factors 1.25 and 1.5 drop (where rounding the capacity
    decides; 1e-6 above, so that any way of computing the share passes, as shares of different
    drop counts differ by at least 1 / (tokens x k))."""
    seed = torch.Generator().manual_seed(77 if hidden else 7)
    shapes = (((99, 8, 2), (170, 16, 4), (66, 4, 1), (310, 16, 2)) if hidden else
              ((100, 8, 3), (250, 16, 4), (90, 4, 1), (210, 16, 2)))  # fair shares not whole
    cases = []
    for tokens, experts, k in shapes:
        skew = torch.linspace(0.0, 1.2, experts)[torch.randperm(experts, generator=seed)]
        scores = torch.randn(tokens, experts, generator=seed) + skew
        near = [route(scores, k, capacity_of(tokens, k, experts, f)).dropped + 1e-6
                for f in (1.25, 1.5)]
        cases += [(scores, k, most) for most in [0.0, 0.01] + near]
    return cases


FACTORS = (1.0, 1.25, 1.5, 2.0, 3.0)


def _factor_variant(scores, k, max_dropped, kind):
    tokens, experts = scores.shape
    fits = []
    for factor in FACTORS:
        capacity = (int(factor * tokens * k / experts) if kind == "floor"
                    else capacity_of(tokens, k, experts, factor))
        dropped = route(scores, k, capacity).dropped
        if (dropped < max_dropped) if kind == "strict" else (dropped <= max_dropped):
            fits.append(factor)
    if not fits:
        return None
    return max(fits) if kind == "largest" else min(fits)


FACTOR_MISTAKES = [
    ("largest", ("the smallest factor that drops little enough: a larger one wastes memory and "
                 "padded compute on empty slots",
                 "要选丢得足够少的最小系数：更大的系数会把显存和计算浪费在空槽位上")),
    ("floor", ("round the capacity up: ceil(factor x tokens x k / experts)",
               "容量要向上取整：ceil(factor x tokens x k / experts)")),
    ("strict", ("'at most max_dropped' includes equality: dropped <= max_dropped",
                "“最多 max_dropped”包括相等：dropped <= max_dropped")),
]


@checker
def check_choose_capacity_factor(choose_capacity_factor, *, hidden=False) -> None:
    """`choose_capacity_factor(scores, k, factors, max_dropped)`: the smallest factor whose
    capacity, ceil(factor x tokens x k / experts), drops at most `max_dropped` of the assignments
    (None when none does)."""
    cases = _factor_cases(hidden)
    answers = []
    for scores, k, most in cases:
        what = (f"choose_capacity_factor(<{scores.shape[0]} x {scores.shape[1]} scores>, {k}, "
                f"{FACTORS}, {most:g})")
        got = call(choose_capacity_factor, scores.clone(), k, FACTORS, most, what=what)
        value = None if got is None else number_or_none(got)
        expect(got is None or value is not None,
               say("{what} returned {got}; return one of the factors, or None",
                   "{what} 返回了 {got}；请返回其中一个系数，或 None", what=what, got=short(got)))
        answers.append(value)
    end_variant_check("choose_capacity_factor", answers, cases, _factor_variant,
                      FACTOR_MISTAKES, _factor_failure)


def _factor_failure(case, got, want, hint) -> str:
    scores, k, most = case
    return with_hint(say("choose_capacity_factor(<{t} x {e} scores>, {k}, {factors}, {most}) "
                         "returned {got}, expected {want}",
                         "choose_capacity_factor(<{t} x {e} 个得分>, {k}, {factors}, {most}) "
                         "返回了 {got}，应为 {want}",
                         t=scores.shape[0], e=scores.shape[1], k=k, factors=FACTORS, most=most,
                         got=got, want=want),
                     hint)
