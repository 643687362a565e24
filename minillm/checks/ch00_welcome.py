"""Checkers for exercises/00_welcome.ipynb."""

from __future__ import annotations

from ._base import CheckFailed, call, expect, expect_close, passed

SAMPLE_TEXTS = [
    "Hello, world!",
    "What is the capital of France?",
    "你好，世界！",
    "  leading spaces and trailing  ",
    "<|im_start|>user\nHi<|im_end|>\n",
]


def check_count_tokens(count_tokens, tokenizer) -> None:
    """`count_tokens(tokenizer, text)` must give the number of ids the tokenizer produces."""
    for text in SAMPLE_TEXTS:
        got = call(count_tokens, tokenizer, text)
        want = len(tokenizer(text).input_ids)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"count_tokens(tokenizer, {text!r}) returned {type(got).__name__} {got!r}; "
               "return an int, the number of token ids")
        if got == len(text):
            raise CheckFailed(f"count_tokens(tokenizer, {text!r}) returned {got}, the number of "
                              f"characters; count the ids the tokenizer returns ({want})")
        expect(got == want, f"count_tokens(tokenizer, {text!r}) returned {got}, but the tokenizer "
                            f"makes {want} ids from it")
    passed("count_tokens", len(SAMPLE_TEXTS))


PREFILL_CASES = [
    ({"tokenize": 0.001, "prefill": 0.150, "decode": 1.800, "detokenize": 0.0005}, 0.150),
    ({"tokenize": 0.0, "prefill": 2.0, "decode": 2.0, "detokenize": 0.0}, 2.0),
    ({"prefill": 0.3, "decode": 0.1}, 0.3),
]


def check_prefill_fraction(prefill_fraction) -> None:
    """`prefill_fraction(timings)` must give prefill's share of the summed stage times."""
    for timings, prefill in PREFILL_CASES:
        want = prefill / sum(timings.values())
        got = call(prefill_fraction, dict(timings))
        if isinstance(got, (int, float)) and abs(got - 100 * want) < 1e-9:
            raise CheckFailed(f"prefill_fraction({timings}) returned {got}, a percentage; "
                              f"return a fraction between 0 and 1 ({want:.4f})")
        if isinstance(got, (int, float)) and abs(got - prefill / timings["decode"]) < 1e-12 \
                and abs(want - got) > 1e-9:
            raise CheckFailed(f"prefill_fraction({timings}) returned {got}: that is prefill over "
                              "decode; divide by the total of every stage")
        expect_close(got, want, f"prefill_fraction({timings})")
    passed("prefill_fraction", len(PREFILL_CASES))


DECODE_CASES = [
    ([0.50, 0.55, 0.60, 0.65, 0.70], 4 / 0.20),
    ([1.0, 1.1], 1 / 0.1),
    ([0.2, 0.3, 0.5, 0.6, 0.9, 1.0, 1.2], 6 / 1.0),
]


def check_decode_speed(decode_speed) -> None:
    """`decode_speed(token_times)` must give decode tokens per second, leaving out the first token
    (it comes from prefill, not decode)."""
    for times, want in DECODE_CASES:
        got = call(decode_speed, list(times))
        including_first = len(times) / (times[-1] - times[0])
        if isinstance(got, (int, float)) and abs(got - including_first) < 1e-9:
            raise CheckFailed(f"decode_speed({times}) returned {got:.3f}: it counted the first "
                              "token, but the first token comes from prefill; count only the "
                              f"tokens after it ({want:.3f} tokens/s)")
        expect_close(got, want, f"decode_speed({times})")
    try:
        decode_speed([1.0])
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(f"decode_speed([1.0]) raised {type(error).__name__}: with a single "
                          "token there is no decode step; raise ValueError saying so") from None
    else:
        raise CheckFailed("decode_speed([1.0]) returned a value: with a single token there is "
                          "no decode step; raise ValueError saying so")
    passed("decode_speed", len(DECODE_CASES) + 1)
