"""Numbers and words as the widgets show them to people: rounded, in words, never
0.20000000000000004."""

from __future__ import annotations

import math

from ..language import say

__all__ = ["number", "percent", "plural", "finish_reason_text"]


def number(value) -> str:
    """A setting as a person types it: floats to 6 significant digits (0.2, not
    0.20000000000000004; 1.0 stays 1.0), everything else as `repr`."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        text = f"{value:.6g}"
        return text if "." in text or "e" in text else text + ".0"
    return repr(value)


def percent(p: float) -> str:
    """A probability as a percentage with two significant digits: 41%, 4.1%, 0.041%; below
    0.0001% it says so instead of printing 1.2e-07%."""
    if p <= 0:
        return "0%"
    points = 100 * p
    if points >= 99.5:
        return "100%" if p >= 1 else ">99.5%"
    if points >= 10:
        return f"{points:.0f}%"
    if points < 1e-4:
        return "<0.0001%"
    return f"{points:.2g}%"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 token', '3 tokens', '12,288 tokens'."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


FINISH_REASONS = {  # English, Chinese
    "eos": ("the model ended it (end-of-text)", "模型自己结束了（文本结束词元）"),
    "length": ("max_new_tokens reached", "达到了 max_new_tokens"),
    "stop": ("a stop string appeared", "出现了停止字符串"),
}


def finish_reason_text(reason: str | None, n_tokens: int, text: str | None = None) -> str:
    """Why a generation ended, in words: '12 tokens, ended: max_new_tokens reached', or for an
    answer with nothing to read, 'no text: the first token was end-of-text'."""
    if reason == "eos" and n_tokens == 1:
        return say("no text: the first token was end-of-text",
                   "没有文本：第一个词元就是文本结束词元")
    why = say(*FINISH_REASONS.get(reason, (str(reason), str(reason))))
    empty = say("no text · ", "没有文本 · ") if text is not None and not text.strip() else ""
    return empty + say("{tokens}, ended: {why}", "{n:,} 个词元，结束原因：{why}",
                       tokens=plural(n_tokens, "token"), n=n_tokens, why=why)
