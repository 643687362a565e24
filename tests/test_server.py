"""The OpenAI-compatible server over real HTTP on 127.0.0.1, against a tiny random Llama: answers
equal the model run alone, streaming gives the same text, concurrent clients share the engine's
batch, a client that hangs up frees its blocks, and bad requests get 4xx with OpenAI's error body.
Then the API's wider features: log-probabilities (both shapes), echo, n samples (streamed too),
penalties, JSON response formats, /metrics, and bad values of each, which leave the requests
already running untouched. Every server is stopped when its test ends, also when it fails.
tests/test_server_sdk.py drives the same server through the official openai package."""

import json
import threading
import time

import httpx
import pytest
import torch

import minillm
from minillm.engine import Engine
from minillm.model.toy import CharTokenizer, LetterTokenizer, tiny_model
from minillm.tools.server import ServerProcess, ServerThread



class ChatLetters(LetterTokenizer):
    """The toy tokenizer with a chat template (the letters of each message, roles as marks)."""

    def apply_chat_template(self, messages, add_generation_prompt=True):
        text = "".join(f"{m['role'][0]}{m['content']}z" for m in messages)
        return text + ("a" if add_generation_prompt else "")


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
    from minillm.tools.cli import build_parser

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
    ("huge max_tokens", {"prompt": "x", "max_tokens": 10**15}, 400, "at most 511"),
    ("max_new_tokens, another server's name", {"prompt": "x", "max_new_tokens": 5}, 400,
     "max_tokens"),
    ("num_beams above 1", {"prompt": "x", "num_beams": 4}, 400, "beam search is not offered"),
    ("do_sample", {"prompt": "x", "do_sample": False}, 400, "temperature 0"),
    ("min_tokens above max_tokens", {"prompt": "x", "max_tokens": 3, "min_tokens": 5}, 400,
     "min_tokens=5"),
    ("min_p above 1", {"prompt": "x", "temperature": 1, "min_p": 1.5}, 400, "min_p"),
    ("temperature too high", {"prompt": "x", "temperature": 7}, 400, "temperature"),
    ("stream as a string", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("missing prompt", {"max_tokens": 4}, 400, "prompt is required"),
    ("empty prompt", {"prompt": ""}, 400, "empty"),
    ("token id out of the vocabulary", {"prompt": [1, 64]}, 400, "outside the vocabulary"),
    ("prompt longer than the context", {"prompt": "a" * 600}, 400, "context window"),
    ("a streamed batch of prompts", {"prompt": ["ab", "cd"], "stream": True}, 400,
     "stream: false"),
    ("a list of objects as the prompt", {"prompt": [{"text": "x"}]}, 400,
     "a list of lists of token ids"),
    ("an empty prompt in a batch", {"prompt": [[3, 4], []]}, 400, "prompt 1 of the batch"),
    ("n zero", {"prompt": "x", "n": 0}, 400, "n: Input should be greater than or equal to 1"),
    ("n above the limit", {"prompt": "x", "n": 9}, 400, "limit of 8 samples"),
    ("too many stop strings", {"prompt": "x", "stop": [f"s{i}" for i in range(65)]}, 400,
     "up to 64"),
    ("an empty stop string", {"prompt": "x", "stop": ["a", ""]}, 400, "non-empty"),
    ("presence_penalty above 2", {"prompt": "x", "presence_penalty": 2.5}, 400,
     "presence_penalty"),
    ("logprobs above 20", {"prompt": "x", "logprobs": 21}, 400, "logprobs"),
    ("max_tokens 0 without echo", {"prompt": "x", "max_tokens": 0}, 400, "0 only with echo"),
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


def slow_engine(tiny, seconds: float) -> Engine:
    """An engine whose every step first waits `seconds` (a big model on a busy CPU)."""
    engine = Engine(*tiny, num_blocks=32, block_size=8)
    real_step = engine.step

    def slow_step():
        time.sleep(seconds)
        return real_step()

    engine.step = slow_step
    return engine


def test_whole_answers_survive_steps_slower_than_the_disconnect_poll(tiny):
    """The handler wakes every second to look for a hung-up client; that must not end a request
    whose engine steps are slow (a big model on a busy CPU)."""
    with ServerThread(slow_engine(tiny, 0.6), "tiny") as server:
        r = httpx.post(server.url + "/v1/completions", timeout=60,
                       json={"prompt": "slow", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3


# --- log-probabilities, echo, n, penalties, JSON, metrics ----------------------------------------

def raw_logprobs(tiny, ids) -> torch.Tensor:
    """log_softmax of the model's logits at every position of `ids`, the model run whole."""
    with torch.inference_mode():
        return torch.log_softmax(tiny[0](torch.tensor([ids]))[0].float(), dim=-1)


def test_completion_logprobs_come_in_the_legacy_shape(client, tiny):
    r = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 6, "logprobs": 2,
                                             "temperature": 0.8, "seed": 3, "ignore_eos": True})
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    model, tok = tiny  # the same seed picks the same tokens (their ids: letters repeat at 26)
    tokens = minillm.generate(model, tok, "abc", max_new_tokens=6, do_sample=True,
                              temperature=0.8, seed=3, ignore_eos=True).token_ids
    assert lp["tokens"] == list(choice["text"]) == [tok.decode([t]) for t in tokens]
    assert lp["text_offset"] == list(range(6))
    want = raw_logprobs(tiny, tok.encode("abc") + tokens)
    for i, (token, value, top) in enumerate(zip(tokens, lp["token_logprobs"],
                                                lp["top_logprobs"])):
        row = want[2 + i]  # raw: the temperature changes the pick, not the numbers
        assert value == pytest.approx(row[token].item(), abs=1e-4)
        best = row.topk(2).indices.tolist()
        assert set(top) == {ChatLetters().decode([t]) for t in best + [token]}
        assert top[lp["tokens"][i]] == pytest.approx(value)


def test_echo_with_max_tokens_zero_scores_the_prompt(client, tiny):
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 0, "echo": True,
                                             "logprobs": 1})
    body = r.json()
    choice = body["choices"][0]
    assert choice["text"] == "hello" and body["usage"]["completion_tokens"] == 0
    lp = choice["logprobs"]
    assert lp["tokens"] == list("hello") and lp["text_offset"] == [0, 1, 2, 3, 4]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    ids = ChatLetters().encode("hello")
    want = raw_logprobs(tiny, ids)
    assert lp["token_logprobs"][1:] == pytest.approx(
        [want[i - 1, ids[i]].item() for i in range(1, 5)], abs=1e-4)
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3, "echo": True,
                                             "temperature": 0, "ignore_eos": True})
    assert r.json()["choices"][0]["text"] == "hello" + alone(tiny, "hello", 3).text


def test_chat_logprobs_list_each_token_with_its_bytes_and_alternatives(client, tiny):
    messages = [{"role": "user", "content": "hi"}]
    r = client.post("/v1/chat/completions", json={
        "messages": messages, "max_completion_tokens": 5, "logprobs": True, "top_logprobs": 3,
        "temperature": 0, "ignore_eos": True})
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == choice["message"]["content"]
    assert all(c["bytes"] == list(c["token"].encode()) for c in content)
    assert all(len(c["top_logprobs"]) == 3 for c in content)
    assert all(c["top_logprobs"][0]["logprob"] >= c["top_logprobs"][1]["logprob"]
               for c in content)
    assert content[0]["token"] == content[0]["top_logprobs"][0]["token"]  # greedy: the best
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2,
                                                  "logprobs": True})
    assert [c["top_logprobs"] for c in r.json()["choices"][0]["logprobs"]["content"]] == [[], []]


def test_n_choices_whole_and_streamed_agree_and_name_their_index(client, tiny):
    body = {"prompt": "abc", "max_tokens": 8, "n": 3, "temperature": 1.0, "seed": 11,
            "ignore_eos": True, "logprobs": 0}
    whole = client.post("/v1/completions", json=body).json()
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert whole["usage"]["completion_tokens"] == 24
    model, tok = tiny
    for c in whole["choices"]:
        want = minillm.generate(model, tok, "abc", max_new_tokens=8, do_sample=True,
                                temperature=1.0, seed=11 + c["index"], ignore_eos=True)
        assert c["text"] == want.text
    with client.stream("POST", "/v1/completions", json={
            **body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        events = sse(r)
    assert events[-1] == "[DONE]" and events[-2]["usage"] == whole["usage"]
    texts, offsets = {}, {}
    for event in events[:-2]:
        (choice,) = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        offsets.setdefault(choice["index"], []).extend(choice["logprobs"]["text_offset"])
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    assert all(o == list(range(8)) for o in offsets.values())


def test_chat_n_streams_start_each_choice_with_the_role(client):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2,
            "temperature": 0.9, "seed": 2, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        events = sse(r)[:-1]
    firsts = [e["choices"][0] for e in events[:2]]
    assert [(f["index"], f["delta"]) for f in firsts] == \
        [(0, {"role": "assistant", "content": ""}), (1, {"role": "assistant", "content": ""})]
    ends = [e["choices"][0] for e in events if e["choices"][0]["finish_reason"]]
    assert sorted(e["index"] for e in ends) == [0, 1]


def test_penalties_reach_the_engine(client, tiny):
    model, tok = tiny
    body = {"prompt": "abab", "max_tokens": 10, "temperature": 0, "ignore_eos": True,
            "presence_penalty": 1.2, "frequency_penalty": 0.8}
    got = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    want = minillm.generate(model, tok, "abab", max_new_tokens=10, ignore_eos=True,
                            presence_penalty=1.2, frequency_penalty=0.8)
    assert got == want.text != alone(tiny, "abab", 10).text


def test_max_completion_tokens_is_max_tokens_by_its_newer_name(client):
    body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    r = client.post("/v1/chat/completions", json={**body, "max_completion_tokens": 4})
    assert r.json()["usage"]["completion_tokens"] == 4
    r = client.post("/v1/chat/completions", json={**body, "max_completion_tokens": 4,
                                                  "max_tokens": 4})
    assert r.status_code == 200
    r = client.post("/v1/chat/completions", json={**body, "max_completion_tokens": 600})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_completion_tokens"


def metric(text: str, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels} in /metrics")


def test_metrics_count_tokens_and_requests_in_prometheus_text(server, client):
    before = client.get("/metrics")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    tokens = metric(before.text, "minillm_generation_tokens_total")
    ttft = metric(before.text, "minillm_time_to_first_token_seconds_count")
    client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 5, "n": 2,
                                         "ignore_eos": True})
    assert wait_until(lambda: not server.loop.engine.has_unfinished())
    after = client.get("/metrics").text
    assert metric(after, "minillm_generation_tokens_total") == tokens + 10
    assert metric(after, "minillm_time_to_first_token_seconds_count") == ttft + 2
    assert metric(after, "minillm_time_per_output_token_seconds_count") >= 2
    assert metric(after, "minillm_num_requests_running") == 0
    assert metric(after, "minillm_num_requests_waiting") == 0
    assert metric(after, "minillm_kv_blocks_used") == 0
    assert metric(after, "minillm_kv_blocks_total") == 128
    assert metric(after, "minillm_request_success_total", finished_reason="length",
                  model_name="tiny") >= 2


def test_metrics_see_a_running_request_and_its_cancellation(tiny):
    engine = slow_engine(tiny, 0.05)
    with ServerThread(engine, "tiny") as server, \
            httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json={
                "prompt": "abcdefghijklmnopq", "max_tokens": 200, "stream": True,
                "ignore_eos": True}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # held: a dropped line iterator closes the connection
            next(line for line in lines if line.startswith("data: "))
            text = c.get("/metrics").text
        assert metric(text, "minillm_num_requests_running") == 1
        assert metric(text, "minillm_kv_blocks_used") == 3  # 17 prompt tokens, blocks of 8
        assert metric(text, "minillm_prompt_tokens_total") == 17
        assert wait_until(lambda: 'finished_reason="abort"' in c.get("/metrics").text)
        text = c.get("/metrics").text  # the client hung up: its request was cancelled
        assert metric(text, "minillm_request_success_total", finished_reason="abort") == 1
        assert metric(text, "minillm_kv_blocks_used") == 0


CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
SCHEMA_WITH_PATTERN = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
    "type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}}
BAD_FEATURE_VALUES = [
    (CHAT, {"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
    (CHAT, {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
    (COMPLETIONS, {"logprobs": 21}, "logprobs", "less than or equal to 20"),
    (CHAT, {"n": 0}, "n", "greater than or equal to 1"),
    (COMPLETIONS, {"n": 9}, "n", "limit of 8"),
    (CHAT, {"echo": True}, "echo", "use /v1/completions"),
    (CHAT, {"response_format": SCHEMA_WITH_PATTERN}, "response_format",
     "'pattern' at properties.a"),
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "needs json_schema"),
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "required": ["a"]}}}}, "response_format",
     "'required' without 'properties'"),
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"anyOf": [{"type": "object"},
                                                        {"type": "object"}]}}}}}},
     "response_format", "'anyOf' at properties.a with alternatives that can begin alike "
                        "(object and object"),
    (CHAT, {"response_format": {"type": "xml"}}, "response_format", "response_format.type"),
    (CHAT, {"presence_penalty": -2.5}, "presence_penalty", "from -2.0 to 2.0"),  # the config's
    (COMPLETIONS, {"frequency_penalty": 3}, "frequency_penalty", "from -2.0 to 2.0"),  # check
    (CHAT, {"max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens", "disagree"),
    (CHAT, {"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos",
     "ignore_eos"),
    (CHAT, {"response_format": {"type": "json_object"}, "min_tokens": 4}, "min_tokens",
     "min_tokens cannot go with a JSON response_format"),
]


def bad_request(client, route, extra):
    base = {"messages": [{"role": "user", "content": "hi"}]} if route == CHAT else \
        {"prompt": "hi"}
    return client.post(route, json={**base, "max_tokens": 3, **extra} if "max_tokens" not in
                       extra and "max_completion_tokens" not in extra else {**base, **extra})


@pytest.mark.parametrize("route,extra,param,words", BAD_FEATURE_VALUES,
                         ids=[f"{r.split('/')[-1]}-{p}-{i}" for i, (r, _, p, _) in
                              enumerate(BAD_FEATURE_VALUES)])
def test_bad_feature_values_get_400_naming_the_field(client, route, extra, param, words):
    r = bad_request(client, route, extra)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error
    assert error["type"] == "invalid_request_error" and error["code"] is None


def test_bad_requests_leave_the_running_batch_alone(server, tiny):
    """A long request streams while every bad request above arrives: its text is still the
    model's own, and no block is lost."""
    engine = server.loop.engine
    got = {}

    def long_stream():
        with httpx.Client(base_url=server.url, timeout=120) as c:
            with c.stream("POST", COMPLETIONS, json={
                    "prompt": "steady", "max_tokens": 60, "temperature": 0, "stream": True,
                    "ignore_eos": True}) as r:
                got["text"] = "".join(e["choices"][0]["text"] for e in sse(r)[:-1])

    worker = threading.Thread(target=long_stream)
    worker.start()
    assert wait_until(lambda: engine.num_running() == 1)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for route, extra, _, _ in BAD_FEATURE_VALUES:
            assert bad_request(c, route, extra).status_code == 400
    worker.join(120)
    assert got["text"] == alone(tiny, "steady", 60).text
    assert wait_until(lambda: engine.blocks.num_free == engine.blocks.num_blocks)


@pytest.fixture(scope="module")
def json_server():
    """A tiny random model over CharTokenizer (JSON's characters): it can write JSON."""
    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    with ServerThread(Engine(model, tok, num_blocks=256, block_size=8), "json") as running:
        yield running


def test_a_pydantic_schema_with_optional_and_ref_is_followed(json_server):
    """Optional fields (anyOf with null) and a nested model ($ref into $defs), as the openai
    SDK's `response_format=SomeModel` sends them."""
    import jsonschema
    from typing import Optional

    from pydantic import BaseModel, Field

    class Toy(BaseModel):
        name: str = Field(max_length=6)

    class Pet(BaseModel):
        age: Optional[int]
        toy: Optional[Toy] = None

    schema = Pet.model_json_schema()
    r = httpx.post(json_server.url + CHAT, timeout=120, json={
        "messages": [{"role": "user", "content": "a pet"}], "max_tokens": 200, "n": 3,
        "seed": 2, "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "pet", "schema": schema}}})
    assert r.status_code == 200, r.text
    for c in r.json()["choices"]:  # every string bounded: every answer ends in 200 tokens
        assert c["finish_reason"] == "stop", c
        jsonschema.validate(json.loads(c["message"]["content"]), schema)


PET = {"type": "object", "properties": {"name": {"type": "string"},
                                        "age": {"type": "integer"},
                                        "color": {"enum": ["red", "green"]}},
       "required": ["name", "age", "color"]}


@pytest.mark.parametrize("fmt", [
    {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}},
    {"type": "json_object"}], ids=["json_schema", "json_object"])
def test_response_format_makes_every_choice_valid_json(json_server, fmt):
    import jsonschema

    r = httpx.post(json_server.url + CHAT, timeout=120, json={
        "messages": [{"role": "user", "content": "a pet"}], "max_tokens": 300, "n": 4,
        "seed": 1, "response_format": fmt})
    assert r.status_code == 200, r.text
    choices = [c for c in r.json()["choices"] if c["finish_reason"] == "stop"]
    assert len(choices) >= 3  # a random model: one may run out of tokens inside a string
    for c in choices:
        value = json.loads(c["message"]["content"])
        if fmt["type"] == "json_schema":
            jsonschema.validate(value, PET)
        assert isinstance(value, dict)
