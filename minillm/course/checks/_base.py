"""What every exercise checker shares: calling the learner's function safely, reading the number or
tensor it returned, and failing in plain words.

- `call(fn, *args)` runs the learner's code. A stub still raising NotImplementedError becomes
  "not written yet"; any other exception becomes a message naming the call; and every argument
  must come back unchanged, unless the task says to write into it (`may_change`): the learner
  gets a fresh copy of each list, dict and tensor, compared with the checker's object after the
  call (so a change is seen, and the checker's own cases stay as they were). Objects that cannot
  be copied (a model, a tokenizer, a generator) are passed as they are.
- `expect_raises` checks a call that the task says must fail, with the exception it names.
- `as_number` / `as_int` accept whatever number type equals the answer: Python ints and floats,
  NumPy scalars, 0-d arrays and 0-d tensors; `same_number` compares one with the answer.
- `checker` wraps each public check function, so that even an answer of a kind no check foresaw
  gets a message instead of a traceback; each takes `hidden=True` for the graders' second set of
  cases.
- `matching_mistake` names a mistake only when the learner's answers equal that mistake's answers
  on every case tried, so a hint fires for the mistake it names and for no other.
- `first_failure` is how most checks end: every answer right prints the pass; else it gives the
  first wrong case and the hint of the mistake that matches, for the check to word its failure.
  `end_check` (`end_variant_check`) goes on to raise it, worded by the check's `explain`.

Every message is written in English and Chinese side by side with `say` (minillm.course.language)
and made when the check runs, so it comes in the language the notebook set.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator

from ...utils.validate import is_int, is_number
from ..language import say


class CheckFailed(AssertionError):
    """A learner's function gave a wrong answer; the message says what and why."""


def checker(check):
    """A checker that never crashes: an error while it reads the learner's answer (an object of an
    unexpected kind, say) becomes a CheckFailed that says so, like every other failure.

    Every checker takes `hidden=False`: with `hidden=True` it tries a second set of cases that no
    notebook shows (the graders' hidden tests in the nbgrader course, scripts/assignments.py), so
    a function written to match the visible cases fails there."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except CheckFailed:
            raise
        except Exception as error:
            raise CheckFailed(say(
                "your answer could not be checked: reading it raised {error}. Return the kind of "
                "value the task describes",
                "无法检查你的答案：读取它时抛出了 {error}。请返回题目要求的那种值",
                error=f"{type(error).__name__}: {error}")) from error

    return run


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def passed(name: str, cases: int) -> None:
    print(say("✅ {name}: all {cases} cases pass", "✅ {name}：全部 {cases} 个用例通过",
              name=name, cases=cases))


def short(value, limit: int = 100) -> str:
    """repr(value), cut to `limit` characters; a tensor or array shows its shape and dtype."""
    if _is_tensor(value) or _is_array(value):
        return f"{type(value).__name__} of shape {tuple(value.shape)} ({value.dtype})"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


def function_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "your function"


def shown_call(fn, args=(), kwargs=None) -> str:
    """`name(arg, ...)` as a learner would write it; long arguments show only their type."""
    parts = [_shown_argument(a) for a in args]
    parts += [f"{k}={short(v, 40)}" for k, v in (kwargs or {}).items()]
    return f"{function_name(fn)}({', '.join(parts)})"


def _shown_argument(value) -> str:
    if _is_tensor(value) or _is_array(value):
        return f"<{short(value)}>"
    text = repr(value)
    if len(text) <= 60:
        return text
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)}>"
    return f"<{type(value).__name__}>"


# --- calling the learner's code ---------------------------------------------------------------

def call(fn, *args, what: str | None = None, may_change=(), if_raises: str = "", **kwargs):
    """`fn(*args, **kwargs)`, with every failure turned into a CheckFailed in plain words.

    `what` names the call in messages (default: the call as written). Arguments must come back
    unchanged, except the parameters named in `may_change` (names or positions), which are
    passed as they are so that the caller sees what the learner wrote into them. `if_raises` is
    added to the message when the call raises: what about this case the learner may have missed."""
    if not callable(fn):
        raise CheckFailed(say("expected a function, got {got}: pass the function itself, without "
                              "calling it",
                              "这里要的是函数，传进来的却是 {got}：请传入函数本身，不要调用它",
                              got=f"{type(fn).__name__} {short(fn)}"))
    what = what or shown_call(fn, args, kwargs)
    names = _parameter_names(fn, len(args))
    given = []  # (name or position, the caller's object, the copy the learner gets, untouched)
    for key, value in list(enumerate(args)) + list(kwargs.items()):
        name = names.get(key) if isinstance(key, int) else key
        keep = key in may_change or name in may_change
        copy = _OPAQUE if keep else _snapshot(value)
        given.append((name or key, value, value if copy is _OPAQUE else copy, copy is _OPAQUE))
    n = len(args)
    try:
        result = fn(*[g[2] for g in given[:n]], **{k: g[2] for k, g in zip(kwargs, given[n:])})
    except NotImplementedError:
        raise CheckFailed(_not_written(fn)) from None
    except CheckFailed:
        raise
    except Exception as error:
        raise CheckFailed(say("{what} raised {error}", "{what} 抛出了 {error}", what=what,
                              error=f"{type(error).__name__}: {error}")
                          + (say(". {hint}", "。{hint}", hint=if_raises) if if_raises else "")
                          ) from error
    for name, original, passed_copy, untouched in given:
        if not untouched and not _same(passed_copy, original):
            which = (say("argument number {n}", "第 {n} 个参数", n=name + 1)
                     if isinstance(name, int) else say("argument `{name}`", "参数 `{name}`",
                                                       name=name))
            raise CheckFailed(say("{what} changed its {which}: {advice}",
                                  "{what} 修改了它的{which}：{advice}", what=what, which=which,
                                  advice=_leave_alone(passed_copy)))
    return result


def _not_written(fn) -> str:
    return say("`{name}` is not written yet: replace `raise NotImplementedError` with your code, "
               "run its cell, then run this check again.",
               "`{name}` 还没有写：把 `raise NotImplementedError` 换成你的代码，运行它所在的"
               "单元格，再运行这个检查。", name=_owner(fn))


def expect_raises(fn, *args, error=ValueError, why: str, what: str | None = None, **kwargs):
    """The task says `fn(*args)` must raise `error` (because `why`); check that it does."""
    what = what or shown_call(fn, args, kwargs)
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(_not_written(fn)) from None
    except error:
        return
    except Exception as raised:
        raise CheckFailed(say("{what} raised {raised} ({message}), but {why}: raise {error} saying "
                              "so",
                              "{what} 抛出了 {raised}（{message}），但{why}：应当抛出 {error} "
                              "并说明原因", what=what, raised=type(raised).__name__,
                              message=raised, why=why, error=error.__name__)) from None
    raise CheckFailed(say("{what} returned {result}, but {why}: raise {error} saying so",
                          "{what} 返回了 {result}，但{why}：应当抛出 {error} 并说明原因",
                          what=what, result=short(result), why=why, error=error.__name__))


def _owner(fn) -> str:
    """The name a learner wrote: a method's class for a bound method (`BlockAllocator.free`)."""
    return function_name(fn)


def _parameter_names(fn, n_args: int) -> dict:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return {}
    names = {}
    for i in range(n_args):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names[i] = params[i].name
        else:
            names[i] = None
    return names


def _leave_alone(value) -> str:
    if _is_tensor(value) or _is_array(value):
        return say("leave the tensor you were given as it was and return a new one (write "
                   "`x = x / t`, not `x /= t`, `x[...] = ...` or an in-place method like "
                   "`x.div_(t)` or `masked_fill_`)",
                   "不要改动传进来的张量，返回一个新的（写 `x = x / t`，不要写 `x /= t`、"
                   "`x[...] = ...`，也不要用 `x.div_(t)`、`masked_fill_` 这类原地修改的方法）")
    if isinstance(value, dict):
        return say("leave the dict you were given as it was and build a new one",
                   "不要改动传进来的字典，另建一个新的")
    return say("leave the list you were given as it was and build a new one",
               "不要改动传进来的列表，另建一个新的")


# --- the copy compared after a call -----------------------------------------------------------

class _Opaque:
    """Stands for an argument that is not copied (a model, a tokenizer, a generator)."""


_OPAQUE = _Opaque()
_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _is_array(value) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _snapshot(value):
    if isinstance(value, _PLAIN):
        return value
    if _is_tensor(value):
        return value.detach().clone()
    if _is_array(value):
        return value.copy()
    if type(value) in (list, tuple):
        parts = [_snapshot(v) for v in value]
        if any(p is _OPAQUE for p in parts):
            return _OPAQUE
        return type(value)(parts)
    if type(value) is dict:
        parts = {k: _snapshot(v) for k, v in value.items()}
        return _OPAQUE if any(p is _OPAQUE for p in parts.values()) else parts
    if type(value) in (set, frozenset):
        return type(value)(value)
    if is_number(value):
        return value
    return _OPAQUE


def _same(value, copy) -> bool:
    if copy is _OPAQUE:
        return True
    if _is_tensor(copy):
        if not _is_tensor(value) or value.shape != copy.shape or value.dtype != copy.dtype:
            return False
        if value.is_floating_point():
            return bool(((value == copy) | (value.isnan() & copy.isnan())).all())
        return bool((value == copy).all())
    if _is_array(copy):
        import numpy as np

        return _is_array(value) and np.array_equal(value, copy, equal_nan=True)
    if isinstance(copy, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(copy)
                and all(_same(v, c) for v, c in zip(value, copy)))
    if isinstance(copy, dict):
        return (isinstance(value, dict) and value.keys() == copy.keys()
                and all(_same(value[k], copy[k]) for k in copy))
    if isinstance(copy, float) and isinstance(value, float) and math.isnan(copy):
        return math.isnan(value)
    return value == copy


# --- numbers ----------------------------------------------------------------------------------

def number_or_none(got):
    """`got` as a float when it is a real number of any kind (a 0-d tensor or array too), else
    None. A bool is not a number here."""
    if is_number(got):
        return float(got)
    if (_is_tensor(got) or _is_array(got)) and got.ndim == 0 and _real_dtype(got):
        return float(got.item())
    return None


def _real_dtype(value) -> bool:
    name = str(value.dtype)
    return not ("bool" in name or "complex" in name)


def as_number(got, what: str) -> float:
    """`got` as a float, or a CheckFailed saying a number was expected."""
    value = number_or_none(got)
    if value is None:
        raise CheckFailed(say("{what} returned {got}; return a number",
                              "{what} 返回了 {got}；请返回一个数", what=what,
                              got=f"{type(got).__name__} {short(got)}"))
    return value


def as_int(got, what: str) -> int:
    """`got` as an int when it is a whole number of any type (5, 5.0, numpy.int64(5), a 0-d
    tensor), or a CheckFailed saying a whole number was expected."""
    if is_int(got):
        return int(got)
    value = number_or_none(got)
    if value is None:
        raise CheckFailed(_not_whole(what, f"{type(got).__name__} {short(got)}"))
    if not math.isfinite(value) or value != int(value):
        raise CheckFailed(_not_whole(what, repr(got)))
    return int(value)


def _not_whole(what: str, got: str) -> str:
    return say("{what} returned {got}; return a whole number (an int)",
               "{what} 返回了 {got}；请返回一个整数（int）", what=what, got=got)


def is_close(got, want, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    """Whether `got` is a number of any type within the tolerance of `want` (NaN equals NaN)."""
    value = number_or_none(got)
    if value is None:
        return False
    if math.isnan(want):
        return math.isnan(value)
    return math.isclose(value, want, rel_tol=rel, abs_tol=abs_)


def same_number(got, want, what: str, rel: float = 1e-6, abs_: float = 1e-9) -> None:
    """`got` must be a number equal to `want` within the tolerance, of any number type."""
    value = as_number(got, what)
    if not is_close(value, want, rel, abs_):
        raise CheckFailed(say("{what} returned {value!r}, expected {want!r}",
                              "{what} 返回了 {value!r}，应为 {want!r}", what=what, value=value,
                              want=want))


def expect_close(got, want, what: str, rel: float = 1e-6, abs_: float = 1e-9) -> None:
    """The older name of `same_number`."""
    same_number(got, want, what, rel, abs_)


# --- naming a mistake -------------------------------------------------------------------------

def matching_mistake(answers, mistakes, same) -> str | None:
    """The hint of the first mistake whose answers equal the learner's on every case.

    answers   the learner's answer for each case, in order
    mistakes  (hint, answers of that mistake for the same cases) pairs
    same      same(learner's answer, mistake's answer) -> bool"""
    for hint, wrong in mistakes:
        if len(wrong) == len(answers) and all(same(a, w) for a, w in zip(answers, wrong)):
            return hint
    return None


def first_failure(name: str, answers: list, wants: list, same=operator.eq, mistakes=None
                  ) -> tuple[int, str | None] | None:
    """The common end of a check: None, with the pass printed, when every answer is `same` as
    its want; else (the first wrong case's index, the hint of the matching mistake or None).

    mistakes  a function giving (hint, answers) pairs for matching_mistake: called only on a
              failure, as a mistake's answers can take as long as the reference's"""
    wrong = [i for i, (got, want) in enumerate(zip(answers, wants)) if not same(got, want)]
    if not wrong:
        passed(name, len(answers))
        return None
    hint = matching_mistake(answers, mistakes(), same) if mistakes is not None else None
    return wrong[0], hint


def first_variant_failure(name: str, answers: list, cases: list, variant, mistakes,
                          same=operator.eq) -> tuple[list, tuple[int, str | None] | None]:
    """`first_failure` for a check whose right answer and typical mistakes come from one
    function: `variant(*case, "reference")` is right, and each (kind, (english, chinese)) in
    `mistakes` is a mistake, `variant(*case, kind)`, with its hint. Returns (the right answers,
    what `first_failure` returns)."""
    wants = [variant(*case, "reference") for case in cases]
    return wants, first_failure(name, answers, wants, same, mistakes=lambda: [
        (say(*words), [variant(*case, kind) for case in cases]) for kind, words in mistakes])


def end_check(name: str, answers: list, wants: list, cases: list, explain, same=operator.eq,
              mistakes=None) -> None:
    """`first_failure`, ended: the pass printed, or a CheckFailed whose message is
    `explain(case, got, want, hint)` for the first wrong case (hint: the matching mistake's, or
    None)."""
    failure = first_failure(name, answers, wants, same, mistakes)
    if failure is not None:
        i, hint = failure
        raise CheckFailed(explain(cases[i], answers[i], wants[i], hint))


def end_variant_check(name: str, answers: list, cases: list, variant, mistakes, explain,
                      same=operator.eq) -> None:
    """`first_variant_failure`, ended as `end_check` ends `first_failure`."""
    wants, failure = first_variant_failure(name, answers, cases, variant, mistakes, same)
    if failure is not None:
        i, hint = failure
        raise CheckFailed(explain(cases[i], answers[i], wants[i], hint))


def with_hint(message: str, hint: str | None, otherwise: str = "") -> str:
    """`message`, then ": hint" when a mistake matched, else `otherwise`."""
    return message + (say(": {hint}", "：{hint}", hint=hint) if hint else otherwise)
