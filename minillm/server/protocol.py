"""The OpenAI API's request shapes, checked, and the errors it answers with.

The fields are OpenAI's (https://platform.openai.com/docs/api-reference/completions), plus three
that vLLM added and load tests need: `top_k`, `repetition_penalty` and `ignore_eos` (generate
exactly `max_tokens` tokens). Types are strict: `"max_tokens": "5"` or `5.0` is an error, not 5.
A field the server does not know is an error too (OpenAI does the same), so a typo is not
silently ignored.

Every error is answered as OpenAI does:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from ..decoding import GenerationConfig

MAX_STOP_STRINGS = 4


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
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False


class Sampling(BaseModel):
    """The fields both endpoints share."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    n: int = 1
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    logprobs: None = None
    user: str | None = None

    def generation_config(self, max_tokens: int) -> GenerationConfig:
        """The engine's settings for this request. temperature 0 means greedy, as in OpenAI;
        ignore_eos (vLLM's extension) is GenerationConfig's field of the same name."""
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0.0:
                raise APIError(400, f"{name} is not supported by this server (only 0); use "
                                    "repetition_penalty (> 1 discourages repeats)", name)
        if self.n != 1:
            raise APIError(400, f"n={self.n}: this server returns one choice per request (n=1); "
                                "send the request n times instead", "n")
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
                      seed=self.seed)
        if sample:
            fields.update(temperature=self.temperature, top_p=self.top_p,
                          top_k=max(self.top_k, 0))
        if self.ignore_eos:
            fields["ignore_eos"] = True
        try:
            return GenerationConfig(**fields)
        except (ValueError, TypeError) as error:
            raise APIError(400, str(error)) from None


class CompletionRequest(Sampling):
    """POST /v1/completions: continue `prompt` (text, or a list of token ids)."""

    prompt: Union[str, list[int], list[str]]
    echo: bool = False
    suffix: None = None
    best_of: int | None = None

    def one_prompt(self):
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            if len(prompt) != 1:
                raise APIError(400, f"prompt is a list of {len(prompt)} strings; this server "
                                    "takes one prompt per request: send one request each",
                               "prompt")
            prompt = prompt[0]
        if not prompt:
            raise APIError(400, "prompt is empty: give some text or token ids", "prompt")
        if self.echo:
            raise APIError(400, "echo is not supported by this server", "echo")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported by this server (only 1)", "best_of")
        return prompt


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = None


class ChatCompletionRequest(Sampling):
    """POST /v1/chat/completions: answer the conversation `messages`."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def conversation(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.messages]


FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}
