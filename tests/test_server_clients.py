"""The server as clients other than the OpenAI SDK use it: lm-evaluation-harness's
`local-completions` requests (batches of token-id prompts, echo and logprobs to score a
continuation), OpenAI's newer chat shapes (the developer role, content as a list of parts), and
an API key. A tiny random model serves; the answers are compared with the model run alone."""

import threading

import httpx
import pytest
import torch

import minillm
from minillm.engine import Engine
from minillm.model.toy import LetterTokenizer, tiny_model
from minillm.tools.server import ServerThread


class ChatLetters(LetterTokenizer):
    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "".join(f"{m['role'][0]}{m['content']}z" for m in messages) + "a"


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, _ = tiny_model()
    return model, ChatLetters()


@pytest.fixture(scope="module")
def server(tiny):
    with ServerThread(Engine(*tiny, num_blocks=128, block_size=8, max_num_seqs=8),
                      "tiny") as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def alone(tiny, prompt, n):
    model, tok = tiny
    return minillm.generate(model, tok, prompt, max_new_tokens=n)


# --- prompts as token ids, and batches of prompts ----------------------------------------------

def test_lm_eval_loglikelihood_request_scores_each_prompt_of_the_batch(client, tiny):
    """lm_eval's LocalCompletionsAPI._create_payload (generate=False) sends exactly this body with
    tokenized_requests=True (its default), and its parse_logprobs reads the choices so."""
    model, tok = tiny
    contexts, continuations = [tok.encode("abc"), tok.encode("hello")], \
        [tok.encode("de"), tok.encode("x")]
    prompts = [c + k for c, k in zip(contexts, continuations)]
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompts,
                                             "temperature": 0, "max_tokens": 1, "logprobs": 1,
                                             "seed": 1234, "echo": True})
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in choices] == [0, 1]
    for choice, ctx, prompt in zip(choices, contexts, prompts):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(prompt) + 1  # the prompt, then one new token
        scores = lp["token_logprobs"][len(ctx):-1]
        with torch.no_grad():
            logits = model(torch.tensor([prompt]))[0].float()
        want = torch.log_softmax(logits, -1)
        assert scores == pytest.approx(
            [want[i - 1, prompt[i]].item() for i in range(len(ctx), len(prompt))], abs=1e-4)
        tops = lp["top_logprobs"][len(ctx):-1]  # lm_eval's is_greedy compares their best
        assert lp["tokens"][len(ctx):-1] == [tok.decode([t]) for t in prompt[len(ctx):]]
        for i, top, token, score in zip(range(len(ctx), len(prompt)), tops,
                                        lp["tokens"][len(ctx):-1], scores):
            assert top[token] == pytest.approx(score, abs=1e-6)
            assert max(top.values()) == pytest.approx(want[i - 1].max().item(), abs=1e-4)


def test_lm_eval_generate_request_answers_each_prompt_in_order(client, tiny):
    """lm_eval's generate_until payload: nested token ids, greedy, stop strings, a seed."""
    _, tok = tiny
    texts = ["abc", "hello", "xyz"]
    r = client.post("/v1/completions", json={
        "model": "tiny", "prompt": [tok.encode(t) for t in texts], "max_tokens": 4,
        "temperature": 0, "stop": ["\n\n"], "seed": 1234})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["text"] for c in body["choices"]] == [alone(tiny, t, 4).text for t in texts]
    assert body["usage"]["prompt_tokens"] == sum(len(t) for t in texts)
    assert body["usage"]["completion_tokens"] == sum(
        len(alone(tiny, t, 4).token_ids) for t in texts)


def test_a_batch_of_strings_with_n_samples_orders_choices_by_prompt(client, tiny):
    r = client.post("/v1/completions", json={"prompt": ["ab", "cd"], "n": 2, "max_tokens": 3,
                                             "temperature": 0})
    assert r.status_code == 200, r.text
    texts = [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]
    assert texts == [alone(tiny, "ab", 3).text] * 2 + [alone(tiny, "cd", 3).text] * 2


def test_a_bad_prompt_in_a_batch_is_refused_before_any_runs(server, client):
    before = server.loop.stats()["completed"]
    r = client.post("/v1/completions", json={"prompt": [[3, 4], [1, 64]], "max_tokens": 2})
    assert r.status_code == 400 and "outside the vocabulary" in r.json()["error"]["message"]
    assert server.loop.stats()["completed"] == before


@pytest.mark.parametrize("prompt,kind", [
    (5, "int"), ([[1, 2], "ab"], "a list of: list of int, str"),
    ([1.5, 2], "a list of: float, int"), ([], "an empty list"),
    ([[1, "a"]], "a list of: list of int and str"), ({"ids": [1]}, "dict")])
def test_prompts_of_other_shapes_are_refused_naming_the_allowed_ones(client, prompt, kind):
    r = client.post("/v1/completions", json={"prompt": prompt})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "prompt" and error["type"] == "invalid_request_error"
    assert "a string, a list of strings, a list of token ids" in error["message"]
    assert f"got {kind}" in error["message"], error["message"]


# --- chat: the developer role and content parts --------------------------------------------------

def chat(client, messages):
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4,
                                                  "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_developer_role_reaches_the_template_as_system(client):
    user = {"role": "user", "content": "hi"}
    assert chat(client, [{"role": "developer", "content": "be brief"}, user]) == \
        chat(client, [{"role": "system", "content": "be brief"}, user])


def test_text_parts_are_joined_with_newlines(client):
    parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]
    assert chat(client, [{"role": "user", "content": parts}]) == \
        chat(client, [{"role": "user", "content": "hi\nthere"}])


@pytest.mark.parametrize("part,words", [
    ({"type": "image_url", "image_url": {"url": "x"}}, "type 'image_url'"),
    ({"type": "input_audio", "input_audio": {}}, "type 'input_audio'"),
    ({"text": "no type"}, "type None"),
    ({"type": "text", "text": 5}, "must be {\"type\": \"text\""),
    ({"type": "text", "text": "x", "extra": 1}, "must be {\"type\": \"text\""),
])
def test_other_content_parts_are_refused_with_the_type_named(client, part, words):
    r = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, part]}]})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "part 1" in message and words in message, message


# --- the API key -------------------------------------------------------------------------------

def test_api_key_guards_the_v1_routes_and_leaves_health_and_metrics_open(tiny):
    engine = Engine(*tiny, num_blocks=32, block_size=8, max_num_seqs=2)
    with ServerThread(engine, "tiny", api_key="sk-test") as server, \
            httpx.Client(base_url=server.url, timeout=60) as c:
        body = {"prompt": "ab", "max_tokens": 2}
        for headers, words in [({}, "no API key given"),
                               ({"Authorization": "Bearer sk-wrong"}, "wrong"),
                               ({"Authorization": "sk-test"}, "wrong")]:
            r = c.post("/v1/completions", json=body, headers=headers)
            assert r.status_code == 401, r.text
            error = r.json()["error"]
            assert words in error["message"] and error["code"] == "invalid_api_key"
            assert error["type"] == "invalid_request_error"
        assert c.get("/v1/models").status_code == 401
        assert c.get("/health").status_code == 200
        assert c.get("/metrics").status_code == 200
        ok = {"Authorization": "Bearer sk-test"}
        assert c.post("/v1/completions", json=body, headers=ok).status_code == 200
        assert c.get("/v1/models", headers=ok).json()["data"][0]["id"] == "tiny"


def test_an_empty_api_key_is_refused(tiny):
    engine = Engine(*tiny, num_blocks=8, block_size=8, max_num_seqs=1)
    with pytest.raises(ValueError, match="API key is empty"):
        ServerThread(engine, "tiny", api_key=" ")


# --- /metrics: vLLM's names and labels ---------------------------------------------------------

def metric(text: str, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels} in /metrics")


def test_metrics_carry_vllms_names_the_model_name_and_count_preemptions_and_cache_hits(tiny):
    """A pool of 6 blocks of 8 cannot hold two requests of 8 + 30 tokens (5 blocks each): one is
    preempted. The same prompt sent again finds its full blocks in the prefix cache. The engine's
    first step waits until both long requests are queued: on a busy machine the first could
    otherwise finish before the second arrives, and nothing would be preempted."""
    engine = Engine(*tiny, num_blocks=6, block_size=8, max_num_seqs=4)
    both_queued, added = threading.Event(), []
    add_request, step = engine.add_request, engine.step

    def counted_add_request(*args, **kwargs):
        request = add_request(*args, **kwargs)
        added.append(request)
        if len(added) >= 2:
            both_queued.set()
        return request

    def step_once_both_are_queued():
        both_queued.wait(timeout=60)
        return step()

    engine.add_request, engine.step = counted_add_request, step_once_both_are_queued
    with ServerThread(engine, "tiny-model") as server, \
            httpx.Client(base_url=server.url, timeout=60) as c:
        body = {"prompt": "abcdefgh", "max_tokens": 30, "ignore_eos": True, "temperature": 0}
        threads = [threading.Thread(target=c.post, args=("/v1/completions",),
                                    kwargs={"json": body}) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c.post("/v1/completions", json={**body, "max_tokens": 2,
                                        "prompt": "abcdefghijklmnopqr"})
        c.post("/v1/completions", json={**body, "max_tokens": 2,
                                        "prompt": "abcdefghijklmnopqr"})
        text = c.get("/metrics").text
        stats = engine.stats()
    name = {"model_name": "tiny-model"}
    assert stats["preemptions"] >= 1
    assert metric(text, "minillm_num_preemptions_total", **name) == stats["preemptions"]
    assert metric(text, "minillm_prefix_cache_queries_total", **name) == 8 + 8 + 18 + 18
    hits = metric(text, "minillm_prefix_cache_hits_total", **name)
    assert hits == stats["prefix_cache_hit_tokens"] and hits >= 16  # the repeat's two blocks
    assert metric(text, "minillm_e2e_request_latency_seconds_count", **name) == 4
    assert metric(text, "minillm_request_queue_time_seconds_count", **name) == 4
    assert metric(text, "minillm_request_queue_time_seconds_sum", **name) >= 0
    assert metric(text, "minillm_request_success_total", finished_reason="length", **name) == 4
    assert metric(text, "minillm_kv_cache_usage_perc", **name) == 0
    for line in text.splitlines():  # every sample names the model
        if line.startswith("minillm_"):
            assert 'model_name="tiny-model"' in line, line


def test_the_openai_sdks_parse_with_a_pydantic_model_gets_a_valid_object():
    """`client.chat.completions.parse(response_format=Model)`: the SDK sends the model's strict
    schema (anyOf for Optional, $ref into $defs for nested models and enums) and parses the
    answer back into the model."""
    import enum
    from typing import Optional

    import openai
    from pydantic import BaseModel, Field

    from minillm.model.toy import CharTokenizer

    class Color(str, enum.Enum):
        red = "red"
        green = "green"

    class Toy(BaseModel):
        name: str = Field(max_length=5)

    class Pet(BaseModel):
        age: Optional[int]
        color: Color
        toy: Optional[Toy]

    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    with ServerThread(Engine(model, tok, num_blocks=64, block_size=8), "json") as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        parse = getattr(client.chat.completions, "parse", None) or \
            client.beta.chat.completions.parse
        r = parse(model="json", messages=[{"role": "user", "content": "a pet"}],
                  response_format=Pet, max_tokens=200, seed=1, n=2)
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Pet)


def test_serve_reads_the_api_key_from_the_environment():
    from minillm.tools.server import ServerProcess

    with ServerProcess(["--tiny"], env={"MINILLM_API_KEY": "sk-env"}) as server:
        body = {"prompt": "ab", "max_tokens": 2}
        assert httpx.post(server.url + "/v1/completions", json=body).status_code == 401
        r = httpx.post(server.url + "/v1/completions", json=body, timeout=60,
                       headers={"Authorization": "Bearer sk-env"})
        assert r.status_code == 200, r.text
