"""The chapter 05 checkers pass the right answers in any number type and give each common mistake
its own hint (and no other mistake that hint)."""

import functools
import math
import re
import time

import numpy as np
import pytest
import torch

from minillm.course.checks import ch05_metrics as checks
from minillm.course.checks._base import CheckFailed
from minillm.engine.capture_sizes import choose_capture_sizes as right_choose
from minillm.engine.capture_sizes import graph_batch_size as right_graph_batch_size

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


def metrics(s, t, ttft=None, tpot=None, latency=None):
    right = {"ttft": t[0] - s,
             "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else math.nan,
             "latency": t[-1] - s}
    for key, f in (("ttft", ttft), ("tpot", tpot), ("latency", latency)):
        if f is not None:
            right[key] = f(s, t)
    return right


def right_time_stream(stream, clock):
    start, times, items = clock(), [], []
    for item in stream:
        times.append(clock())
        items.append(item)
    return start, times, items


def right_throughput(reqs):
    return (sum(len(t) for _, t in reqs)
            / (max(t[-1] for _, t in reqs) - min(s for s, _ in reqs)))


def right_roofline(rows, n_weights, bytes_per_weight, peak_flops, bandwidth):
    return max(2 * n_weights * rows / peak_flops, n_weights * bytes_per_weight / bandwidth)


def test_right_answers_pass(capsys):
    checks.check_request_metrics(metrics)
    checks.check_predict_latency(lambda a, b, n: a + b * (n - 1))
    checks.check_time_stream(right_time_stream)
    checks.check_throughput(right_throughput)
    checks.check_roofline_seconds(right_roofline)
    assert capsys.readouterr().out.count("✅") == 5


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("kind", [np.float64, np.float32, lambda x: torch.tensor(x)])
def test_number_types_are_accepted(kind, hidden, capsys):
    checks.check_request_metrics(lambda s, t: {k: kind(v) for k, v in metrics(s, t).items()},
                                 hidden=hidden)
    checks.check_throughput(lambda reqs: kind(right_throughput(reqs)), hidden=hidden)
    checks.check_predict_latency(lambda a, b, n: kind(a + b * (n - 1)), hidden=hidden)
    checks.check_roofline_seconds(lambda *case: kind(right_roofline(*case)), hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 4


def test_a_wrong_latency_is_shown_with_enough_digits_to_differ():
    with pytest.raises(CheckFailed) as failure:
        checks.check_predict_latency(lambda a, b, n: (a + b * (n - 1)) * (1 + 1e-5))
    returned, expected = re.search(r"returned (\S+), expected (\S+?)[ :(]",
                                   str(failure.value)).groups()
    assert returned != expected, str(failure.value)


@pytest.mark.parametrize("hidden", [False, True])
def test_request_metrics_hints_are_specific(hidden):
    check = functools.partial(checks.check_request_metrics, hidden=hidden)
    assert_hints_are_specific(check, {
        "ttft clock time": (lambda s, t: metrics(s, t, ttft=lambda s, t: t[0]),
                            "first token's clock time"),
        "tpot over n": (lambda s, t: metrics(s, t, tpot=checks._tpot_over_all),
                        "n tokens have n - 1 gaps"),
        "tpot from start": (lambda s, t: metrics(s, t, tpot=lambda s, t: (t[-1] - s) / len(t)),
                            "counted the time to the first token"),
        "last gap": (lambda s, t: metrics(s, t, tpot=lambda s, t: t[-1] - t[-2] if len(t) > 1
                                          else math.nan), "the last gap alone"),
        "latency from first": (lambda s, t: metrics(s, t, latency=lambda s, t: t[-1] - t[0]),
                               "it starts at the first token"),
        "latency clock time": (lambda s, t: metrics(s, t, latency=lambda s, t: t[-1]),
                               "last token's clock time"),
    })


def nan_for_one_token(tpot):
    """A TPOT mistake made by a learner who still returns NaN for a single token, as asked."""
    return lambda s, t: tpot(s, t) if len(t) > 1 else math.nan


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("tpot, words", [
    (checks._tpot_over_all, "n tokens have n - 1 gaps"),
    (lambda s, t: (t[-1] - s) / len(t), "counted the time to the first token"),
    (lambda s, t: t[-1] - t[-2], "the last gap alone"),
], ids=["over n", "from start", "last gap"])
def test_tpot_hints_fire_when_a_single_token_gives_nan(tpot, words, hidden):
    """The task asks for NaN with one token: a mistake elsewhere keeps its hint."""
    with pytest.raises(CheckFailed, match=re.escape(words)):
        checks.check_request_metrics(lambda s, t: metrics(s, t, tpot=nan_for_one_token(tpot)),
                                     hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_tpot_of_one_token_is_explained(hidden):
    def crashes(s, t):
        return {"ttft": t[0] - s, "tpot": (t[-1] - t[0]) / (len(t) - 1), "latency": t[-1] - s}

    with pytest.raises(CheckFailed, match="ZeroDivisionError.*float\\('nan'\\)"):
        checks.check_request_metrics(crashes, hidden=hidden)
    with pytest.raises(CheckFailed, match="no gap: return float\\('nan'\\)"):
        checks.check_request_metrics(lambda s, t: metrics(s, t, tpot=lambda s, t: (
            (t[-1] - t[0]) / max(len(t) - 1, 1))), hidden=hidden)


def test_request_metrics_without_a_key_is_named():
    with pytest.raises(CheckFailed, match="keys 'ttft', 'tpot' and 'latency'"):
        checks.check_request_metrics(lambda s, t: (t[0] - s, 0.0, t[-1] - s))


@pytest.mark.parametrize("hidden", [False, True])
def test_predict_latency_hints_are_specific(hidden):
    check = functools.partial(checks.check_predict_latency, hidden=hidden)
    assert_hints_are_specific(check, {
        "n gaps": (lambda a, b, n: a + b * n, "n_tokens - 1 gaps follow"),
        "ttft per token": (lambda a, b, n: (a + b) * (n - 1), "TTFT comes once"),
    })


def time_stream_variant(kind):
    def timed(stream, clock):
        if kind == "start late":
            times, items, start = [], [], None
            for item in stream:
                now = clock()
                start = now if start is None else start
                times.append(now)
                items.append(item)
            return (clock() if start is None else start), times, items
        if kind == "collected":
            start = clock()
            items = list(stream)
            return start, [clock() for _ in items], items
        if kind == "before":
            start, times, items = clock(), [], []
            iterator = iter(stream)
            while True:
                now = clock()
                try:
                    item = next(iterator)
                except StopIteration:
                    return start, times, items
                times.append(now)
                items.append(item)
        if kind == "perf_counter":
            return right_time_stream(stream, time.perf_counter)
        if kind == "from the start":
            start, times, items = right_time_stream(stream, clock)
            return start, [t - start for t in times], items
        raise ValueError(kind)

    return timed


@pytest.mark.parametrize("hidden", [False, True])
def test_time_stream_hints_are_specific(hidden):
    check = functools.partial(checks.check_time_stream, hidden=hidden)
    assert_hints_are_specific(check, {
        "start late": (time_stream_variant("start late"), "TTFT comes out 0"),
        "collected": (time_stream_variant("collected"), "collecting the stream first"),
        "before": (time_stream_variant("before"), "read before its item arrived"),
        "perf_counter": (time_stream_variant("perf_counter"), "not time.perf_counter()"),
        "from the start": (time_stream_variant("from the start"), "measured from the start"),
    })


def test_time_stream_that_loses_items_is_named():
    def drops_first(stream, clock):
        start, times, items = right_time_stream(stream, clock)
        return start, times[1:], items[1:]

    with pytest.raises(CheckFailed, match="expected every item of the stream"):
        checks.check_time_stream(drops_first)


@pytest.mark.parametrize("hidden", [False, True])
def test_throughput_hints_are_specific(hidden):
    check = functools.partial(checks.check_throughput, hidden=hidden)
    assert_hints_are_specific(check, {
        "summed rates": (lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs),
                         "added up each request's own tokens per second"),
        "serial": (lambda reqs: sum(len(t) for _, t in reqs) / sum(t[-1] - s for s, t in reqs),
                   "sum of the requests' latencies"),
        "mean rate": (lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs) / len(reqs),
                      "averaged each request's tokens per second"),
        "from first token": (lambda reqs: sum(len(t) for _, t in reqs) / (
            max(t[-1] for _, t in reqs) - min(t[0] for _, t in reqs)), "not at its first token"),
    })


def test_throughput_hint_says_overlap_only_when_the_requests_overlap():
    with pytest.raises(CheckFailed) as failure:
        checks.check_throughput(lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs))
    assert "overlap" not in str(failure.value)
    assert not checks._overlap(checks.THROUGHPUT_CASES[4])
    assert checks._overlap(checks.THROUGHPUT_CASES[0] + [(10.5, [11.0])])


@pytest.mark.parametrize("hidden", [False, True])
def test_roofline_hints_are_specific(hidden):
    check = functools.partial(checks.check_roofline_seconds, hidden=hidden)
    assert_hints_are_specific(check, {
        "min": (lambda r, w, b, p, bw: min(2 * w * r / p, w * b / bw), "not min(...)"),
        "sum": (lambda r, w, b, p, bw: 2 * w * r / p + w * b / bw, "not their sum"),
        "one flop": (lambda r, w, b, p, bw: max(w * r / p, w * b / bw), "2 FLOP per weight"),
        "bytes x rows": (lambda r, w, b, p, bw: max(2 * w * r / p, w * b * r / bw),
                         "do not multiply the bytes by rows"),
        "no bytes per weight": (lambda r, w, b, p, bw: max(2 * w * r / p, w / bw),
                                "multiply the weights by bytes_per_weight"),
        "reading only": (lambda r, w, b, p, bw: w * b / bw, "that is the reading alone"),
        "arithmetic only": (lambda r, w, b, p, bw: 2 * w * r / p, "the arithmetic alone"),
    })


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_request_metrics, checks.check_predict_latency,
                                   checks.check_time_stream, checks.check_throughput,
                                   checks.check_roofline_seconds, checks.check_graph_batch_size,
                                   checks.check_choose_capture_sizes])
def test_an_unwritten_stub_says_so(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_request_metrics(metrics, hidden=True)
    checks.check_predict_latency(lambda a, b, n: a + b * (n - 1), hidden=True)
    checks.check_time_stream(right_time_stream, hidden=True)
    checks.check_throughput(right_throughput, hidden=True)
    checks.check_roofline_seconds(right_roofline, hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 5
    assert f"time_stream: all {len(checks.HIDDEN_STREAM_CASES)} cases pass" in out


@pytest.mark.parametrize("check, right", [
    (checks.check_request_metrics, metrics),
    (checks.check_predict_latency, lambda a, b, n: a + b * (n - 1)),
    (checks.check_throughput, right_throughput),
    (checks.check_roofline_seconds, right_roofline),
    (checks.check_graph_batch_size, right_graph_batch_size),
    (checks.check_choose_capture_sizes, right_choose),
], ids=["request_metrics", "predict_latency", "throughput", "roofline_seconds",
        "graph_batch_size", "choose_capture_sizes"])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    """(time_stream is left out: it reads a clock and a stream, new objects at every call, so
    there is no answer to look up by its arguments.)"""
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """A single token (no TPOT), a first token at the start, an empty and a one-item stream,
    requests one after another, and rows on both sides of the ridge."""
    visible = set(map(repr, checks.METRIC_REQUESTS))
    assert not visible & set(map(repr, checks.HIDDEN_METRIC_REQUESTS))
    for requests in (checks.METRIC_REQUESTS, checks.HIDDEN_METRIC_REQUESTS):
        assert any(len(t) == 1 for _, t in requests)
        assert any(t[0] == s for s, t in requests)
    for cases in (checks.STREAM_CASES, checks.HIDDEN_STREAM_CASES):
        assert any(not items for _, _, items in cases)
        assert any(len(items) == 1 for _, _, items in cases)
    assert not checks._overlap(checks.HIDDEN_THROUGHPUT_CASES[4])
    assert checks._overlap(checks.HIDDEN_THROUGHPUT_CASES[2])
    for cases in (checks.ROOF_CASES, checks.HIDDEN_ROOF_CASES):
        bound = [2 * w * r / p > w * b / bw for r, w, b, p, bw in cases]
        assert any(bound) and not all(bound)
    assert not set(checks.ROOF_CASES) & set(checks.HIDDEN_ROOF_CASES)


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


ZH_HINTS = [  # (check, a wrong answer, the Chinese words of its hint)
    (checks.check_request_metrics, lambda s, t: metrics(s, t, ttft=lambda s, t: t[0]),
     "第一个词元到达时的时钟读数"),
    (checks.check_request_metrics, lambda s, t: metrics(s, t, tpot=checks._tpot_over_all),
     "只有 n - 1 个间隔"),
    (checks.check_request_metrics,
     lambda s, t: metrics(s, t, tpot=nan_for_one_token(checks._tpot_over_all)),
     "在第一个之后只有 n - 1 个间隔"),
    (checks.check_request_metrics,
     lambda s, t: metrics(s, t, tpot=lambda s, t: (t[-1] - s) / len(t)), "也算进去了"),
    (checks.check_request_metrics, lambda s, t: metrics(
        s, t, tpot=lambda s, t: t[-1] - t[-2] if len(t) > 1 else math.nan), "这只是最后一个间隔"),
    (checks.check_request_metrics, lambda s, t: metrics(s, t, latency=lambda s, t: t[-1] - t[0]),
     "可用户从请求开始就在等"),
    (checks.check_request_metrics, lambda s, t: metrics(s, t, tpot=lambda s, t: (
        (t[-1] - t[0]) / max(len(t) - 1, 1))), "只有一个词元时没有间隔"),
    (checks.check_request_metrics, lambda s, t: (t[0] - s, 0.0, t[-1] - s), "三个键的字典"),
    (checks.check_predict_latency, lambda a, b, n: a + b * n, "后面只跟着 n_tokens - 1 个间隔"),
    (checks.check_predict_latency, lambda a, b, n: (a + b) * (n - 1), "TTFT 只算一次"),
    (checks.check_time_stream, time_stream_variant("start late"), "TTFT 算出来是 0"),
    (checks.check_time_stream, time_stream_variant("collected"), "先把整个流收集起来"),
    (checks.check_time_stream, time_stream_variant("before"), "其实是上一项的时间"),
    (checks.check_time_stream, time_stream_variant("perf_counter"),
     "不要用 time.perf_counter()"),
    (checks.check_time_stream, time_stream_variant("from the start"), "是从开始算起的"),
    (checks.check_throughput, lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs),
     "各自的每秒词元数加了起来"),
    (checks.check_throughput,
     lambda reqs: sum(len(t) for _, t in reqs) / sum(t[-1] - s for s, t in reqs),
     "一个接一个跑的"),
    (checks.check_throughput,
     lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs) / len(reqs), "取了平均"),
    (checks.check_throughput, lambda reqs: sum(len(t) for _, t in reqs) / (
        max(t[-1] for _, t in reqs) - min(t[0] for _, t in reqs)), "而不是从它的第一个词元算起"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: min(2 * w * r / p, w * b / bw),
     "不是 min(...)"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: 2 * w * r / p + w * b / bw,
     "而不是两者之和"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: max(w * r / p, w * b / bw),
     "每行、每个权重 2 FLOP"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: max(2 * w * r / p, w * b * r / bw),
     "字节数不要乘以 rows"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: max(2 * w * r / p, w / bw),
     "乘以 bytes_per_weight 才是"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: w * b / bw, "这只是读取的时间"),
    (checks.check_roofline_seconds, lambda r, w, b, p, bw: 2 * w * r / p, "这只是计算的时间"),
]


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check, wrong, words", ZH_HINTS, ids=[w for _, _, w in ZH_HINTS])
def test_each_hint_comes_in_chinese(chinese, hidden, check, wrong, words):
    with pytest.raises(CheckFailed) as failure:
        check(wrong, hidden=hidden)
    message = str(failure.value)
    assert words in message, message
    assert not re.search(r"\b(returned|expected|the|tokens?)\b", message), message


def test_the_chinese_edition_passes_right_answers_in_chinese(chinese, capsys):
    checks.check_request_metrics(metrics)
    checks.check_roofline_seconds(right_roofline)
    checks.check_request_metrics(metrics, hidden=True)
    checks.check_roofline_seconds(right_roofline, hidden=True)
    assert capsys.readouterr().out.count("个用例通过") == 4


# --- lesson 05b's tasks: a CUDA graph's batch size, and choosing the sizes to capture ---------

GRAPH_WRONG = {
    "round down": (lambda b, s: max([x for x in s if x <= b], default=None), "pad up, not down"),
    "first listed": (lambda b, s: next((x for x in s if x >= b), None), "need not be sorted"),
    "strictly larger": (lambda b, s: min([x for x in s if x > b], default=None), ">=, not >"),
    "largest": (lambda b, s: max(s) if max(s) >= b else None, "not the largest"),
    "batch itself": (lambda b, s: right_graph_batch_size(b, s) or b, "return None"),
}


def choose_without(rule):
    def choose(batch_sizes, candidates, max_graphs):
        rows = sorted(set(batch_sizes)) if rule == "distinct" else batch_sizes
        ranked = []
        for order, (name, sizes) in enumerate(candidates.items()):
            if (rule != "limit" and len(sizes) > max_graphs) or \
                    (rule != "cover" and max(sizes) < max(batch_sizes)):
                continue
            padding = sum(min([s for s in sizes if s >= b], default=b) - b for b in rows)
            ranked.append(((len(sizes), order) if rule == "padding" else
                           (padding, -len(sizes) if rule == "ties" else len(sizes), order), name))
        return min(ranked)[1] if ranked else None
    return choose


CHOOSE_WRONG = {
    "no limit": (choose_without("limit"), "more than max_graphs"),
    "no cover": (choose_without("cover"), "every step a graph"),
    "distinct sizes": (choose_without("distinct"), "not once per batch size"),
    "fewest graphs": (choose_without("padding"), "only breaks ties"),
    "ties to more graphs": (choose_without("ties"), "on equal padding"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_the_05b_tasks_pass_right_answers(hidden, capsys):
    checks.check_graph_batch_size(right_graph_batch_size, hidden=hidden)
    checks.check_choose_capture_sizes(right_choose, hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 2


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check, wrong", [(checks.check_graph_batch_size, GRAPH_WRONG),
                                          (checks.check_choose_capture_sizes, CHOOSE_WRONG)],
                         ids=["graph_batch_size", "choose_capture_sizes"])
def test_the_05b_hints_are_specific(check, wrong, hidden):
    assert_hints_are_specific(functools.partial(check, hidden=hidden), wrong)


def test_an_answer_that_is_no_captured_size_is_named():
    with pytest.raises(CheckFailed, match="return one of the captured sizes"):
        checks.check_graph_batch_size(lambda b, s: str(b))
    with pytest.raises(CheckFailed, match="return the name of one of the lists"):
        checks.check_choose_capture_sizes(lambda b, c, m: c[next(iter(c))])


@pytest.mark.parametrize("check, wrong, words", [
    (checks.check_graph_batch_size, GRAPH_WRONG["round down"][0], "要向上补齐"),
    (checks.check_choose_capture_sizes, CHOOSE_WRONG["distinct sizes"][0], "常跑的大小分量更重"),
])
def test_the_05b_hints_come_in_chinese(chinese, check, wrong, words):
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    assert words in str(failure.value) and "expected" not in str(failure.value)
