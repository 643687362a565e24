"""The engine on the real model (SmolLM2-135M): 21 requests of mixed lengths in one continuous
batch, some sharing a system prompt (prefix-cache hits), on a pool small enough to preempt. Each
request's greedy tokens equal `minillm.generate` on that request alone. Outputs are kept short
(2 to 6 tokens) so the whole file runs in well under a minute on 2 cores."""

import random

import pytest
import torch

import minillm
from minillm.engine import Engine

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

SYSTEM = ("You are a helpful assistant. Answer in one short sentence, use plain words, and never "
          "make up facts you are not sure about. Question: ")
QUESTIONS = ["What is the capital of France?", "Why is the sky blue?", "Name a prime number.",
             "What do bees make?", "How many legs does a spider have?", "What is ice?",
             "Who wrote Hamlet?", "What colour is grass?"]
OTHERS = ["Hi", "The capital of France is", "def add(a, b):", "1, 2, 3, 4,", "Once upon a time",
          "Water boils at", "The largest planet in the solar system is",
          "In 1969, Neil Armstrong became the first person to walk on",
          "To make a cup of tea, first boil some water, then put a tea bag in a cup, and",
          "Photosynthesis", "A haiku about the sea:", "SELECT name FROM users WHERE",
          "Paris, Rome, Berlin,"]


@pytest.fixture(scope="module")
def smollm2():
    torch.manual_seed(0)
    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


def test_continuous_batch_equals_each_request_alone(smollm2):
    model, tokenizer = smollm2
    prompts = [SYSTEM + q for q in QUESTIONS] + OTHERS
    rng = random.Random(0)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    prompts = [prompts[i] for i in order]
    news = [rng.randint(2, 6) for _ in prompts]
    lengths = [len(tokenizer.encode(p)) for p in prompts]
    assert len(prompts) >= 20 and min(lengths) <= 3 and max(lengths) >= 30

    engine = Engine(model, tokenizer, num_blocks=16, block_size=16, max_num_seqs=8,
                    max_num_batched_tokens=256)
    outs = engine.generate(prompts, [{"max_new_tokens": n} for n in news])
    for p, n, out in zip(prompts, news, outs):
        want = minillm.generate(model, tokenizer, p, max_new_tokens=n)
        assert out.token_ids == want.token_ids, p
        assert out.finish_reason == want.finish_reason
    assert sum(o.num_cached_tokens for o in outs) >= 32  # the system prompt was shared
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_the_batching_benchmark_runs_and_reports_measured_ratios(tmp_path):
    """scripts/bench_batching.py end to end at a toy size: every run measured, ratios computed
    from those measurements (the full-size figures are in the README)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "scripts/bench_batching.py"
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(script), "--small", "--requests", "4", "--skip-hf", "--rates", "3",
         "--pool-max-num-seqs", "8", "--threads", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(out.read_text())
    runs = summary["throughput"]
    assert set(runs) == {"continuous", "continuous, pool-bound", "static"}
    assert all(r["new_tokens"] == runs["static"]["new_tokens"] > 0 for r in runs.values())
    ratio = runs["continuous"]["tokens_per_s"] / runs["static"]["tokens_per_s"]
    assert summary["continuous_over_static"] == pytest.approx(ratio)
    assert summary["static_over_continuous_computed_rows"] >= 1
    assert 0 < summary["memory_used_over_reserved"]["paged"] <= 1
    assert [row["requests"] for row in summary["online"]] == [4]
    assert "over static" in done.stdout and "TTFT p50" in done.stdout
