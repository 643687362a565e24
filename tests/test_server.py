"""The OpenAI-compatible server over real HTTP on 127.0.0.1, against a tiny random Llama: answers
equal the model run alone, streaming gives the same text, concurrent clients share the engine's
batch, a client that hangs up frees its blocks, and bad requests get 4xx with OpenAI's error body.
Every server is stopped when its test ends, also when the test fails."""

import json
import threading
import time

import httpx
import pytest
import torch

import minillm
from minillm.engine import Engine
from minillm.engine.toy import LetterTokenizer, tiny_model
from minillm.server import ServerProcess, ServerThread



class ChatLetters(LetterTokenizer):
    """The toy tokenizer with a chat template (the letters of each message, roles as marks)."""

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "".join(f"{m['role'][0]}{m['content']}z" for m in messages) + "a"


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, _ = tiny_model()
    return model, ChatLetters()


@pytest.fixture(scope="module")
def server(tiny):
    engine = Engine(*tiny, num_blocks=128, block_size=8, max_num_seqs=8)
    with ServerThread(engine, "tiny") as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def alone(tiny, prompt, n):
    model, tok = tiny
    return minillm.generate(model, tok, prompt, max_new_tokens=n)


def sse(response) -> list:
    """The events of a server-sent-event stream; '[DONE]' as the string."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", f"unexpected line in the stream: {line!r}"
    return events


def wait_until(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_binds_loopback_by_default(server):
    assert server.host == "127.0.0.1" and server.socket.getsockname()[0] == "127.0.0.1"
    from minillm.__main__ import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"


def test_health_and_models(client):
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["max_model_len"] == 512


def test_completion_equals_the_model_run_alone(client, tiny):
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "hello", "max_tokens": 7,
                                             "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200
    body = r.json()
    want = alone(tiny, "hello", 7)
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["choices"][0]["text"] == want.text
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def test_token_id_prompts_are_accepted(client, tiny):
    r = client.post("/v1/completions", json={"prompt": [7, 4, 11], "max_tokens": 3,
                                             "temperature": 0})
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"] == alone(tiny, [7, 4, 11], 3).text


def test_stream_gives_the_same_text_then_usage_and_done(client):
    body = {"prompt": "streaming", "max_tokens": 9, "temperature": 0}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    with client.stream("POST", "/v1/completions",
                       json={**body, "stream": True,
                             "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse(r)
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 9
    chunks = events[:-2]
    assert len(chunks) == 9  # one event per token for this tokenizer (one letter each)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 8 + ["length"]
    assert len({c["id"] for c in chunks}) == 1


def test_chat_stream_and_whole_answer_agree(client, tiny):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    body = {"messages": messages, "max_tokens": 6, "temperature": 0}
    whole = client.post("/v1/chat/completions", json=body).json()
    assert whole["object"] == "chat.completion"
    message = whole["choices"][0]["message"]
    prompt = ChatLetters().apply_chat_template(messages)
    assert message == {"role": "assistant", "content": alone(tiny, prompt, 6).text}
    assert whole["usage"]["prompt_tokens"] == len(ChatLetters().encode(prompt))
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == message["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_sampling_with_a_seed_repeats(client):
    body = {"prompt": "abc", "max_tokens": 12, "temperature": 0.9, "top_p": 0.9, "seed": 5}
    first = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    again = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert first == again and len(first) == 12


def test_concurrent_requests_share_the_batch(server, tiny):
    prompts = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    n = 24
    steps_before = server.loop.steps
    results = [None] * len(prompts)

    def ask(i):
        with httpx.Client(base_url=server.url, timeout=120) as c:
            results[i] = c.post("/v1/completions", json={
                "prompt": prompts[i], "max_tokens": n, "temperature": 0,
                "ignore_eos": True}).json()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    steps = server.loop.steps - steps_before
    for prompt, body in zip(prompts, results):
        assert body["choices"][0]["text"] == alone(tiny, prompt, n).text
    assert server.loop.max_batch >= 2, "no step ever ran two requests together"
    # alone, the six requests need 6 x 24 steps; sharing the batch needs far fewer
    assert steps < len(prompts) * n * 0.75, f"{steps} steps for {len(prompts)} x {n} tokens"


def test_a_client_that_hangs_up_mid_stream_frees_its_request(server):
    engine = server.loop.engine
    cancelled = server.loop.cancelled
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json={
                "prompt": "long", "max_tokens": 500, "temperature": 0, "stream": True,
                "ignore_eos": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    break  # one event, then hang up
    assert wait_until(lambda: server.loop.cancelled > cancelled and
                      engine.blocks.num_free == engine.blocks.num_blocks and
                      not engine.has_unfinished()), \
        f"the request was not freed: {server.loop.stats()}"
    engine.blocks.check()


BAD = [
    ("malformed JSON", b'{"prompt": "x", ', 400, "not valid JSON"),
    ("max_tokens as a string", {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ("max_tokens as a float", {"prompt": "x", "max_tokens": 5.0}, 400, "max_tokens"),
    ("negative max_tokens", {"prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
    ("zero max_tokens", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("huge max_tokens", {"prompt": "x", "max_tokens": 10**15}, 400, "at most 511"),
    ("unknown field", {"prompt": "x", "max_tokenz": 5}, 400, "unknown field 'max_tokenz'"),
    ("temperature too high", {"prompt": "x", "temperature": 7}, 400, "temperature"),
    ("stream as a string", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("missing prompt", {"max_tokens": 4}, 400, "prompt is required"),
    ("empty prompt", {"prompt": ""}, 400, "empty"),
    ("token id out of the vocabulary", {"prompt": [1, 64]}, 400, "outside the vocabulary"),
    ("prompt longer than the context", {"prompt": "a" * 600}, 400, "context window"),
    ("a batch of prompts", {"prompt": ["ab", "cd"]}, 400, "one prompt per request"),
    ("n above 1", {"prompt": "x", "n": 2}, 400, "n=2"),
    ("too many stop strings", {"prompt": "x", "stop": list("abcde")}, 400, "stop"),
    ("presence_penalty", {"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("unknown model", {"prompt": "x", "model": "gpt-4"}, 404, "does not exist"),
    ("a JSON list as the body", [1, 2], 400, "invalid request"),
]


@pytest.mark.parametrize("what,body,status,words", BAD, ids=[b[0] for b in BAD])
def test_bad_completion_requests_get_4xx_with_a_message(client, what, body, status, words):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post("/v1/completions", content=content,
                    headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"], error
    assert error["type"] in ("invalid_request_error", "not_found_error")
    assert "Traceback" not in r.text


BAD_CHAT = [
    ("no messages", {"messages": []}, "messages"),
    ("a role that does not exist", {"messages": [{"role": "robot", "content": "hi"}]}, "role"),
    ("content as a number", {"messages": [{"role": "user", "content": 5}]}, "content"),
    ("messages as a string", {"messages": "hi"}, "messages"),
]


@pytest.mark.parametrize("what,body,words", BAD_CHAT, ids=[b[0] for b in BAD_CHAT])
def test_bad_chat_requests_get_400(client, what, body, words):
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"]


def test_oversized_body_unknown_route_and_wrong_method(client):
    r = client.post("/v1/completions", content=b'{"prompt": "' + b"a" * (2 << 20) + b'"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and "bytes" in r.json()["error"]["message"]
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and "/v1/completions" in r.json()["error"]["message"]
    r = client.get("/v1/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_the_server_still_answers_after_bad_requests(client):
    for _ in range(3):
        client.post("/v1/completions", content=b"{", headers={"content-type": "application/json"})
    r = client.post("/v1/completions", json={"prompt": "ok", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_serve_command_starts_answers_and_stops():
    with ServerProcess(["--tiny", "--threads", "1"]) as server:
        assert server.url.startswith("http://127.0.0.1:")
        r = httpx.post(server.url + "/v1/completions",
                       json={"prompt": "hi", "max_tokens": 3, "model": "tiny"}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert server.process.poll() is not None  # stopped


def test_an_engine_failure_is_reported_and_the_server_goes_on(tiny):
    engine = Engine(*tiny, num_blocks=32, block_size=8)
    real_step, calls = engine.step, []

    def flaky_step():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real_step()

    engine.step = flaky_step
    with ServerThread(engine, "tiny") as server:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.post("/v1/completions", json={"prompt": "ab", "max_tokens": 3})
            assert r.status_code == 500 and "boom" in r.json()["error"]["message"]
            assert r.json()["error"]["type"] == "server_error" and "Traceback" not in r.text
            r = c.post("/v1/completions", json={"prompt": "ab", "max_tokens": 3})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        assert wait_until(lambda: engine.blocks.num_free == engine.blocks.num_blocks)


def test_whole_answers_survive_steps_slower_than_the_disconnect_poll(tiny):
    """The handler wakes every second to look for a hung-up client; that must not end a request
    whose engine steps are slow (a big model on a busy CPU)."""
    engine = Engine(*tiny, num_blocks=32, block_size=8)
    real_step = engine.step

    def slow_step():
        time.sleep(0.6)
        return real_step()

    engine.step = slow_step
    with ServerThread(engine, "tiny") as server:
        r = httpx.post(server.url + "/v1/completions", timeout=60,
                       json={"prompt": "slow", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3
