"""Argument checks shared by the whole package: one wording for "an int from 1 to 300".

Each check raises TypeError for a value of the wrong kind and ValueError for one out of range;
the message names the argument, the value and what is allowed. NumPy scalars count as numbers.
"""

from __future__ import annotations

import math
import numbers


def is_int(value) -> bool:
    """An integer that is not a bool (NumPy integers included)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number that is not a bool (NumPy scalars included)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _allowed(kind: str, low, high) -> str:
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind} >= {low}"
    if high is not None:
        return f"{kind} <= {high}"
    return kind


def check_int(name: str, value, low: int | None = None, high: int | None = None, *,
              allowed: str | None = None, allow_none: bool = False) -> int | None:
    """`value` as a Python int when it is an int in [low, high]; else a TypeError/ValueError that
    says so (`allowed` replaces the default wording of what is allowed)."""
    if value is None and allow_none:
        return None
    allowed = allowed or _allowed("an int", low, high)
    if not is_int(value):
        raise TypeError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return int(value)


def check_number(name: str, value, low: float | None = None, high: float | None = None, *,
                 allowed: str | None = None, ok=None, allow_none: bool = False
                 ) -> float | None:
    """`value` as a float when it is a finite number in [low, high] (and `ok(value)` holds, when
    given); else a TypeError/ValueError that names `name` and what is `allowed`."""
    if value is None and allow_none:
        return None
    allowed = allowed or _allowed("a number", low, high)
    if not is_number(value):
        raise TypeError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    bad = (math.isnan(value) or (low is not None and value < low)
           or (high is not None and value > high) or (ok is not None and not ok(value)))
    if bad or (ok is None and math.isinf(value)):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)
