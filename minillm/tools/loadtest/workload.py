"""What a load test sends: how many requests, how many at once, how fast, and how long.

Prompts are made of common English words drawn with a fixed seed, one word per wanted token (most
of these words are one token in a byte-level BPE vocabulary; the server's `usage` reports the
true count). Every request gets its own prompt, so a prefix cache cannot answer them all from one.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from .full_length import FIELDS, full_length_fields

WORDS = ("the of and to in is was for on that with as by at from his her it an were are which "
         "this be or has had first one their its new after who they two have but been also "
         "time city year world state school part people during used water river house music "
         "light small north south great about between other into more game three over many "
         "most work only second well some through show before film team life book where when "
         "form line long early high group best under each day old back end name set made "
         "family number place road land since large power main area war both sea field").split()

ENDPOINTS = ("completions", "chat")


@dataclass(frozen=True)
class Workload:
    """A load test's settings.

    requests        how many requests to send in all
    concurrency     the most requests in flight at once (并发数)
    rate            requests per second, arriving as a Poisson process (seeded); None: send the
                    next one as soon as a slot is free
    prompt_tokens   words per prompt (about as many tokens)
    output_tokens   max_tokens of every request; with full_length each answer should be this long
    stream          ask for server-sent events: needed to measure TTFT and TPOT
    endpoint        "completions" or "chat"
    full_length     ask for answers of exactly `output_tokens` tokens (vLLM's `ignore_eos` and
                    `min_tokens`: see full_length.py); False lets answers end at end of text
    temperature     0 is greedy
    seed            fixes the prompts and the arrival times
    timeout_s       the most seconds one request may take
    max_seconds     the whole test stops sending after this many seconds (a bound, not a goal)
    """

    requests: int = 32
    concurrency: int = 4
    rate: float | None = None
    prompt_tokens: int = 32
    output_tokens: int = 16
    stream: bool = True
    endpoint: str = "completions"
    full_length: bool = True
    temperature: float = 0.0
    seed: int = 0
    timeout_s: float = 120.0
    max_seconds: float = 600.0

    def __post_init__(self):
        def count(name, low, high):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name} must be an int from {low} to {high}, got {value!r}")

        count("requests", 1, 1_000_000)
        count("concurrency", 1, 4096)
        count("prompt_tokens", 1, 1_000_000)
        count("output_tokens", 1, 1_000_000)
        count("seed", 0, 2**63)
        if self.rate is not None and not (isinstance(self.rate, (int, float)) and
                                          0 < self.rate < math.inf):
            raise ValueError(f"rate must be a number of requests per second > 0, or None for "
                             f"'as fast as the concurrency allows', got {self.rate!r}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {self.endpoint!r}")
        for name in ("timeout_s", "max_seconds"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        for name in ("stream", "full_length"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be from 0 to 2, got {self.temperature!r}")

    def prompts(self) -> list[str]:
        """One prompt per request, the same for the same seed."""
        rng = random.Random(self.seed)
        return [" ".join(rng.choice(WORDS) for _ in range(self.prompt_tokens))
                for _ in range(self.requests)]

    def arrivals(self) -> list[float]:
        """When each request may be sent, seconds after the start: Poisson arrivals at `rate`
        (exponential gaps, seeded), or all at 0 when rate is None."""
        if self.rate is None:
            return [0.0] * self.requests
        rng = random.Random(self.seed + 1)
        t, times = 0.0, []
        for _ in range(self.requests):
            times.append(t)
            t += rng.expovariate(self.rate)
        return times

    def payload(self, prompt: str, model: str | None, full_length=None) -> dict:
        """The JSON body of one request. `full_length`: the spellings of "answer exactly
        max_tokens tokens" to send (default: all of full_length.FIELDS, or none when
        `self.full_length` is False)."""

        body = {"max_tokens": self.output_tokens, "temperature": self.temperature,
                "stream": self.stream}
        if model:
            body["model"] = model
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if full_length is None:
            full_length = FIELDS if self.full_length else ()
        body.update(full_length_fields(full_length, self.output_tokens))
        return body

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def as_dict(self) -> dict:
        return asdict(self)
