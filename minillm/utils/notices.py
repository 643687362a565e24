"""Notices: one line on stderr, once per process, for what a user should know but need not act
on (a slower fallback taken, another folder used instead of the one asked for)."""

from __future__ import annotations

import sys

_SAID: set[str] = set()


def say_once(message: str) -> bool:
    """Print "minillm: `message`" to stderr the first time this process meets `message`.
    Returns whether it was printed now."""
    if message in _SAID:
        return False
    _SAID.add(message)
    print(f"minillm: {message}", file=sys.stderr, flush=True)
    return True
