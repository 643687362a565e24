"""Checkers for exercises/05_metrics.ipynb: the four metrics from token timestamps."""

from __future__ import annotations

import math

from ._base import CheckFailed, call, expect, expect_close, passed

# (start, token_times): fixed requests, seconds
REQUESTS = [
    (0.0, [0.30, 0.35, 0.40, 0.45, 0.50]),
    (10.0, [10.9, 11.0, 11.2, 11.3]),
    (2.5, [2.6, 2.7]),
    (1.0, [4.0, 4.05, 4.1, 4.15, 4.2, 4.25, 4.3, 4.35, 4.4]),
]


def _ttft(start, times):
    return times[0] - start


def _tpot(times):
    return (times[-1] - times[0]) / (len(times) - 1)


def check_ttft(ttft) -> None:
    """`ttft(start, token_times)`: seconds from the start to the first token."""
    for start, times in REQUESTS:
        got = call(ttft, start, list(times))
        if isinstance(got, (int, float)) and math.isclose(got, times[0]) and start != 0:
            raise CheckFailed(f"ttft({start}, {times}) returned {got}: that is the first token's "
                              f"clock time; subtract the start ({_ttft(start, times):.4g})")
        expect_close(got, _ttft(start, times), f"ttft({start}, {times})")
    passed("ttft", len(REQUESTS))


def check_tpot(tpot) -> None:
    """`tpot(token_times)`: the mean gap after the first token; ValueError with one token."""
    for _, times in REQUESTS:
        want = _tpot(times)
        got = call(tpot, list(times))
        if isinstance(got, (int, float)) and len(times) > 2 and \
                math.isclose(got, (times[-1] - times[0]) / len(times)):
            raise CheckFailed(f"tpot({times}) returned {got:.4g}: it divided by all {len(times)} "
                              f"tokens, but {len(times)} tokens have {len(times) - 1} gaps "
                              f"({want:.4g})")
        expect_close(got, want, f"tpot({times})")
    try:
        tpot([1.0])
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(f"tpot([1.0]) raised {type(error).__name__}: with one token there is "
                          "no gap; raise ValueError saying so") from None
    else:
        raise CheckFailed("tpot([1.0]) returned a value: with one token there is no gap to "
                          "average; raise ValueError saying so")
    passed("tpot", len(REQUESTS) + 1)


def check_latency(latency) -> None:
    """`latency(start, token_times)`: end-to-end seconds, start to the last token."""
    for start, times in REQUESTS:
        got = call(latency, start, list(times))
        if isinstance(got, (int, float)) and math.isclose(got, times[-1] - times[0]) \
                and start != times[0]:
            raise CheckFailed(f"latency({start}, {times}) returned {got:.4g}: it starts at the "
                              f"first token; the user waited from the start "
                              f"({times[-1] - start:.4g})")
        expect_close(got, times[-1] - start, f"latency({start}, {times})")
    passed("latency", len(REQUESTS))


def check_predict_latency(predict_latency) -> None:
    """`predict_latency(ttft, tpot, n_tokens)`: TTFT + TPOT x (n_tokens - 1), checked against
    the measured latency of each fixed request."""
    for start, times in REQUESTS:
        args = (_ttft(start, times), _tpot(times), len(times))
        got = call(predict_latency, *args)
        want = times[-1] - start
        if isinstance(got, (int, float)) and math.isclose(got, args[0] + args[1] * args[2]):
            raise CheckFailed(f"predict_latency{args} returned {got:.4g}: the first token is "
                              f"already in the TTFT, so only n_tokens - 1 gaps follow "
                              f"({want:.4g}, the measured latency)")
        expect_close(got, want, f"predict_latency{args}", rel=1e-9)
    passed("predict_latency", len(REQUESTS))


def check_throughput(throughput) -> None:
    """`throughput(requests)`: all new tokens of [(start, token_times), ...] divided by the wall
    time from the first start to the last token."""
    cases = [REQUESTS[:2], REQUESTS[2:], REQUESTS, [REQUESTS[0]]]
    for reqs in cases:
        tokens = sum(len(t) for _, t in reqs)
        span = max(t[-1] for _, t in reqs) - min(s for s, _ in reqs)
        want = tokens / span
        got = call(throughput, [(s, list(t)) for s, t in reqs])
        summed = sum(len(t) / (t[-1] - s) for s, t in reqs)
        if isinstance(got, (int, float)) and len(reqs) > 1 and math.isclose(got, summed):
            raise CheckFailed(f"throughput returned {got:.4g}, the sum of each request's own "
                              f"tokens/s; the requests overlap in time, so divide all tokens "
                              f"({tokens}) by the wall time they took together ({span:.4g} s)")
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"throughput returned {type(got).__name__}; return tokens per second, a number")
        expect_close(got, want, f"throughput of {len(reqs)} request(s)")
    passed("throughput", len(cases))
