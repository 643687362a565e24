"""Stopping conditions (停止条件): when one sequence's generation ends, and why.

A sequence ends at the first of:
- an end-of-sequence (EOS) token: the model says it is done        -> finish_reason "eos"
- `max_new_tokens` new tokens: the user's budget is spent          -> finish_reason "length"
- a stop string appearing in the text: a user condition on text    -> finish_reason "stop"

Stop strings are found in text, not tokens, because one string can be split across tokens in many
ways. `TextTracker` turns token ids into text as they arrive, holds back any tail that could still
grow into a stop string, and cuts the text before the stop string when one appears.
"""

from __future__ import annotations


class DiffDecoder:
    """Incremental detokenizing for a tokenizer that has no `stream_decoder()` (a transformers
    tokenizer, for example): decode all ids so far and hand out the part not handed out yet.
    A trailing U+FFFD means the last token ended inside a UTF-8 character: wait for more."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = 0

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self.sent = text[self.sent:], len(text)
        return piece

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids) if self.ids else ""
        piece, self.sent = text[self.sent:], len(text)
        return piece


class NoText:
    """The decoder when there is no tokenizer (a model folder without one): ids only, no text."""

    def push(self, token_id: int) -> str:
        return ""

    def flush(self) -> str:
        return ""


def stream_decoder(tokenizer):
    """The tokenizer's own incremental decoder when it has one, else a `DiffDecoder`."""
    if tokenizer is None:
        return NoText()
    make = getattr(tokenizer, "stream_decoder", None)
    return make() if callable(make) else DiffDecoder(tokenizer)


def check_stop_strings(stop) -> tuple[str, ...]:
    """Normalise `stop` (None, a string or a list of strings) to a tuple of non-empty strings."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise TypeError(f"stop must be a string or a list of strings, got {stop!r}")
    if any(s == "" for s in stop):
        raise ValueError("stop strings must not be empty: an empty string would stop at once")
    return tuple(stop)


class TextTracker:
    """The text of one sequence, built piece by piece, with stop-string detection.

    `push(piece)` adds decoded text and returns the part that is now safe to show: text that cannot
    turn out to be the beginning of a stop string. `finish()` returns whatever was held back.
    After a stop string is found, `stopped` is True and `text` ends just before it."""

    def __init__(self, stop: tuple[str, ...] = ()):
        self.stop = stop
        self.longest = max((len(s) for s in stop), default=0)
        self.text = ""
        self.sent = 0
        self.stopped = False

    def push(self, piece: str) -> str:
        if self.stopped or not piece:
            return ""
        start = max(0, len(self.text) - self.longest + 1)  # a new match must end in `piece`
        self.text += piece
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            self.stopped = True
            return self.finish()
        return self._emit(len(self.text) - self._partial_tail())

    def finish(self) -> str:
        return self._emit(len(self.text))

    def _partial_tail(self) -> int:
        """Length of the longest tail of the text that is the start of some stop string."""
        for n in range(min(self.longest - 1, len(self.text)), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.stop):
                return n
        return 0

    def _emit(self, end: int) -> str:
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent:end], end
        return piece


class Sequence:
    """One sequence being generated: its new tokens, its text, and why it stopped (None while it
    runs). `add(token_id)` records the next token and returns the text that is ready to show."""

    def __init__(self, prompt_ids: list[int], tokenizer, eos_token_ids, max_new_tokens: int,
                 stop: tuple[str, ...] = ()):
        self.prompt_ids = list(prompt_ids)
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        self.max_new_tokens = max_new_tokens
        self.token_ids: list[int] = []
        self.decoder = stream_decoder(tokenizer)
        self.tracker = TextTracker(stop)
        self.finish_reason: str | None = None if max_new_tokens > 0 else "length"

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return self.tracker.text

    def add(self, token_id: int) -> str:
        if self.done:
            raise RuntimeError("this sequence has already finished")
        token_id = int(token_id)
        self.token_ids.append(token_id)
        if token_id in self.eos_token_ids:  # the EOS token is kept in token_ids, not in text
            self.finish_reason = "eos"
            return self.tracker.push(self.decoder.flush()) + self.tracker.finish()
        piece = self.tracker.push(self.decoder.push(token_id))
        if self.tracker.stopped:
            self.finish_reason = "stop"
        elif len(self.token_ids) >= self.max_new_tokens:
            piece += self.tracker.push(self.decoder.flush())
            piece += self.tracker.finish()
            self.finish_reason = "stop" if self.tracker.stopped else "length"
        return piece
