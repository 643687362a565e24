"""Constrained decoding: JSONGrammar accepts exactly JSON that fits the schema subset, byte by
byte; JSONConstraint's trie walk (with the inside-a-string shortcut) allows exactly the tokens a
brute-force check of every token allows; a random model forced through it writes JSON that
parses and validates, alone, in a batch and as the n samples of one engine request; unsupported
schema features are named."""

import json
import re

import jsonschema
import pytest
import torch

import minillm
from minillm.decoding import JSONConstraint, SchemaError
from minillm.decoding.json_grammar import JSONGrammar
from minillm.engine import Engine
from minillm.model.toy import CharTokenizer, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PERSON = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "height": {"type": "number"}, "member": {"type": "boolean"},
                         "color": {"enum": ["red", "green", 7, None]},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                         "pet": {"type": "object", "properties": {"kind": {"type": "string"}},
                                 "required": ["kind"]}},
          "required": ["name", "age", "color"], "additionalProperties": False}


@pytest.fixture(scope="module")
def chars():
    tok = CharTokenizer()
    model, _ = tiny_model(vocab_size=tok.vocab_size, seed=3)
    return model, tok


def states(grammar, text: bytes):
    state, seen = grammar.start, []
    for i in range(len(text)):
        state = grammar.feed_byte(state, text[i])
        seen.append(state)
    return seen


# --- the grammar --------------------------------------------------------------------------------

VALID = [
    b'{"name": "Ann", "age": 31, "color": "red"}',
    b'{"color":null,"age":-0,"name":"\\u00e9\\n\\"x\\""}',
    b'{ "age" : 7 , "name" : "" , "color" : 7 , "tags" : [ "a" , "b" ] }',
    b'{"name": "\xe4\xbd\xa0", "age": 1, "color": "green", "height": 1.5e-3, "member": false}',
    b'{"name": "a", "age": 2, "color": "red", "tags": [], "pet": {"kind": "cat"}}',
]
INVALID = [  # each ends at its first byte that cannot be
    (b'{"name": "Ann", "age": 31}', "a required key is missing"),
    (b'{"age": 1.', "an integer with a fraction"),
    (b'{"nam"', "a key not in properties"),
    (b'{"name": "a", "n', "a key twice"),
    (b'{"color": "b', "a value not in the enum"),
    (b'{"tags": ["a", "b", "c",', "more than maxItems"),
    (b'{"age": 01', "a leading zero"),
    (b'{"age": 12345678901234567', "17 digits (16 at most, as llama.cpp's JSON grammar)"),
    (b'{"name": "a\n', "a raw control character in a string"),
    (b'{"name": "\\x', "an unknown escape"),
    (b'{  ', "two spaces"),
    (b' ', "a space before the value"),
    (b'{"pet": {}', "a nested required key is missing"),
    (b'[', "an array where the schema wants an object"),
]


@pytest.mark.parametrize("text", VALID)
def test_valid_json_is_complete_and_every_prefix_is_a_state(text):
    grammar = JSONGrammar(PERSON)
    seen = states(grammar, text)
    assert all(s is not None for s in seen)
    assert grammar.is_complete(seen[-1]) and not any(map(grammar.is_complete, seen[:-1]))
    jsonschema.validate(json.loads(text), PERSON)
    assert grammar.feed(seen[-1], b" ") is None  # nothing after the value


@pytest.mark.parametrize("text,why", INVALID, ids=[w for _, w in INVALID])
def test_invalid_json_is_refused_at_its_first_bad_byte(text, why):
    grammar = JSONGrammar(PERSON)
    seen = states(grammar, text)
    assert seen[-1] is None and all(s is not None for s in seen[:-1]), why


SHORT = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 3}},
         "required": ["word"]}


@pytest.mark.parametrize("text,fits", [
    (b'{"word": "abc"}', True),
    (b'{"word": ""}', True),
    (b'{"word": "\xe4\xbd\xa0\xe5\xa5\xbd!"}', True),   # three characters, seven bytes
    (b'{"word": "a\\n\\u00e9"}', True),               # an escape is one character
    (b'{"word": "abcd"}', False),
    (b'{"word": "\xe4\xbd\xa0\xe5\xa5\xbd!?"}', False),
    (b'{"word": "ab\\n\\t"}', False),
])
def test_max_length_counts_characters_not_bytes(text, fits):
    grammar = JSONGrammar(SHORT)
    state = grammar.feed(grammar.start, text)
    assert grammar.is_complete(state) == fits
    assert (len(json.loads(text)["word"]) <= 3) == fits


def test_without_a_schema_any_object_and_nothing_else():
    grammar = JSONGrammar(None)
    text = b'{"a": [1, {"b": null}, "x", true, -2.5E+3], "c": {}, "a": false}'
    assert grammar.is_complete(grammar.feed(grammar.start, text))
    for bad in (b'"x"', b"[1]", b"7", b"{'a': 1}", b'{"a": tru}'):
        assert not grammar.is_complete(grammar.feed(grammar.start, bad))


UNSUPPORTED = [
    ({"type": "string", "pattern": "a+"}, ["'pattern' at the top level"]),
    ({"type": ["string", "null"]}, ["'type' as a list at the top level"]),
    ({"anyOf": [{"type": "integer"}, {"type": "number"}]},
     ["'anyOf' at the top level with alternatives that can begin alike (integer and number; "
      "only alternatives of different kinds, such as Optional[X])"]),
    ({"anyOf": [{"type": "object"}, {"type": "null"}, {"type": "object"}]},
     ["'anyOf' at the top level with alternatives that can begin alike (object and object; "
      "only alternatives of different kinds, such as Optional[X])"]),
    ({"anyOf": [{"enum": ["a"]}, {"type": "string"}]},
     ["'anyOf' at the top level with alternatives that can begin alike (enum and string; "
      "only alternatives of different kinds, such as Optional[X])"]),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 3},
                                       "b": {"$ref": "other.json#/x"}}},
     ["'minLength' at properties.a", "'$ref' to 'other.json#/x' at properties.b (only "
      "references within the schema, '#/...')"]),
    ({"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
      "$ref": "#/$defs/Node"},
     ["recursive '$ref' to '#/$defs/Node' at $defs.Node.properties.next"]),
    ({"$ref": "#/$defs/A", "type": "object", "$defs": {"A": {"type": "string"}}},
     ["'type' beside '$ref' at the top level"]),
    ({"anyOf": [{"type": "string"}, {"type": "null"}], "maxLength": 2},
     ["'maxLength' beside 'anyOf' at the top level"]),
    ({"type": "integer", "maxLength": 3}, ["'maxLength' at the top level"]),
    ({"type": "object", "additionalProperties": {"type": "string"}},
     ["'additionalProperties' as a schema at the top level"]),
]


@pytest.mark.parametrize("schema,features", UNSUPPORTED)
def test_unsupported_features_are_named(schema, features):
    with pytest.raises(SchemaError) as error:
        JSONGrammar(schema)
    assert error.value.features == features
    assert all(f in str(error.value) for f in features)


@pytest.mark.parametrize("schema,words", [
    ({"type": "thing"}, "unknown type 'thing'"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "'required' names ['b']"),
    ({"enum": []}, "'enum' must be a non-empty list"),
    ({"type": "integer", "enum": [1, "a"]}, "enum value 'a' at the top level is not of type"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "'maxItems' (1) is below 'minItems' (3)"),
    ({"type": "string", "maxLength": -1}, "'maxLength' must be an integer >= 0"),
    ({"type": "string", "maxLength": 2.5}, "'maxLength' must be an integer >= 0"),
    ({"$ref": "#/$defs/Missing"}, "'$ref' '#/$defs/Missing' at the top level points to nothing"),
    ({"anyOf": []}, "'anyOf' must be a non-empty list of schemas"),
    ("string", "a schema must be a JSON object"),
])
def test_invalid_schemas_say_what_is_wrong(schema, words):
    with pytest.raises(SchemaError, match=re.escape(words)):
        JSONGrammar(schema)


def pydantic_schema() -> dict:
    """What Pydantic emits for a model with a nested model ($ref/$defs), an Enum ($ref), Optional
    fields (anyOf with null), a Literal (const) and a list of nested models."""
    import enum
    from typing import Literal, Optional

    from pydantic import BaseModel, Field

    class Color(str, enum.Enum):
        red = "red"
        green = "green"

    class Pet(BaseModel):
        kind: Literal["cat"]
        age: Optional[int] = None

    class Owner(BaseModel):
        name: str = Field(max_length=8)
        color: Optional[Color] = None
        pet: Optional[Pet]
        pets: list[Pet] = Field(default_factory=list, max_length=2)
        score: Optional[float] = None

    return Owner.model_json_schema()


def test_pydantic_schemas_with_anyof_ref_defs_optional_and_const_are_followed():
    schema = pydantic_schema()
    assert "$defs" in schema and "anyOf" in json.dumps(schema) and "const" in json.dumps(schema)
    grammar = JSONGrammar(schema)
    good = [b'{"name": "Ann", "pet": null}',
            b'{"pet": {"kind": "cat", "age": null}, "name": "Bo", "color": "green"}',
            b'{"name": "C", "pet": {"kind": "cat"}, "pets": [{"kind": "cat", "age": 3}], '
            b'"color": null, "score": -1.5}']
    for text in good:
        jsonschema.validate(json.loads(text), schema)  # the reference agrees they are valid
        assert grammar.is_complete(grammar.feed(grammar.start, text)), text
    bad = [(b'{"name": "Ann"}', "pet is required"),
           (b'{"pet": {"kind": "dog', "not the const"),
           (b'{"color": "blue', "not in the Enum"),
           (b'{"score": "', "a string where a number or null goes"),
           (b'{"name": "123456789', "longer than max_length"),
           (b'{"pets": [{"kind": "cat"}, {"kind": "cat"}, ', "more than max_length items")]
    for text, why in bad:
        assert grammar.feed(grammar.start, text) is None, why
    assert not grammar.is_complete(grammar.feed(grammar.start, b'{"pet": nul'))


def test_optional_is_decided_by_the_first_byte():
    grammar = JSONGrammar({"type": "object", "properties": {"a": {"anyOf": [
        {"type": "integer"}, {"type": "null"}, {"type": "array", "items": {"type": "string"}}]}},
        "required": ["a"]})
    for text in (b'{"a": 5}', b'{"a": null}', b'{"a": ["x"]}', b'{"a": -12}'):
        assert grammar.is_complete(grammar.feed(grammar.start, text)), text
    for text in (b'{"a": "', b'{"a": t', b'{"a": [1', b'{"a": 1.'):
        assert grammar.feed(grammar.start, text) is None, text


# --- the constraint -----------------------------------------------------------------------------

def brute_force(constraint, state) -> torch.Tensor:
    """Every token checked on its own: does the state survive its bytes?"""
    tok, grammar = constraint.tokenizer, constraint.grammar
    allowed = torch.zeros(tok.vocab_size, dtype=torch.bool)
    for i in range(len(tok.PIECES)):
        allowed[i] = grammar.feed(state, tok.PIECES[i].encode()) is not None
    if grammar.is_complete(state):
        allowed[tok.eos_token_ids] = True
    return allowed


@pytest.mark.parametrize("schema", [PERSON, SHORT, None], ids=["schema", "maxLength", "any-object"])
def test_the_trie_walk_allows_exactly_what_a_brute_force_check_allows(schema):
    tok = CharTokenizer()
    constraint = JSONConstraint(tok, schema)
    text = {id(PERSON): VALID[0], id(SHORT): b'{"word": "a\\nb"}'}.get(
        id(schema), b'{"a": [1, {"b": null}, "x\\n"], "c": -2.5E+3}')
    for state in [constraint.grammar.start, *states(constraint.grammar, text)]:
        assert torch.equal(constraint.allowed(state), brute_force(constraint, state))
    assert constraint.allowed(constraint.grammar.feed(constraint.grammar.start, text)).tolist() \
        == [False] * len(tok.PIECES) + [True]  # complete: only the end


def check(text: str, schema) -> None:
    value = json.loads(text)
    assert isinstance(value, dict)
    if schema is not None:
        jsonschema.validate(value, schema)


@pytest.mark.parametrize("schema", [PERSON, None], ids=["schema", "any-object"])
def test_a_random_model_forced_through_the_constraint_writes_valid_json(chars, schema):
    model, tok = chars
    finished = 0
    for seed in range(12):
        out = minillm.generate(model, tok, [0], max_new_tokens=300, do_sample=True, seed=seed,
                               logits_processor=JSONConstraint(tok, schema))
        assert out.finish_reason in ("eos", "length")
        if out.finish_reason == "eos":
            check(out.text, schema)
            finished += 1
        else:  # cut by max_new_tokens: still a valid beginning
            grammar = JSONGrammar(schema)
            assert grammar.feed(grammar.start, out.text.encode()) is not None
    assert finished >= 9, f"only {finished} of 12 random answers closed their JSON in 300 tokens"


def test_a_random_model_forced_through_a_pydantic_schema_writes_valid_json(chars):
    """Every string, array and number of the schema is bounded, so every answer ends in 300
    tokens; each must validate against the schema (jsonschema as the reference)."""
    model, tok = chars
    schema = pydantic_schema()
    constraint = JSONConstraint(tok, schema)
    for seed in range(6):
        out = minillm.generate(model, tok, [0], max_new_tokens=300, do_sample=True, seed=seed,
                               logits_processor=constraint)
        assert out.finish_reason == "eos", out.text
        check(out.text, schema)


def test_with_every_string_and_array_bounded_every_answer_ends_in_time(chars):
    """Bounded strings, arrays and numbers bound the longest valid answer (here under 90
    characters, spaces included), so 120 tokens of at least one character always end it."""
    model, tok = chars
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 8},
                             "tags": {"type": "array", "maxItems": 2,
                                      "items": {"type": "string", "maxLength": 4}},
                             "ok": {"type": "boolean"}},
              "required": ["name", "tags", "ok"]}
    for seed in range(12):
        out = minillm.generate(model, tok, [0], max_new_tokens=120, do_sample=True, seed=seed,
                               logits_processor=JSONConstraint(tok, schema))
        assert out.finish_reason == "eos", out.text
        check(out.text, schema)


def test_a_batch_and_the_samples_of_an_engine_request_share_one_constraint(chars):
    model, tok = chars
    batch = minillm.generate(model, tok, [[1, 2], [3, 4]], max_new_tokens=300, do_sample=True,
                             seed=5, logits_processor=JSONConstraint(tok, PERSON))
    engine = Engine(model, tok, num_blocks=128, block_size=8)
    out = engine.generate([[1, 2]], n=4, max_new_tokens=300, do_sample=True, seed=5,
                          logits_processor=JSONConstraint(tok, PERSON))[0]
    texts = [o.text for o in batch if o.finish_reason == "eos"]
    texts += [s.text for s in out.samples if s.finish_reason == "eos"]
    assert len(texts) >= 4
    for text in texts:
        check(text, PERSON)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_greedy_and_seeded_runs_repeat(chars):
    model, tok = chars
    runs = [minillm.generate(model, tok, [7], max_new_tokens=200, do_sample=True, seed=1,
                             logits_processor=JSONConstraint(tok, PERSON)).text for _ in range(2)]
    assert runs[0] == runs[1]


def test_the_constraint_needs_an_end_of_sequence_token():
    tok = CharTokenizer()
    with pytest.raises(ValueError, match="needs an end-of-sequence token"):
        JSONConstraint(tok, PERSON, eos_token_ids=[])
    with pytest.raises(SchemaError, match="pattern"):
        JSONConstraint(tok, {"type": "string", "pattern": "x"})


def test_logits_processor_is_checked(chars):
    model, tok = chars
    with pytest.raises(TypeError, match="logits_processor must be a function"):
        minillm.generate(model, tok, [1], logits_processor="json")
    with pytest.raises(ValueError, match="beam search"):
        minillm.generate(model, tok, [1], num_beams=2, logits_processor=JSONConstraint(tok))
