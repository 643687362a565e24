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

The `gguf` package (llama.cpp's own reader, which the model loader uses too) parses the file.
It builds a NumPy view of every one of the ~100,000 vocabulary and merge strings, which takes
several seconds, so the metadata it reads is kept in minillm's cache as JSON (keyed by the
file's name, size and modification time): later loads read that in a fraction of a second.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .bytes_unicode import bytes_to_unicode
from .pretokenize import GGUF_PRE_PATTERNS, GPT2_PATTERN, PreTokenizer

CONTROL, USER_DEFINED = 3, 4


class GGUFMetadataError(ValueError):
    """The file is not a GGUF file, or has no usable tokenizer in its metadata."""


def read_gguf_metadata(path) -> dict:
    """All key-value metadata of a GGUF file, as Python values (arrays become lists)."""
    from ..files import cache_entry, writable_cache_dir

    path = Path(path)
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFMetadataError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
    st = path.stat()
    relative = Path("gguf-metadata") / f"{path.stem}-{st.st_size}-{st.st_mtime_ns}.json"
    cached = cache_entry(relative)
    if cached.is_file():
        try:
            return json.loads(cached.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass  # a damaged copy: read the file again
    metadata = _parse(path)
    cached = writable_cache_dir() / relative
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=cached.parent, delete=False,
                                     suffix=".partial") as f:
        json.dump(metadata, f)
    os.replace(f.name, cached)  # atomic: a parallel reader never sees half a file
    return metadata


def _parse(path: Path) -> dict:
    import gguf

    try:
        fields = gguf.GGUFReader(str(path)).fields
    except (ValueError, IndexError, OSError) as error:  # a cut or damaged file
        raise GGUFMetadataError(f"{path}: cannot read its GGUF metadata ({error}); is the file "
                                "truncated?") from None
    return {name: field.contents() for name, field in fields.items()
            if not name.startswith("GGUF.")}


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
