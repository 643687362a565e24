"""The server driven by the official `openai` package, as users drive it: sync and async clients,
whole and streamed answers, chat and completions, n, log-probabilities, echo, penalties, seeds,
and errors raised as the SDK's own exceptions. A tiny random model serves (answers are nonsense,
shapes and numbers are what is checked); tests/test_server_smollm2.py does the same on SmolLM2."""

import asyncio
import json

import openai
import pytest
import torch

import minillm
from minillm.engine import Engine
from minillm.model.toy import CharTokenizer, LetterTokenizer, tiny_model
from minillm.tools.server import ServerThread


class ChatLetters(LetterTokenizer):
    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "".join(f"{m['role'][0]}{m['content']}z" for m in messages) + "a"


MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, _ = tiny_model(eos_token_ids=(5,))
    return model, ChatLetters(eos_token_ids=(5,))


@pytest.fixture(scope="module")
def server(tiny):
    with ServerThread(Engine(*tiny, num_blocks=128, block_size=8, max_num_seqs=8),
                      "tiny") as running:
        yield running


@pytest.fixture()
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def test_models_list_the_context_length(client):
    (card,) = client.models.list().data
    assert card.id == "tiny" and card.model_extra["max_model_len"] == 512


def test_chat_whole_and_streamed(client, tiny):
    model, tok = tiny
    whole = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6,
                                           temperature=0)
    want = minillm.generate(model, tok, tok.apply_chat_template(MESSAGES), max_new_tokens=6)
    assert whole.choices[0].message.content == want.text
    assert whole.usage.completion_tokens == len(want.token_ids)
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.text and chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_completions_with_n_logprobs_and_a_seed(client, tiny):
    model, tok = tiny
    r = client.completions.create(model="tiny", prompt="abc", max_tokens=5, n=3, seed=4,
                                  temperature=0.9, logprobs=2, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        want = minillm.generate(model, tok, "abc", max_new_tokens=5, do_sample=True,
                                temperature=0.9, seed=4 + c.index, ignore_eos=True)
        assert c.text == want.text and len(c.logprobs.token_logprobs) == 5
        assert all(len(top) <= 3 for top in c.logprobs.top_logprobs)
    assert r.usage.completion_tokens == 15


def test_echo_scores_a_prompt_as_evaluation_harnesses_do(client, tiny):
    model, tok = tiny
    r = client.completions.create(model="tiny", prompt="scoreme", max_tokens=0, echo=True,
                                  logprobs=1)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "scoreme" and lp.tokens == list("scoreme")
    assert lp.token_logprobs[0] is None
    ids = tok.encode("scoreme")
    with torch.inference_mode():
        want = torch.log_softmax(model(torch.tensor([ids]))[0], dim=-1)
    assert lp.token_logprobs[1:] == pytest.approx(
        [want[i - 1, ids[i]].item() for i in range(1, len(ids))], abs=1e-4)
    assert sum(lp.token_logprobs[1:]) < 0


def test_chat_logprobs_through_the_sdk(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4,
                                       logprobs=True, top_logprobs=2, temperature=0,
                                       extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    assert all(len(t.top_logprobs) == 2 and t.bytes == list(t.token.encode()) for t in content)


def test_streamed_n_choices_carry_their_index(client):
    stream = client.completions.create(model="tiny", prompt="abc", max_tokens=4, n=2, seed=1,
                                       temperature=1.0, stream=True,
                                       extra_body={"ignore_eos": True})
    texts = {}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert sorted(texts) == [0, 1] and all(len(t) == 4 for t in texts.values())


def test_async_client_many_requests_at_once(server, tiny):
    model, tok = tiny

    async def main():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused",
                                      max_retries=0) as c:
            async def one(prompt):
                r = await c.completions.create(model="tiny", prompt=prompt, max_tokens=5,
                                               temperature=0)
                return r.choices[0].text

            async def streamed(prompt):
                s = await c.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=5,
                    temperature=0, stream=True)
                return "".join([ch.choices[0].delta.content or "" async for ch in s
                                if ch.choices])

            return await asyncio.gather(*[one(p) for p in ("ab", "cd", "ef")],
                                        *[streamed(p) for p in ("gh", "ij")])

    results = asyncio.run(main())
    for prompt, text in zip(("ab", "cd", "ef"), results[:3]):
        assert text == minillm.generate(model, tok, prompt, max_new_tokens=5).text
    for prompt, text in zip(("gh", "ij"), results[3:]):
        chat = tok.apply_chat_template([{"role": "user", "content": prompt}])
        assert text == minillm.generate(model, tok, chat, max_new_tokens=5).text


@pytest.mark.parametrize("kwargs,param", [
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 25}, "top_logprobs"),
    ({"n": 0}, "n"),
    ({"n": 100}, "n"),
    ({"presence_penalty": 2.1}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"extra_body": {"echo": True}}, "echo"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"format": "date"}}}}}},
     "response_format"),
])
def test_bad_values_raise_the_sdks_bad_request_error(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, **kwargs)
    assert error.value.status_code == 400 and error.value.body["param"] == param


def test_an_unknown_model_is_the_sdks_not_found_error(client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x", max_tokens=1)


def test_json_schema_through_the_sdk():
    import jsonschema

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "size": {"enum": ["s", "m", "l"]}},
              "required": ["ok", "size"]}
    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    with ServerThread(Engine(model, tok, num_blocks=64, block_size=8), "json") as server, \
            openai.OpenAI(base_url=server.url + "/v1", api_key="unused") as c:
        r = c.chat.completions.create(
            model="json", messages=MESSAGES, max_tokens=100, n=3, seed=0,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "shirt", "schema": schema}})
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), schema)
