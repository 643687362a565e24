"""n samples from one request (parallel sampling) on a tiny random Llama: sample i equals
`minillm.generate` with seed + i, the prompt is prefilled once and its blocks are shared
(copy-on-write for the partial block), the books balance under preemption and cancelling, and n
is checked."""

import random

import pytest

from minillm.engine import Engine
from minillm.model.toy import tiny_model
from test_engine import alone, assert_no_leaks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SAMPLING = dict(do_sample=True, temperature=1.2, top_p=0.95, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_sample_i_equals_generate_with_seed_plus_i(tiny, scheduler):
    engine = Engine(*tiny, scheduler=scheduler, num_blocks=64, block_size=8)
    prompt = list(range(1, 12))
    out = engine.generate([prompt], n=4, max_new_tokens=9, seed=10, **SAMPLING)[0]
    assert [s.index for s in out.samples] == [0, 1, 2, 3] and out.samples[0] is out
    for i, sample in enumerate(out.samples):
        want = alone(tiny, prompt, max_new_tokens=9, seed=10 + i, **SAMPLING)
        assert sample.token_ids == want.token_ids and sample.text == want.text
        assert sample.finish_reason == "length" and sample.request_id == out.request_id
    assert len({tuple(s.token_ids) for s in out.samples}) > 1  # they really differ
    assert_no_leaks(engine)


def test_the_prompt_runs_once_and_its_blocks_are_shared(tiny):
    prompt = list(range(1, 20))  # 19 tokens in blocks of 8: two full blocks and 3 slots of one
    engine = Engine(*tiny, num_blocks=64, block_size=8, record=True)
    rid = engine.add_request(prompt, n=4, max_new_tokens=4, seed=1, **SAMPLING)
    engine.step()  # the prefill, then the first token of each sample
    assert [(n, kind) for _, n, kind in engine.steps[0].items] == [(19, "prefill")]
    assert engine.blocks.num_used == 3  # the prompt's blocks, held by all four
    full = engine.requests[rid].block_table[:2]
    assert [engine.blocks.blocks[b].ref_count for b in full] == [4, 4]
    engine.step()  # every sample writes into the partial block: three copies, one in place
    assert [n for _, n, _ in engine.steps[1].items] == [1, 1, 1, 1]
    assert engine.blocks.num_used == 2 + 4  # four separate requests would hold 4 x 3
    engine.run()
    assert_no_leaks(engine)


def test_copy_on_write_keeps_each_samples_context_its_own(tiny):
    """Greedy samples are equal: they read the same prompt through copied blocks, and the copy
    of a block must carry the prompt's keys and values for that to hold."""
    prompt = list(range(3, 16))
    engine = Engine(*tiny, num_blocks=32, block_size=4)
    out = engine.generate([prompt], n=3, max_new_tokens=12, ignore_eos=True)[0]
    want = alone(tiny, prompt, max_new_tokens=12, ignore_eos=True)
    assert [s.token_ids for s in out.samples] == [want.token_ids] * 3
    assert_no_leaks(engine)


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_books_balance_under_preemption_with_samples(tiny, scheduler):
    rng = random.Random(4)
    prompts = [[rng.randrange(64) for _ in range(rng.randint(3, 30))] for _ in range(6)]
    settings = [dict(n=rng.randint(1, 4), max_new_tokens=rng.randint(4, 20), seed=k, **SAMPLING)
                for k in range(6)]
    blocks = 14 if scheduler == "continuous" else 40
    engine = Engine(*tiny, scheduler=scheduler, num_blocks=blocks, block_size=4, max_num_seqs=8,
                    max_num_batched_tokens=32)
    outs = engine.generate(prompts, settings)
    for prompt, s, out in zip(prompts, settings, outs):
        samples = out.samples or [out]
        assert len(samples) == s["n"]
        one = {k: v for k, v in s.items() if k != "n"}
        for i, sample in enumerate(samples):
            want = alone(tiny, prompt, **{**one, "seed": s["seed"] + i})
            assert sample.token_ids == want.token_ids
    if scheduler == "continuous":
        assert engine.scheduler.num_preemptions > 0
    assert_no_leaks(engine)


def test_cancelling_ends_every_sample_once_also_those_not_forked_yet(tiny):
    engine = Engine(*tiny, num_blocks=64, block_size=4, max_num_seqs=4)
    busy = engine.add_request(list(range(40)), max_new_tokens=30, ignore_eos=True)
    waiting = engine.add_request([1, 2, 3], n=4, max_new_tokens=5, ignore_eos=True)  # no room
    running = engine.add_request([4, 5, 6], n=2, max_new_tokens=30, ignore_eos=True)
    final = {}

    def step():
        for out in engine.step():
            if out.finished:
                final[(out.request_id, out.index)] = out

    step()
    assert engine.cancel(waiting)
    engine.cancel(busy)
    for _ in range(3):
        step()
    assert engine.cancel(running) and not engine.cancel(running)
    while engine.has_unfinished():
        step()
    assert sorted(k for k in final if k[0] == waiting) == [(waiting, i) for i in range(4)]
    assert all(final[(waiting, i)].finish_reason == "cancelled" for i in range(4))
    assert [len(final[(running, i)].token_ids) for i in range(2)] == [3, 3]
    assert_no_leaks(engine)


def test_soak_with_samples_cancels_and_preemption(tiny):
    """120 requests, up to four samples each, arriving over time on a pool small enough to
    preempt, some cancelled: every sample ends exactly once and every block comes back."""
    model, tok = tiny_model(eos_token_ids=(7,), seed=2)
    rng = random.Random(1)
    engine = Engine(model, tok, num_blocks=20, block_size=4, max_num_seqs=8,
                    max_num_batched_tokens=48)
    pending, ended, ns = list(range(120)), {}, {}
    while pending or engine.has_unfinished():
        for _ in range(rng.randint(0, 4)):
            if pending:
                rid = pending.pop()
                ns[rid] = rng.randint(1, 4)
                engine.add_request([rng.randrange(64) for _ in range(rng.randint(1, 25))],
                                   request_id=rid, n=ns[rid], max_new_tokens=rng.randint(1, 16),
                                   do_sample=True, seed=rid)
        if rng.random() < 0.05 and engine.requests:
            engine.cancel(rng.choice(list(engine.requests)))
        for out in engine.step():
            if out.finished:
                key = (out.request_id, out.index)
                assert key not in ended, "a sample ended twice"
                ended[key] = out
    assert sorted(ended) == sorted((rid, i) for rid, n in ns.items() for i in range(n))
    assert engine.scheduler.num_preemptions > 0
    assert_no_leaks(engine)


def test_n_is_checked(tiny):
    engine = Engine(*tiny, num_blocks=16, max_num_seqs=4)
    with pytest.raises(ValueError, match=r"n must be an int from 1 to max_num_seqs \(4\), got 0"):
        engine.add_request([1, 2], n=0)
    with pytest.raises(ValueError, match="got 5"):
        engine.add_request([1, 2], n=5)
    with pytest.raises(TypeError, match="n must be"):
        engine.add_request([1, 2], n=2.0)
    assert not engine.has_unfinished()
