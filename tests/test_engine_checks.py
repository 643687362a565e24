"""The chapter 06 checkers: they pass the solutions and fail wrong answers with a useful message,
each hint only for the mistake it names."""

import functools
import re
import types
from pathlib import Path

import numpy as np
import pytest

from minillm.course.checks import ch06_batching as checks
from minillm.course.checks._base import CheckFailed

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific

SOURCE = Path(__file__).parent.parent / "lessons/06_batching_exercise.py"


@pytest.fixture(scope="module")
def solutions():
    """The solution code of every [task] cell of the exercise source, with its helpers."""
    text = SOURCE.read_text()
    namespace = {}
    for kind, body in re.findall(r"# %% ?(\[\w+\])?\n(.*?)(?=\n# %%|\Z)", text, flags=re.S):
        if kind == "[task]":
            exec(body.split("# ==== solution ====")[1], namespace)
        elif not kind and ("def blocks_to_add" in body or "def schedule_step" in body):
            exec(body, namespace)
    return namespace


def test_the_solutions_pass(solutions, capsys):
    checks.check_block_allocator(solutions["BlockAllocator"])
    checks.check_admit_waiting(solutions["admit_waiting"])
    checks.check_plan_running(solutions["plan_running"])
    checks.check_schedule_step(solutions["schedule_step"])
    assert capsys.readouterr().out.count("✅") == 4


@pytest.mark.parametrize("hidden", [False, True])
def test_a_stub_says_it_is_not_written_yet(hidden, unwritten):
    class Stub:
        def __init__(self, n):
            raise NotImplementedError

    for check in (checks.check_block_allocator, checks.check_admit_waiting,
                  checks.check_plan_running, checks.check_schedule_step):
        with pytest.raises(CheckFailed, match="not written yet"):
            check(Stub if check is checks.check_block_allocator else unwritten, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_an_allocator_that_ignores_reference_counts_is_caught(solutions, hidden):
    class NoCounts(solutions["BlockAllocator"]):
        def free(self, block):  # frees on the first release, shared or not
            if block not in self.free_list:
                self.free_list.append(block)
            self.ref_count[block] = 0

    with pytest.raises(CheckFailed, match="still held by another sequence"):
        checks.check_block_allocator(NoCounts, hidden=hidden)


def test_an_allocator_that_hands_out_a_held_block_is_caught():
    class Reuses:
        def __init__(self, n):
            self.num_free = n

        def allocate(self):
            self.num_free -= 1
            return 0

        def share(self, block):
            pass

        def free(self, block):
            self.num_free += 1

    with pytest.raises(CheckFailed, match="which is still held"):
        checks.check_block_allocator(Reuses)
    with pytest.raises(CheckFailed, match="which is still held"):
        checks.check_block_allocator(Reuses, hidden=True)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("error", [IndexError, AssertionError])
def test_the_wrong_exception_when_exhausted_is_caught(solutions, error, hidden):
    class WrongError(solutions["BlockAllocator"]):
        def allocate(self):
            if not self.free_list:
                raise error("empty")
            return super().allocate()

    with pytest.raises(CheckFailed, match=f"raised {error.__name__}.*every block is held: "
                                          "raise RuntimeError"):
        checks.check_block_allocator(WrongError, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_double_free_that_passes_silently_is_caught(solutions, hidden):
    class Silent(solutions["BlockAllocator"]):
        def free(self, block):
            if self.ref_count[block] > 0:
                super().free(block)

    with pytest.raises(CheckFailed, match="already free.*raise RuntimeError"):
        checks.check_block_allocator(Silent, hidden=hidden)


@pytest.mark.parametrize("hidden", [False, True])
def test_num_free_as_a_method_is_named(solutions, hidden):
    class Method(solutions["BlockAllocator"]):
        num_free = None

        def num_free(self):  # noqa: F811
            return len(self.free_list)

    with pytest.raises(CheckFailed, match="num_free .* is a method"):
        checks.check_block_allocator(Method, hidden=hidden)


def test_numpy_block_ids_are_accepted(solutions, capsys):
    class Numpy(solutions["BlockAllocator"]):
        def allocate(self):
            return np.int64(super().allocate())

    checks.check_block_allocator(Numpy)
    assert "✅" in capsys.readouterr().out


def admit(**kind):
    return lambda *a: checks._admit_variant(*a, **kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_admit_hints_are_specific(hidden):
    check = functools.partial(checks.check_admit_waiting, hidden=hidden)
    assert_hints_are_specific(check, {
        "skips": (admit(stop=False), "stop at the first request that does not fit"),
        "no seats": (admit(seats=False), "at most free_seats"),
        "no chunk": (admit(chunk=False), "chunked prefill"),
        "no blocks": (admit(blocks=False), "only when the blocks"),
    })


def running(**kind):
    return lambda *a: checks._running_variant(*a, **kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_plan_running_hints_are_specific(hidden):
    check = functools.partial(checks.check_plan_running, hidden=hidden)
    assert_hints_are_specific(check, {
        "list order": (running(decodes_first=False), "(one token left) go first"),
        "oldest victim": (running(victim=0), "the LAST one still in `running`"),
        "no preemption": (running(preempt=False), "free_blocks below 0"),
        "runs itself": (running(run_self=True), "preempts itself"),
        "no budget": (running(use_budget=False), "the budget is spent"),
        "budget not given back": (running(budget_back=False), "AND its tokens"),
    })


def without_the_budget_given_back(solutions):
    """The solution's plan_running, less the line that gives a preempted decode's tokens back
    to the budget (it still takes the decode out of the plan and gives its blocks back)."""
    source = SOURCE.read_text().split("# ==== solution ====\ndef plan_running")[1]
    source = "def plan_running" + source.split("# %% [check]")[0]
    assert "                budget += m\n" in source
    namespace = dict(solutions)
    exec(source.replace("                budget += m\n", ""), namespace)
    return namespace["plan_running"]


@pytest.mark.parametrize("hidden", [False, True])
def test_a_preempted_decode_whose_budget_is_not_given_back_is_caught(solutions, hidden):
    """Two prompts behind a decode that the first prompt's chunk preempts: the engine gives the
    decode's token back to the budget, and the second prompt runs it."""
    with pytest.raises(CheckFailed, match=r"AND its tokens.*a later request loses them"):
        checks.check_plan_running(without_the_budget_given_back(solutions), hidden=hidden)


def step(**kind):
    return lambda *a, **k: checks._step_variant(*a, **k, **kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_schedule_step_hints_are_specific(hidden):
    check = functools.partial(checks.check_schedule_step, hidden=hidden)
    assert_hints_are_specific(check, {
        "admits after preempting": (step(admit_after_preempt=True), "admit nobody new"),
        "seats from max": (step(seats_from_max=True), "minus the requests still running"),
    })


def test_a_plan_that_changes_the_requests_is_named(solutions):
    def marks(running, free_blocks, budget, block_size):
        plan = solutions["plan_running"](running, free_blocks, budget, block_size)
        for r in running:
            r["computed"] = r["num_tokens"]
        return plan

    with pytest.raises(CheckFailed, match="changed its argument `running`"):
        checks.check_plan_running(marks)


def test_a_decode_preempted_after_it_was_planned_leaves_the_plan():
    """A decode planned first, then preempted by an older request's chunk: it does not run (the
    engine's scheduler undoes its plan, and the exercise asks for the same)."""
    want = checks._reference_step([checks._r("old", 8, 4, 1), checks._r("new", 6, 5, 2)], [], 0)
    assert want["run"] == [("old", 4)] and want["preempted"] == ["new"]


@pytest.mark.parametrize("hidden", [False, True])
def test_the_stub_that_raised_is_named_not_the_given_schedule_step(solutions, hidden):
    """The notebook gives schedule_step written; it calls the learner's plan_running, which
    may still be a stub: the message names plan_running."""
    def plan_running(running, free_blocks, budget, block_size):
        raise NotImplementedError

    given = solutions["schedule_step"]
    step = types.FunctionType(given.__code__, {**solutions, "plan_running": plan_running},
                              given.__name__, given.__defaults__)
    with pytest.raises(CheckFailed) as failure:
        checks.check_schedule_step(step, hidden=hidden)
    message = str(failure.value)
    assert message.startswith("`plan_running` is not written yet (`schedule_step` calls it)")
    assert "`schedule_step` is not written yet" not in message


def test_the_trace_plans_every_case_as_the_engine_does(capsys):
    import random

    rng = random.Random(0)
    cases = list(checks.RUNNING_CASES) + [(checks._random_running(rng), rng.randint(0, 6),
                                           rng.choice([8, 16, 32]), 4) for _ in range(300)]
    for running, free, budget, block_size in cases:
        got, lines = checks._narrated_plan(running, free, budget, block_size)
        want = checks._reference_step(running, [], free, block_size, budget)
        assert {**got, "preempted": sorted(got["preempted"])} == want
        assert lines[-1] == f"result: {got}"


def test_the_exercises_worked_trace_shows_both_preemption_cases(capsys):
    """The case the exercise traces before task 3: a decode preempts itself, and a chunk
    preempts a decode planned earlier in the step."""
    case = [checks._r("a", 30, 4, 1), checks._r("b", 9, 8, 2), checks._r("c", 5, 4, 1)]
    assert SOURCE.read_text().count('"num_tokens": ') >= 3  # the same case, written out
    result = checks.trace_plan_running(case, free_blocks=1, budget=16, block_size=4)
    out = capsys.readouterr().out
    assert "c preempted itself: it does not run" in out
    assert "b was planned: out of the plan, +1 block, +1 budget" in out
    assert result == {"run": [("a", 15)], "preempted": ["c", "b"], "free_blocks": 0}


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

def test_the_solutions_pass_the_hidden_cases(solutions, capsys):
    checks.check_block_allocator(solutions["BlockAllocator"], hidden=True)
    checks.check_admit_waiting(solutions["admit_waiting"], hidden=True)
    checks.check_plan_running(solutions["plan_running"], hidden=True)
    checks.check_schedule_step(solutions["schedule_step"], hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 4
    assert f"plan_running: all {len(checks.HIDDEN_RUNNING_CASES) + 50} cases pass" in out


@pytest.mark.parametrize("name", ["admit_waiting", "plan_running", "schedule_step"])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(solutions, name):
    """(BlockAllocator is left out: it is a class whose answers depend on the calls made before,
    on an object made afresh for each trace, so there is no answer to look up by arguments.)"""
    assert_hidden_cases_catch_memorizing(getattr(checks, f"check_{name}"), solutions[name])


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """Exhaustion, a double free and a shared block freed in parts; a chunk cut by the budget,
    full seats, first come first served, no seat and no block; self-preemption and a planned
    decode preempted; and block sizes other than 4, which the visible plans never use."""
    for traces in (checks.ALLOCATOR_TRACES, checks.HIDDEN_ALLOCATOR_TRACES):
        ops = {op[0] for _, trace in traces for op in trace}
        assert {"exhausted", "double free", "share"} <= ops
    assert not (set(map(repr, checks.ALLOCATOR_TRACES))
                & set(map(repr, checks.HIDDEN_ALLOCATOR_TRACES)))
    assert not set(map(repr, checks.ADMIT_CASES)) & set(map(repr, checks.HIDDEN_ADMIT_CASES))
    for cases in (checks.ADMIT_CASES, checks.HIDDEN_ADMIT_CASES):
        assert any(seats == 0 for _, _, _, seats, _ in cases)
        assert any(not waiting for waiting, *_ in cases)
        assert any(r["num_tokens"] > budget for w, _, budget, _, _ in cases for r in w)
    hidden = [checks._reference_step(r, [], f, bs, b) for r, f, b, bs in
              checks.HIDDEN_RUNNING_CASES]
    assert any(p["preempted"] and not p["run"] for p in hidden)  # a request preempted itself
    assert any(p["preempted"] and p["run"] for p in hidden)
    assert {bs for *_, bs in checks.HIDDEN_RUNNING_CASES} > {4}
    for cases in (checks.RUNNING_CASES, checks.HIDDEN_RUNNING_CASES):  # a planned decode's
        assert any(checks._running_variant(*c, budget_back=False)  # budget goes to a later one
                   != checks._reference_step(c[0], [], c[1], c[3], c[2]) for c in cases)
    assert not set(map(repr, checks.RUNNING_CASES)) & set(map(repr, checks.HIDDEN_RUNNING_CASES))
    assert not set(map(repr, checks.STEP_CASES)) & set(map(repr, checks.HIDDEN_STEP_CASES))


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


ZH_HINTS = [  # (check, a wrong answer, the Chinese words of its hint)
    (checks.check_admit_waiting, admit(stop=False), "遇到第一个放不下的请求就停下"),
    (checks.check_admit_waiting, admit(seats=False), "最多接纳 free_seats 个请求"),
    (checks.check_admit_waiting, admit(chunk=False), "分块预填充（chunked prefill）"),
    (checks.check_admit_waiting, admit(blocks=False), "都空闲时，才接纳"),
    (checks.check_plan_running, running(decodes_first=False), "解码（只剩一个词元）排在前面"),
    (checks.check_plan_running, running(victim=0), "而不是第一个"),
    (checks.check_plan_running, running(preempt=False), "free_blocks 就会小于 0"),
    (checks.check_plan_running, running(run_self=True), "抢占了自己的请求"),
    (checks.check_plan_running, running(use_budget=False), "预算用完这一步就停"),
    (checks.check_plan_running, running(budget_back=False), "也要交还它的词元"),
    (checks.check_schedule_step, step(admit_after_preempt=True), "不接纳任何新请求"),
    (checks.check_schedule_step, step(seats_from_max=True), "减去仍在运行的请求数"),
]


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check, wrong, words", ZH_HINTS, ids=[w for _, _, w in ZH_HINTS])
def test_each_hint_comes_in_chinese(chinese, hidden, check, wrong, words):
    with pytest.raises(CheckFailed) as failure:
        check(wrong, hidden=hidden)
    message = str(failure.value)
    assert words in message and "你的计划是" in message, message
    assert "you planned" not in message and "expected" not in message, message


def test_the_allocator_messages_come_in_chinese(chinese, solutions):
    class NoCounts(solutions["BlockAllocator"]):
        def free(self, block):
            if block not in self.free_list:
                self.free_list.append(block)
            self.ref_count[block] = 0

    class NumFreeMethod(solutions["BlockAllocator"]):
        def num_free(self):
            return 0

    with pytest.raises(CheckFailed, match="还被另一条序列占用着.*不能回到池里"):
        checks.check_block_allocator(NoCounts)
    with pytest.raises(CheckFailed, match="num_free 是一个方法"):
        checks.check_block_allocator(NumFreeMethod)


def test_the_stub_named_comes_in_chinese(chinese, solutions):
    def admit_waiting(waiting, free_blocks, budget, free_seats, block_size):
        raise NotImplementedError

    given = solutions["schedule_step"]
    step = types.FunctionType(given.__code__, {**solutions, "admit_waiting": admit_waiting},
                              given.__name__, given.__defaults__)
    with pytest.raises(CheckFailed, match=r"^`admit_waiting` 还没有写（`schedule_step` 要调用它）"):
        checks.check_schedule_step(step)


def test_the_trace_comes_in_chinese(chinese, capsys):
    case = [checks._r("a", 30, 4, 1), checks._r("b", 9, 8, 2), checks._r("c", 5, 4, 1)]
    result = checks.trace_plan_running(case, free_blocks=1, budget=16, block_size=4)
    out = capsys.readouterr().out
    assert "c 抢占了它自己：这一步不运行" in out
    assert "b 原本已排进计划：移出计划，+1 个块，预算 +1" in out
    assert "结果：" in out and "result" not in out and "preempt " not in out, out
    assert result == {"run": [("a", 15)], "preempted": ["c", "b"], "free_blocks": 0}
