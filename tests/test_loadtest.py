"""The load client: percentiles as numpy computes them, the workload's checks and seeds, token
times rebuilt by minillm.measure.metrics' definitions, real load tests of minillm's own server on
127.0.0.1 (200 requests at concurrency 16, each answered exactly once; the command's table and
JSON), and a fake server that behaves as llama-cpp-python's does (it ignores ignore_eos and
min_tokens and sends no usage in a stream): the report's warnings and the tokenizer's counts.
The command line: `bench latency` and `bench serve`, and the old spellings with their note.
Every server is stopped when its test ends."""

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from minillm.engine import Engine
from minillm.model.toy import tiny_model
from minillm.tools.loadtest import RequestResult, Workload, percentile, run
from minillm.tools.loadtest.report import summarize
from minillm.tools.server import ServerProcess, ServerThread


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
    ("output_tokens", True, "output_tokens"), ("full_length", "yes", "full_length")])
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
    assert body["max_tokens"] == 5 and body["stream"]
    assert body["ignore_eos"] is True and body["min_tokens"] == 5  # both spellings of full length
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"
    assert "stream_options" not in Workload(stream=False).payload("x", None)
    assert w.path == "/v1/chat/completions"
    free = Workload(full_length=False).payload("x", None)
    assert "ignore_eos" not in free and "min_tokens" not in free
    only = w.payload("x", None, full_length=("ignore_eos",))
    assert only["ignore_eos"] and "min_tokens" not in only
    with pytest.raises(ValueError, match="unknown full-length field"):
        w.payload("x", None, full_length=("n_predict",))


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
                        prompt_tokens=4, finish_reason="length") for i in range(3)]
    bad = RequestResult(3, 0.0, 0.1, error="HTTP 500: boom")
    report = summarize(ok + [bad], Workload(requests=4, output_tokens=2), 1.5, "http://x", "m")
    assert (report["requests"], report["ok"], report["errors"]) == (4, 3, 1)
    assert report["error_examples"] == ["HTTP 500: boom"]
    assert report["throughput_tok_s"] == pytest.approx(6 / 1.2)  # first start 0, last end 1.2
    assert report["ttft_ms"]["p50"] == pytest.approx(200)
    assert report["tpot_ms"]["mean"] == pytest.approx(800)
    assert report["ttft_ms"]["n"] == report["tpot_ms"]["n"] == 3  # the failed one is left out
    assert report["output_length"]["ended_early"] == 0 and report["output_length"]["mean"] == 2
    [warning] = report["warnings"]
    assert "fewer than 5 requests (TTFT 3, TPOT 3, latency 3)" in warning


def test_an_answer_ended_early_by_its_finish_reason_and_length():
    from minillm.tools.loadtest.report import ended_early

    def answer(n, reason):
        return RequestResult(0, 0.0, 1.0, output_tokens=n, finish_reason=reason)

    assert not ended_early(answer(8, "length"), 8)
    assert not ended_early(answer(7, "length"), 8)  # max_tokens reached; a re-count missed one
    assert ended_early(answer(3, "stop"), 8) and ended_early(answer(1, None), 8)  # None: cut
    assert not ended_early(answer(8, None), 8)  # no finish reason, but every token came


def test_streams_cut_short_are_named_in_the_warning():
    cut = [RequestResult(i, 0.0, 0.5, [0.1], output_tokens=1) for i in range(5)]  # no reason
    report = summarize(cut, Workload(requests=5, output_tokens=32), 0.5, "http://x", "m")
    assert report["output_length"] == {"asked": 32, "mean": 1, "min": 1, "max": 1,
                                       "ended_early": 5, "finish_reasons": {"none": 5}}
    early, few = report["warnings"]
    assert "5 of 5 answers ended before the 32 tokens asked (finish_reason none 5)" in early
    assert "closed the stream" in early and "--interrupt_requests False" in early
    assert "(TPOT 0)" in few  # one token each: no TPOT at all


def test_200_requests_at_concurrency_16_each_answered_once(server):
    steps = server.loop.steps
    work = Workload(requests=200, concurrency=16, prompt_tokens=3, output_tokens=4, seed=1,
                    timeout_s=120, max_seconds=300)
    report = run(server.url, work, tokenizer="no-such-model")
    assert report["requests"] == 200 and report["ok"] == 200, report["error_examples"]
    assert report["output_tokens"] == 200 * 4  # ignore_eos: every answer has 4 tokens
    # minillm serve takes both of vLLM's spellings of full length (min_tokens since the
    # server honours it), so the probe sent both and nothing was refused
    assert report["full_length"]["sent"] == ["ignore_eos", "min_tokens"]
    assert report["full_length"]["refused"] == {}
    assert report["counted_by"] == {"prompt": {"server": 200}, "output": {"server": 200}}
    assert not report["tokenizer"]["used"] and report["tokenizer"]["error"] is None  # never loaded
    assert report["output_length"]["ended_early"] == 0 and report["warnings"] == []
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

    from minillm.tools.loadtest.client import send_one

    work = Workload(requests=24, concurrency=8, prompt_tokens=2, output_tokens=3)

    async def go():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*[
                send_one(client, server.url + work.path, work.payload(p, None, ("ignore_eos",)), i)
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
    from minillm.tools.server import free_port

    report = run(f"http://127.0.0.1:{free_port()}", requests=2, concurrency=1, timeout_s=5)
    assert report["errors"] == 2 and "ConnectError" in report["error_examples"][0]


def test_bench_serve_command_prints_a_table_and_json():
    with ServerProcess(["--tiny", "--threads", "1"]) as server:
        out = subprocess.run(
            [sys.executable, "-m", "minillm", "bench", "serve", "--url", server.url,
             "--requests", "12", "--concurrency", "4", "--tokens", "5", "--prompt-tokens", "3",
             "--no-progress"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("TTFT ms") for line in lines)
    assert "full length asked with ignore_eos, min_tokens" in lines
    report = json.loads(lines[-1])
    assert report["ok"] == 12 and report["output_tokens"] == 60
    assert report["workload"]["concurrency"] == 4 and report["tpot_ms"]["p99"] > 0
    assert report["tpot_ms"]["n"] == 12 and not any("WARNING" in line for line in lines)


def test_bench_serve_refuses_bad_settings():
    def bench(*args):
        return subprocess.run([sys.executable, "-m", "minillm", "bench", *args],
                              capture_output=True, text=True, timeout=120)

    out = bench("serve", "--url", "127.0.0.1:8000")
    assert out.returncode == 2 and "http://" in out.stderr
    out = bench("serve", "--url", "http://127.0.0.1:9", "--concurrency", "0")
    assert out.returncode == 2 and "concurrency" in out.stderr
    out = bench("serve", "--url", "http://127.0.0.1:9", "--tokenizer", "/no/such/tokenizer.gguf")
    assert out.returncode == 2 and "--tokenizer" in out.stderr and "no tokenizer" in out.stderr
    out = bench("--url", "127.0.0.1:8000")  # the old spelling: a note, then the same check
    assert out.returncode == 2 and "http://" in out.stderr
    assert "`python -m minillm bench serve --url URL`" in out.stderr


# --- the command line: `bench latency` and `bench serve` ------------------------------------


def _parse(capsys, *argv):
    from minillm.tools.cli import build_parser, new_bench_spelling

    argv, note = new_bench_spelling(list(argv))
    try:
        return build_parser().parse_args(argv), note, None
    except SystemExit as exit:
        assert exit.code == 2
        return None, note, capsys.readouterr().err


def test_bench_subcommands_have_their_own_options(capsys):
    from minillm.tools import cli

    args, note, _ = _parse(capsys, "bench", "latency", "--tokens", "5", "--dtypes", "fp32")
    assert args.run is cli._bench_latency and (args.tokens, args.dtypes) == (5, "fp32")
    assert note is None and not hasattr(args, "url")
    args, note, _ = _parse(capsys, "bench", "serve", "--url", "http://h:1", "--tokens", "7")
    assert args.run is cli._bench_serve and (args.url, args.tokens) == ("http://h:1", 7)
    assert note is None and not hasattr(args, "dtypes") and args.tokenizer == "smollm2-135m"
    assert _parse(capsys, "bench", "serve", "--url", "http://h:1", "--no-ignore-eos")[0] \
        .no_full_length  # the old name of --no-full-length


def test_old_bench_spellings_still_run_with_a_note(capsys):
    from minillm.tools import cli

    args, note, _ = _parse(capsys, "bench")
    assert args.run is cli._bench_latency and "`python -m minillm bench latency`" in note
    args, note, _ = _parse(capsys, "bench", "--threads", "1", "--no-transformers")
    assert args.run is cli._bench_latency and args.threads == [1] and "bench latency" in note
    args, note, _ = _parse(capsys, "bench", "--requests", "3", "--url=http://h:1")
    assert args.run is cli._bench_serve and args.requests == 3 and "bench serve" in note
    assert cli.main(["bench", "--url", "ftp://h"]) == 2  # runs `bench serve`, which refuses it
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("minillm: `bench --url URL` is now spelled") and "http://" in err[1]


@pytest.mark.parametrize("argv,words", [
    (("bench", "serve"), "--url"),  # required
    (("bench", "latency", "--url", "http://h:1"), "unrecognized arguments: --url"),
    (("bench", "serve", "--url", "http://h:1", "--dtypes", "fp32"),
     "unrecognized arguments: --dtypes"),
    (("bench", "latncy"), "invalid choice: 'latncy'"),
    (("bench", "serve", "--url", "http://h:1", "--requests", "many"), "--requests"),
])
def test_bench_command_line_errors_name_the_problem(capsys, argv, words):
    args, note, err = _parse(capsys, *argv)
    assert args is None and note is None and words in err


# --- a server that is not vLLM: ignores ignore_eos, no usage in a stream ---------------------


class FakeServer:
    """A server that answers as llama-cpp-python's does: it accepts ignore_eos and min_tokens
    and ignores both, sends no usage in a stream (a whole answer has usage, its prompt counted
    in words, as a tokenizer that is not the client's would), and every answer ends after
    `events` events of two words each with finish_reason "stop"."""

    WORDS = ("water", "river", "house", "music", "light", "north")

    def __init__(self, events: int = 3):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self
        self.events, self.bodies, self.answers = events, [], []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "fake"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                n = min(fake.events, body["max_tokens"])
                pieces = [" " + " ".join(fake.WORDS[(2 * k + j) % 6] for j in range(2))
                          for k in range(n)]
                if not body.get("stream"):
                    self._send(200, {"id": "x", "choices": [
                        {"index": 0, "text": "".join(pieces), "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": len(body["prompt"].split()),
                                  "completion_tokens": 2 * n}})
                    return
                fake.answers.append((body["prompt"], "".join(pieces)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for k, piece in enumerate(pieces):
                    reason = "stop" if k == n - 1 else None
                    event = {"id": f"x{len(fake.bodies)}", "choices": [
                        {"index": 0, "text": piece, "finish_reason": reason}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def _send(self, status, data):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def small_tokenizer():
    """A byte-level BPE with few merges, so most words are several tokens: its counts differ
    from the words and from the stream's events."""
    from minillm.tools.loadtest.workload import WORDS
    from minillm.tokenizer import train

    return train(" ".join([*WORDS, *FakeServer.WORDS]) * 4, vocab_size=300)


def test_a_server_that_ignores_ignore_eos_and_sends_no_usage(small_tokenizer):
    from minillm.tools.loadtest.report import table

    with FakeServer(events=3) as fake:
        report = run(fake.url, Workload(requests=4, concurrency=2, prompt_tokens=6,
                                        output_tokens=40), tokenizer=small_tokenizer)
    assert report["ok"] == 4 and report["full_length"]["sent"] == ["ignore_eos", "min_tokens"]
    streamed = [b for b in fake.bodies if b["stream"]]
    assert len(streamed) == 4 and all(b["ignore_eos"] and b["min_tokens"] == 40 for b in streamed)
    # no usage: both counts are the tokenizer's, of what the server received and sent
    assert report["counted_by"] == {"prompt": {"tokenizer": 4}, "output": {"tokenizer": 4}}
    assert report["prompt_tokens"] == sum(len(small_tokenizer.encode(p)) for p, _ in fake.answers)
    assert report["output_tokens"] == sum(len(small_tokenizer.encode(t)) for _, t in fake.answers)
    assert report["output_tokens"] != 4 * 3  # not the events
    out = report["output_length"]
    assert out["ended_early"] == 4 and out["finish_reasons"] == {"stop": 4} and out["asked"] == 40
    assert out["mean"] == report["output_tokens"] / 4
    early, few, counts = report["warnings"]
    assert "4 of 4 answers ended before the 40 tokens asked (finish_reason stop 4)" in early
    assert "the server accepted ignore_eos, min_tokens but did not honour it" in early
    assert "fewer than 5 requests (TTFT 4, TPOT 4, latency 4)" in few
    # the probe's whole answer had usage: the server counted words, the tokenizer did not
    probe = fake.bodies[0]
    assert not probe["stream"] and probe["max_tokens"] == 1
    assert probe["prompt"] not in [p for p, _ in fake.answers]  # not a test prompt: no cache hit
    tokens, words = len(small_tokenizer.encode(probe["prompt"])), len(probe["prompt"].split())
    assert f"counts {tokens} tokens in a prompt where the server counted {words}" in counts
    text = table(report)
    assert text.count("WARNING: ") == 3 and "tokens counted by (requests): prompt tokenizer" in text
    assert "40 asked" in text and "4 of 4 ended early (finish_reason stop 4)" in text


def test_without_usage_or_tokenizer_the_counts_say_so():
    with FakeServer(events=2) as fake:
        report = run(fake.url, Workload(requests=5, concurrency=5, prompt_tokens=3,
                                        output_tokens=2, full_length=False),
                     tokenizer="/no/such/folder/tokenizer.gguf")
    assert "ignore_eos" not in fake.bodies[0] and len(fake.bodies) == 5  # no probe either
    assert report["counted_by"] == {"prompt": {"unknown": 5}, "output": {"events": 5}}
    assert report["output_tokens"] == 5 * 2 and report["prompt_tokens"] == 0
    assert report["output_length"]["ended_early"] == 0  # 2 tokens asked, 2 came
    [warning] = report["warnings"]
    assert "could not be loaded" in warning and "--tokenizer" in warning
