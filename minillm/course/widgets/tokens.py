"""Tokens as the widgets show them to people.

A byte-level tokenizer may cut a character in two: with an English vocabulary most Chinese
characters are two or three tokens of one or two bytes each, and such a token decoded alone is
"\ufffd". A label shows those bytes instead (`\\xe4\\xbd`), and running text joins the tokens of one
character before it shows it. Special tokens (`<|im_end|>`) are left out of running text: a note
says why a generation ended.
"""

from __future__ import annotations

from ..language import say

__all__ = ["token_label", "has_byte_labels", "bytes_note", "text_pieces"]


def bytes_note() -> str:
    """What a \\x.. label means, for a chart's axis (in the course's language)."""
    return say("\\x..: bytes of a character cut across tokens", "\\x..：被切到多个词元里的"
               "一个字符的字节")


def _token_bytes(tokenizer, token_id: int) -> bytes | None:
    read = getattr(tokenizer, "token_bytes", None)
    return read(token_id) if read is not None else None


def _special_ids(tokenizer) -> set[int]:
    """minillm's tokenizer names its special tokens in `special_tokens`, transformers' in
    `all_special_ids`."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    named = getattr(tokenizer, "special_tokens", None)
    return ids | set(named.values()) if isinstance(named, dict) else ids


def token_label(tokenizer, token_id: int) -> str:
    """A token for a chart's axis: its text with spaces kept and control characters escaped
    (' the', '\\n'); the bytes that are only part of a character as \\x.. ('\\xe4\\xbd'); "∅"
    for a token with no text."""
    data = _token_bytes(tokenizer, token_id)
    if data is None:  # a tokenizer that cannot give bytes: its decoded text
        return repr(tokenizer.decode([token_id]))[1:-1] or "∅"
    text = data.decode("utf-8", errors="surrogateescape")  # a stray byte b -> U+DC00 + b
    label = "".join(f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF
                    else repr(ch)[1:-1] for ch in text)
    return label or "∅"


def has_byte_labels(tokenizer, token_ids) -> bool:
    """Whether any of `token_ids` holds only part of a character (its label shows bytes)."""
    for token_id in token_ids:
        data = _token_bytes(tokenizer, token_id)
        if data is None:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return False


def text_pieces(tokenizer, token_ids) -> list[tuple[str, list[int]]]:
    """Running text cut at token boundaries: (text, positions of the tokens it came from). The
    tokens of a character cut across tokens are joined into one piece; special tokens give no
    text."""
    special = _special_ids(tokenizer)
    pieces, pending, where = [], b"", []
    for position, token_id in enumerate(token_ids):
        if token_id in special:
            continue
        data = _token_bytes(tokenizer, token_id)
        if data is None:
            pieces.append((tokenizer.decode([token_id]), [position]))
            continue
        pending, where = pending + data, where + [position]
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.reason == "unexpected end of data":
                continue  # the rest of the character is in the next token
            text = pending.decode("utf-8", errors="replace")
        pieces.append((text, where))
        pending, where = b"", []
    if pending:
        pieces.append((pending.decode("utf-8", errors="replace"), where))
    return pieces
