"""What the server does with fields beyond OpenAI's, as evaluation harnesses send them: vLLM's
sampling fields the engine implements are honoured (min_p, min_tokens, any number of stop strings
up to 64), a field the server does not know is ignored as vLLM ignores it but named in the
answer's X-Minillm-Ignored-Fields header, and vLLM's /tokenize and /detokenize read the prompt as
the completions do. On the tiny random Llama over real HTTP."""

import logging

import httpx
import pytest
import torch

import minillm
from minillm.model.toy import tiny_model
from minillm.decoding import MinNewTokensProcessor
from minillm.engine import Engine
from minillm.tools.server import ServerThread
from test_server import ChatLetters


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, _ = tiny_model()
    return model, ChatLetters()


@pytest.fixture(scope="module")
def server(tiny):
    with ServerThread(Engine(*tiny, num_blocks=64, block_size=8, max_num_seqs=4),
                      "tiny") as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_an_unknown_field_is_ignored_named_in_a_header_and_logged_once(client, tiny, caplog):
    body = {"prompt": "abc", "max_tokens": 5, "temperature": 0, "logit_bias_mode": "x",
            "truncate_prompt_tokens": 3}
    with caplog.at_level(logging.WARNING, logger="minillm.server"):
        first = client.post("/v1/completions", json=body)
        second = client.post("/v1/completions", json=body)
    assert first.status_code == second.status_code == 200, first.text
    assert first.headers["x-minillm-ignored-fields"] == "logit_bias_mode, truncate_prompt_tokens"
    want = minillm.generate(*tiny, "abc", max_new_tokens=5).text
    assert first.json()["choices"][0]["text"] == want
    said = [r.getMessage() for r in caplog.records if "ignoring the request field" in r.message]
    assert len(said) == 2, said  # each name once, not again for the second request
    plain = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 2})
    assert "x-minillm-ignored-fields" not in plain.headers
    chat = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "b"}], "max_tokens": 2, "num_beams": 1,
        "use_beam_search": False, "stream": True, "best_of_n": 2})
    assert chat.status_code == 200 and chat.headers["x-minillm-ignored-fields"] == "best_of_n"


def test_five_stop_strings_are_taken_as_lm_eval_sends_them(client, tiny):
    text = minillm.generate(*tiny, "abc", max_new_tokens=12).text
    stop = ["\n", ".", "Q:", "</s>", text[4:6]]
    r = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 12,
                                              "temperature": 0, "stop": stop})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == text[:text.index(text[4:6])]


def test_min_tokens_holds_the_end_of_sequence_back():
    scores = torch.zeros(1, 6)
    hold = MinNewTokensProcessor(3, eos_token_ids=[2, 5], prompt_length=4)
    held = hold(torch.zeros(1, 6, dtype=torch.long), scores)   # 2 generated: held back
    assert held[0, 2] == held[0, 5] == -torch.inf and held[0, :2].eq(0).all()
    assert hold(torch.zeros(1, 7, dtype=torch.long), scores).eq(0).all()  # 3 generated: free
    assert MinNewTokensProcessor(3, [], prompt_length=4)(
        torch.zeros(1, 5, dtype=torch.long), scores).eq(0).all()  # ignore_eos: nothing to hold
    with pytest.raises(ValueError, match="min_new_tokens"):
        MinNewTokensProcessor(-1, [2])


def test_min_p_samples_as_generate_does(client, tiny):
    body = {"prompt": "abc", "max_tokens": 8, "temperature": 0.9, "min_p": 0.2, "seed": 5}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    want = minillm.generate(*tiny, "abc", max_new_tokens=8, do_sample=True, temperature=0.9,
                            min_p=0.2, seed=5).text
    assert r.json()["choices"][0]["text"] == want


def test_tokenize_and_detokenize_read_the_prompt_as_the_completions_do(client, tiny):
    _, tok = tiny
    r = client.post("/tokenize", json={"prompt": "abcab", "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok.encode("abcab") and body["count"] == 5
    assert body["token_strs"] == list("abcab") and body["max_model_len"] > 0
    usage = client.post("/v1/completions", json={"prompt": "abcab", "max_tokens": 1}).json()
    assert usage["usage"]["prompt_tokens"] == body["count"]
    chat = client.post("/tokenize", json={"messages": [{"role": "user", "content": "bc"}],
                                          "add_generation_prompt": False}).json()
    assert chat["tokens"] == tok.encode("ubcz")
    assert client.post("/tokenize", json={"prompt": ""}).json()["count"] == 0
    back = client.post("/detokenize", json={"tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": "abcab"}


@pytest.mark.parametrize("path, body, words", [
    ("/tokenize", {}, "give prompt (a string) or messages"),
    ("/tokenize", {"prompt": "ab", "messages": [{"role": "user", "content": "b"}]},
     "one of them"),
    ("/tokenize", {"prompt": "ab", "model": "gpt-4"}, "does not exist"),
    ("/detokenize", {"tokens": [1, 10**6]}, "outside the vocabulary"),
    ("/detokenize", {"tokens": "ab"}, "tokens"),
])
def test_the_tokenizer_routes_refuse_what_they_cannot_read(client, path, body, words):
    r = client.post(path, json=body)
    assert r.status_code in (400, 404), r.text
    assert words in r.json()["error"]["message"]


def test_tokenizer_info_says_what_a_client_needs_to_tokenize_as_the_server(client, tiny):
    info = client.get("/tokenizer_info").json()
    model, tok = tiny
    assert info["tokenizer_class"] == "ChatLetters"
    assert info["vocab_size"] == model.config.vocab_size and info["model_max_length"] > 0
    eos = getattr(tok, "eos_token_id", None)
    assert info["eos_token"] == (None if eos is None else tok.decode([eos]))
