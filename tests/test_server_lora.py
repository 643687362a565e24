"""The server serves LoRA adapters by name, as vLLM's `--lora-modules` does: a request's `model`
names the model or one adapter, on both routes, streamed or not, and each answer equals what the
engine gives with that adapter directly (Engine(lora=) + add_request(adapter=)); /v1/models lists
each adapter under its model (`parent`); an unknown name is a 404 naming what was asked for and
what is served; the same prompt under two adapters shares no cached blocks; `minillm serve
--lora NAME=PATH` reads save_adapter's files, and a bad value stops it before it listens, with
the reason and no traceback."""

import json

import httpx
import pytest
import torch

from minillm.engine import Engine
from minillm.engine.lora import MultiLoRA, random_adapter, save_adapter
from minillm.model.toy import LetterTokenizer, tiny_model
from minillm.tools.cli import build_parser, main
from minillm.tools.server import ServerProcess, ServerThread, create_app, make_engine
from minillm.tools.server.options import parse_lora

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi there"}]


class ChatLetters(LetterTokenizer):
    """The toy tokenizer with a chat template (the letters of each message, roles as marks)."""

    def apply_chat_template(self, messages, add_generation_prompt=True):
        text = "".join(f"{m['role'][0]}{m['content']}z" for m in messages)
        return text + ("a" if add_generation_prompt else "")


def adapters_for(model) -> dict:
    return {"a": random_adapter(model, TARGETS, rank=4, seed=1, size=0.5),
            "b": random_adapter(model, TARGETS[2:], rank=4, seed=2, size=0.5)}


def lora_engine() -> Engine:
    """tiny_model() (make_engine's tiny model) with adapters a and b, in blocks of 4 tokens."""
    model, _ = tiny_model()
    return Engine(model, ChatLetters(), num_blocks=128, block_size=4, max_num_seqs=8,
                  lora=MultiLoRA(model, adapters_for(model)))


@pytest.fixture(scope="module")
def direct():
    """What the engine gives with an adapter, no server: a separate copy of the model, so that
    nothing it runs shares layers with the server's engine thread."""
    engine, seen = lora_engine(), {}

    def answer(prompt: str, adapter: str | None, n: int = 6) -> str:
        if (prompt, adapter, n) not in seen:
            rid = engine.add_request(prompt, adapter=adapter, max_new_tokens=n, ignore_eos=True)
            seen[prompt, adapter, n] = engine.run()[rid].text
        return seen[prompt, adapter, n]

    return answer


@pytest.fixture(scope="module")
def server():
    with ServerThread(lora_engine(), "tiny") as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def sse(response) -> list:
    return [json.loads(line[6:]) for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def ask(client, route: str, model: str | None, stream: bool, prompt: str = "abcab") -> tuple:
    """(text, the `model` each body or chunk names) of one greedy answer of 6 tokens."""
    body = {"max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": stream,
            **({"model": model} if model is not None else {}),
            **({"prompt": prompt} if route == COMPLETIONS else {"messages": MESSAGES})}
    pick = (lambda c: c.get("text", "")) if route == COMPLETIONS else \
        (lambda c: (c.get("delta") or c.get("message") or {}).get("content") or "")
    if not stream:
        r = client.post(route, json=body)
        assert r.status_code == 200, r.text
        return pick(r.json()["choices"][0]), {r.json()["model"]}
    with client.stream("POST", route, json=body) as r:
        assert r.status_code == 200
        chunks = sse(r)
    return "".join(pick(c["choices"][0]) for c in chunks), {c["model"] for c in chunks}


def test_models_lists_the_model_then_each_adapter_under_it(client):
    cards = client.get("/v1/models").json()["data"]
    assert [(c["id"], c["parent"]) for c in cards] == [("tiny", None), ("a", "tiny"),
                                                        ("b", "tiny")]
    assert all(c["object"] == "model" and c["max_model_len"] == 512 for c in cards)


def test_the_adapters_change_the_answer(direct):
    assert len({direct("abcab", name) for name in (None, "a", "b")}) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("route", [COMPLETIONS, CHAT], ids=["completions", "chat"])
@pytest.mark.parametrize("model", ["tiny", "a", "b", None])
def test_model_picks_the_adapter_and_answers_as_the_engine_does(client, direct, route, stream,
                                                                model):
    prompt = "abcab" if route == COMPLETIONS else ChatLetters().apply_chat_template(MESSAGES)
    text, named = ask(client, route, model, stream)
    assert text == direct(prompt, None if model in ("tiny", None) else model)
    assert named == {model or "tiny"}  # the answer names the adapter it ran


def test_the_same_prompt_under_two_adapters_shares_no_cached_blocks(client, direct):
    """14 letters: three full blocks of 4. Each name's second request finds its own three blocks;
    the first request under another name finds none, and answers with its own adapter."""
    prompt = "cabbagecabbage"

    def hits():
        return client.get("/health").json()["prefix_cache_hit_tokens"]

    for name, cached in [("a", 0), ("a", 12), ("b", 0), ("tiny", 0), ("b", 12), ("tiny", 12)]:
        before = hits()
        text, _ = ask(client, COMPLETIONS, name, False, prompt)
        assert hits() - before == cached, name
        assert text == direct(prompt, None if name == "tiny" else name), name
    assert len({direct(prompt, name) for name in (None, "a", "b")}) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("route", [COMPLETIONS, CHAT, "/tokenize"])
def test_an_unknown_model_is_a_404_naming_it_and_what_is_served(client, route, stream):
    body = {"model": "gpt-4", "stream": stream,
            **({"messages": MESSAGES} if route == CHAT else {"prompt": "abc"})}
    if route == "/tokenize":
        body.pop("stream")
    r = client.post(route, json=body)
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("not_found_error", "model",
                                                              "model_not_found")
    assert error["message"] == ("the model 'gpt-4' does not exist here; this server serves "
                                "'tiny' and its LoRA adapters 'a', 'b' (see /v1/models)")


def test_the_tokenizer_routes_take_an_adapter_name(client):
    r = client.post("/tokenize", json={"model": "b", "prompt": "abc"})
    assert r.status_code == 200 and r.json()["count"] == 3


def test_metrics_count_adapter_requests_under_the_model_name(client):
    before = client.get("/metrics").text
    ask(client, COMPLETIONS, "a", False)
    after = client.get("/metrics").text
    labels = {line.split('model_name="')[1].split('"')[0] for line in after.splitlines()
              if 'model_name="' in line}
    assert labels == {"tiny"}  # vLLM's labels: the served model's name, adapters included

    def generated(text):
        line = next(x for x in text.splitlines()
                    if x.startswith('minillm_generation_tokens_total{model_name="tiny"}'))
        return float(line.split()[-1])

    assert generated(after) - generated(before) == 6


def test_an_adapter_named_as_the_model_is_refused():
    with pytest.raises(ValueError, match="a LoRA adapter is named 'a', as the model is"):
        create_app(lora_engine(), "a")


# --- `minillm serve --lora NAME=PATH` -----------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """save_adapter's files of adapters a and b, made for make_engine's tiny model."""
    folder = tmp_path_factory.mktemp("adapters")
    model, _ = tiny_model()
    return {name: str(save_adapter(folder / f"{name}.safetensors", adapter))
            for name, adapter in adapters_for(model).items()}


def test_the_option_parses_in_both_spellings():
    parser = build_parser()
    assert parser.parse_args(["serve"]).lora is None
    for args in (["--lora", "a=x.st", "--lora", "b=y.st"], ["--lora-modules", "a=x.st", "b=y.st"]):
        lora = parser.parse_args(["serve", *args]).lora
        assert parse_lora(lora) == {"a": "x.st", "b": "y.st"}


def test_make_engine_serves_the_files_as_the_engine_serves_the_adapters(files, direct):
    engine = make_engine(tiny=True, lora=files)
    assert engine.lora.names == ["a", "b"]
    for name in ("a", "b", None):
        rid = engine.add_request("abcab", adapter=name, max_new_tokens=6, ignore_eos=True)
        assert engine.run()[rid].text == direct("abcab", name)


def test_adapters_of_q_proj_fit_the_fused_int8_model(files, recwarn):
    """int8 fuses q, k, v into one qkv_proj of quantized layers (buffers, no parameters)."""
    engine = make_engine(tiny=True, weights="int8", lora=files)
    assert "layers.0.attn.qkv_proj" in {n for n, _ in engine.model.named_modules()}
    texts = {engine.generate(["abcab"], max_new_tokens=6, ignore_eos=True, adapter=name)[0].text
             for name in ("a", "b", None)}
    assert len(texts) == 3


def test_the_serve_command_serves_an_adapter_file(files, direct, tmp_path):
    log = tmp_path / "serve.log"
    with open(log, "w") as sink, ServerProcess(["--tiny", "--threads", "1", "--lora",
                                                f"a={files['a']}"], log=sink) as server:
        cards = httpx.get(server.url + "/v1/models", timeout=60).json()["data"]
        assert [(c["id"], c["parent"]) for c in cards] == [("tiny", None), ("a", "tiny")]
        r = httpx.post(server.url + COMPLETIONS, timeout=60, json={
            "model": "a", "prompt": "abcab", "max_tokens": 6, "temperature": 0,
            "ignore_eos": True})
        assert r.json()["choices"][0]["text"] == direct("abcab", "a")
    assert "(fp32 weights, LoRA adapters a) on" in log.read_text()


def bad_files(folder) -> dict:
    """Adapter files that are not right for the tiny model, each named by what is wrong."""
    from safetensors.torch import save_file

    (folder / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    save_file({"embed.weight": torch.zeros(4, 4)}, folder / "model.safetensors")
    wider, _ = tiny_model(hidden_size=64)
    save_adapter(folder / "wider.safetensors", random_adapter(wider, ("o_proj",), 4, 0))
    A, B = torch.zeros(4, 32), torch.zeros(32, 4)
    save_adapter(folder / "peft.safetensors",
                 {"base_model.model.model.layers.0.self_attn.o_proj": (A, B)})
    save_adapter(folder / "nope.safetensors", {"layers.0.attn.nope": (A, B)})
    return {name: str(folder / f"{name}.safetensors")
            for name in ("junk", "model", "wider", "peft", "nope")}


@pytest.mark.parametrize("value, words", [
    (["a"], "--lora takes NAME=PATH (the name clients send as 'model', the adapter's file), "
            "got 'a'"),
    (["=x.safetensors"], "got '=x.safetensors'"),
    (["a=", "b=x"], "got 'a='"),
    (["a={a}", "a={b}"], "--lora: the name 'a' is given twice"),
    (["a=/no/such.safetensors"], "LoRA adapter 'a': no file /no/such.safetensors"),
    (["a={junk}"], "LoRA adapter 'a': {junk}: not a safetensors file"),
    (["a={model}"], "the tensor 'embed.weight' is not part of a LoRA adapter"),
    (["a={a}", "w={wider}"], "LoRA adapter 'w': {wider}: layers.0.attn.o_proj: A has shape "
                             "(4, 64), the layer needs (4, 32)"),
    (["p={peft}"], "is a Hugging Face (PEFT) layer name"),
    (["n={nope}"], "the model has no layer 'layers.0.attn.nope'"),
    (["tiny={a}"], "a LoRA adapter is named 'tiny', as the model is"),
], ids=["no =", "no name", "no path", "a name twice", "no file", "not safetensors",
        "a model's weights", "another model's adapter", "PEFT's names", "no such layer",
        "the model's own name"])
def test_a_bad_lora_value_stops_the_server_with_the_reason(files, tmp_path, capsys, value,
                                                           words):
    paths = {**files, **bad_files(tmp_path)}
    args = [arg for v in value for arg in ("--lora", v.format(**paths))]
    assert main(["serve", "--tiny", "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minillm serve: ") and words.format(**paths) in err, err
    assert "Traceback" not in err and "http://" not in err
