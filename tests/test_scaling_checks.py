"""The chapter 09 checkers: the right answers pass (float32 and NumPy results too); each usual
mistake gets its own hint and no other mistake gets it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minillm.course.checks import ch09_scaling as checks
from minillm.course.checks._base import CheckFailed
from minillm.distributed import split_evenly

from memorizing import assert_hidden_cases_catch_memorizing
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


@pytest.mark.parametrize("hidden", [False, True])
def test_split_hints_are_specific(hidden):
    def variant(kind):
        return lambda t, p: ([(a, b) for a, b in checks._split_variant(t, p, kind)]
                             if 1 <= p <= t else split_evenly(t, p))

    assert_hints_are_specific(lambda f: checks.check_split_evenly(f, hidden=hidden), {
        "rest to last": (variant("rest to last"), "the last rank took all the leftover"),
        "floor": (variant("floor"), "were dropped"),
        "ceil": (variant("ceil"), "rounding the share up"),
        "last ranks": (variant("last ranks"), "go to the FIRST ranks"),
    })


def no_check(total, parts):
    base, extra = divmod(total, max(parts, 1))
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def refuses_only_too_many(total, parts):
    if parts > total:
        raise ValueError("more ranks than items")
    return no_check(total, parts)


@pytest.mark.parametrize("hidden, too_many, too_few", [
    (False, "3 items cannot go to 4 ranks", "5 items cannot go to 0 ranks"),
    (True, "2 items cannot go to 5 ranks", "6 items cannot go to -1 ranks"),
])
def test_split_must_raise_valueerror(hidden, too_many, too_few):
    with pytest.raises(CheckFailed, match=too_many + ".*raise ValueError"):
        checks.check_split_evenly(no_check, hidden=hidden)
    with pytest.raises(CheckFailed, match=too_few + ".*raise ValueError"):
        checks.check_split_evenly(refuses_only_too_many, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_column_parallel_mistakes_are_named(hidden):
    with pytest.raises(CheckFailed, match="full output's shape"):
        checks.check_column_parallel(lambda x, w, world: [x @ w.T] * world, hidden=hidden)
    with pytest.raises(CheckFailed, match="split by input features"):
        checks.check_column_parallel(lambda x, w, world: [
            x[..., r.start:r.stop] for r in split_evenly(w.shape[1], world)], hidden=hidden)
    with pytest.raises(CheckFailed, match="return a list with one tensor per rank"):
        checks.check_column_parallel(lambda x, w, world: torch.cat(column(x, w, world), -1),
                                     hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_row_parallel_mistakes_are_named(hidden):
    with pytest.raises(CheckFailed, match="already the full output"):
        checks.check_row_parallel(lambda x, w, world: [x @ w.T] * world, hidden=hidden)
    with pytest.raises(CheckFailed, match="partial sum of the \\*whole\\* output"):
        checks.check_row_parallel(column, hidden=hidden)


@pytest.mark.parametrize("hidden, first_rows", [(False, "0:12"), (True, "0:4")])
def test_tp_feed_forward_mistakes_are_named(hidden, first_rows):
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

    assert_hints_are_specific(lambda f: checks.check_tp_feed_forward(f, hidden=hidden), {
        "features": (split_differently, "the SAME hidden features"),
        "chunk": (chunked, "torch.chunk gives 4, 4, 2"),
        "relu": (relu, "not ReLU"),
        "silu after": (silu_after, "SiLU goes on the gate alone"),
    })
    with pytest.raises(CheckFailed, match="already the whole output"):
        checks.check_tp_feed_forward(lambda x, mlp, world: [mlp(x)] * world, hidden=hidden)
    with pytest.raises(CheckFailed) as failure:  # a mistake the checker has no name for
        checks.check_tp_feed_forward(
            lambda x, mlp, world: [0.5 * p for p in tp_ffn(x, mlp, world)], hidden=hidden)
    assert str(failure.value).endswith(f"* up[{first_rows}] x")


@pytest.mark.parametrize("hidden", [False, True])
def test_percentile_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_percentile(f, hidden=hidden), {
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


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_split_evenly, checks.check_column_parallel,
                                   checks.check_row_parallel, checks.check_tp_feed_forward,
                                   checks.check_percentile])
def test_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


# --- the same hints in the Chinese edition ------------------------------------------------------


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


# --- the hidden cases (hidden=True), which no notebook shows ----------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_split_evenly(split_evenly, hidden=True)
    checks.check_split_evenly(lambda t, p: [(r.start, r.stop) for r in split_evenly(t, p)],
                              hidden=True)
    checks.check_column_parallel(column, hidden=True)
    checks.check_row_parallel(row, hidden=True)
    checks.check_tp_feed_forward(tp_ffn, hidden=True)
    checks.check_percentile(percentile, hidden=True)
    checks.check_percentile(lambda v, q: np.percentile(v, q), hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 7, out
    assert "split_evenly: all 12 cases pass" in out, out


def check_split_refusing(split, *, hidden=False):
    """check_split_evenly, with a split that refuses a rank count out of 1..total before it
    looks anything up: a learner who knows that rule and memorized the rest."""
    def refusing(total, parts):
        if not 1 <= parts <= total:
            raise ValueError("parts must be from 1 to total")
        return split(total, parts)

    checks.check_split_evenly(refusing, hidden=hidden)


def check_ffn_on_weights(parts, *, hidden=False):
    """check_tp_feed_forward for a function of the block's three weights: the block itself is a
    new module at every check, so a learner can only memorize the plain data."""
    checks.check_tp_feed_forward(lambda x, mlp, world: parts(
        x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, world), hidden=hidden)


def tp_ffn_on_weights(x, gate, up, down, world):
    parts = []
    for r in split_evenly(gate.shape[0], world):
        h = F.silu(x @ gate[r.start:r.stop].T) * (x @ up[r.start:r.stop].T)
        parts.append(h @ down[:, r.start:r.stop].T)
    return parts


@pytest.mark.parametrize("check, right", [
    (check_split_refusing, split_evenly),
    (checks.check_column_parallel, column),
    (checks.check_row_parallel, row),
    (check_ffn_on_weights, tp_ffn_on_weights),
    (checks.check_percentile, percentile),
])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_hidden_cases_come_in_chinese(chinese, capsys):
    with pytest.raises(CheckFailed, match="6 项不能分给 -1 个进程"):
        checks.check_split_evenly(refuses_only_too_many, hidden=True)
    checks.check_percentile(percentile, hidden=True)
    assert "✅ percentile：全部 13 个用例通过" in capsys.readouterr().out


# --- 6 and 7 · top-k routing with a capacity, and the capacity factor (lesson 09b) ------------

def route_with_capacity(scores, k, capacity):
    from minillm.distributed.moe import route

    routing = route(scores, k, capacity)
    return routing.experts, routing.kept


def route_as_lists(scores, k, capacity):
    experts, kept = route_with_capacity(scores, k, capacity)
    return experts.tolist(), kept.numpy()


def choose_capacity_factor(scores, k, factors, max_dropped):
    from minillm.distributed.moe import capacity_of, route

    for factor in sorted(factors):
        capacity = capacity_of(scores.shape[0], k, scores.shape[1], factor)
        if route(scores, k, capacity).dropped <= max_dropped:
            return factor
    return None


def _routing(kind):
    return lambda s, k, c: checks._routing_variant(s, k, c, kind)


def _factor(kind):
    return lambda s, k, factors, most: checks._factor_variant(s, k, most, kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_routing_answers_pass_as_tensors_lists_or_arrays(hidden, capsys):
    checks.check_route_with_capacity(route_with_capacity, hidden=hidden)
    checks.check_route_with_capacity(route_as_lists, hidden=hidden)
    checks.check_choose_capacity_factor(choose_capacity_factor, hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 3


def test_the_cases_do_drop_tokens_and_the_factors_differ():
    """The cases exercise what they check: some assignments are dropped, and the factor chosen
    is not the same for every case (nor always None)."""
    for hidden in (False, True):
        kept = [k for s, kk, c in checks._routing_cases(hidden)
                for k in sum(checks._routing_variant(s, kk, c, "reference")[1], [])]
        assert 0 < kept.count(False) < len(kept) / 2
        chosen = {checks._factor_variant(s, k, m, "reference")
                  for s, k, m in checks._factor_cases(hidden)}
        assert len(chosen - {None}) >= 3


@pytest.mark.parametrize("hidden", [False, True])
def test_routing_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_route_with_capacity(f, hidden=hidden), {
        "lowest": (_routing("lowest"), "k largest scores"),
        "no capacity": (_routing("no capacity"), "at most `capacity` tokens"),
        "token-major": (_routing("token-major"), "first choice before any second"),
        "off by one": (_routing("off by one"), "not c + 1"),
    })
    assert_hints_are_specific(lambda f: checks.check_choose_capacity_factor(f, hidden=hidden), {
        "largest": (_factor("largest"), "the smallest factor"),
        "floor": (_factor("floor"), "round the capacity up"),
        "strict": (_factor("strict"), "includes equality"),
    })


def test_a_routing_answer_of_the_wrong_shape_is_named():
    with pytest.raises(CheckFailed, match="return two things"):
        checks.check_route_with_capacity(lambda s, k, c: s.topk(k).indices)
    with pytest.raises(CheckFailed, match="kept should be 4 rows of 2"):
        checks.check_route_with_capacity(lambda s, k, c: (s.topk(k).indices, [True] * 4))
    with pytest.raises(CheckFailed, match="return one of the factors, or None"):
        checks.check_choose_capacity_factor(lambda s, k, f, m: "1.25")


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_route_with_capacity,
                                   checks.check_choose_capacity_factor])
def test_routing_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


@pytest.mark.parametrize("check, right", [
    (checks.check_route_with_capacity, route_with_capacity),
    (checks.check_choose_capacity_factor, choose_capacity_factor),
])
def test_the_hidden_routing_cases_catch_memorizing(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_routing_hints_come_in_chinese(chinese):
    with pytest.raises(CheckFailed, match="先满足所有词元的第一选择"):
        checks.check_route_with_capacity(_routing("token-major"))
    with pytest.raises(CheckFailed, match="容量要向上取整"):
        checks.check_choose_capacity_factor(_factor("floor"))
