"""The llguidance grammar backend against minillm's own: the same allowed tokens at every step
(SmolLM2's 49,152 tokens on texts with escapes, UTF-8, bytes that are not UTF-8, and every schema
feature; the toy vocabulary through seeded random generations), the same greedy answers from the
real model, the same refusals plus its own (objects of many properties), the error that names
the extra when llguidance is missing, and the server's --grammar-backend."""

import sys

import httpx
import pytest
import torch

import minillm
from minillm.model.toy import CharTokenizer, tiny_model
from minillm.decoding import GRAMMAR_BACKENDS, JSONConstraint, SchemaError, make_json_constraint
from minillm.decoding.json_lark import MAX_PROPERTIES
from minillm.decoding.llguidance_constraint import LLGuidanceConstraint
from minillm.engine import Engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PET = {"type": "object", "properties": {"kind": {"const": "cat"},
                                        "age": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
       "required": ["kind"]}
OWNER = {  # what Pydantic writes: $defs and $ref, Optional as anyOf with null, Field limits
    "$defs": {"Pet": PET},
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4},
                   "pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
                   "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}, "maxItems": 2},
                   "score": {"type": "number"}, "ok": {"type": "boolean"},
                   "color": {"enum": ["red", "grün", 7, None]}, "extra": {}},
    "required": ["name", "pet"]}
TEXTS = {  # schema name -> (schema, a valid answer walked token by token)
    "owner": (OWNER, '{"pet": {"age": null, "kind": "cat"}, "name": "Zo\\u00e9\u4f60", '
                     '"pets": [ {"kind": "cat", "age": -12} ], "color": "grün", '
                     '"extra": {"a": [1, 2.5e-3, "x\\n", true]}, "ok": false, "score": 3.25}'),
    "any-object": (None, '{"k": {"nested": [null, "\\"q\\"", -0.5E+2]}, "v": "\u00e9t\u00e9"}'),
}


@pytest.fixture(scope="module")
def smollm2():
    return minillm.load_tokenizer("smollm2-135m")


def masks(constraint, ids: list[int], vocab: int) -> list[torch.Tensor]:
    """The constraint's allowed tokens before each of `ids` and after the last."""
    out = []
    for k in range(len(ids) + 1):
        scores = constraint(torch.tensor([[0] + ids[:k]]), torch.zeros(1, vocab))
        out.append(scores[0] == 0)
    return out


@pytest.mark.parametrize("name", list(TEXTS))
def test_both_backends_allow_the_same_tokens_of_smollm2_at_every_step(smollm2, name):
    schema, text = TEXTS[name]
    ids = smollm2.encode(text)
    ours = masks(JSONConstraint(smollm2, schema, prompt_length=1), ids, smollm2.vocab_size)
    theirs = masks(LLGuidanceConstraint(smollm2, schema, prompt_length=1), ids,
                   smollm2.vocab_size)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert torch.equal(a, b), (f"after {smollm2.decode(ids[:k])!r}: minillm only "
                                   f"{(a & ~b).nonzero().flatten()[:8].tolist()}, llguidance "
                                   f"only {(b & ~a).nonzero().flatten()[:8].tolist()}")
    assert ours[-1].nonzero().flatten().tolist() == sorted(smollm2.eos_token_ids)  # the end


def test_strings_take_bytes_that_are_not_utf8_in_both(smollm2):
    """minillm's grammar reads bytes: a string may hold a lone continuation byte (SmolLM2 has
    such tokens); llguidance's allow_invalid_utf8 keeps the masks equal there too."""
    lone = next(i for i in range(smollm2.vocab_size) if smollm2.token_bytes(i) == b"\x80")
    start = smollm2.encode('{"a": "')
    for constraint in (JSONConstraint(smollm2, prompt_length=1),
                       LLGuidanceConstraint(smollm2, prompt_length=1)):
        assert masks(constraint, start, smollm2.vocab_size)[-1][lone]


class Both:
    """A logits processor that runs both backends, checks they agree on every row that has not
    ended (a row after its end-of-sequence token is padding), and applies one."""

    def __init__(self, tok, schema):
        self.pair = (JSONConstraint(tok, schema), LLGuidanceConstraint(tok, schema))
        self.eos = list(tok.eos_token_ids)
        self.steps = 0

    def __call__(self, input_ids, scores):
        ours, theirs = (c(input_ids, scores.clone()) for c in self.pair)
        generated = self.pair[0].generated(input_ids)
        open_rows = ~torch.isin(generated, torch.tensor(self.eos)).any(dim=1)
        assert torch.equal(ours[open_rows], theirs[open_rows]), \
            f"the backends differ at step {self.steps}"
        self.steps += 1
        return ours


@pytest.mark.parametrize("schema", [OWNER, None], ids=["owner", "any-object"])
def test_random_generations_see_the_same_masks_at_every_step(schema):
    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    steps = 0
    for seed in range(10):
        both = Both(tok, schema)
        minillm.generate(model, tok, [0], max_new_tokens=150, do_sample=True, seed=seed,
                         logits_processor=both)
        steps += both.steps
    assert steps > 300


def test_a_batch_of_rows_keeps_one_matcher_per_row():
    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    both = Both(tok, OWNER)
    outs = minillm.generate(model, tok, [[1, 2], [3, 4], [5, 6]], max_new_tokens=150,
                            do_sample=True, seed=4, logits_processor=both)
    assert len({o.text for o in outs}) > 1 and both.steps > 20
    engine = Engine(model, tok, num_blocks=128, block_size=8)
    both = Both(tok, OWNER)
    one = engine.generate([[1, 2]], n=3, max_new_tokens=150, do_sample=True, seed=5,
                          logits_processor=both)[0]
    assert len({s.text for s in one.samples}) > 1 and both.steps > 20


@pytest.fixture(scope="module")
def real_model():
    return minillm.load("smollm2-135m")


def test_the_real_model_gives_the_same_greedy_answer_with_both(real_model):
    model, tok = real_model
    schema = OWNER
    prompt = tok.apply_chat_template([{"role": "user", "content": "Describe a pet as JSON."}])
    answers = [minillm.generate(model, tok, prompt, max_new_tokens=30, logits_processor=
                                make_json_constraint(tok, schema, backend=b)).text
               for b in GRAMMAR_BACKENDS]
    assert answers[0] == answers[1] and answers[0].startswith("{")


def test_both_refuse_the_same_unsupported_features_and_llguidance_large_objects():
    tok = CharTokenizer()
    for backend in GRAMMAR_BACKENDS:
        with pytest.raises(SchemaError, match="'pattern' at properties.a"):
            make_json_constraint(tok, {"type": "object", "properties": {
                "a": {"type": "string", "pattern": "x"}}}, backend=backend)
        with pytest.raises(ValueError, match="needs an end-of-sequence token"):
            make_json_constraint(tok, PET, eos_token_ids=[], backend=backend)
    wide = {"type": "object", "properties": {"inner": {"type": "object", "properties": {
        f"k{i}": {"type": "integer"} for i in range(MAX_PROPERTIES + 1)}}}}
    make_json_constraint(tok, wide, backend="minillm")
    with pytest.raises(SchemaError, match=f"at most {MAX_PROPERTIES} properties.*properties"
                                          r"\.inner has 11") as error:
        make_json_constraint(tok, wide, backend="llguidance")
    assert error.value.features == ["an object of 11 properties at properties.inner"]
    with pytest.raises(ValueError, match="'xgrammar' is not one of minillm, llguidance"):
        make_json_constraint(tok, PET, backend="xgrammar")


def test_a_missing_llguidance_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)  # import llguidance now fails
    with pytest.raises(ImportError, match=r"needs the package llguidance.*minillm-course\[grammar\]"):
        make_json_constraint(CharTokenizer(), PET, backend="llguidance")
    from minillm.tools.server.app import create_app

    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    with pytest.raises(ImportError, match=r"minillm-course\[grammar\]"):
        create_app(Engine(model, tok, num_blocks=16, block_size=8), grammar_backend="llguidance")


def test_the_server_option_and_its_answers():
    from minillm.decoding.grammar_backend import GRAMMAR_BACKENDS as ENGINE_NAMES
    from minillm.tools.cli import build_parser
    from minillm.tools.server import ServerThread
    from minillm.tools.server.options import GRAMMAR_BACKENDS as OPTION_NAMES

    assert OPTION_NAMES == ENGINE_NAMES
    parse = build_parser().parse_args
    assert parse(["serve"]).grammar_backend == "minillm"
    assert parse(["serve", "--grammar-backend", "llguidance"]).grammar_backend == "llguidance"
    with pytest.raises(SystemExit):
        parse(["serve", "--grammar-backend", "outlines"])

    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    body = {"model": "json", "messages": [{"role": "user", "content": "an owner"}],
            "max_tokens": 120, "seed": 3, "n": 2,
            "temperature": 1.0, "response_format": {"type": "json_schema", "json_schema": {
                "name": "owner", "schema": OWNER}}}
    texts = {}
    for backend in GRAMMAR_BACKENDS:
        engine = Engine(model, tok, num_blocks=256, block_size=8)
        with ServerThread(engine, "json", grammar_backend=backend) as running:
            r = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            texts[backend] = [c["message"]["content"] for c in r.json()["choices"]]
            wide = dict(body, response_format={"type": "json_schema", "json_schema": {
                "name": "wide", "schema": {"type": "object", "properties": {
                    f"k{i}": {"type": "integer"} for i in range(MAX_PROPERTIES + 1)}}}})
            r = httpx.post(running.url + "/v1/chat/completions", json=wide, timeout=120)
            if backend == "llguidance":
                assert r.status_code == 400 and "at most 10 properties" in r.text, r.text
            else:
                assert r.status_code == 200, r.text
    assert texts["minillm"] == texts["llguidance"]
