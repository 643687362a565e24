"""The OpenAI API's answer shapes, as pydantic models: every body and stream chunk the server
sends is one of these, with OpenAI's field names (https://platform.openai.com/docs/api-reference).

    /v1/completions         CompletionResponse (streamed: the same shape, one per chunk)
    /v1/chat/completions    ChatCompletion, or ChatCompletionChunk when streamed
    /v1/models              ModelList
    errors                  ErrorResponse: {"error": {"message", "type", "param", "code"}}

Log-probabilities come in two shapes: the chat API's (ChoiceLogprobs: one entry per token with
its text, bytes and top alternatives) and the legacy completions API's (CompletionLogprobs:
parallel lists). logprobs.py builds both from the engine's numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_serializer


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def json_body(self) -> dict:
        return self.model_dump(mode="json")

    def sse(self) -> str:
        """This object as one server-sent event."""
        return f"data: {self.model_dump_json()}\n\n"


# --- shared -------------------------------------------------------------------------------------

class ErrorDetail(Shape):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class ErrorResponse(Shape):
    error: ErrorDetail


class Usage(Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Envelope(Shape):
    """What every answer and chunk carries around its choices: the request's id, when, the model."""

    id: str
    created: int
    model: str


class ModelCard(Shape):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "minillm"
    max_model_len: int  # the context window, in tokens (vLLM's name)
    weights: str  # how the weights are stored: fp32, bf16, int8 or q4_1 (minillm's own field)
    parent: str | None = None  # a LoRA adapter's model (vLLM's field); None for the model


class ModelList(Shape):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(Shape):
    """GET /health: the engine thread's state and its counters (minillm's own, not OpenAI's)."""

    model_config = ConfigDict(extra="allow")
    status: str
    model: str


class TokenizeResponse(Shape):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeResponse(Shape):
    prompt: str


class TokenizerInfo(Shape):
    """GET /tokenizer_info (vLLM's): what a client needs to tokenize as the server does."""

    tokenizer_class: str
    eos_token: str | None
    bos_token: str | None
    pad_token: str | None
    chat_template: str | None
    model_max_length: int
    vocab_size: int


# --- /v1/completions ----------------------------------------------------------------------------

class CompletionLogprobs(Shape):
    """The legacy shape: one entry per token in each list. top_logprobs maps token text to
    log-probability for the k most likely tokens and the chosen one; the first prompt token of
    an echoed prompt has None for both (nothing comes before it). text_offset: where each token's
    text starts in the choice's text."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(Shape):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class CompletionResponse(Envelope):
    """A whole answer, or one streamed chunk of it (OpenAI uses the same shape for both)."""

    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage | None = None


# --- /v1/chat/completions -----------------------------------------------------------------------

class TopLogprob(Shape):
    token: str
    logprob: float
    bytes: list[int] | None  # the token's UTF-8 bytes: a character may span several tokens


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Shape):
    content: list[TokenLogprob] | None
    refusal: None = None


class ChatMessage(Shape):
    role: Literal["assistant"] = "assistant"
    content: str | None


class ChatChoice(Shape):
    index: int
    message: ChatMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None


class ChatCompletion(Envelope):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class Delta(Shape):
    """What a chunk adds to a choice's message: the role in its first chunk, then text. Fields
    not given are left out of the JSON, as OpenAI does ({} in the last chunk)."""

    role: Literal["assistant"] | None = None
    content: str | None = None

    @model_serializer(mode="wrap")
    def _only_given(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatChunkChoice(Shape):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Envelope):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
