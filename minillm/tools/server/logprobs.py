"""The engine's log-probabilities (minillm.engine.logprobs.TokenLogprob) in OpenAI's two shapes.

They are the model's raw distribution, log_softmax of the logits, before temperature, top-k/top-p,
the penalties or a JSON constraint: the same text gets the same numbers whatever the sampling
settings (vLLM's default). A token's text is the token decoded alone; a token that is only part
of a character shows U+FFFD there, and its `bytes` (chat) say exactly what it writes.
"""

from __future__ import annotations

from ...decoding.vocabulary import token_bytes
from .responses import ChoiceLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob

FLOOR = -9999.0  # OpenAI's value for "very unlikely"; JSON has no -infinity


class TokenText:
    """Each token's text and bytes, remembered: the same tokens come back again and again."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._text: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        text = self._text.get(token_id)
        if text is None:
            text = self._text[token_id] = self.tokenizer.decode([token_id])
        return text

    def bytes(self, token_id: int) -> list[int]:
        return list(token_bytes(self.tokenizer, token_id))


def _value(logprob: float) -> float:
    return max(float(logprob), FLOOR)


def chat_logprobs(entries, tokens: TokenText) -> ChoiceLogprobs:
    """The chat shape: for each token its text, log-probability, bytes and top alternatives."""
    content = []
    for e in entries:
        top = [TopLogprob(token=tokens.text(t), logprob=_value(lp), bytes=tokens.bytes(t))
               for t, lp in e.top]
        content.append(TokenLogprob(token=tokens.text(e.token_id), logprob=_value(e.logprob),
                                    bytes=tokens.bytes(e.token_id), top_logprobs=top))
    return ChoiceLogprobs(content=content)


def completion_logprobs(token_ids, entries, tokens: TokenText, offset: int = 0
                        ) -> CompletionLogprobs:
    """The legacy completions shape, parallel lists over `token_ids`; `entries[i]` is None for
    a token with nothing before it (the first prompt token). Each token's dictionary holds the
    top alternatives and the token itself; text offsets count from `offset`."""
    texts, values, tops, offsets = [], [], [], []
    for token_id, e in zip(token_ids, entries):
        text = tokens.text(token_id)
        texts.append(text)
        offsets.append(offset)
        offset += len(text)
        if e is None:
            values.append(None)
            tops.append(None)
            continue
        values.append(_value(e.logprob))
        top = {tokens.text(t): _value(lp) for t, lp in e.top}
        top.setdefault(text, _value(e.logprob))
        tops.append(top)
    return CompletionLogprobs(tokens=texts, token_logprobs=values, top_logprobs=tops,
                              text_offset=offsets)
