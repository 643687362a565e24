"""The chapter 06 checkers: they pass the solutions and fail wrong answers with a useful message."""

import re
from pathlib import Path

import pytest

from minillm.checks import ch06_batching as checks
from minillm.checks._base import CheckFailed

SOURCE = Path(__file__).parent.parent / "scripts/notebook_sources/06_batching_exercise.py"


@pytest.fixture(scope="module")
def solutions():
    """The solution code of every [task] cell of the exercise source."""
    text = SOURCE.read_text()
    tasks = re.findall(r"# %% \[task\]\n(.*?)(?=\n# %%)", text, flags=re.S)
    namespace = {}
    for task in tasks:
        exec(task.split("# ==== solution ====")[1], namespace)
    return namespace


def test_the_solutions_pass(solutions, capsys):
    checks.check_block_allocator(solutions["BlockAllocator"])
    checks.check_schedule_step(solutions["schedule_step"])
    assert capsys.readouterr().out.count("✅") == 2


def test_a_stub_says_it_is_not_written_yet():
    class Stub:
        def __init__(self, n):
            raise NotImplementedError

    def stub(*args, **kwargs):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_block_allocator(Stub)
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_schedule_step(stub)


def test_an_allocator_that_ignores_reference_counts_is_caught(solutions):
    class NoCounts(solutions["BlockAllocator"]):
        def free(self, block):  # frees on the first release, shared or not
            if block not in self.free_list:
                self.free_list.append(block)
            self.ref_count[block] = 0

    with pytest.raises(CheckFailed, match="still held by another sequence"):
        checks.check_block_allocator(NoCounts)


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


def test_a_scheduler_that_never_preempts_is_caught(solutions):
    def no_preemption(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
        big = 10**6  # plan as if blocks never ran out
        plan = solutions["schedule_step"](running, waiting, big, block_size, budget, max_seqs)
        return {**plan, "free_blocks": free_blocks - (big - plan["free_blocks"])}

    with pytest.raises(CheckFailed, match="the free blocks allow"):
        checks.check_schedule_step(no_preemption)


def test_a_scheduler_that_ignores_the_budget_is_caught(solutions):
    def no_budget(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
        return solutions["schedule_step"](running, waiting, free_blocks, block_size, 10**6,
                                          max_seqs)

    with pytest.raises(CheckFailed, match="budget"):
        checks.check_schedule_step(no_budget)
