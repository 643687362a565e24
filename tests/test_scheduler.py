"""The schedulers on fixed request traces, without a model: a fake step computes what was
scheduled and appends one made-up token to each request that caught up."""

import pytest

from minillm.decoding import GenerationConfig
from minillm.engine import BlockManager, ContinuousScheduler, Request, StaticScheduler
from minillm.model.toy import LetterTokenizer


def make(rid, prompt_len, new=4, first=1, n=1):
    return Request(rid, list(range(first, first + prompt_len)), GenerationConfig(max_new_tokens=new), [],
                   None, LetterTokenizer(), [], arrival_time=0.0, n=n)


def fake_step(scheduler, batch):
    """What the engine does after the forward pass, with token 0 as every new token."""
    for r, n in batch.items:
        if scheduler.computed(r, n):
            for sample in (r, *scheduler.fork(r)):
                sample.add_token(0, 0.0)
                if sample.sequence.done:
                    sample.status = "finished"
                    scheduler.finish(sample)


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


def test_samples_fork_after_the_prompt_and_copy_a_shared_block_before_writing_it():
    bm = BlockManager(8, 4)
    s = ContinuousScheduler(bm, max_num_seqs=4, max_num_batched_tokens=64)
    a = make("a", 6, new=3, n=3)
    s.add(a)
    batch = s.schedule()
    assert [(r.id, n) for r, n in batch.items] == [("a", 6)]  # the prompt runs once
    fake_step(s, batch)
    samples = a.group
    assert [r.index for r in samples] == [0, 1, 2] and bm.num_used == 2
    assert all(r.block_table == a.block_table for r in samples)
    assert [bm.blocks[b].ref_count for b in a.block_table] == [3, 3]
    partial = a.block_table[1]
    batch = s.schedule()  # each writes its token 7 into the shared, half-full second block
    assert [(r.index, n) for r, n in batch.items] == [(0, 1), (1, 1), (2, 1)]
    # two get a copy of it; the last one left holding it writes in place
    assert [src for src, _ in batch.copies] == [partial, partial]
    assert sorted(r.block_table[1] == partial for r in samples) == [False, False, True]
    assert len({r.block_table[1] for r in samples}) == 3
    assert bm.blocks[samples[0].block_table[0]].ref_count == 3  # the full block stays shared
    assert bm.num_used == 4  # 1 shared + 3 own; three separate requests would hold 6
    fake_step(s, batch)
    while s.has_unfinished():
        fake_step(s, s.schedule())
    assert all(len(r.sequence.token_ids) == 3 for r in samples) and bm.num_free == 8
    bm.check()


def test_a_request_counts_as_its_n_sequences_at_admission():
    s = ContinuousScheduler(BlockManager(64, 4), max_num_seqs=4, max_num_batched_tokens=64)
    trace = run(s, [make("a", 2, new=2, n=3), make("b", 2, new=1, n=2, first=10)])
    assert trace[0] == [("a", 2)]  # 3 + 2 sequences > 4: b waits
    assert ("b", 2) not in trace[1] and ("b", 2) in trace[2]  # until a's samples are done
    assert s.blocks.num_free == 64


def test_static_batches_fork_too_and_free_every_block():
    s = StaticScheduler(BlockManager(16, 4), max_num_seqs=4, max_num_batched_tokens=64)
    trace = run(s, [make("a", 5, new=2, n=2), make("b", 3, new=3)])
    assert trace[0] == [("a", 5), ("b", 3)]
    assert trace[1] == [("a", 1), ("b", 1), ("a", 1)]  # a's two samples and b, one row each
    assert s.blocks.num_free == 16
    s.blocks.check()


def test_every_planned_item_holds_its_blocks_even_when_a_later_one_preempts():
    """Decodes are planned first; a prompt chunk planned after them may need blocks and preempt
    the newest request, which can be a decode already in the plan. That one must leave the plan
    (its blocks are gone), on random traces with samples, chunked prefill and a small pool."""
    import random

    rng = random.Random(0)
    preempted_planned = 0
    for trial in range(40):
        bm = BlockManager(rng.randint(6, 12), 2)
        s = ContinuousScheduler(bm, max_num_seqs=6, max_num_batched_tokens=rng.randint(3, 8))
        for k in range(rng.randint(2, 6)):
            s.add(make(k, rng.randint(1, 8), new=rng.randint(1, 6), first=10 * k,
                       n=rng.randint(1, 3)))
        steps = 0
        while s.has_unfinished() and steps < 500:
            batch = s.schedule()
            planned = [r for r, _ in batch.items]
            preempted_planned += any(r in batch.preempted for r in planned)
            for r, n in batch.items:
                assert r.status == "running" and len(r.block_table) * 2 >= r.num_computed + n
            assert sum(n for _, n in batch.items) <= s.max_num_batched_tokens
            fake_step(s, batch)
            steps += 1
        assert not s.has_unfinished() and bm.num_free == bm.num_blocks
        bm.check()
    assert preempted_planned == 0
