"""Bytes <-> printable characters: how a byte-level vocabulary writes its tokens down.

A byte-level BPE works on UTF-8 bytes, but vocabularies are stored as text (in `tokenizer.json`
and in GGUF metadata). GPT-2 introduced a fixed table that gives every one of the 256 byte values
a printable character: the printable bytes keep their own character ("a" is "a"), the others
(control bytes, the space, bytes 127-160, ...) are shifted to characters from U+0100 onward.
That is why a space shows up as "Ġ" (byte 0x20 -> U+0120) and a newline as "Ċ" in vocabularies.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: byte value (0-255) -> the printable character that stands for it."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


@lru_cache(maxsize=None)
def unicode_to_bytes() -> dict[str, int]:
    """The inverse table: printable character -> byte value."""
    return {char: b for b, char in bytes_to_unicode().items()}


def token_to_bytes(token: str) -> bytes:
    """The bytes a vocabulary entry such as "Ġhello" stands for (b" hello")."""
    table = unicode_to_bytes()
    try:
        return bytes(table[char] for char in token)
    except KeyError as error:
        raise ValueError(f"{token!r} is not written in the byte-level alphabet: "
                         f"{error.args[0]!r} stands for no byte") from None


def bytes_to_token(data: bytes) -> str:
    """The vocabulary spelling of some bytes: b" hello" -> "Ġhello"."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in data)


def is_byte_level(token: str) -> bool:
    """True when every character of `token` stands for a byte."""
    table = unicode_to_bytes()
    return all(char in table for char in token)
