"""Checkers for exercises/05_metrics.ipynb: one request's metrics, the latency formula, timing a
token stream and the throughput of many requests, each compared with `minillm.measure.metrics`;
a forward pass's least time under the roofline, compared with `minillm.measure.roofline`; and,
for lesson 05b, a CUDA graph's batch size and the choice of the sizes to capture, compared with
`minillm.engine.capture_sizes`.

Every message says both languages side by side (`say`), chosen by the notebook's set_language.
"""

from __future__ import annotations

import math
import random

from ...engine import capture_sizes
from ...measure.metrics import RequestMetrics, predict_latency, throughput
from ...measure.roofline import Roof
from ..language import say
from ._base import (CheckFailed, as_number, call, checker, end_check, end_variant_check, expect,
                    first_failure, is_close, is_int, matching_mistake, passed, short, with_hint)

# (start, token_times): fixed requests, seconds
REQUESTS = [
    (0.0, [0.30, 0.35, 0.40, 0.45, 0.50]),
    (10.0, [10.9, 11.0, 11.2, 11.3]),
    (2.5, [2.6, 2.7]),
    (1.0, [4.0, 4.05, 4.1, 4.15, 4.2, 4.25, 4.3, 4.35, 4.4]),
    (7.25, [7.5]),
    (100.0, [100.0, 100.02, 100.05]),
]
HIDDEN_REQUESTS = [
    (20.0, [20.8, 20.9, 21.05, 21.1, 21.3, 21.35]),
    (0.5, [1.25]),  # one token: no gap, so no TPOT
    (4.0, [4.0, 4.5]),  # the first token at the start (TTFT 0), one gap
    (3.5, [5.0, 5.02, 5.04, 5.06, 5.08, 5.1, 5.12, 5.14, 5.16, 5.18, 5.2, 5.22]),
    (0.0, [0.05, 0.9, 0.95]),  # a stall between two quick tokens
    (61.0, [61.3, 61.4, 61.5, 61.6]),
]


def _random_requests(rng, n):
    out = []
    for _ in range(n):
        start = round(rng.uniform(0, 20), 3)
        t = start + rng.uniform(0.05, 2.0)
        times = []
        for _ in range(rng.randint(1, 30)):
            times.append(round(t, 4))
            t += rng.uniform(0.01, 0.2)
        out.append((start, times))
    return out


# --- 1 · one request's metrics ------------------------------------------------------------------

METRIC_REQUESTS = REQUESTS + _random_requests(random.Random(5), 12)
HIDDEN_METRIC_REQUESTS = HIDDEN_REQUESTS + _random_requests(random.Random(15), 12)


def _tpot_over_all(s, t):
    return (t[-1] - t[0]) / len(t)


METRIC_KEYS = ("ttft", "tpot", "latency")


def _metric_mistakes() -> dict:
    """key -> [(hint, the mistaken function)], made when a check runs (the hints' language)."""
    return {
        "ttft": [(say("that is the first token's clock time; subtract the start",
                      "这是第一个词元到达时的时钟读数；要减去开始时间"),
                  lambda s, t: t[0])],
        "tpot": [(say("it divided by all the tokens, but n tokens have n - 1 gaps after the first",
                      "它除以了全部词元数，但 n 个词元在第一个之后只有 n - 1 个间隔"),
                  _tpot_over_all),
                 (say("it counted the time to the first token too: TPOT is the mean gap after "
                      "the first token, (t_last - t_first) / (n - 1)",
                      "它把到第一个词元为止的时间也算进去了：TPOT 是第一个词元之后的平均间隔，"
                      "即 (t_last - t_first) / (n - 1)"),
                  lambda s, t: (t[-1] - s) / len(t)),
                 (say("that is the last gap alone; TPOT is the mean of all n - 1 gaps",
                      "这只是最后一个间隔；TPOT 是全部 n - 1 个间隔的平均值"),
                  lambda s, t: t[-1] - t[-2] if len(t) > 1 else math.nan)],
        "latency": [(say("it starts at the first token; the user waited from the start",
                         "它从第一个词元算起；可用户从请求开始就在等"),
                     lambda s, t: t[-1] - t[0]),
                    (say("that is the last token's clock time; subtract the start",
                         "这是最后一个词元到达时的时钟读数；要减去开始时间"),
                     lambda s, t: t[-1])],
    }


def _mistaken(key, mistake, start, times):
    """What `mistake` gives for this request: one number, or for TPOT on a single token, where
    the task asks for NaN, either the mistake's own number or NaN (a learner may make the
    mistake and still return NaN when there is no gap, as the task says)."""
    value = mistake(start, times)
    if key == "tpot" and len(times) == 1:
        return (value, math.nan)
    return value


def _same_as_mistake(answer, mistaken) -> bool:
    if isinstance(mistaken, tuple):
        return any(is_close(answer, m) for m in mistaken)
    return is_close(answer, mistaken)


def _reference_metrics(start, times) -> dict:
    m = RequestMetrics(start, tuple(times))
    return {"ttft": m.ttft, "tpot": m.tpot, "latency": m.latency}


@checker
def check_request_metrics(request_metrics, *, hidden=False) -> None:
    """`request_metrics(start, token_times)` -> {"ttft", "tpot", "latency"}, as
    `minillm.measure.metrics.RequestMetrics` computes them (tpot NaN with a single token)."""
    requests = HIDDEN_METRIC_REQUESTS if hidden else METRIC_REQUESTS
    answers = {key: [] for key in METRIC_KEYS}
    for start, times in requests:
        what = f"request_metrics({start}, {short(times, 60)})"
        got = call(request_metrics, start, times, what=what,
                   if_raises=say("With a single token there is no gap: TPOT is float('nan')",
                                 "只有一个词元时没有间隔：TPOT 是 float('nan')")
                   if len(times) == 1 else "")
        expect(isinstance(got, dict) and set(METRIC_KEYS) <= set(got),
               say("{what} returned {got}; return a dict with the keys 'ttft', 'tpot' and "
                   "'latency'",
                   "{what} 返回了 {got}；请返回一个含 'ttft'、'tpot'、'latency' 三个键的字典",
                   what=what, got=short(got)))
        for key in METRIC_KEYS:
            answers[key].append(as_number(got[key], f"{what}['{key}']"))
    wants = [_reference_metrics(s, t) for s, t in requests]
    for key, mistakes in _metric_mistakes().items():
        wrong = [i for i, (g, w) in enumerate(zip(answers[key], wants)) if not is_close(g, w[key])]
        if not wrong:
            continue
        i = wrong[0]
        start, times = requests[i]
        models = [(hint, [_mistaken(key, f, s, t) for s, t in requests]) for hint, f in mistakes]
        hint = matching_mistake(answers[key], models, _same_as_mistake)
        if hint is None and key == "tpot" and len(times) == 1:
            hint = say("with a single token there is no gap: return float('nan')",
                       "只有一个词元时没有间隔：应返回 float('nan')")
        raise CheckFailed(with_hint(
            say("{call}['{key}'] is {got!r}, expected {want!r}",
                "{call}['{key}'] 是 {got!r}，应为 {want!r}",
                call=f"request_metrics({start}, {short(times, 60)})", key=key,
                got=answers[key][i], want=wants[i][key]),
            hint))
    passed("request_metrics", len(requests))


# --- 2 · predicting the latency -----------------------------------------------------------------

LATENCY_CASES = [(0.25, 0.05, 200), (1.5, 0.1, 1), (0.0, 0.02, 1000)]  # (ttft, tpot, n_tokens)
HIDDEN_LATENCY_CASES = [(0.4, 0.03, 500), (2.0, 0.25, 1), (0.0, 0.01, 2), (0.125, 0.2, 64)]


@checker
def check_predict_latency(predict, *, hidden=False) -> None:
    """`predict_latency(ttft, tpot, n_tokens)`: TTFT + TPOT x (n_tokens - 1), checked against
    minillm.measure.metrics.predict_latency and against the measured latency of each request."""
    requests = HIDDEN_METRIC_REQUESTS if hidden else METRIC_REQUESTS
    cases = [(r.ttft, r.tpot, r.n_tokens, r.latency)
             for r in (RequestMetrics(s, tuple(t)) for s, t in requests)
             if r.n_tokens > 1]
    cases += [(*case, None) for case in (HIDDEN_LATENCY_CASES if hidden else LATENCY_CASES)]
    answers = []
    for ttft, tpot, n, _ in cases:
        what = f"predict_latency({ttft:.4g}, {tpot:.4g}, {n})"
        answers.append(as_number(call(predict, ttft, tpot, n, what=what), what))
    wants = [predict_latency(ttft, tpot, n) for ttft, tpot, n, _ in cases]
    end_check("predict_latency", answers, wants, cases, _latency_failure, is_close, lambda: [
        (say("the first token is already in the TTFT, so only n_tokens - 1 gaps follow",
             "第一个词元已经算在 TTFT 里了，后面只跟着 n_tokens - 1 个间隔"),
         [a + b * k for a, b, k, _ in cases]),
        (say("TTFT comes once, not per token: TTFT + TPOT x (n_tokens - 1)",
             "TTFT 只算一次，不是每个词元都算：TTFT + TPOT x (n_tokens - 1)"),
         [(a + b) * (k - 1) for a, b, k, _ in cases]),
    ])


def _latency_failure(case, got, want, hint) -> str:
    ttft, tpot, n, measured = case
    seen = say(" (the measured latency of that request was {m:.4g})",
               "（这个请求实测的延迟是 {m:.4g}）", m=measured) if measured else ""
    return with_hint(say("{call} returned {got:.10g}, expected {want:.10g}{seen}",
                         "{call} 返回了 {got:.10g}，应为 {want:.10g}{seen}",
                         call=f"predict_latency({ttft!r}, {tpot!r}, {n})", got=got, want=want,
                         seen=seen),
                     hint)


# --- 3 · timing a token stream -------------------------------------------------------------------

class FakeClock:
    """A clock the checker moves by hand: calling it reads the time."""

    def __init__(self, now: float):
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def _fake_stream(clock: FakeClock, gaps, items):
    """Yield `items`, the clock moving on by gaps[i] before item i is ready (gaps[0]: prefill)."""
    for gap, item in zip(gaps, items):
        clock.now += gap
        yield item


STREAM_CASES = [  # (clock's start, gaps, items)
    (1000.0, [0.5, 0.1, 0.1, 0.1], ["The", " capital", " is", " Paris"]),
    (5.0, [0.25], [42]),
    (0.0, [], []),
    (250.0, [2.0, 0.05, 0.3, 0.05, 0.05, 0.7], [11, 12, 13, 14, 15, 16]),
    (3600.0, [0.01] * 20, list(range(20))),
]
HIDDEN_STREAM_CASES = [
    (42.0, [1.2, 0.3, 0.05], ["Hello", ",", " world"]),
    (12.0, [0.8], ["only"]),
    (7.5, [], []),
    (86400.0, [0.4, 0.02, 0.02, 1.5, 0.02, 0.02, 0.02], list("abcdefg")),  # a stall mid-stream
    (0.0, [0.125] * 12, list(range(100, 112))),
    (1e6, [3.0, 0.5], [" yes", " yes"]),  # the same item twice
]


def _expected_timing(start, gaps, items):
    times, now = [], start
    for gap in gaps:
        now += gap
        times.append(now)
    return start, times, list(items)


@checker
def check_time_stream(time_stream, *, hidden=False) -> None:
    """`time_stream(stream, clock)` -> (start, token_times, items): `start` read from `clock`
    before the first item is asked for, each time read right after its item arrived."""
    cases = HIDDEN_STREAM_CASES if hidden else STREAM_CASES
    for start, gaps, items in cases:
        clock = FakeClock(start)
        what = say("time_stream(<a stream of {n} items>, clock)",
                   "time_stream(<含 {n} 项的流>, clock)", n=len(items))
        got = call(time_stream, _fake_stream(clock, gaps, items), clock, what=what)
        expect(isinstance(got, tuple) and len(got) == 3,
               say("{what} returned {got}; return a tuple (start, token_times, items)",
                   "{what} 返回了 {got}；请返回一个元组 (start, token_times, items)",
                   what=what, got=short(got)))
        got_start = as_number(got[0], say("the start {what} returned", "{what} 返回的 start",
                                          what=what))
        expect(isinstance(got[1], (list, tuple)) and isinstance(got[2], (list, tuple)),
               say("{what} returned token_times {times} and items {items}; return both as lists",
                   "{what} 返回的 token_times 是 {times}，items 是 {items}；两者都请以列表返回",
                   what=what, times=short(got[1]), items=short(got[2])))
        got_times = [as_number(t, say("a time {what} returned", "{what} 返回的一个时间",
                                      what=what)) for t in got[1]]
        want_start, want_times, want_items = _expected_timing(start, gaps, items)
        expect(list(got[2]) == want_items,
               say("{what} returned the items {got}; expected every item of the stream, in "
                   "order: {want}",
                   "{what} 返回的 items 是 {got}；应按顺序包含流里的每一项：{want}",
                   what=what, got=short(list(got[2])), want=short(want_items)))
        clock_values = {want_start, *want_times}
        if any(not any(math.isclose(v, c) for c in clock_values)
               for v in [got_start] + got_times):
            _not_clock_readings(what, got_start, got_times, want_start, want_times,
                                clock.reads, len(want_items))
        expect(len(got_times) == len(want_times),
               say("{what} returned {n} times for {items} items; record one time per item",
                   "{what} 为 {items} 项返回了 {n} 个时间；每一项应记一个时间",
                   what=what, n=len(got_times), items=len(want_items)))
        if want_times and got_times[1:] == want_times[:-1] and got_times[:1] == [want_start]:
            raise CheckFailed(say("{what}: each time was read before its item arrived (it is "
                                  "the previous item's time); read the clock right after the "
                                  "item",
                                  "{what}：每个时间都是在它那一项到达之前读的（其实是上一项的"
                                  "时间）；应在拿到这一项之后立刻读时钟", what=what))
        if want_times and got_start == want_times[0] and want_start != want_times[0]:
            raise CheckFailed(say("{what}: start is the first item's time, so TTFT comes out "
                                  "0; read the start before asking the stream for anything "
                                  "(prefill happens while you wait for the first item)",
                                  "{what}：start 是第一项的时间，于是 TTFT 算出来是 0；应在向流"
                                  "要任何东西之前读 start（预填充就发生在等第一项的时候）",
                                  what=what))
        if got_times and all(t == want_times[-1] for t in got_times) and len(set(want_times)) > 1:
            raise CheckFailed(say("{what}: every time is the end time: time each item as it "
                                  "arrives, in a `for item in stream:` loop, instead of "
                                  "collecting the stream first",
                                  "{what}：每个时间都是结束时刻：应在 `for item in stream:` "
                                  "循环里，每到一项就记下它的时间，而不是先把整个流收集起来",
                                  what=what))
        expect(math.isclose(got_start, want_start) and all(
            math.isclose(a, b) for a, b in zip(got_times, want_times)),
            say("{what} returned start {got_start} and times {got_times}; expected start "
                "{want_start} and times {want_times}",
                "{what} 返回的 start 是 {got_start}，时间是 {got_times}；应为 start "
                "{want_start}，时间 {want_times}", what=what, got_start=got_start,
                got_times=short(got_times), want_start=want_start,
                want_times=short(want_times)))
    passed("time_stream", len(cases))


def _not_clock_readings(what, got_start, got_times, want_start, want_times, reads, items):
    """Fail for times that are not readings of the given clock, naming the mistake that made
    them: times measured from the start, or another clock (too few reads of the given one)."""
    since_start = [t - want_start for t in want_times]
    if want_times and len(got_times) == len(since_start) and all(
            math.isclose(g, s, abs_tol=1e-9) for g, s in zip(got_times, since_start)):
        raise CheckFailed(say("{what}: the times {times} are measured from the start "
                              "(clock() - start); return the clock's readings themselves, "
                              "clock() right after each item: the metrics subtract the start",
                              "{what}：时间 {times} 是从开始算起的（clock() - start）；应返回"
                              "时钟的读数本身，即每一项之后立刻读的 clock()：减去开始时间是"
                              "算指标时的事", what=what, times=short(got_times)))
    if reads < 1 + items:
        raise CheckFailed(say("{what}: the clock you were given was read {reads} time(s) for a "
                              "start and {items} item(s), and the times {times} are not its "
                              "readings: read every time with clock(), not time.perf_counter() "
                              "or another clock",
                              "{what}：为一个 start 和 {items} 项，传给你的时钟只被读了 {reads} "
                              "次，而时间 {times} 不是它的读数：每个时间都要用 clock() 读，"
                              "不要用 time.perf_counter() 或别的时钟",
                              what=what, reads=reads, items=items,
                              times=short([got_start] + got_times)))
    raise CheckFailed(say("{what}: the times {times} are not readings of the clock you were "
                          "given: return start = clock() and, for each item, the clock() read "
                          "right after it",
                          "{what}：时间 {times} 不是传给你的那个时钟的读数：应返回 "
                          "start = clock()，以及每一项之后立刻读的 clock()",
                          what=what, times=short([got_start] + got_times)))


# --- 4 · throughput ------------------------------------------------------------------------------

def _overlap(reqs) -> bool:
    spans = sorted((s, t[-1]) for s, t in reqs)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


THROUGHPUT_CASES = [REQUESTS[:2], REQUESTS[2:4], REQUESTS, [REQUESTS[0]],
                    [(0.0, [0.5, 0.6]), (1.0, [1.5, 1.6, 1.7])],  # one after the other
                    _random_requests(random.Random(8), 16), _random_requests(random.Random(9), 3)]
HIDDEN_THROUGHPUT_CASES = [
    HIDDEN_REQUESTS[3:], HIDDEN_REQUESTS[:3], HIDDEN_REQUESTS, [HIDDEN_REQUESTS[5]],
    [(5.0, [5.2, 5.3, 5.4]), (6.0, [6.1]), (8.0, [8.5, 8.6])],  # one after another, idle between
    _random_requests(random.Random(18), 10), _random_requests(random.Random(19), 25)]


@checker
def check_throughput(throughput_fn, *, hidden=False) -> None:
    """`throughput(requests)`: all new tokens of [(start, token_times), ...] divided by the wall
    time from the first start to the last token, as minillm.measure.metrics.throughput."""
    cases = HIDDEN_THROUGHPUT_CASES if hidden else THROUGHPUT_CASES
    answers = []
    for reqs in cases:
        what = say("throughput(<{n} request{s}>)", "throughput(<{n} 个请求>)", n=len(reqs),
                   s="s" if len(reqs) > 1 else "")
        answers.append(as_number(call(throughput_fn, reqs, what=what), what))
    wants = [throughput([RequestMetrics(s, tuple(t)) for s, t in reqs]).tokens_per_second
             for reqs in cases]
    failure = first_failure("throughput", answers, wants, is_close)
    if failure is None:
        return
    i = failure[0]
    reqs = cases[i]
    tokens = sum(len(t) for _, t in reqs)
    span = max(t[-1] for _, t in reqs) - min(s for s, _ in reqs)
    serial = say("you divided by the sum of the requests' latencies, as if they ran one after "
                 "another; divide by the wall time from the first start to the last token",
                 "你除以了各请求延迟之和，好像它们是一个接一个跑的；应除以从第一个开始到最后一个"
                 "词元的墙钟时间")
    mistakes = [
        (say("you added up each request's own tokens per second; throughput is all tokens over "
             "the wall time from the first start to the last token",
             "你把每个请求各自的每秒词元数加了起来；吞吐量是全部词元数除以从第一个开始到最后"
             "一个词元的墙钟时间"),
         [sum(len(t) / (t[-1] - s) for s, t in r) for r in cases]),
        (serial,
         [sum(len(t) for _, t in r) / sum(t[-1] - s for s, t in r) for r in cases]),
        (say("you averaged each request's tokens per second; throughput is all tokens over the "
             "wall time they took together",
             "你对每个请求的每秒词元数取了平均；吞吐量是全部词元数除以它们一起花掉的墙钟时间"),
         [sum(len(t) / (t[-1] - s) for s, t in r) / len(r) for r in cases]),
        (say("the wall time starts at the first request's start, not at its first token",
             "墙钟时间从第一个请求开始时算起，而不是从它的第一个词元算起"),
         [sum(len(t) for _, t in r) / (max(t[-1] for _, t in r) - min(t[0] for _, t in r))
          for r in cases]),
    ]
    hint = matching_mistake(answers, mistakes, is_close)
    if hint == serial and _overlap(reqs):
        hint += say(" (these requests overlap in time)", "（这些请求在时间上是重叠的）")
    raise CheckFailed(say("throughput of {n} request(s) returned {got:.6g}, expected {want:.6g}: "
                          "{tokens} tokens over {span:.4g} s",
                          "{n} 个请求的 throughput 返回了 {got:.6g}，应为 {want:.6g}："
                          "{tokens} 个词元，用时 {span:.4g} s", n=len(reqs), got=answers[i],
                          want=wants[i], tokens=tokens, span=span)
                      + (say("; {hint}", "；{hint}", hint=hint) if hint else ""))


# --- 5 · the roofline ---------------------------------------------------------------------------

ROOF_CASES = [  # (rows, weights, bytes per weight, peak FLOP/s, bytes/s)
    (1, 134_515_008, 4, 100e9, 25e9),  # SmolLM2 in float32 on a CPU-like machine
    (4, 134_515_008, 4, 100e9, 25e9),
    (64, 134_515_008, 4, 100e9, 25e9),
    (512, 134_515_008, 4, 100e9, 25e9),
    (1, 6.74e9, 2, 989e12, 3.35e12),  # a 7B model in fp16 on an H100 (published figures)
    (256, 6.74e9, 2, 989e12, 3.35e12),
    (2048, 6.74e9, 2, 989e12, 3.35e12),
    (16, 6.74e9, 1, 197e12, 819e9),  # int8 weights on a TPU v5e (published figures)
]
HIDDEN_ROOF_CASES = [
    (1, 1.24e9, 2, 312e12, 2.039e12),  # a 1B model in bf16 on an A100 80GB (published figures)
    (32, 1.24e9, 2, 312e12, 2.039e12),
    (1024, 1.24e9, 2, 312e12, 2.039e12),
    (100, 8e9, 2, 200e12, 2e12),  # exactly at the ridge: reading and arithmetic take as long
    (8, 70.6e9, 1, 1979e12, 3.35e12),  # 70B in fp8 on an H100 SXM (published figures)
    (4096, 70.6e9, 1, 1979e12, 3.35e12),
    (2, 361.8e6, 4, 60e9, 40e9),  # a 360M model in float32 on a laptop
    (3, 134_515_008, 2, 100e9, 25e9),
]


def _roof_seconds(rows, weights, nbytes, peak, bandwidth) -> float:
    flops = 2 * weights * rows
    return flops / Roof(peak, bandwidth).attainable(flops / (weights * nbytes))


def _roof_mistakes(cases):
    def model(f):
        return [f(*case) for case in cases]

    return [
        (say("the pass needs both its arithmetic and its reading, and the slower of the two sets "
             "the time: max(...), not min(...)",
             "一次前向既要算也要读，两者中慢的那个决定时间：用 max(...)，不是 min(...)"),
         model(lambda r, w, b, p, bw: min(2 * w * r / p, w * b / bw))),
        (say("the reading and the arithmetic go on at once: the time is the larger of the two, "
             "not their sum", "读取和计算是同时进行的：时间取两者中较大的那个，而不是两者之和"),
         model(lambda r, w, b, p, bw: 2 * w * r / p + w * b / bw)),
        (say("a multiply and an add: 2 FLOP per weight per row",
             "一次乘法加一次加法：每行、每个权重 2 FLOP"),
         model(lambda r, w, b, p, bw: max(w * r / p, w * b / bw))),
        (say("the weights are read once per pass, whatever the rows (that is what a batch "
             "shares): do not multiply the bytes by rows",
             "不管有多少行，每次前向只读一遍权重（一个批共享的正是这次读取）：字节数不要乘以 "
             "rows"),
         model(lambda r, w, b, p, bw: max(2 * w * r / p, w * b * r / bw))),
        (say("multiply the weights by bytes_per_weight to get the bytes read",
             "权重个数乘以 bytes_per_weight 才是读取的字节数"),
         model(lambda r, w, b, p, bw: max(2 * w * r / p, w / bw))),
        (say("that is the reading alone: with many rows the arithmetic takes longer (past the "
             "ridge the pass is compute-bound)",
             "这只是读取的时间：行数多时计算更费时（过了屋脊点，这次前向就是计算受限的）"),
         model(lambda r, w, b, p, bw: w * b / bw)),
        (say("that is the arithmetic alone: with few rows, reading the weights takes longer (the "
             "pass is bandwidth-bound)",
             "这只是计算的时间：行数少时读权重更费时（这次前向是带宽受限的）"),
         model(lambda r, w, b, p, bw: 2 * w * r / p)),
    ]


@checker
def check_roofline_seconds(roofline_seconds, *, hidden=False) -> None:
    """`roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth)`: the least
    time of a forward pass of `rows` tokens, 2 FLOP per weight per row against the weights read
    once: max(FLOPs / peak_flops, bytes / bandwidth), as minillm.measure.roofline's Roof gives."""
    cases = HIDDEN_ROOF_CASES if hidden else ROOF_CASES
    answers = []
    for case in cases:
        what = f"roofline_seconds{case}"
        answers.append(as_number(call(roofline_seconds, *case, what=what), what))
    wants = [_roof_seconds(*case) for case in cases]
    end_check("roofline_seconds", answers, wants, cases, _roof_failure, is_close,
              lambda: _roof_mistakes(cases))


def _roof_failure(case, got, want, hint) -> str:
    rows, weights, nbytes, peak, bandwidth = case
    return (say("{call} returned {got:.6g} s, expected {want:.6g} s: {flops:.3g} FLOP at "
                "{peak:.3g} FLOP/s against {nbytes:.3g} bytes at {bandwidth:.3g} bytes/s",
                "{call} 返回了 {got:.6g} s，应为 {want:.6g} s：以 {peak:.3g} FLOP/s "
                "算 {flops:.3g} FLOP，对比以 {bandwidth:.3g} bytes/s 读 {nbytes:.3g} "
                "字节", call=f"roofline_seconds{case}", got=got, want=want,
                flops=2 * weights * rows, peak=peak, nbytes=weights * nbytes,
                bandwidth=bandwidth)
            + (say("; {hint}", "；{hint}", hint=hint) if hint else ""))


# --- 6 · a CUDA graph's batch size (lesson 05b) -------------------------------------------------

VLLM_START = [1, 2, 4, 8, 16, 24, 32]  # how vLLM's default capture list begins
GRAPH_CASES = [  # (batch, capture sizes)
    (1, [1, 2, 4, 8]), (3, [1, 2, 4, 8]), (8, [1, 2, 4, 8]), (9, [1, 2, 4, 8]),
    (5, [16, 1, 8, 4]), (13, VLLM_START), (2, [2]), (40, VLLM_START),
]
HIDDEN_GRAPH_CASES = [
    (2, [1, 2, 4]), (7, [8, 1, 4, 2]), (24, VLLM_START), (33, [32, 16, 8]),
    (1, [4, 2]), (17, VLLM_START), (6, [6, 3]), (100, [64]),
]


def _graph_variant(batch, sizes, kind):
    if kind == "reference":
        return capture_sizes.graph_batch_size(batch, sizes)
    if kind == "first listed":
        return next((s for s in sizes if s >= batch), None)
    fitting = [s for s in sizes if (s > batch if kind == "strictly larger" else s >= batch)]
    if kind == "round down":
        below = [s for s in sizes if s <= batch]
        return max(below) if below else None
    if kind == "largest":
        return max(sizes) if fitting else None
    if kind == "batch itself" and not fitting:
        return batch
    return min(fitting) if fitting else None


GRAPH_MISTAKES = [  # (the variant, its hint in English and Chinese)
    ("round down", ("pad up, not down: a graph of fewer rows cannot hold the batch; take the "
                    "smallest captured size >= batch",
                    "要向上补齐，不是向下：行数更少的图放不下这个批；取 >= batch 的最小捕获大小")),
    ("first listed", ("the list need not be sorted: take the smallest size >= batch, not the "
                      "first one listed", "列表不一定有序：取 >= batch 的最小大小，而不是列出的"
                      "第一个")),
    ("strictly larger", ("a batch that equals a captured size replays that graph: >=, not >",
                         "批大小正好等于某个捕获大小时就用那张图：是 >=，不是 >")),
    ("largest", ("the smallest size that holds the batch, not the largest: every extra row is "
                 "wasted work", "取能放下这个批的最小大小，而不是最大的：多出来的每一行都是白算")),
    ("batch itself", ("a batch larger than every captured size has no graph to replay: return "
                      "None (the step runs without one)",
                      "比所有捕获大小都大的批没有图可以重放：返回 None（这一步不用图运行）")),
]


@checker
def check_graph_batch_size(graph_batch_size, *, hidden=False) -> None:
    """`graph_batch_size(batch, capture_sizes)`: the smallest captured size >= batch, or None
    when the batch is larger than all, as minillm.engine.capture_sizes gives."""
    cases = HIDDEN_GRAPH_CASES if hidden else GRAPH_CASES
    answers = []
    for batch, sizes in cases:
        what = f"graph_batch_size({batch}, {sizes})"
        got = call(graph_batch_size, batch, list(sizes), what=what)
        expect(got is None or is_int(got),
               say("{what} returned {got}; return one of the captured sizes (an int), or None",
                   "{what} 返回了 {got}；请返回其中一个捕获大小（整数），或 None", what=what,
                   got=short(got)))
        answers.append(None if got is None else int(got))
    end_variant_check("graph_batch_size", answers, cases, _graph_variant, GRAPH_MISTAKES,
                      _graph_failure)


def _graph_failure(case, got, want, hint) -> str:
    batch, sizes = case
    return with_hint(say("graph_batch_size({batch}, {sizes}) returned {got}, expected {want}",
                         "graph_batch_size({batch}, {sizes}) 返回了 {got}，应为 {want}",
                         batch=batch, sizes=sizes, got=got, want=want),
                     hint, say("; the smallest size >= batch, or None when there is none",
                               "；取 >= batch 的最小大小，没有时返回 None"))


# --- 7 · choosing the capture sizes (lesson 05b) ------------------------------------------------

def _lists(largest):
    return {"every size": list(range(1, largest + 1)),
            "powers of two": [2 ** i for i in range(largest.bit_length()) if 2 ** i <= largest],
            f"1 and {largest}": [1, largest],
            "up to 8": [1, 2, 4, 8]}


CHOOSE_CASES = [  # (the batch size of each step, the candidate lists, the most graphs)
    ([16] * 3 + [12] * 5 + [5] * 4 + [1] * 2, _lists(16), 5),
    ([16] * 3 + [12] * 5 + [5] * 4 + [1] * 2, _lists(16), 2),
    ([4, 4, 2], {"1, 2, 4, 8": [1, 2, 4, 8], "2 and 4": [2, 4]}, 8),
    ([5] * 10 + [2, 3], {"5 and 8": [5, 8], "3 and 6": [3, 6]}, 2),
    ([16, 9, 3], _lists(16), 1),
]
HIDDEN_CHOOSE_CASES = [
    ([32] * 2 + [20] * 6 + [9] * 3 + [2] * 4, _lists(32), 6),
    ([32] * 2 + [20] * 6 + [9] * 3 + [2] * 4, _lists(32), 2),
    ([8, 8, 4], {"1, 2, 4, 8, 16": [1, 2, 4, 8, 16], "4 and 8": [4, 8]}, 8),
    ([7] * 12 + [3, 4], {"7 and 12": [7, 12], "4 and 8": [4, 8]}, 2),
    ([32, 17], _lists(32), 1),
]


def _choose_variant(steps, candidates, most, kind):
    if kind == "reference":
        return capture_sizes.choose_capture_sizes(steps, candidates, most)
    largest = max(steps)
    counted = sorted(set(steps)) if kind == "distinct sizes" else steps
    qualified = []
    for order, (name, sizes) in enumerate(candidates.items()):
        if (kind != "no limit" and len(sizes) > most) or \
                (kind != "no cover" and max(sizes) < largest):
            continue
        padding = sum(min((s for s in sizes if s >= b), default=b) - b for b in counted)
        graphs = -len(sizes) if kind == "ties to more graphs" else len(sizes)
        qualified.append(((graphs, order) if kind == "fewest graphs" else
                          (padding, graphs, order), name))
    return min(qualified)[1] if qualified else None


CHOOSE_MISTAKES = [
    ("no limit", ("a list of more than max_graphs sizes is out, however little it pads",
                  "超过 max_graphs 个大小的列表不能选，不管它补得多少")),
    ("no cover", ("a list must give every step a graph: its largest size must hold the largest "
                  "batch (an eager step pads nothing, but runs without a graph)",
                  "列表必须让每一步都有图可用：它的最大大小要放得下最大的批（不用图的步骤虽然不补"
                  "零，却没有图）")),
    ("distinct sizes", ("count the padding of every step, not once per batch size: a size the "
                        "engine ran often weighs more",
                        "要数每一步的补齐，而不是每个批大小只数一次：引擎常跑的大小分量更重")),
    ("fewest graphs", ("among the lists that qualify, the fewest padded rows wins; fewer graphs "
                       "only breaks ties", "符合条件的列表里，补齐行数最少的胜出；图更少只用来"
                       "打破平局")),
    ("ties to more graphs", ("on equal padding take the list with fewer graphs: each graph costs "
                             "capture time and memory", "补齐一样多时选图更少的列表：每张图都要"
                             "花捕获时间和内存")),
]


@checker
def check_choose_capture_sizes(choose_capture_sizes, *, hidden=False) -> None:
    """`choose_capture_sizes(batch_sizes, candidates, max_graphs)`: the name of the list that pads
    the fewest rows over the steps, among those of at most max_graphs sizes that hold the largest
    step (ties: fewer graphs, then the first listed), or None."""
    cases = HIDDEN_CHOOSE_CASES if hidden else CHOOSE_CASES
    answers = []
    for steps, candidates, most in cases:
        what = f"choose_capture_sizes(<{len(steps)} steps>, {list(candidates)}, {most})"
        got = call(choose_capture_sizes, list(steps),
                   {name: list(sizes) for name, sizes in candidates.items()}, most, what=what)
        expect(got is None or (isinstance(got, str) and got in candidates),
               say("{what} returned {got}; return the name of one of the lists, or None",
                   "{what} 返回了 {got}；请返回其中一个列表的名字，或 None", what=what,
                   got=short(got)))
        answers.append(got)
    end_variant_check("choose_capture_sizes", answers, cases, _choose_variant, CHOOSE_MISTAKES,
                      _choose_failure)


def _choose_failure(case, got, want, hint) -> str:
    steps, candidates, most = case
    return with_hint(say("for steps of batch sizes {steps}, lists {lists} and at most {most} "
                         "graphs you chose {got!r}, expected {want!r}",
                         "步骤的批大小为 {steps}、候选列表为 {lists}、最多 {most} 张图时，你选了 "
                         "{got!r}，应为 {want!r}", steps=short(steps, 80), lists=candidates,
                         most=most, got=got, want=want),
                     hint, say("; count each step's rows padded up to the list's next size",
                               "；把每一步补齐到列表中下一个大小，数出补了多少行"))
