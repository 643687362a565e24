"""Reading a tokenizer out of a GGUF file's metadata.

A GGUF file starts with a header of key-value metadata, then the tensors. The tokenizer lives in
the metadata under llama.cpp's names:

    tokenizer.ggml.model        "gpt2" for a byte-level BPE
    tokenizer.ggml.pre          which pre-tokenizer regex ("smollm" means GPT-2's)
    tokenizer.ggml.tokens       the vocabulary, one string per id ("Ġthe")
    tokenizer.ggml.token_type   1 normal, 3 control (special), 4 user-defined (added), ...
    tokenizer.ggml.merges       "Ġ t", "Ġ a", ... in rank order
    tokenizer.ggml.bos_token_id / eos_token_id / padding_token_id / unknown_token_id
    tokenizer.chat_template     a Jinja template

Only the metadata is read (about 0.1 s), not the 100 MB of weights after it.
"""

from __future__ import annotations

import struct
from pathlib import Path

from .bytes_unicode import bytes_to_unicode
from .pretokenize import GGUF_PRE_PATTERNS, GPT2_PATTERN, PreTokenizer

# value type -> struct format (the scalar types); 8 is a string, 9 an array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
CONTROL, USER_DEFINED = 3, 4


class GGUFMetadataError(ValueError):
    """The file is not a GGUF file, or has no usable tokenizer in its metadata."""


def read_gguf_metadata(path) -> dict:
    """All key-value metadata of a GGUF file, as Python values (arrays become lists)."""
    path = Path(path)
    with open(path, "rb") as f:
        reader = _Reader(f)
        if reader.read(4) != b"GGUF":
            raise GGUFMetadataError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
        version = reader.unpack("I")
        if version not in (2, 3):
            raise GGUFMetadataError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        reader.unpack("Q")  # tensor count
        count = reader.unpack("Q")
        metadata = {}
        for _ in range(count):
            key = reader.string()
            metadata[key] = reader.value(reader.unpack("I"))
    return metadata


class _Reader:
    """Little-endian reading from a file, in 1 MB blocks."""

    def __init__(self, f):
        self.f, self.buf, self.pos = f, b"", 0

    def read(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            self.buf = self.buf[self.pos:] + self.f.read(max(n, 1 << 20))
            self.pos = 0
            if n > len(self.buf):
                raise GGUFMetadataError("the GGUF file ends inside its metadata (truncated?)")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        return struct.unpack("<" + fmt, self.read(size))[0]

    def string(self) -> str:
        return self.read(self.unpack("Q")).decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, n = self.unpack("I"), self.unpack("Q")
            if item_kind in _SCALARS:
                fmt = _SCALARS[item_kind]
                return list(struct.unpack(f"<{n}{fmt}", self.read(n * struct.calcsize(fmt))))
            return [self.value(item_kind) for _ in range(n)]
        raise GGUFMetadataError(f"unknown GGUF value type {kind}")


def tokenizer_from_gguf(path):
    """minillm's Tokenizer for the vocabulary stored in a GGUF file."""
    from .tokenizer import Tokenizer

    path = Path(path)
    meta = read_gguf_metadata(path)
    if "tokenizer.ggml.tokens" not in meta:
        raise GGUFMetadataError(f"{path} has no tokenizer metadata (no 'tokenizer.ggml.tokens'); "
                                "load the tokenizer from the model's folder instead")
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFMetadataError(f"{path} holds a {model!r} tokenizer; minillm reads byte-level "
                                "BPE vocabularies only (tokenizer.ggml.model = 'gpt2')")
    tokens = meta["tokenizer.ggml.tokens"]
    if "tokenizer.ggml.merges" not in meta:
        raise GGUFMetadataError(f"{path} has a byte-level vocabulary but no merges")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    alphabet = set(bytes_to_unicode().values())
    # As transformers reads it: control tokens spelled in the byte alphabet are special,
    # user-defined ones are added tokens matched whole in the text.
    special = {t: i for i, (t, k) in enumerate(zip(tokens, types))
               if k == CONTROL and set(t) <= alphabet}
    added = {t: i for i, (t, k) in enumerate(zip(tokens, types)) if k == USER_DEFINED}
    pattern = GGUF_PRE_PATTERNS.get(meta.get("tokenizer.ggml.pre"), GPT2_PATTERN)
    return Tokenizer(
        tokens, [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]], special,
        added_tokens=added, pre_tokenizer=PreTokenizer([{"type": "split", "pattern": pattern}]),
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta.get("tokenizer.ggml.padding_token_id"),
        chat_template=meta.get("tokenizer.chat_template"),
        name=meta.get("general.name") or path.stem,
    )
