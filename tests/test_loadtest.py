"""The load client: percentiles as numpy computes them, the workload's checks and seeds, token
times rebuilt by minillm.metrics' definitions, and real load tests of minillm's own server on
127.0.0.1 (200 requests at concurrency 16, each answered exactly once; the command's table and
JSON). Every server is stopped when its test ends."""

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from minillm.engine import Engine
from minillm.engine.toy import tiny_model
from minillm.loadtest import RequestResult, Workload, percentile, run
from minillm.loadtest.report import summarize
from minillm.server import ServerProcess, ServerThread


@pytest.fixture(scope="module")
def server():
    torch.set_num_threads(1)
    engine = Engine(*tiny_model(), num_blocks=256, block_size=8, max_num_seqs=16)
    with ServerThread(engine, "tiny") as running:
        yield running


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentile_is_numpys_linear_percentile(n):
    rng = random.Random(n)
    values = [rng.random() for _ in range(n)]
    for q in (0, 1, 25, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q), abs=1e-12)


def test_percentile_edges():
    assert math.isnan(percentile([], 50))
    assert percentile([3.0, float("nan"), 1.0], 50) == 2.0  # NaN left out
    with pytest.raises(ValueError, match="from 0 to 100"):
        percentile([1.0], 101)


@pytest.mark.parametrize("field,value,words", [
    ("requests", 0, "requests must be an int"), ("concurrency", 1.5, "concurrency"),
    ("rate", -1.0, "rate"), ("endpoint", "embeddings", "endpoint"),
    ("timeout_s", 0, "timeout_s"), ("temperature", 3, "temperature"),
    ("output_tokens", True, "output_tokens")])
def test_workload_refuses_bad_settings(field, value, words):
    with pytest.raises(ValueError, match=words):
        Workload(**{field: value})


def test_workload_is_seeded():
    a, b = Workload(requests=50, rate=10.0, seed=3), Workload(requests=50, rate=10.0, seed=3)
    assert a.prompts() == b.prompts() and a.arrivals() == b.arrivals()
    assert a.prompts() != Workload(requests=50, seed=4).prompts()
    assert all(len(p.split()) == a.prompt_tokens for p in a.prompts())
    assert len(set(a.prompts())) == 50  # every request its own prompt
    gaps = np.diff(Workload(requests=2000, rate=10.0).arrivals())
    assert gaps.mean() == pytest.approx(0.1, rel=0.1)  # Poisson arrivals at 10 per second
    assert Workload(requests=3).arrivals() == [0.0, 0.0, 0.0]


def test_payload_shapes():
    w = Workload(output_tokens=5, endpoint="chat")
    body = w.payload("hello there", "m")
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert body["max_tokens"] == 5 and body["stream"] and body["ignore_eos"]
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"
    assert "stream_options" not in Workload(stream=False).payload("x", None)
    assert w.path == "/v1/chat/completions"


def test_token_times_follow_the_metrics_definitions():
    # 3 events carried 5 tokens: first at 0.4 s, last at 1.2 s
    r = RequestResult(0, start=0.0, end=1.3, chunk_times=[0.4, 0.9, 1.2], output_tokens=5)
    m = r.metrics()
    assert m.n_tokens == 5 and m.ttft == pytest.approx(0.4)
    assert m.tpot == pytest.approx((1.2 - 0.4) / 4) and m.latency == pytest.approx(1.3)
    one_per_event = RequestResult(0, 0.0, 0.5, [0.1, 0.2, 0.45], output_tokens=3).metrics()
    assert one_per_event.token_times == (0.1, 0.2, 0.45)
    whole = RequestResult(0, 0.0, 2.0, [], output_tokens=8).metrics(streamed=False)
    assert math.isnan(whole.ttft) and whole.latency == 2.0


def test_summary_counts_failures_and_throughput():
    ok = [RequestResult(i, start=i * 0.1, end=i * 0.1 + 1.0,
                        chunk_times=[i * 0.1 + 0.2, i * 0.1 + 1.0], output_tokens=2,
                        prompt_tokens=4) for i in range(3)]
    bad = RequestResult(3, 0.0, 0.1, error="HTTP 500: boom")
    report = summarize(ok + [bad], Workload(requests=4), 1.5, "http://x", "m")
    assert (report["requests"], report["ok"], report["errors"]) == (4, 3, 1)
    assert report["error_examples"] == ["HTTP 500: boom"]
    assert report["throughput_tok_s"] == pytest.approx(6 / 1.2)  # first start 0, last end 1.2
    assert report["ttft_ms"]["p50"] == pytest.approx(200)
    assert report["tpot_ms"]["mean"] == pytest.approx(800)


def test_200_requests_at_concurrency_16_each_answered_once(server):
    steps = server.loop.steps
    work = Workload(requests=200, concurrency=16, prompt_tokens=3, output_tokens=4, seed=1,
                    timeout_s=120, max_seconds=300)
    report = run(server.url, work)
    assert report["requests"] == 200 and report["ok"] == 200, report["error_examples"]
    assert report["output_tokens"] == 200 * 4  # ignore_eos: every answer has 4 tokens
    assert report["model"] == "tiny"  # found through /v1/models
    assert server.loop.completed >= 200
    assert server.loop.max_batch > 1
    assert server.loop.steps - steps < 200 * 4  # requests shared steps
    for key in ("ttft_ms", "tpot_ms", "latency_ms"):
        row = report[key]
        assert 0 < row["p50"] <= row["p90"] <= row["p99"]
    assert report["throughput_tok_s"] > 0
    engine = server.loop.engine
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_each_response_id_arrives_once(server):
    import asyncio

    import httpx

    from minillm.loadtest.client import send_one

    work = Workload(requests=24, concurrency=8, prompt_tokens=2, output_tokens=3)

    async def go():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*[
                send_one(client, server.url + work.path, work.payload(p, None), i)
                for i, p in enumerate(work.prompts())])

    results = asyncio.run(go())
    assert [r.index for r in results] == list(range(24)) and all(r.ok for r in results)
    assert len({r.response_id for r in results}) == 24


def test_without_streaming_only_latency_is_known(server):
    report = run(server.url, requests=6, concurrency=3, prompt_tokens=2, output_tokens=3,
                 stream=False, endpoint="completions")
    assert report["ok"] == 6 and report["output_tokens"] == 18
    assert math.isnan(report["ttft_ms"]["p50"]) and report["latency_ms"]["p50"] > 0


def test_server_errors_are_counted_not_raised(server):
    report = run(server.url, requests=3, concurrency=2, model="no-such-model")
    assert report["ok"] == 0 and report["errors"] == 3
    assert "HTTP 404" in report["error_examples"][0]


def test_unreachable_server_is_an_error_per_request():
    from minillm.server import free_port

    report = run(f"http://127.0.0.1:{free_port()}", requests=2, concurrency=1, timeout_s=5)
    assert report["errors"] == 2 and "ConnectError" in report["error_examples"][0]


def test_bench_url_command_prints_a_table_and_json():
    with ServerProcess(["--tiny", "--threads", "1"]) as server:
        out = subprocess.run(
            [sys.executable, "-m", "minillm", "bench", "--url", server.url, "--requests", "12",
             "--concurrency", "4", "--tokens", "5", "--prompt-tokens", "3", "--no-progress"],
            capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("TTFT ms") for line in lines)
    report = json.loads(lines[-1])
    assert report["ok"] == 12 and report["output_tokens"] == 60
    assert report["workload"]["concurrency"] == 4 and report["tpot_ms"]["p99"] > 0


def test_bench_url_refuses_bad_settings():
    out = subprocess.run([sys.executable, "-m", "minillm", "bench", "--url", "127.0.0.1:8000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "http://" in out.stderr
    out = subprocess.run([sys.executable, "-m", "minillm", "bench", "--url",
                          "http://127.0.0.1:9", "--concurrency", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "concurrency" in out.stderr
