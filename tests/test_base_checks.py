"""What every checker shares (minillm/course/checks/_base.py): the safe call, the number types, naming a
mistake only when it matches everywhere, and a checker that never crashes."""

import numpy as np
import pytest
import torch

from minillm.course.checks._base import (CheckFailed, as_int, as_number, call, checker, expect_raises,
                                  is_close, matching_mistake, same_number)


def test_a_stub_is_not_written_yet_and_any_other_error_is_named():
    def stub(x):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="`.*stub` is not written yet"):
        call(stub, 1)
    with pytest.raises(CheckFailed, match=r"f\(3\) raised ZeroDivisionError: division by zero\. "
                                          r"a hint"):
        call(lambda x: x / 0, 3, what="f(3)", if_raises="a hint")
    with pytest.raises(CheckFailed, match="pass the function itself"):
        call(42, 1)


@pytest.mark.parametrize("argument, change", [
    (torch.ones(3), lambda t: t.add_(1)),
    ([1, 2, 3], lambda xs: xs.append(4)),
    ({"a": [1]}, lambda d: d["a"].append(2)),
    (np.ones(2), lambda a: a.__setitem__(0, 5)),
])
def test_a_changed_argument_is_named_and_the_callers_object_stays_intact(argument, change):
    def changes(x):
        change(x)
        return 0

    before = repr(argument)
    with pytest.raises(CheckFailed, match="changed its argument `x`"):
        call(changes, argument)
    assert repr(argument) == before, "the learner got a copy; the checker's case is unchanged"


def test_an_argument_the_task_writes_into_is_passed_as_it_is():
    buffer = torch.zeros(3)
    call(lambda out: out.fill_(1), buffer, may_change=("out",))
    assert torch.equal(buffer, torch.ones(3))
    call(lambda *a: a[0].fill_(2), buffer, may_change=(0,))
    assert torch.equal(buffer, torch.full((3,), 2.0))


def test_objects_that_cannot_be_copied_are_passed_as_they_are():
    model = torch.nn.Linear(2, 2)
    assert call(lambda m: m, model) is model


@pytest.mark.parametrize("value", [3, 3.0, np.int64(3), np.float32(3), torch.tensor(3),
                                   torch.tensor(3.0), np.array(3)])
def test_any_number_type_that_equals_the_answer(value):
    assert as_number(value, "x") == 3.0 and as_int(value, "x") == 3
    same_number(value, 3, "x")
    assert is_close(value, 3)


@pytest.mark.parametrize("value", [True, "3", [3], torch.tensor([3.0, 1.0]), None])
def test_what_is_not_a_number(value):
    with pytest.raises(CheckFailed, match="return a"):
        as_number(value, "f()")
    assert not is_close(value, 3)


def test_a_fraction_is_not_a_whole_number():
    with pytest.raises(CheckFailed, match="whole number"):
        as_int(2.5, "f()")


def test_nan_equals_nan_for_an_answer_that_is_nan():
    assert is_close(float("nan"), float("nan")) and not is_close(1.0, float("nan"))


def test_expect_raises_names_the_exception_it_wants():
    expect_raises(lambda: int("x"), error=ValueError, why="it is not a number")
    with pytest.raises(CheckFailed, match="raised KeyError.*it is empty: raise ValueError"):
        expect_raises(lambda: {}["k"], error=ValueError, why="it is empty")
    with pytest.raises(CheckFailed, match="returned 5, but it is empty: raise ValueError"):
        expect_raises(lambda: 5, error=ValueError, why="it is empty", what="f()")


def test_a_mistake_is_named_only_when_it_matches_every_case():
    mistakes = [("doubled", [2, 4, 6]), ("squared", [1, 4, 9])]
    assert matching_mistake([2, 4, 6], mistakes, int.__eq__) == "doubled"
    assert matching_mistake([1, 4, 6], mistakes, int.__eq__) is None  # one case each: neither
    assert matching_mistake([2, 4], mistakes, int.__eq__) is None


def test_a_checker_turns_an_unforeseen_answer_into_a_message():
    @checker
    def check_length(fn):
        return len(fn())  # an int has no len()

    with pytest.raises(CheckFailed, match="could not be checked.*TypeError"):
        check_length(lambda: 5)


def test_every_checker_takes_hidden_cases():
    """Each chapter's checkers take `hidden=False`, keyword-only: the nbgrader course's hidden
    tests call them with hidden=True (scripts/assignments.py)."""
    import importlib
    import inspect
    import pkgutil

    import minillm.course.checks as package

    found = 0
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("ch"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, fn in vars(module).items():
            if name.startswith("check_") and callable(fn):
                found += 1
                hidden = inspect.signature(fn).parameters.get("hidden")
                assert hidden is not None and hidden.default is False \
                    and hidden.kind is hidden.KEYWORD_ONLY, \
                    f"{info.name}.{name} must take a keyword-only hidden=False"
    assert found >= 40
