"""A tokenizer's vocabulary as bytes: what each token writes, and a trie (前缀树) of them.

Text is bytes to the model: a byte-level BPE token may even be half of a character ("你" is
three bytes, which SmolLM2 may spend three tokens on). So every rule about what text may come
next (json_constraint.py) and every report of a token (the server's logprobs "bytes") works on
the token's bytes.
"""

from __future__ import annotations

import torch


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes `token_id` writes. Exact with a tokenizer that has `token_bytes` (minillm's);
    otherwise the token decoded alone, in UTF-8 (a token that ends inside a character then shows
    as U+FFFD)."""
    exact = getattr(tokenizer, "token_bytes", None)
    if exact is not None:
        return exact(token_id)
    return tokenizer.decode([token_id]).encode("utf-8")


def special_token_ids(tokenizer) -> set[int]:
    """Ids of the tokens that stand for a marker, not for text (<|im_end|>, ...)."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    ids |= set((getattr(tokenizer, "special_tokens", None) or {}).values())
    return ids


class TrieNode:
    """One byte string: the tokens that are exactly it, and the longer strings below it."""

    __slots__ = ("children", "tokens")

    def __init__(self):
        self.children: dict[int, TrieNode] = {}
        self.tokens: list[int] = []

    def insert(self, data: bytes, token_id: int) -> None:
        node = self
        for byte in data:
            node = node.children.setdefault(byte, TrieNode())
        node.tokens.append(token_id)


def is_plain(byte: int) -> bool:
    """A byte that may stand as it is inside a JSON string: not a quote, not a backslash, not a
    control byte."""
    return byte >= 0x20 and byte not in b'"\\'


class Vocabulary:
    """The text tokens of `tokenizer` (special tokens left out), as

    size     the number of token ids
    trie     every text token, by its bytes
    plain    (size,) bool: tokens made only of plain bytes (see is_plain)
    characters (size,) int: how many UTF-8 characters begin in each token (bytes that are not
             continuation bytes), for strings with a maxLength
    others   a trie of the text tokens that are not plain

    `Vocabulary.of(tokenizer)` builds it once per tokenizer (about a second for 49,152 tokens)."""

    _built: dict[int, tuple[object, "Vocabulary"]] = {}

    def __init__(self, tokenizer):
        self.size = getattr(tokenizer, "vocab_size", None) or len(tokenizer)
        special = special_token_ids(tokenizer)
        self.trie, self.others = TrieNode(), TrieNode()
        self.plain = torch.zeros(self.size, dtype=torch.bool)
        self.characters = torch.zeros(self.size, dtype=torch.int32)
        for i in range(self.size):
            if i in special:
                continue
            try:
                data = token_bytes(tokenizer, i)
            except (ValueError, KeyError, IndexError):  # an id with no token
                continue
            if not data:
                continue
            self.trie.insert(data, i)
            self.characters[i] = sum(1 for b in data if not 0x80 <= b < 0xC0)
            if all(is_plain(b) for b in data):
                self.plain[i] = True
            else:
                self.others.insert(data, i)

    @classmethod
    def of(cls, tokenizer) -> "Vocabulary":
        kept = cls._built.get(id(tokenizer))
        if kept is None or kept[0] is not tokenizer:
            kept = cls._built[id(tokenizer)] = (tokenizer, cls(tokenizer))
        return kept[1]
