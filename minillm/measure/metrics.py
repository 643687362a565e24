"""Measuring inference (性能指标): the four numbers that describe how fast a model answers.

For one request, from the moment it starts and the moment each new token is ready:

    TTFT        time to first token (首个词元生成时间): start -> first token. Tokenizing and the
                prefill (预填充) pass over the whole prompt happen here.
    TPOT        time per output token (每个输出词元的时间): the mean gap between tokens *after*
                the first, (t_last - t_first) / (n - 1). The first token is left out: it comes
                from prefill, not decode.
    latency     end-to-end latency (端到端延迟): start -> last token.
                By the definitions above, latency = TTFT + TPOT x (n - 1) for n new tokens.
    tokens/s    n / latency for the whole request; decode tokens/s = 1 / TPOT.

Across many requests, throughput (吞吐量) is all their new tokens divided by the wall time from
the first start to the last end: serving more users at once raises it, while each user's TPOT grows.

`RequestMetrics` holds one request's timestamps and computes the numbers. `TokenClock` records
them inside a generation loop (`minillm.generate` and `minillm.stream` attach them to each result
as `.metrics`), and `throughput` sums up many requests. This file is the arithmetic only: it
runs no model (the generation loops in minillm.generation.loop and minillm.engine use it).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..utils.validate import check_int
from ..utils.wording import text

__all__ = ["RequestMetrics", "Throughput", "TokenClock", "TokenEvent", "throughput",
           "predict_latency"]


def _check_times(start: float, token_times: Sequence[float]) -> None:
    if not isinstance(start, (int, float)) or isinstance(start, bool) or not math.isfinite(start):
        raise TypeError(f"start must be a finite number of seconds, got {start!r}")
    previous = start
    for n, t in enumerate(token_times):
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
            raise TypeError(f"token time {n} must be a finite number of seconds, got {t!r}")
        if t < previous:
            what = "the request's start" if n == 0 else f"token time {n - 1} ({previous})"
            raise ValueError(f"token times must not go back in time: token time {n} ({t}) is "
                             f"before {what}")
        previous = t


@dataclass(frozen=True)
class RequestMetrics:
    """One request's timing: when it started and when each new token was ready (seconds, from
    `time.perf_counter()` or any one clock).

        >>> m = RequestMetrics(start=0.0, token_times=(0.30, 0.35, 0.40, 0.45))
        >>> m.ttft, m.tpot, m.latency          # 0.30, 0.05, 0.45
    """

    start: float
    token_times: tuple[float, ...]
    prompt_tokens: int = 0
    end: float | None = None  # when the answer was complete; None: at the last token

    def __post_init__(self):
        times = tuple(self.token_times)
        _check_times(self.start, times)
        object.__setattr__(self, "token_times", tuple(float(t) for t in times))
        if not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be an int >= 0, got {self.prompt_tokens!r}")
        if self.end is not None and times and self.end < times[-1]:
            raise ValueError(f"end ({self.end}) is before the last token ({times[-1]})")

    @property
    def n_tokens(self) -> int:
        """New tokens generated."""
        return len(self.token_times)

    @property
    def ttft(self) -> float:
        """Time to first token, seconds (NaN when no token came)."""
        return self.token_times[0] - self.start if self.token_times else math.nan

    @property
    def gaps(self) -> list[float]:
        """The time between consecutive tokens (inter-token latency, 词元间延迟): n - 1 gaps."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tpot(self) -> float:
        """Time per output token, seconds: the mean gap after the first token (NaN with fewer
        than two tokens: there was no decode step)."""
        if self.n_tokens < 2:
            return math.nan
        return (self.token_times[-1] - self.token_times[0]) / (self.n_tokens - 1)

    @property
    def latency(self) -> float:
        """End-to-end latency, seconds: start to the end of the answer."""
        if self.end is not None:
            return self.end - self.start
        return (self.token_times[-1] if self.token_times else self.start) - self.start

    @property
    def tokens_per_second(self) -> float:
        """New tokens per second over the whole request (prefill included)."""
        return self.n_tokens / self.latency if self.latency > 0 else math.nan

    @property
    def decode_tokens_per_second(self) -> float:
        """Decode speed: tokens per second after the first token, 1 / TPOT."""
        return 1.0 / self.tpot if self.tpot > 0 else math.nan

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prompt tokens per second during the time to first token."""
        return self.prompt_tokens / self.ttft if self.ttft > 0 else math.nan

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "new_tokens": self.n_tokens,
                "ttft_s": self.ttft, "tpot_s": self.tpot, "latency_s": self.latency,
                "tokens_per_s": self.tokens_per_second,
                "decode_tokens_per_s": self.decode_tokens_per_second}

    def __str__(self) -> str:
        return text("{n} tokens: TTFT {ttft:.1f} ms, TPOT {tpot:.1f} ms ({speed:.1f} tok/s), "
                    "latency {latency:.1f} ms",
                    "{n} 个词元：TTFT {ttft:.1f} ms，TPOT {tpot:.1f} ms（每秒 {speed:.1f} 个词元），"
                    "端到端延迟 {latency:.1f} ms",
                    n=self.n_tokens, ttft=1000 * self.ttft, tpot=1000 * self.tpot,
                    speed=self.decode_tokens_per_second, latency=1000 * self.latency)


def predict_latency(ttft: float, tpot: float, n_tokens: int) -> float:
    """End-to-end latency of an answer of `n_tokens` new tokens: TTFT + TPOT x (n_tokens - 1).
    The first token's time is TTFT; each later one adds one TPOT."""
    check_int("n_tokens", n_tokens, 1)
    return ttft + tpot * (n_tokens - 1)


@dataclass(frozen=True)
class Throughput:
    """Many requests summed up: output tokens over the wall time they took together."""

    requests: int
    output_tokens: int
    seconds: float
    mean_ttft: float
    mean_tpot: float
    mean_latency: float

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else math.nan

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else math.nan

    def __str__(self) -> str:
        return text("{requests} requests, {tokens} tokens in {seconds:.2f} s: {speed:.1f} tok/s; "
                    "mean TTFT {ttft:.1f} ms, mean TPOT {tpot:.1f} ms",
                    "{requests} 个请求，{seconds:.2f} 秒生成 {tokens} 个词元：每秒 {speed:.1f} 个"
                    "词元；平均 TTFT {ttft:.1f} ms，平均 TPOT {tpot:.1f} ms",
                    requests=self.requests, tokens=self.output_tokens, seconds=self.seconds,
                    speed=self.tokens_per_second, ttft=1000 * self.mean_ttft,
                    tpot=1000 * self.mean_tpot)


def throughput(metrics: Sequence[RequestMetrics]) -> Throughput:
    """Throughput of requests that ran over the same period (a batch, or a server's requests):
    all new tokens / (last end - first start). Requests with one token have no TPOT and are left
    out of the mean TPOT."""
    metrics = list(metrics)
    if not metrics:
        raise ValueError("throughput needs at least one RequestMetrics")
    if not all(isinstance(m, RequestMetrics) for m in metrics):
        raise TypeError("throughput takes a list of RequestMetrics (a result's `.metrics`)")
    first = min(m.start for m in metrics)
    last = max(m.start + m.latency for m in metrics)
    tpots = [m.tpot for m in metrics if m.n_tokens >= 2]
    return Throughput(requests=len(metrics), output_tokens=sum(m.n_tokens for m in metrics),
                      seconds=last - first,
                      mean_ttft=statistics.fmean(m.ttft for m in metrics),
                      mean_tpot=statistics.fmean(tpots) if tpots else math.nan,
                      mean_latency=statistics.fmean(m.latency for m in metrics))


class TokenClock:
    """Records, inside the generation loop, when each row's tokens become ready.

    Create it when the request starts; call `tick(sequences)` after every step of
    `minillm.generation.loop.token_steps`: each row that gained tokens gets the time of now."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.start = clock()
        self.times: list[list[float]] = []

    def tick(self, sequences) -> float:
        now = self.clock()
        if not self.times:
            self.times = [[] for _ in sequences]
        for times, s in zip(self.times, sequences):
            while len(times) < len(s.token_ids):
                times.append(now)
        return now

    def metrics(self, sequences) -> list[RequestMetrics]:
        if not self.times:
            self.times = [[] for _ in sequences]
        return [RequestMetrics(self.start, tuple(t), len(s.prompt_ids))
                for t, s in zip(self.times, sequences)]


@dataclass(frozen=True)
class TokenEvent:
    """What a stream (`minillm.stream`) reports for each new token to its `on_token` callback."""

    index: int        # 0 for the first new token
    token_id: int
    piece: str        # the text this token made ready ("" while a character or stop string waits)
    time: float       # seconds since the request started
    gap: float        # seconds since the previous token (TTFT for the first)
