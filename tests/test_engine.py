"""The engine on a tiny random Llama: every request's output equals `minillm.generate` run on it
alone (greedy and seeded sampling, continuous and static, with preemption and prefix caching), no
block leaks, per-request settings, bad input, cancelling, threads, and a 300-request soak test."""

import random
import threading

import pytest

import minillm
from minillm.engine import Engine
from minillm.model.toy import tiny_model



pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def prompts_and_lengths(n, seed=0, longest=40, most_new=20):
    rng = random.Random(seed)
    prompts = [[rng.randrange(64) for _ in range(rng.randint(1, longest))] for _ in range(n)]
    return prompts, [rng.randint(1, most_new) for _ in range(n)]


def alone(tiny, prompt, **settings):
    model, tok = tiny
    return minillm.generate(model, tok, prompt, **settings)


def assert_no_leaks(engine):
    assert engine.blocks.num_free == engine.blocks.num_blocks
    assert not engine.scheduler.running and not engine.scheduler.waiting
    engine.blocks.check()


@pytest.mark.parametrize("scheduler,num_blocks", [("continuous", 256), ("static", 256),
                                                  ("continuous", 10)])
def test_greedy_outputs_equal_each_request_run_alone(tiny, scheduler, num_blocks):
    prompts, news = prompts_and_lengths(12)
    engine = Engine(*tiny, scheduler=scheduler, num_blocks=num_blocks, block_size=8,
                    max_num_seqs=6, max_num_batched_tokens=48)
    outs = engine.generate(prompts, [{"max_new_tokens": n} for n in news], ignore_eos=True)
    for p, n, out in zip(prompts, news, outs):
        want = alone(tiny, p, max_new_tokens=n, ignore_eos=True)
        assert out.token_ids == want.token_ids and out.finish_reason == "length"
    if num_blocks == 10:  # 80 slots for 6 sequences of up to 60 tokens: preemption must happen
        assert engine.scheduler.num_preemptions > 0
        assert any(o.num_preemptions for o in outs)
    assert_no_leaks(engine)


def test_eos_and_stop_strings_end_each_request_by_its_own_rule():
    model, tok = tiny_model(eos_token_ids=(5,))
    prompts, news = prompts_and_lengths(10, seed=3, most_new=30)
    settings = [{"max_new_tokens": n, "stop": ["ab", "q"] if i % 3 == 0 else None}
                for i, n in enumerate(news)]
    outs = Engine(model, tok, num_blocks=64, block_size=8).generate(prompts, settings)
    for p, s, out in zip(prompts, settings, outs):
        want = minillm.generate(model, tok, p, **s)
        assert (out.token_ids, out.text, out.finish_reason) == \
            (want.token_ids, want.text, want.finish_reason)
    assert {o.finish_reason for o in outs} >= {"eos", "length"}


def test_each_request_keeps_its_own_sampling_settings_in_one_batch(tiny):
    prompts, news = prompts_and_lengths(6, seed=1)
    settings = [
        {"do_sample": True, "temperature": 0.7, "seed": 1},
        {"do_sample": True, "top_p": 0.8, "seed": 2},
        {},  # greedy
        {"do_sample": True, "top_k": 5, "temperature": 1.3, "seed": 3},
        {"repetition_penalty": 1.5},
        {"do_sample": True, "min_p": 0.1, "no_repeat_ngram_size": 2, "seed": 4},
    ]
    settings = [{**s, "max_new_tokens": n, "ignore_eos": True} for s, n in zip(settings, news)]
    outs = Engine(*tiny, num_blocks=64, block_size=8).generate(prompts, settings)
    for p, s, out in zip(prompts, settings, outs):
        assert out.token_ids == alone(tiny, p, **s).token_ids


def test_prefix_cache_hits_are_counted_and_change_nothing(tiny):
    rng = random.Random(5)
    system = [rng.randrange(64) for _ in range(40)]  # a shared "system prompt": 5 full blocks
    prompts = [system + [rng.randrange(64) for _ in range(rng.randint(1, 12))] for _ in range(8)]
    runs = {}
    for caching in (False, True):
        engine = Engine(*tiny, num_blocks=64, block_size=8, max_num_seqs=4,
                        enable_prefix_caching=caching)
        runs[caching] = engine.generate(prompts, max_new_tokens=6, ignore_eos=True)
        assert_no_leaks(engine)
    assert [o.token_ids for o in runs[True]] == [o.token_ids for o in runs[False]]
    assert sum(o.num_cached_tokens for o in runs[False]) == 0
    # the first four are admitted together before any block is full; the next four hit 5 blocks
    assert [o.num_cached_tokens for o in runs[True]] == [0] * 4 + [40] * 4
    assert engine.stats()["prefix_cache_hit_tokens"] == 160


def test_streamed_pieces_join_to_the_text_and_metrics_are_filled(tiny):
    engine = Engine(*tiny, num_blocks=32, block_size=8)
    rid = engine.add_request([1, 2, 3], max_new_tokens=7, ignore_eos=True)
    pieces, final = [], None
    while engine.has_unfinished():
        for out in engine.step():
            pieces.append(out.new_text)
            final = out
    assert final.request_id == rid and final.finished and "".join(pieces) == final.text
    m = final.metrics
    assert m.n_tokens == 7 and m.prompt_tokens == 3 and 0 < m.ttft <= m.latency


def test_queue_time_runs_from_arrival_to_the_first_admission(tiny):
    """With room for one sequence, the second request waits until the first has finished: its
    queue time covers the first's whole run, and is no longer than its own time to first token.
    Its samples (n=2) share the one admission."""
    engine = Engine(*tiny, num_blocks=32, block_size=8, max_num_seqs=2)
    first = engine.add_request([1, 2, 3], max_new_tokens=6, ignore_eos=True, n=2)
    second = engine.add_request([4, 5], max_new_tokens=2, ignore_eos=True)
    finals = engine.run()
    a, b = finals[first], finals[second]
    assert 0 <= a.queue_time <= a.metrics.ttft
    assert all(s.queue_time == a.queue_time for s in a.samples)
    assert b.queue_time >= a.metrics.latency - a.queue_time  # it waited for the first's run
    assert b.queue_time <= b.metrics.ttft


def test_an_invalid_setting_rejects_that_request_alone(tiny):
    engine = Engine(*tiny, num_blocks=32, block_size=8)
    with pytest.raises(ValueError, match="top_p"):
        engine.add_request([1, 2], top_p=1.5)
    with pytest.raises(TypeError, match="unknown generation option"):
        engine.add_request([1, 2], temprature=0.5)
    assert not engine.has_unfinished()
    outs = engine.generate([[1, 2], [3, 4], [5, 6]],
                           [{"max_new_tokens": 3}, {"temperature": -1.0, "do_sample": True}, None],
                           ignore_eos=True)
    assert outs[1].finish_reason == "rejected" and "temperature" in outs[1].error
    assert outs[0].token_ids == alone(tiny, [1, 2], max_new_tokens=3,
                                      ignore_eos=True).token_ids
    assert outs[2].finish_reason == "length"
    assert_no_leaks(engine)


def test_a_request_that_can_never_fit_is_refused(tiny):
    engine = Engine(*tiny, num_blocks=4, block_size=8)  # 32 slots in all
    with pytest.raises(ValueError, match="can never fit.*33 tokens need 5 blocks"):
        engine.add_request(list(range(30)), max_new_tokens=3)
    with pytest.raises(ValueError, match="context window of 512"):
        Engine(*tiny, num_blocks=64).add_request([1] * 500, max_new_tokens=20)
    engine.add_request(list(range(29)), max_new_tokens=3)  # exactly the whole pool: fine
    assert engine.run()[0].finish_reason in ("length", "eos")


def test_bad_engine_arguments(tiny):
    with pytest.raises(ValueError, match="scheduler must be 'continuous' or 'static'"):
        Engine(*tiny, scheduler="dynamic")
    engine = Engine(*tiny, num_blocks=8)
    with pytest.raises(ValueError, match="takes one prompt"):
        engine.add_request([[1, 2], [3]])
    with pytest.raises(ValueError, match="beam search"):
        engine.add_request([1], num_beams=2)
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([])
    engine.add_request([1], request_id="x")
    with pytest.raises(ValueError, match="'x' is already in use"):
        engine.add_request([2], request_id="x")


def test_cancelling_mid_generation_gives_the_blocks_back(tiny):
    engine = Engine(*tiny, num_blocks=32, block_size=4)
    keep = engine.add_request(list(range(10)), max_new_tokens=12, ignore_eos=True)
    drop = engine.add_request(list(range(20, 30)), max_new_tokens=30, ignore_eos=True)
    for _ in range(4):
        engine.step()
    held = len(engine.requests[drop].block_table)
    free = engine.blocks.num_free
    assert held >= 3 and engine.cancel(drop)
    assert engine.blocks.num_free == free + held
    assert not engine.cancel(drop)  # already ended
    final = engine.run()
    assert final[drop].finish_reason == "cancelled" and len(final[drop].token_ids) == 4
    assert final[keep].token_ids == alone(tiny, list(range(10)), max_new_tokens=12,
                                          ignore_eos=True).token_ids
    assert_no_leaks(engine)


def test_cancelling_a_waiting_request_and_a_static_batch_member(tiny):
    engine = Engine(*tiny, scheduler="static", num_blocks=64, block_size=4, max_num_seqs=2)
    ids = [engine.add_request([i + 1] * 5, max_new_tokens=8, ignore_eos=True)
           for i in range(3)]
    engine.step()
    assert engine.cancel(ids[2])  # still waiting
    assert engine.cancel(ids[0])  # in the running static batch
    final = engine.run()
    assert [final[i].finish_reason for i in ids] == ["cancelled", "length", "cancelled"]
    assert_no_leaks(engine)


def test_requests_added_from_other_threads_while_one_loop_steps(tiny):
    engine = Engine(*tiny, num_blocks=64, block_size=8)
    finished, stop = {}, threading.Event()

    def loop():
        while not stop.is_set():
            if engine.wait_for_work(timeout=0.05):
                for out in engine.step():
                    if out.finished:
                        finished[out.request_id] = out

    worker = threading.Thread(target=loop)
    worker.start()
    adders = [threading.Thread(target=lambda k=k: [
        engine.add_request([k + 1, j + 1], max_new_tokens=5, ignore_eos=True,
                           request_id=(k, j)) for j in range(5)]) for k in range(4)]
    for t in adders:
        t.start()
    for t in adders:
        t.join()
    while engine.has_unfinished():
        threading.Event().wait(0.01)
    stop.set()
    worker.join()
    assert sorted(finished) == [(k, j) for k in range(4) for j in range(5)]
    assert all(len(o.token_ids) == 5 for o in finished.values())
    assert_no_leaks(engine)


def test_memory_records_paged_against_contiguous(tiny):
    prompts, news = prompts_and_lengths(10, seed=2)
    engine = Engine(*tiny, num_blocks=64, block_size=8, record=True)
    engine.generate(prompts, [{"max_new_tokens": n} for n in news], ignore_eos=True)
    steps = engine.steps
    assert steps and all(s.used_tokens <= s.paged_slots <= s.contiguous_slots + 8 * 16
                         for s in steps)
    assert all(s.paged_slots - s.used_tokens < 8 * len({i for i, _, _ in s.items}) + 8
               for s in steps)  # under one block of waste per running request
    kinds = {k for s in steps for _, _, k in s.items}
    assert kinds == {"prefill", "decode"}


def test_soak_300_requests_each_end_exactly_once(tiny):
    """300 requests with random prompts, lengths, settings, arrival times and some cancels, on a
    pool small enough to force preemption: each ends exactly once, with a valid reason, and
    every block comes back."""
    model, tok = tiny_model(eos_token_ids=(7,), seed=1)
    rng = random.Random(0)
    engine = Engine(model, tok, num_blocks=16, block_size=8, max_num_seqs=16,
                    max_num_batched_tokens=64)
    pending = list(range(300))
    rng.shuffle(pending)
    ended, expected = {}, {}
    step = 0
    while pending or engine.has_unfinished():
        for _ in range(rng.randint(0, 6)):  # requests arrive a few at a time
            if pending:
                rid = pending.pop()
                s = {"max_new_tokens": rng.randint(1, 24), "seed": rid}
                if rng.random() < 0.5:
                    s.update(do_sample=True, temperature=rng.uniform(0.5, 1.5),
                             top_p=rng.uniform(0.5, 1.0))
                if rng.random() < 0.2:
                    s["stop"] = ["ab"]
                prompt = [rng.randrange(64) for _ in range(rng.randint(1, 60))]
                engine.add_request(prompt, request_id=rid, **s)
                expected[rid] = s["max_new_tokens"]
        if rng.random() < 0.03 and engine.requests:
            engine.cancel(rng.choice(list(engine.requests)))
        for out in engine.step():
            if out.finished:
                assert out.request_id not in ended, "a request ended twice"
                ended[out.request_id] = out
        step += 1
    assert sorted(ended) == list(range(300))
    for rid, out in ended.items():
        assert out.finish_reason in ("eos", "length", "stop", "cancelled")
        assert len(out.token_ids) <= expected[rid]
        if out.finish_reason == "length":
            assert len(out.token_ids) == expected[rid]
        if out.finish_reason == "eos":
            assert out.token_ids[-1] == 7
    assert engine.scheduler.num_preemptions > 0
    assert {o.finish_reason for o in ended.values()} >= {"eos", "length", "cancelled"}
    assert_no_leaks(engine)
