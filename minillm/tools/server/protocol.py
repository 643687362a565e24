"""The OpenAI API's request shapes, checked, and the errors it answers with.

The fields are OpenAI's (https://platform.openai.com/docs/api-reference/completions), plus the
sampling fields vLLM added that the engine implements: `top_k`, `min_p`, `repetition_penalty`,
`min_tokens` (no end of sequence before that many tokens) and `ignore_eos` (generate exactly
`max_tokens` tokens). Types are strict: `"max_tokens": "5"` or `5.0` is an error, not 5.

A field the server does not know is handled as vLLM handles it: ignored, logged once, and named
in the answer's `X-Minillm-Ignored-Fields` header, so evaluation harnesses that send their own
fields still run and nothing is dropped unsaid. Fields that ask for something this server does
under another name, or does not do, are refused with what to send instead (`REFUSED_FIELDS`):
ignoring them would change the answer. The answers' shapes are in responses.py.

The sampling options are GenerationConfig's (minillm/decoding/config.py), checked by its own
checks: `OPTION_FIELDS` says which option each request field sets, `NOT_OFFERED` which options
the API leaves out, and tests/test_server_options.py holds both against GenerationConfig (every
option is one or the other; the server refuses exactly the values the config refuses, beyond
OpenAI's own limit on temperature (at most 2) and at most 64 stop strings.

Every error is answered as OpenAI does:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...decoding import GenerationConfig
from ...decoding.config import check_option
from .responses import ErrorDetail, ErrorResponse

# OpenAI takes up to 4 stop strings, vLLM any number; evaluation harnesses add the EOS string
# to a task's own (lm-eval sends 5 for a task with 4). A bound keeps each token's check cheap.
MAX_STOP_STRINGS = 64
MAX_TEMPERATURE = 2.0  # OpenAI's limit; GenerationConfig takes any temperature >= 0
MAX_LOGPROBS = 20  # the most alternatives per position (OpenAI's limit for chat)

# request field -> the GenerationConfig option it sets
OPTION_FIELDS = {"max_tokens": "max_new_tokens", "temperature": "temperature", "top_p": "top_p",
                 "top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
                 "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                 "seed": "seed", "stop": "stop", "ignore_eos": "ignore_eos"}
NOT_OFFERED = (  # GenerationConfig's options this API does not take
    "do_sample",  # temperature 0 asks for greedy decoding, anything above it samples
    "no_repeat_ngram_size", "bad_words_ids", "eos_token_id",
    "num_beams", "length_penalty", "early_stopping", "num_return_sequences",  # beam search
)
# fields other servers take that would change the answer if ignored: refused, saying what to send
# (a value in the tuple is the one that changes nothing, accepted)
REFUSED_FIELDS = {
    "max_new_tokens": ((), "this API's length field is max_tokens (max_completion_tokens in "
                           "chat)"),
    "do_sample": ((), "temperature 0 asks for greedy decoding, a temperature above 0 samples"),
    "num_beams": ((1,), "beam search is not offered by the server (num_beams 1 is accepted); "
                        "minillm.generate(..., num_beams=k) runs it"),
    "use_beam_search": ((False,), "beam search is not offered by the server; "
                                  "minillm.generate(..., num_beams=k) runs it"),
}


class APIError(Exception):
    """An error the server answers with `status` and OpenAI's error body."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 type: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = \
            status, message, param, type, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return ErrorResponse(error=ErrorDetail(message=message, type=type, param=param,
                                           code=code)).json_body()


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False


class JSONSchemaFormat(BaseModel):
    """response_format's json_schema: {"name": ..., "schema": {...}, "strict": true}."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": ...}."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


def _top_logprobs():
    return Field(default=None, ge=0, le=MAX_LOGPROBS)


class Sampling(BaseModel):
    """The fields both endpoints share; fields it does not know stay in `model_extra`."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, le=MAX_TEMPERATURE)
    top_p: float = 1.0
    top_k: int = 0  # -1 is off too, as in vLLM
    min_p: float = 0.0  # 0 is off, as in vLLM
    min_tokens: int = Field(default=0, ge=0)
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    user: str | None = None

    @field_validator("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty", "seed")
    @classmethod
    def _option(cls, value, info):
        """GenerationConfig's own check of the option (a temperature of 0 is greedy here)."""
        if info.field_name == "top_k" and value == -1:
            return 0
        try:
            check_option(OPTION_FIELDS[info.field_name], value)
        except TypeError as error:  # pydantic turns only ValueErrors into a 400
            raise ValueError(str(error)) from None
        return value

    def ignored_fields(self) -> list[str]:
        """The fields this server does not know, which it ignores as vLLM does; a field of
        REFUSED_FIELDS with a value that would change the answer is an APIError instead."""
        extra = dict(self.model_extra or {})
        for name, (harmless, instead) in REFUSED_FIELDS.items():
            if name in extra:
                value = extra.pop(name)
                if not any(value == h and type(value) is type(h) for h in harmless):
                    raise APIError(400, f"{name}={value!r} is not taken here: {instead}", name)
        return sorted(extra)

    def generation_config(self, max_tokens: int) -> GenerationConfig:
        """The engine's settings for this request. temperature 0 means greedy, as in OpenAI;
        ignore_eos (vLLM's extension) is GenerationConfig's field of the same name; min_tokens
        is a logits processor of the request (`min_tokens_processor`)."""
        if self.min_tokens > max_tokens:
            raise APIError(400, f"min_tokens={self.min_tokens} is more than the {max_tokens} new "
                                "tokens the request allows (max_tokens)", "min_tokens")
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        if stop is not None:
            if len(stop) > MAX_STOP_STRINGS or any(not s for s in stop):
                raise APIError(400, f"stop takes up to {MAX_STOP_STRINGS} non-empty strings, got "
                                    f"{stop!r}", "stop")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options is allowed only with stream: true",
                           "stream_options")
        sample = self.temperature > 0
        fields = dict(max_new_tokens=max_tokens, do_sample=sample,
                      repetition_penalty=self.repetition_penalty, stop=stop or None,
                      seed=self.seed, presence_penalty=self.presence_penalty,
                      frequency_penalty=self.frequency_penalty)
        if sample:
            fields.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                          min_p=self.min_p or None)
        if self.ignore_eos:
            fields["ignore_eos"] = True
        try:
            return GenerationConfig(**fields)
        except (ValueError, TypeError) as error:
            raise APIError(400, str(error)) from None


PROMPT_SHAPES = ("a string, a list of strings, a list of token ids (integers) or a list of "
                 "lists of token ids")


def _prompt_kind(value) -> str:
    """What `value` is, in words, for the error that refuses it: "a list of: float, int"."""
    if not isinstance(value, list):
        return type(value).__name__
    if not value:
        return "an empty list"

    def item(v):
        if not isinstance(v, list):
            return type(v).__name__
        return "list of " + " and ".join(sorted({type(i).__name__ for i in v})) if v \
            else "empty list"

    return "a list of: " + ", ".join(sorted({item(v) for v in value}))


def _is_ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                           for i in value)


class CompletionRequest(Sampling):
    """POST /v1/completions: continue `prompt`, or each of several prompts.

    prompt    text, a list of token ids, or a batch: a list of texts or of token-id lists (what
              OpenAI accepts; lm-evaluation-harness sends token ids). A batch's answer has
              len(prompts) * n choices, prompt i's samples at indices i*n to i*n + n - 1
    logprobs  k from 0 to 20: each token's log-probability and the k most likely alternatives
              (OpenAI's legacy shape; OpenAI allows up to 5, vLLM and this server 20)
    echo      put the prompt before the answer, with the prompt tokens' log-probabilities when
              logprobs is set; max_tokens 0 is then allowed: the prompt is scored, nothing is
              generated"""

    prompt: Any
    max_tokens: int | None = Field(default=None, ge=0)
    logprobs: int | None = _top_logprobs()
    echo: bool = False
    suffix: None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_shape(cls, value):
        if isinstance(value, str) or (_is_ids(value) and value):
            return value
        if isinstance(value, list) and value and (all(isinstance(p, str) for p in value) or
                                                  all(_is_ids(p) for p in value)):
            return value
        raise ValueError(f"prompt must be {PROMPT_SHAPES} (none of them empty); got "
                         f"{_prompt_kind(value)}")

    def prompts(self) -> list:
        """The prompts, each a string or a list of token ids; checks what goes with them."""
        prompt = self.prompt
        batch = isinstance(prompt, list) and not _is_ids(prompt)
        prompts = prompt if batch else [prompt]
        for i, p in enumerate(prompts):
            if not p:
                where = f"prompt {i} of the batch" if batch else "prompt"
                raise APIError(400, f"{where} is empty: give some text or token ids", "prompt")
        if self.stream and len(prompts) > 1:
            raise APIError(400, f"prompt is a batch of {len(prompts)} prompts, which this server "
                                "answers only with stream: false; stream one request per prompt",
                           "prompt")
        if self.max_tokens == 0 and not self.echo:
            raise APIError(400, "max_tokens must be >= 1 (0 only with echo: true, to score the "
                                "prompt)", "max_tokens")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported by this server (only 1); use n",
                           "best_of")
        return prompts


class Message(BaseModel):
    """One message: content is text, or a list of parts of which only text parts
    ({"type": "text", "text": ...}) are taken; they are joined with newlines, as vLLM
    does. The developer role is OpenAI's newer name for system and reaches the chat template
    as system (the role the model was trained with)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["developer", "system", "user", "assistant"]
    content: Union[str, list[dict]]
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, content):
        if isinstance(content, str):
            return content
        for i, part in enumerate(content):
            kind = part.get("type")
            if kind != "text":
                raise ValueError(f"message content part {i} has type {kind!r}; this server takes "
                                 "only text parts ({\"type\": \"text\", \"text\": ...}): the "
                                 "model reads text only")
            if set(part) != {"type", "text"} or not isinstance(part["text"], str):
                raise ValueError(f"message content part {i} must be {{\"type\": \"text\", "
                                 f"\"text\": a string}}, got {part!r}"[:300])
        return content

    def text(self) -> str:
        content = self.content
        return content if isinstance(content, str) else "\n".join(p["text"] for p in content)

    def template_role(self) -> str:
        return "system" if self.role == "developer" else self.role


class ChatCompletionRequest(Sampling):
    """POST /v1/chat/completions: answer the conversation `messages`.

    logprobs         true: each answer token's log-probability
    top_logprobs     0 to 20 most likely alternatives at each position (needs logprobs: true)
    response_format  {"type": "json_object"}, or {"type": "json_schema", "json_schema":
                     {"name": ..., "schema": {...}}} for a small JSON Schema subset (see
                     minillm.decoding.json_grammar): the answer is constrained to match
    max_completion_tokens   OpenAI's newer name for max_tokens"""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = _top_logprobs()
    response_format: ResponseFormat | None = None
    echo: bool = False  # OpenAI's chat API has none: refused with a clear message

    def check(self) -> None:
        if self.echo:
            raise APIError(400, "echo is not part of the chat API; use /v1/completions with "
                                "echo: true", "echo")
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        if (self.max_tokens is not None and self.max_completion_tokens is not None
                and self.max_tokens != self.max_completion_tokens):
            raise APIError(400, f"max_tokens ({self.max_tokens}) and max_completion_tokens "
                                f"({self.max_completion_tokens}) disagree; give one "
                                "(max_completion_tokens is the newer name)",
                           "max_completion_tokens")
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and (
                fmt.json_schema is None or fmt.json_schema.schema_ is None):
            raise APIError(400, "response_format of type json_schema needs json_schema: "
                                '{"name": ..., "schema": {...}}', "response_format")
        if fmt is not None and fmt.type != "text" and self.ignore_eos:
            raise APIError(400, "ignore_eos cannot go with a JSON response_format: the answer "
                                "ends when its JSON is complete", "ignore_eos")
        if fmt is not None and fmt.type != "text" and self.min_tokens:
            raise APIError(400, "min_tokens cannot go with a JSON response_format: the answer "
                                "ends when its JSON is complete", "min_tokens")

    @property
    def answer_length(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens

    @property
    def length_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None \
            else "max_tokens"

    def conversation(self) -> list[dict]:
        return [{"role": m.template_role(), "content": m.text()} for m in self.messages]


class TokenizeRequest(BaseModel):
    """POST /tokenize (vLLM's): the token ids of `prompt` as /v1/completions reads it, or of the
    conversation `messages` as /v1/chat/completions lays it out (with the assistant's turn begun
    when add_generation_prompt). add_special_tokens is taken and changes nothing: the tokenizer
    adds no special tokens to a prompt, here or in the completions."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give prompt (a string) or messages (a conversation), one of them")
        return self

    def conversation(self) -> list[dict]:
        return [{"role": m.template_role(), "content": m.text()} for m in self.messages]


class DetokenizeRequest(BaseModel):
    """POST /detokenize (vLLM's): the text of the token ids `tokens`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = None
    tokens: list[int]


FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}
