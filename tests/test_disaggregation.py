"""Serving on virtual clocks (virtual_clock.py), a long prompt arriving into running decodes with
and without chunked prefill (interference.py), and prefill/decode disaggregation with two
engines (disaggregation.py), on a tiny random Llama: the same tokens as each request run alone,
every block back in its pool, and the structure the lesson's timings rest on."""

import random

import pytest
import torch

import minillm
from minillm.model.toy import tiny_model
from minillm.engine import Engine
from minillm.engine.disaggregation import (DecodeScheduler, PrefillScheduler,
                                           copy_blocks_between, serve_colocated,
                                           serve_disaggregated)
from minillm.engine.interference import long_prompt_arrival
from minillm.engine.virtual_clock import ClockedEngine

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model(max_seq_len=1024)


def arrivals(n, rng_seed=0, longest=60, most_new=12, **settings):
    rng, t, out = random.Random(rng_seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(50.0)
        out.append((t, [rng.randrange(64) for _ in range(rng.randint(1, longest))],
                    {"max_new_tokens": rng.randint(1, most_new), "ignore_eos": True,
                     **settings}))
    return out


def empty(engine):
    return engine.blocks.num_free == engine.blocks.num_blocks and not engine.has_unfinished()


def test_the_clock_moves_only_by_the_steps_and_jumps_when_idle(tiny):
    clocked = ClockedEngine(Engine(*tiny, num_blocks=32))
    clocked.wait_until(5.0)
    clocked.wait_until(2.0)  # never back
    rid = clocked.add([1, 2, 3], max_new_tokens=3, ignore_eos=True)
    while clocked.has_work():
        clocked.step()
    m = clocked.metrics(rid)
    assert clocked.now == pytest.approx(5.0 + clocked.busy_seconds)
    assert m.start == 5.0 and m.n_tokens == 3 and m.token_times[-1] == clocked.now
    assert clocked.steps == 3  # prefill with the first token, then one step per token


@pytest.mark.parametrize("budget,steps", [(400, 1), (40, 9)])
def test_a_long_prompt_runs_in_one_step_or_in_chunks(tiny, budget, steps):
    engine = Engine(*tiny, num_blocks=64, max_num_batched_tokens=budget,
                    enable_prefix_caching=False)
    running = [[1, 2, 3], [4, 5, 6, 7], [8]]
    got = long_prompt_arrival(engine, running, list(range(60)) * 5)
    # the budget left after three decodes is budget - 3 tokens a step: 300 tokens take 9 steps
    assert got.steps == steps and got.budget == budget
    assert len(got.gaps) == 3 * steps  # each running request got a token in every step
    assert all(g > 0 for g in got.gaps) and got.stall == max(got.gaps)
    # the first request's gaps run from its last token before the arrival to the long prompt's
    # first token, step by step: they add up to the long prompt's TTFT
    assert sum(got.gaps[:steps]) == pytest.approx(got.ttft)
    assert empty(engine)


def test_the_arrival_measurement_refuses_what_cannot_be_measured(tiny):
    with pytest.raises(ValueError, match="running_prompts is empty"):
        long_prompt_arrival(Engine(*tiny), [], [1, 2, 3])
    with pytest.raises(ValueError, match="need max_num_seqs >= 5"):  # no seat for the prompt
        long_prompt_arrival(Engine(*tiny, max_num_seqs=4), [[1], [2], [3], [4]], [1, 2, 3])


def test_copy_blocks_between_two_pools(tiny):
    a = Engine(*tiny, num_blocks=8, block_size=4).pool
    b = Engine(*tiny, num_blocks=8, block_size=4).pool
    for t in (*a.keys, *a.values):
        t.copy_(torch.randn_like(t))
    assert copy_blocks_between(a, [5, 1], b, [0, 7]) == 2 * a.bytes_per_block
    for src, dst in zip((*a.keys, *a.values), (*b.keys, *b.values)):
        assert torch.equal(dst[0:4], src[20:24]) and torch.equal(dst[28:32], src[4:8])
        assert not dst[4:28].any()
    with pytest.raises(ValueError, match="same block size"):
        copy_blocks_between(a, [1], Engine(*tiny, num_blocks=8, block_size=8).pool, [0])


@pytest.mark.parametrize("settings", [{}, {"do_sample": True, "temperature": 0.9, "seed": 3}])
def test_colocated_and_disaggregated_give_each_request_its_own_tokens(tiny, settings):
    work = arrivals(12, **settings)
    colocated = serve_colocated(Engine(*tiny, num_blocks=64, max_num_batched_tokens=32), work)
    prefill = Engine(*tiny, scheduler=PrefillScheduler, num_blocks=32, max_num_batched_tokens=32)
    decode = Engine(*tiny, scheduler=DecodeScheduler, num_blocks=48, record=True)
    split = serve_disaggregated(prefill, decode, work)
    for (at, prompt, s), a, b, m in zip(work, colocated.outputs, split.outputs, split.metrics):
        want = minillm.generate(*tiny, prompt, **s).token_ids
        assert a.token_ids == b.token_ids == want
        assert m.start == at and m.n_tokens == len(want)
    # the decode engine ran one-token rows only: every prompt was computed on the other side
    assert all(n == 1 for step in decode.steps for _, n, _ in step.items)
    blocks = sum(decode.blocks.blocks_for(len(p) - 1) for _, p, _ in work)
    assert split.handoff_bytes == blocks * decode.pool.bytes_per_block
    assert set(split.busy_seconds) == {"prefill", "decode"}
    assert empty(prefill) and empty(decode) and not prefill.scheduler.handoffs
    summary = split.summary()
    assert summary["longest gap"] == max(g for m in split.metrics for g in m.gaps)
    assert summary["TTFT p50"] <= summary["TTFT p90"]


def test_two_engines_side_by_side_take_every_other_request(tiny):
    work = arrivals(7)
    engines = [Engine(*tiny, num_blocks=32, record=True) for _ in range(2)]
    served = serve_colocated(engines, work)
    assert [m.start for m in served.metrics] == [at for at, _, _ in work]
    for (_, prompt, s), out in zip(work, served.outputs):
        assert out.token_ids == minillm.generate(*tiny, prompt, **s).token_ids
    admitted = [{rid for step in e.steps for rid, _, kind in step.items if kind == "prefill"}
                for e in engines]
    assert [len(a) for a in admitted] == [4, 3]
    assert set(served.busy_seconds) == {"engine 0", "engine 1"} and all(map(empty, engines))


def test_disaggregation_needs_its_two_schedulers_and_a_decode_pool_that_fits(tiny):
    work = arrivals(2, longest=40)
    with pytest.raises(TypeError, match="PrefillScheduler"):
        serve_disaggregated(Engine(*tiny), Engine(*tiny, scheduler=DecodeScheduler), work)
    prefill = Engine(*tiny, scheduler=PrefillScheduler, num_blocks=16, block_size=8)
    decode = Engine(*tiny, scheduler=DecodeScheduler, num_blocks=1, block_size=8)
    with pytest.raises(RuntimeError, match="cannot hold a handed-over request"):
        serve_disaggregated(prefill, decode, [(0.0, list(range(30)), {"max_new_tokens": 2})])


def test_running_requests_outlive_a_start_that_takes_many_steps(tiny):
    """Prompts that each need most of the budget start one step after another; the first ones
    decode meanwhile and must not run out of tokens before the long prompt's first token."""
    engine = Engine(*tiny, num_blocks=64, max_num_batched_tokens=32, enable_prefix_caching=False)
    got = long_prompt_arrival(engine, [list(range(30))] * 4, list(range(64)) * 4)
    assert got.steps == 10 and len(got.gaps) == 40  # 256 tokens, 28 a step beside 4 decodes
    assert empty(engine)


def test_prefill_interference_is_counted_in_the_steps_and_disaggregation_has_none(tiny):
    """The lesson's evidence that no load can change: decode tokens that shared a step with
    another prompt's prefill, counted from the engines' recorded steps. Colocated engines have
    some (the arrivals come while others decode); the disaggregated decode engine has none (its
    only prompt rows are each request's last prompt token); without records there is no count."""
    work = arrivals(12, longest=40, most_new=12)
    together = Engine(*tiny, num_blocks=64, max_num_batched_tokens=64, record=True)
    colocated = serve_colocated(together, work)
    counted = colocated.interference
    by_hand = sum(sum(1 for _, _, kind in step.items if kind == "decode")
                  for step in together.steps
                  if any(kind == "prefill" and n > 1 for _, n, kind in step.items)
                  and any(kind == "decode" for _, _, kind in step.items))
    assert counted["stalled decode tokens"] == by_hand > 0
    assert counted["prompt tokens beside decodes"] > 0
    prefill = Engine(*tiny, scheduler=PrefillScheduler, num_blocks=32, max_num_batched_tokens=64,
                     record=True)
    decode = Engine(*tiny, scheduler=DecodeScheduler, num_blocks=48, record=True)
    split = serve_disaggregated(prefill, decode, work)
    assert split.interference == {"stalled decode tokens": 0, "prompt tokens beside decodes": 0}
    unrecorded = serve_colocated(Engine(*tiny, num_blocks=64), work)
    assert unrecorded.interference is None
