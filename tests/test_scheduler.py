"""The schedulers on fixed request traces, without a model: a fake step computes what was
scheduled and appends one made-up token to each request that caught up."""

import pytest

from minillm.decoding import GenerationConfig
from minillm.engine import BlockManager, ContinuousScheduler, Request, StaticScheduler
from minillm.engine.toy import LetterTokenizer


def make(rid, prompt_len, new=4, first=1):
    return Request(rid, list(range(first, first + prompt_len)), GenerationConfig(max_new_tokens=new), [],
                   None, LetterTokenizer(), [], arrival_time=0.0)


def fake_step(scheduler, batch):
    """What the engine does after the forward pass, with token 0 as every new token."""
    for r, n in batch.items:
        if scheduler.computed(r, n):
            r.add_token(0, 0.0)
            if r.sequence.done:
                r.status = "finished"
                scheduler.finish(r)


def run(scheduler, requests, limit=1000):
    for r in requests:
        scheduler.add(r)
    trace = []
    while scheduler.has_unfinished() and len(trace) < limit:
        batch = scheduler.schedule()
        trace.append([(r.id, n) for r, n in batch.items])
        fake_step(scheduler, batch)
    return trace


def test_continuous_admits_a_new_request_as_soon_as_one_finishes():
    s = ContinuousScheduler(BlockManager(64, 4), max_num_seqs=2, max_num_batched_tokens=64)
    trace = run(s, [make("a", 3, new=1), make("b", 3, new=3), make("c", 2, new=1)])
    assert trace[0] == [("a", 3), ("b", 3)]  # two seqs at most
    assert trace[1] == [("b", 1), ("c", 2)]  # a finished after its prefill: c joins at once
    assert trace[2] == [("b", 1)]
    assert len(trace) == 3


def test_static_batch_waits_for_its_longest_member():
    s = StaticScheduler(BlockManager(64, 4), max_num_seqs=2, max_num_batched_tokens=64)
    trace = run(s, [make("a", 3, new=1), make("b", 3, new=3), make("c", 2, new=1)])
    assert trace[0] == [("a", 3), ("b", 3)]
    assert trace[1] == [("a", 1), ("b", 1)]  # a has finished but its row keeps running
    assert trace[2] == [("a", 1), ("b", 1)]
    assert trace[3] == [("c", 2)]  # c starts only after the whole first batch
    assert s.blocks.num_free == 64


def test_token_budget_chunks_a_long_prompt_and_puts_decodes_first():
    s = ContinuousScheduler(BlockManager(64, 4), max_num_seqs=4, max_num_batched_tokens=8)
    trace = run(s, [make("a", 2, new=3), make("long", 20, new=1)])
    assert trace[0] == [("a", 2), ("long", 6)]
    assert trace[1] == [("a", 1), ("long", 7)]  # the decode goes first, the chunk takes the rest
    assert trace[2] == [("a", 1), ("long", 7)]
    assert all(sum(n for _, n in step) <= 8 for step in trace)
    assert s.blocks.num_free == 64


def test_admission_is_first_come_first_served():
    s = ContinuousScheduler(BlockManager(64, 4), max_num_seqs=1, max_num_batched_tokens=64)
    trace = run(s, [make(i, 2, new=1) for i in range(4)])
    assert [step[0][0] for step in trace] == [0, 1, 2, 3]


@pytest.mark.parametrize("caching", [False, True])
def test_preemption_takes_the_newest_request_and_recomputes_it_later(caching):
    # 4 blocks of 2 tokens; a and b hold 2 each after prefill; a's 5th token needs a third
    s = ContinuousScheduler(BlockManager(4, 2, enable_prefix_caching=caching), max_num_seqs=4,
                            max_num_batched_tokens=64)
    a, b = make("a", 3, new=3), make("b", 3, new=3, first=10)
    trace = run(s, [a, b])
    assert trace[:3] == [[("a", 3), ("b", 3)], [("a", 1), ("b", 1)], [("a", 1)]]
    assert b.num_preemptions == 1 and a.num_preemptions == 0
    # b comes back: prompt (3) + its 2 generated tokens are recomputed, or, with prefix
    # caching, all but its first block, which is still in the cache
    assert trace[3] == ([("b", 3)] if caching else [("b", 5)])
    assert len(a.sequence.token_ids) == 3 and len(b.sequence.token_ids) == 3
    assert s.num_preemptions == 1 and s.blocks.num_free == 4
    s.blocks.check()


def test_nobody_is_admitted_while_blocks_are_short():
    s = ContinuousScheduler(BlockManager(3, 2), max_num_seqs=4, max_num_batched_tokens=64)
    trace = run(s, [make("a", 4, new=2), make("b", 3, new=1, first=10)])
    # b needs 2 blocks, only 1 is free; then a takes that one for its 5th token
    assert trace == [[("a", 4)], [("a", 1)], [("b", 3)]]
    assert s.blocks.num_free == 3


def test_bad_limits():
    with pytest.raises(ValueError, match="max_num_seqs must be a positive int"):
        ContinuousScheduler(BlockManager(4), max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens must be a positive int"):
        ContinuousScheduler(BlockManager(4), max_num_batched_tokens=-1)


def test_a_request_preempted_after_it_was_planned_leaves_the_plan():
    """Decodes are planned first; an older request's prompt chunk may then need the blocks of a
    newer request whose decode is already planned. That newer request is preempted, so it must
    not run in this step (its blocks are gone)."""
    s = ContinuousScheduler(BlockManager(3, 4), max_num_seqs=4, max_num_batched_tokens=64)
    old, new = make("old", 12, new=4), make("new", 3, new=4, first=20)
    for r, computed in [(old, 4), (new, 3)]:
        s._admit(r, [])
        r.num_computed = computed
        s.blocks.grow(r.block_table, computed)
    new.add_token(0, 0.0)  # new has a token to decode; old has 8 prompt tokens to go
    batch = s.schedule()
    assert [(r.id, n) for r, n in batch.items] == [("old", 8)]
    assert batch.preempted == [new] and not new.block_table and new in s.waiting
    s.blocks.check()
