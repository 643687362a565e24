"""The chapter 09 checkers: the right answers pass (float32 and NumPy results too); each usual
mistake gets its own hint and no other mistake gets it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minillm.course.checks import ch09_scaling as checks
from minillm.course.checks._base import CheckFailed
from minillm.distributed import split_evenly

from test_tokenizer_checks import assert_hints_are_specific


def column(x, w, world):
    return [x @ w[r.start:r.stop].T for r in split_evenly(w.shape[0], world)]


def row(x, w, world):
    return [x[..., r.start:r.stop] @ w[:, r.start:r.stop].T
            for r in split_evenly(w.shape[1], world)]


def tp_ffn(x, mlp, world):
    parts = []
    for r in split_evenly(mlp.gate_proj.weight.shape[0], world):
        h = (F.silu(x @ mlp.gate_proj.weight[r.start:r.stop].T)
             * (x @ mlp.up_proj.weight[r.start:r.stop].T))
        parts.append(h @ mlp.down_proj.weight[:, r.start:r.stop].T)
    return parts


def percentile(values, q):
    data = sorted(values)
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def test_right_answers_pass(capsys):
    checks.check_split_evenly(split_evenly)
    checks.check_split_evenly(lambda t, p: [(r.start, r.stop) for r in split_evenly(t, p)])
    checks.check_column_parallel(column)
    checks.check_row_parallel(row)
    checks.check_tp_feed_forward(tp_ffn)
    checks.check_percentile(percentile)
    assert capsys.readouterr().out.count("✅") == 6


@pytest.mark.parametrize("compute", [
    lambda v, q: np.percentile(v, q),
    lambda v, q: np.float32(np.percentile(v, q)),
    lambda v, q: torch.quantile(torch.tensor(v, dtype=torch.float32), q / 100),
])
def test_percentile_accepts_numpy_and_float32_torch(compute, capsys):
    checks.check_percentile(compute)
    assert "✅" in capsys.readouterr().out


def test_split_hints_are_specific():
    def variant(kind):
        return lambda t, p: ([(a, b) for a, b in checks._split_variant(t, p, kind)]
                             if 1 <= p <= t else split_evenly(t, p))

    assert_hints_are_specific(checks.check_split_evenly, {
        "rest to last": (variant("rest to last"), "the last rank took all the leftover"),
        "floor": (variant("floor"), "were dropped"),
        "ceil": (variant("ceil"), "rounding the share up"),
        "last ranks": (variant("last ranks"), "go to the FIRST ranks"),
    })


def test_split_must_raise_valueerror():
    def no_check(total, parts):
        base, extra = divmod(total, max(parts, 1))
        out, start = [], 0
        for i in range(parts):
            size = base + (1 if i < extra else 0)
            out.append(range(start, start + size))
            start += size
        return out

    with pytest.raises(CheckFailed, match="cannot go to 4 ranks.*raise ValueError"):
        checks.check_split_evenly(no_check)


def test_column_parallel_mistakes_are_named():
    with pytest.raises(CheckFailed, match="full output's shape"):
        checks.check_column_parallel(lambda x, w, world: [x @ w.T] * world)
    with pytest.raises(CheckFailed, match="split by input features"):
        checks.check_column_parallel(lambda x, w, world: [
            x[..., r.start:r.stop] for r in split_evenly(w.shape[1], world)])
    with pytest.raises(CheckFailed, match="return a list with one tensor per rank"):
        checks.check_column_parallel(lambda x, w, world: torch.cat(column(x, w, world), -1))


def test_row_parallel_mistakes_are_named():
    with pytest.raises(CheckFailed, match="already the full output"):
        checks.check_row_parallel(lambda x, w, world: [x @ w.T] * world)
    with pytest.raises(CheckFailed, match="partial sum of the \\*whole\\* output"):
        checks.check_row_parallel(column)


def test_tp_feed_forward_mistakes_are_named():
    def split_differently(x, mlp, world):  # gate/up by one split, down by another
        parts = []
        rows = split_evenly(mlp.gate_proj.weight.shape[0], world)
        for r, c in zip(rows, rows[::-1]):
            h = (F.silu(x @ mlp.gate_proj.weight[r.start:r.stop].T)
                 * (x @ mlp.up_proj.weight[r.start:r.stop].T))
            parts.append(h[..., :c.stop - c.start] @ mlp.down_proj.weight[:, c.start:c.stop].T)
        return parts

    def chunked(x, mlp, world):  # torch.chunk's shares: 4, 4, 2 for 10 features over 3 ranks
        return [(F.silu(x @ g.T) * (x @ u.T)) @ d.T for g, u, d in zip(
            mlp.gate_proj.weight.chunk(world), mlp.up_proj.weight.chunk(world),
            mlp.down_proj.weight.chunk(world, dim=1))]

    def relu(x, mlp, world):
        return checks._ffn_variant(x, mlp, world, act=F.relu)

    def silu_after(x, mlp, world):
        return checks._ffn_variant(x, mlp, world, silu_after=True)

    assert_hints_are_specific(checks.check_tp_feed_forward, {
        "features": (split_differently, "the SAME hidden features"),
        "chunk": (chunked, "torch.chunk gives 4, 4, 2"),
        "relu": (relu, "not ReLU"),
        "silu after": (silu_after, "SiLU goes on the gate alone"),
    })
    with pytest.raises(CheckFailed, match="already the whole output"):
        checks.check_tp_feed_forward(lambda x, mlp, world: [mlp(x)] * world)
    with pytest.raises(CheckFailed) as failure:  # a mistake the checker has no name for
        checks.check_tp_feed_forward(lambda x, mlp, world: [0.5 * p for p in tp_ffn(x, mlp, world)])
    assert str(failure.value).endswith("* up[0:12] x")


def test_percentile_hints_are_specific():
    assert_hints_are_specific(checks.check_percentile, {
        "nearest": (lambda v, q: checks._percentile_variant(v, q, "nearest"), "nearest rank"),
        "n": (lambda v, q: checks._percentile_variant(v, q, "n not n-1"), "not n x q / 100"),
        "unsorted": (lambda v, q: checks._percentile_variant(v, q, "unsorted"), "sort the values"),
    })


def test_percentile_that_sorts_in_place_is_named():
    def sorts(values, q):
        values.sort()
        return percentile(values, q)

    with pytest.raises(CheckFailed, match="changed its argument `values`"):
        checks.check_percentile(sorts)


@pytest.mark.parametrize("check", [checks.check_split_evenly, checks.check_column_parallel,
                                   checks.check_row_parallel, checks.check_tp_feed_forward,
                                   checks.check_percentile])
def test_stubs_say_not_written_yet(check):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        check(stub)


# --- the same hints in the Chinese edition ------------------------------------------------------

@pytest.fixture
def chinese():
    from minillm.course import set_language

    set_language("zh")
    yield
    set_language("en")


def _split(kind):
    return lambda t, p: ([(a, b) for a, b in checks._split_variant(t, p, kind)]
                         if 1 <= p <= t else split_evenly(t, p))


def _chunked_ffn(x, mlp, world):
    return [(F.silu(x @ g.T) * (x @ u.T)) @ d.T for g, u, d in zip(
        mlp.gate_proj.weight.chunk(world), mlp.up_proj.weight.chunk(world),
        mlp.down_proj.weight.chunk(world, dim=1))]


ZH_HINTS = [  # (check, a wrong answer, words of its Chinese hint, words of its English hint)
    (checks.check_split_evenly, _split("rest to last"), "剩下的零头全给了最后一个进程",
     "the last rank took all the leftover"),
    (checks.check_split_evenly, _split("floor"), "被丢掉了", "were dropped"),
    (checks.check_split_evenly, _split("ceil"), "向上取整", "rounding the share up"),
    (checks.check_split_evenly, _split("last ranks"), "要分给*前面*的进程",
     "go to the FIRST ranks"),
    (checks.check_column_parallel, lambda x, w, world: [x @ w.T] * world, "是完整输出的形状",
     "full output's shape"),
    (checks.check_column_parallel, lambda x, w, world: [
        x[..., r.start:r.stop] for r in split_evenly(w.shape[1], world)], "看起来是按输入特征切的",
     "split by input features"),
    (checks.check_column_parallel, lambda x, w, world: torch.cat(column(x, w, world), -1),
     "只返回了一个张量", "return a list with one tensor per rank"),
    (checks.check_row_parallel, lambda x, w, world: [x @ w.T] * world, "已经是完整的输出了",
     "already the full output"),
    (checks.check_row_parallel, column, "的一个部分和", "partial sum of the"),
    (checks.check_tp_feed_forward, _chunked_ffn, "torch.chunk 分出来的是 4、4、2",
     "torch.chunk gives"),
    (checks.check_tp_feed_forward, lambda x, mlp, world: checks._ffn_variant(
        x, mlp, world, act=F.relu), "不是 ReLU", "not ReLU"),
    (checks.check_tp_feed_forward, lambda x, mlp, world: checks._ffn_variant(
        x, mlp, world, silu_after=True), "SiLU 只作用在 gate 上", "goes on the gate alone"),
    (checks.check_tp_feed_forward, lambda x, mlp, world: [mlp(x)] * world, "已经是整个输出了",
     "already the whole output"),
    (checks.check_percentile, lambda v, q: checks._percentile_variant(v, q, "nearest"),
     "“最近秩”法", "nearest rank"),
    (checks.check_percentile, lambda v, q: checks._percentile_variant(v, q, "n not n-1"),
     "而不是 n x q / 100", "not n x q / 100"),
    (checks.check_percentile, lambda v, q: checks._percentile_variant(v, q, "unsorted"),
     "先把数值排序", "sort the values"),
]


@pytest.mark.parametrize("check, wrong, zh_words, en_words", ZH_HINTS,
                         ids=[f"{c.__name__}-{en}" for c, _, _, en in ZH_HINTS])
def test_each_hint_comes_in_chinese(chinese, check, wrong, zh_words, en_words):
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert zh_words in message, message
    assert en_words not in message, message


def test_the_chapters_own_messages_come_in_chinese(chinese, capsys):
    def no_check(total, parts):
        base, extra = divmod(total, max(parts, 1))
        return [range(i * base + min(i, extra), (i + 1) * base + min(i + 1, extra))
                for i in range(parts)]

    with pytest.raises(CheckFailed, match="项不能分给 4 个进程"):
        checks.check_split_evenly(no_check)
    with pytest.raises(CheckFailed, match="请返回一个数"):
        checks.check_percentile(lambda v, q: "p99")
    checks.check_percentile(percentile)
    assert "✅ percentile：全部 13 个用例通过" in capsys.readouterr().out
