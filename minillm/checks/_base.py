"""What every exercise checker shares: calling the learner's function, and failing in plain words."""

from __future__ import annotations

import math


class CheckFailed(AssertionError):
    """A learner's function gave a wrong answer; the message says what and why."""


def call(fn, *args, **kwargs):
    """Call the learner's `fn`, turning a stub that is still unwritten into a plain message."""
    name = getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise CheckFailed(f"expected a function, got {type(fn).__name__}: pass the function "
                          "itself, without calling it")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"`{name}` is not written yet: replace `raise NotImplementedError` "
                          "with your code, run its cell, then run this check again.") from None
    except CheckFailed:
        raise
    except Exception as error:
        shown = ", ".join(repr(a) if len(repr(a)) < 60 else type(a).__name__ for a in args)
        raise CheckFailed(f"`{name}({shown})` raised {type(error).__name__}: {error}") from error


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def expect_close(got, want, what: str, rel: float = 1e-6, abs_: float = 1e-9) -> None:
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        raise CheckFailed(f"{what}: expected a number, got {type(got).__name__} {got!r}")
    if not math.isclose(got, want, rel_tol=rel, abs_tol=abs_):
        raise CheckFailed(f"{what}: got {got!r}, expected {want!r}")


def passed(name: str, cases: int) -> None:
    print(f"✅ {name}: all {cases} cases pass")
