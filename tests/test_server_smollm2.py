"""The server with the real model (SmolLM2-135M, short answers) on 127.0.0.1: the chat template is
the model's own, greedy answers equal `minillm.generate` on the same prompt, and a streamed answer
in Chinese (characters of several bytes, split across tokens) joins up to the whole answer."""

import json

import httpx
import pytest

import minillm
from minillm.engine import Engine
from minillm.server import ServerThread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(gguf_path):
    return minillm.load("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def server(smollm2):
    with ServerThread(Engine(*smollm2, num_blocks=64), "smollm2-135m") as running:
        yield running


def test_chat_answer_equals_generate_on_the_chat_template(server, smollm2):
    model, tokenizer = smollm2
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
        "model": "smollm2-135m", "messages": messages, "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    prompt = tokenizer.apply_chat_template(messages)
    want = minillm.generate(model, tokenizer, prompt, max_new_tokens=8)
    assert body["choices"][0]["message"]["content"] == want.text
    assert body["usage"]["prompt_tokens"] == len(tokenizer.encode(prompt))
    assert body["usage"]["completion_tokens"] == len(want.token_ids)


def test_streamed_chinese_joins_up_to_the_whole_answer(server):
    body = {"prompt": "你好，世界！今天", "max_tokens": 10, "temperature": 0}
    whole = httpx.post(server.url + "/v1/completions", json=body, timeout=120).json()
    pieces = []
    with httpx.stream("POST", server.url + "/v1/completions", timeout=120,
                      json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces.append(json.loads(line[6:])["choices"][0]["text"])
    assert "".join(pieces) == whole["choices"][0]["text"]
    # a character split across tokens is sent once it is whole: fewer events than tokens, and no
    # half character, except at the very end when max_tokens cuts one (the engine's rule)
    assert len([p for p in pieces if p]) < whole["usage"]["completion_tokens"]
    assert all("\ufffd" not in p for p in pieces[:-1])
