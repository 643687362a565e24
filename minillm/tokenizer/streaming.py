"""Streaming detokenization (流式解码): text out as soon as it is whole, one token at a time.

A byte-level token is a handful of bytes, not always a whole character: "你" is three bytes
(e4 bd a0), and SmolLM2 may spend one token on each. Decoding each token alone would print
broken characters. The stream decoder keeps the bytes of an unfinished character back until the
token that completes it arrives, so what it emits, put together, is exactly `decode(ids)`.
"""

from __future__ import annotations

import codecs


class StreamDecoder:
    """`push(token_id)` returns the text completed by that token ("" while a character is still
    unfinished); `flush()` returns whatever is left at the end (an unfinished character becomes
    U+FFFD, as in `decode`)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ids: list[int] = []

    def push(self, token_id) -> str:
        token_id = self._tokenizer._check_id(token_id)
        self.ids.append(token_id)
        if self._skip and token_id in self._tokenizer._special_ids:
            return ""
        return self._utf8.decode(self._tokenizer._id_bytes[token_id])

    def flush(self) -> str:
        """The text still held back (an unfinished character at the very end), and reset."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text

    def __repr__(self) -> str:
        return f"StreamDecoder({len(self.ids)} tokens pushed)"
