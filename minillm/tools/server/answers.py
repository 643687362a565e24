"""The engine's outputs as OpenAI answers: one whole body, or a stream of chunks.

An answer has n choices, one per sample of the request; the engine reports each sample as
RequestOutputs that carry its `index`. A `CompletionAnswer` or `ChatAnswer` remembers, per choice,
what a stream has sent so far, and builds the response models of responses.py.

The end-of-sequence token that ended an answer is not part of its text. The legacy completions
list it in their log-probabilities all the same, with its token text, as OpenAI's and vLLM's do
(lm-eval scores a continuation by reading the last entry as the one generated token: leaving the
EOS out would make it read the continuation's last token instead); chat's log-probabilities
leave it out, as OpenAI's chat does. Usage counts every generated token, that one included. With echo and max_tokens 0 the engine generates one token, which the answer leaves out
entirely: the prompt alone is scored (vLLM does the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from .logprobs import TokenText, chat_logprobs, completion_logprobs
from .protocol import FINISH_REASONS
from .responses import (ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk,
                        ChatMessage, CompletionChoice, CompletionResponse, Delta, Usage)


@dataclass
class Sent:
    """What a stream has sent of one choice so far."""

    started: bool = False
    tokens: int = 0  # generated tokens whose log-probabilities went out
    chars: int = 0   # characters of text (for text_offset)


def finish_reason(out) -> str | None:
    return FINISH_REASONS.get(out.finish_reason, out.finish_reason) if out.finished else None


class Answer:
    """What both endpoints share: the id, the choices' progress, usage."""

    def __init__(self, rid: str, created: int, model: str, n: int, prompt_ids: list[int],
                 tokens: TokenText, logprobs: bool, generates: bool = True):
        self.rid, self.created, self.model, self.n = rid, created, model, n
        self.prompt_ids, self.tokens, self.logprobs = prompt_ids, tokens, logprobs
        self.generates = generates  # False: echo with max_tokens 0, nothing generated is shown
        self.sent = [Sent() for _ in range(n)]

    lists_eos = False  # whether the log-probabilities list the EOS token that ended an answer

    def generated(self, out) -> tuple[list[int], list]:
        """The answer's tokens and their log-probabilities (the ending EOS token left out unless
        this answer `lists_eos`)."""
        if not self.generates:
            return [], []
        ids, entries = list(out.token_ids), list(out.logprobs or [])
        if out.finish_reason == "eos" and not self.lists_eos:
            ids, entries = ids[:-1], entries[:-1]
        return ids, entries

    def usage(self, finals) -> Usage:
        done = sum(len(out.token_ids) for out in finals) if self.generates else 0
        prompt = len(self.prompt_ids)
        return Usage(prompt_tokens=prompt, completion_tokens=done, total_tokens=prompt + done)

    def new_tokens(self, out) -> tuple[list[int], list]:
        """Generated tokens of this choice a stream has not reported yet."""
        ids, entries = self.generated(out)
        sent = self.sent[out.index]
        new = ids[sent.tokens:], entries[sent.tokens:]
        sent.tokens = len(ids)
        return new


class CompletionAnswer(Answer):
    """/v1/completions: the text (after the prompt, with `echo`), legacy log-probabilities."""

    lists_eos = True

    def __init__(self, *args, echo: bool = False, prompt_text: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.echo, self.prompt_text = echo, prompt_text

    def _prompt_part(self, out):
        if not self.echo:
            return "", [], []
        return self.prompt_text, list(self.prompt_ids), list(out.prompt_logprobs or [])

    def _choice(self, out, text, ids, entries, offset) -> CompletionChoice:
        logprobs = completion_logprobs(ids, entries, self.tokens, offset) \
            if self.logprobs else None
        return CompletionChoice(index=out.index, text=text, logprobs=logprobs,
                                finish_reason=finish_reason(out))

    def whole(self, finals) -> CompletionResponse:
        choices = []
        for out in finals:
            text, ids, entries = self._prompt_part(out)
            gen_ids, gen_entries = self.generated(out)
            text += out.text if self.generates else ""
            choices.append(self._choice(out, text, ids + gen_ids, entries + gen_entries, 0))
        return CompletionResponse(id=self.rid, created=self.created, model=self.model,
                                  choices=choices, usage=self.usage(finals))

    def start(self) -> list:
        return []

    def chunks(self, out) -> list[CompletionResponse]:
        sent = self.sent[out.index]
        text, ids, entries = self._prompt_part(out) if not sent.started else ("", [], [])
        sent.started = True
        new_ids, new_entries = self.new_tokens(out)
        text += out.new_text if self.generates else ""
        if not (text or new_ids or ids or out.finished):
            return []
        choice = self._choice(out, text, ids + new_ids, entries + new_entries, sent.chars)
        sent.chars += len(text)
        return [CompletionResponse(id=self.rid, created=self.created, model=self.model,
                                   choices=[choice])]

    def usage_chunk(self, finals) -> CompletionResponse:
        return CompletionResponse(id=self.rid, created=self.created, model=self.model,
                                  choices=[], usage=self.usage(finals))


class ChatAnswer(Answer):
    """/v1/chat/completions: an assistant message per choice, chat log-probabilities."""

    def whole(self, finals) -> ChatCompletion:
        choices = []
        for out in finals:
            logprobs = chat_logprobs(self.generated(out)[1], self.tokens) \
                if self.logprobs else None
            choices.append(ChatChoice(index=out.index, message=ChatMessage(content=out.text),
                                      logprobs=logprobs, finish_reason=finish_reason(out)))
        return ChatCompletion(id=self.rid, created=self.created, model=self.model,
                              choices=choices, usage=self.usage(finals))

    def _chunk(self, choice: ChatChunkChoice) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.rid, created=self.created, model=self.model,
                                   choices=[choice])

    def start(self) -> list[ChatCompletionChunk]:
        """Each choice's first chunk: the assistant's role, no text yet."""
        return [self._chunk(ChatChunkChoice(index=i, delta=Delta(role="assistant", content="")))
                for i in range(self.n)]

    def chunks(self, out) -> list[ChatCompletionChunk]:
        reason = finish_reason(out)
        if not (out.new_text or reason):
            return []  # tokens without text yet (half a character): their logprobs come later
        _, entries = self.new_tokens(out)
        logprobs = chat_logprobs(entries, self.tokens) if self.logprobs else None
        delta = Delta(content=out.new_text) if out.new_text or reason is None else Delta()
        return [self._chunk(ChatChunkChoice(index=out.index, delta=delta, logprobs=logprobs,
                                            finish_reason=reason))]

    def usage_chunk(self, finals) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.rid, created=self.created, model=self.model,
                                   choices=[], usage=self.usage(finals))


def merge_completions(wholes: list[CompletionResponse], n: int) -> CompletionResponse:
    """The answers to a batch of prompts as one: prompt i's n choices at indices i*n to
    i*n + n - 1 (OpenAI's order), usage summed, the first answer's id."""
    choices = [c.model_copy(update={"index": i * n + c.index})
               for i, whole in enumerate(wholes) for c in whole.choices]
    prompt = sum(w.usage.prompt_tokens for w in wholes)
    done = sum(w.usage.completion_tokens for w in wholes)
    first = wholes[0]
    return CompletionResponse(id=first.id, created=first.created, model=first.model,
                              choices=choices, usage=Usage(prompt_tokens=prompt,
                                                           completion_tokens=done,
                                                           total_tokens=prompt + done))
