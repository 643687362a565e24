"""The server's request model against GenerationConfig, so the two cannot drift: every option of
GenerationConfig is either a request field (protocol.OPTION_FIELDS) or left out on purpose
(protocol.NOT_OFFERED); each field that sets an option refuses exactly the values the config
refuses (beyond OpenAI's own limits), with the config's message and the field as `param`; and a
request that says nothing gets the config's defaults, except where OpenAI's API differs."""

import dataclasses
import math

import pytest
from pydantic import ValidationError

from minillm.decoding import GenerationConfig
from minillm.tools.server.app import _validation_message
from minillm.tools.server.protocol import (MAX_TEMPERATURE, NOT_OFFERED, OPTION_FIELDS,
                                           ChatCompletionRequest, CompletionRequest, Sampling)

PROBES = {  # values around every boundary an option has, and a few of the wrong type
    float: [-math.inf, -3.0, -2.5, -2.0, -1.0, -0.5, 0.0, 1e-3, 0.5, 1.0, 1.01, 1.5, 2.0, 2.5,
            7.0, 1e9, math.inf],
    int: [-5, -2, -1, 0, 1, 2, 50, 10**6],
}


def test_every_option_is_a_field_or_left_out_on_purpose():
    options = set(GenerationConfig.field_names())
    offered = set(OPTION_FIELDS.values())
    assert offered.isdisjoint(NOT_OFFERED)
    assert offered | set(NOT_OFFERED) == options, options ^ (offered | set(NOT_OFFERED))
    for request in (CompletionRequest, ChatCompletionRequest):
        assert set(OPTION_FIELDS) <= set(request.model_fields)


def _config_accepts(option, value) -> bool:
    # the server samples at any temperature above 0, so its sampling options take effect
    fields = {option: value, "do_sample": option in ("top_k", "top_p", "min_p") or (
        option == "temperature" and value > 0)}
    try:
        GenerationConfig(**fields)
    except (ValueError, TypeError):
        return False
    return True


def _server_accepts(field, value) -> tuple[bool, str, str | None]:
    try:
        body = CompletionRequest.model_validate({"prompt": "x", field: value})
        body.generation_config(8)
    except ValidationError as error:
        return (False, *_validation_message(error.errors(include_url=False)))
    return True, "", None


SERVER_ONLY = {  # the API's own limits and spellings, on top of the config's
    ("temperature", lambda v: v > MAX_TEMPERATURE): "refused",  # OpenAI's 0 to 2
    ("top_k", lambda v: v == -1): "accepted",  # vLLM's "off", as the config's 0
}


def _server_only(field, value):
    return next((verdict for (name, applies), verdict in SERVER_ONLY.items()
                 if name == field and applies(value)), None)


NUMERIC = [f for f, option in OPTION_FIELDS.items()
           if f not in ("max_tokens", "stop", "ignore_eos")]


@pytest.mark.parametrize("field", NUMERIC)
def test_a_field_refuses_what_the_config_refuses_with_its_message(field):
    option = OPTION_FIELDS[field]
    kind = Sampling.model_fields[field].annotation
    kind = int if kind in (int, int | None) else float
    for value in PROBES[kind]:
        accepted, message, param = _server_accepts(field, value)
        expected = _server_only(field, value)
        if expected is None:
            expected = "accepted" if _config_accepts(option, value) else "refused"
        assert ("accepted" if accepted else "refused") == expected, (field, value, message)
        if not accepted:
            assert param == field, (field, value, message)
            assert field in message, (field, value, message)
        if not accepted and expected == "refused" and _server_only(field, value) is None:
            with pytest.raises((ValueError, TypeError)) as config_error:
                GenerationConfig(**{option: value})
            assert str(config_error.value) in message, (message, str(config_error.value))


def test_a_request_that_says_nothing_gets_the_configs_defaults_but_openais():
    """OpenAI's defaults where its API has its own: temperature 1 samples (do_sample=True)."""
    config = CompletionRequest.model_validate({"prompt": "x"}).generation_config(8)
    differ = {f.name for f in dataclasses.fields(GenerationConfig)
              if getattr(config, f.name) != getattr(GenerationConfig(), f.name)}
    assert differ == {"max_new_tokens", "do_sample"}
    assert config.max_new_tokens == 8 and config.do_sample is True
    greedy = CompletionRequest.model_validate({"prompt": "x", "temperature": 0,
                                               "top_p": 0.5}).generation_config(8)
    assert greedy.do_sample is False and greedy.top_p == 1.0  # greedy: no sampling options set


def test_a_field_of_the_wrong_type_is_refused_before_any_check():
    for field, value in [("temperature", "hot"), ("top_k", 2.5), ("seed", "1"),
                         ("presence_penalty", None)]:
        accepted, message, param = _server_accepts(field, value)
        assert not accepted and param == field, (field, message)
