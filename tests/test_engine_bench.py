"""The benchmark helpers (minillm.tools.bench.batching) on a tiny model: the workload, Poisson arrivals,
percentiles, memory ratios, the online mode and the interleaved comparison of weight formats."""

import statistics

import pytest
import torch

from minillm.engine import Engine, StepRecord
from minillm.tools.bench.batching import (Work, compare_weights, make_workload, memory_use, percentile,
                                  poisson_arrivals, run_engine, run_online, time_split)
from minillm.model.toy import tiny_model
from minillm.fast import optimize
from script_modules import script


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_workload_lengths_are_in_range_and_fixed_by_the_seed():
    _, tok = tiny_model()
    text = "abcdefghij" * 200
    work = make_workload(tok, 20, (5, 30), (2, 9), seed=3, text=text)
    assert len(work) == 20
    assert all(5 <= len(w.prompt) <= 30 and 2 <= w.max_new_tokens <= 9 for w in work)
    assert work == make_workload(tok, 20, (5, 30), (2, 9), seed=3, text=text)


def test_poisson_gaps_have_mean_one_over_the_rate():
    times = poisson_arrivals(4000, rate=5.0, seed=0)
    gaps = [b - a for a, b in zip([0.0] + times, times)]
    assert all(g > 0 for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(0.2, rel=0.05)
    with pytest.raises(ValueError, match="rate must be > 0"):
        poisson_arrivals(3, rate=0)


def test_engine_bench_and_load_client_share_one_percentile():
    import minillm.tools.loadtest
    import minillm.utils.stats

    assert percentile is minillm.utils.stats.percentile is minillm.tools.loadtest.percentile
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)


def test_memory_use_is_token_weighted_over_steps():
    steps = [StepRecord(0, 1, used_tokens=10, paged_slots=16, contiguous_slots=40, running=1),
             StepRecord(1, 2, used_tokens=30, paged_slots=32, contiguous_slots=40, running=1)]
    got = memory_use(steps, max_len=100)
    assert got == {"paged": 40 / 48, "contiguous_per_request": 40 / 80,
                   "contiguous_max_length": 40 / 200}


def test_time_split_separates_decode_only_steps_from_steps_with_prompt_tokens():
    steps = [StepRecord(0.0, 1.0, [(0, 100, "prefill")]),
             StepRecord(1.0, 1.5, [(0, 1, "decode"), (1, 60, "prefill")]),
             StepRecord(1.5, 1.7, [(0, 1, "decode"), (1, 1, "decode")]),
             StepRecord(1.7, 2.1, [(0, 1, "decode"), (1, 1, "decode"), (2, 1, "decode"),
                                   (3, 1, "decode")]),
             StepRecord(2.1, 2.3, [(1, 5, "recompute")]),
             StepRecord(2.3, 2.6, [(0, 1, "decode"), (1, 1, "ghost"), (2, 1, "ghost")])]
    got = time_split(steps)  # a static batch's ghost rows are decode rows, not prompt tokens
    assert got == pytest.approx({"decode_steps": 3, "decode_s": 0.9, "decode_step_s": 0.3,
                                 "decode_rows_mean": 3.0, "prompt_steps": 3, "prompt_s": 1.7,
                                 "prompt_tokens": 165})


def test_offline_and_online_runs_finish_every_request():
    model, tok = tiny_model()
    work = [Work(list(range(1, 2 + i)), 3 + i % 4) for i in range(6)]
    new = lambda: Engine(model, tok, num_blocks=32, block_size=8, record=True)  # noqa: E731
    offline = run_engine(new(), work)
    assert offline["new_tokens"] == sum(w.max_new_tokens for w in work)
    online = run_online(new(), work, rate=200.0, seed=0)
    assert online["requests"] == 6
    assert 0 < online["ttft_p50"] <= online["ttft_p99"]
    assert all(m.n_tokens == w.max_new_tokens for m, w in
               zip(sorted(online["metrics"], key=lambda m: m.start), work))


def test_weight_formats_are_compared_interleaved_on_the_same_work():
    model, tok = tiny_model()
    models = {"fp32": model, "int8": optimize(model, "int8")}
    work = [Work(list(range(1, 3 + i)), 4) for i in range(4)]
    order = []

    def maker(fmt):
        def make():
            order.append(fmt)
            return Engine(models[fmt], tok, num_blocks=32, block_size=8, max_num_seqs=4,
                          record=True)
        return make

    rows = compare_weights({fmt: maker(fmt) for fmt in models}, work, repeats=3)
    assert order == ["fp32", "int8", "int8", "fp32", "fp32", "int8"]  # rotated each repetition
    assert set(rows) == {"fp32", "int8"} and rows["fp32"]["over_first"] == 1.0
    for row in rows.values():
        assert row["new_tokens"] == 16
        assert row["tokens_per_s"]["n"] == row["decode_step_s"]["n"] == 3
        assert 0 < row["tokens_per_s"]["min"] <= row["tokens_per_s"]["median"]
    median = rows["int8"]["tokens_per_s"]["median"] / rows["fp32"]["tokens_per_s"]["median"]
    assert rows["int8"]["over_first"] == pytest.approx(median)
    with pytest.raises(ValueError, match="at least one engine and one repetition"):
        compare_weights({"fp32": maker("fp32")}, work, repeats=0)


def test_the_batching_benchmark_takes_known_weight_formats_only():
    import argparse

    formats = script("bench_batching").weight_formats
    assert formats("fp32, int8,q4_1") == ["fp32", "int8", "q4_1"]
    for bad in ("", "int4", "fp32,fp32", "fp16"):
        with pytest.raises(argparse.ArgumentTypeError, match="fp32, bf16, int8, q4_1"):
            formats(bad)
