"""The byte-level BPE tokenizer (分词器): text -> token ids -> text.

Encoding runs in three steps:
  1. special tokens written in the text (`<|im_start|>`, ...) are cut out whole;
  2. the text between them is cut into words by the pre-tokenizer's regex;
  3. each word's UTF-8 bytes become one token each, then BPE merges adjacent tokens, lowest
     rank first, until no pair in the word has a merge. A word already seen comes from a cache.
Decoding joins the tokens' bytes and reads them as UTF-8.
"""

from __future__ import annotations

import json
import operator
from itertools import chain
import os
from collections.abc import Iterable
from pathlib import Path

import regex

from . import chat
from .bpe import bpe_word
from .bytes_unicode import bytes_to_unicode, is_byte_level, token_to_bytes
from .pretokenize import PreTokenizer
from .streaming import StreamDecoder

FORMAT = "minillm-tokenizer"
_CACHE_LIMIT = 200_000


class Tokenizer:
    """A byte-level BPE tokenizer.

    tokens          the vocabulary: token id -> its spelling in GPT-2's byte alphabet ("Ġthe"),
                    or the text of a special token; None for an id that has no token
    merges          (left, right) spellings in rank order: merges[0] is applied first
    special_tokens  text -> id for tokens matched whole in the text and marked special
    added_tokens    text -> id for tokens matched whole but not special (decoded like text)
    """

    def __init__(self, tokens: list[str | None], merges: Iterable[tuple[str, str]],
                 special_tokens: dict[str, int] | None = None, *,
                 added_tokens: dict[str, int] | None = None,
                 pre_tokenizer: PreTokenizer | None = None,
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 pad_token_id: int | None = None, eos_token_ids: Iterable[int] = (),
                 chat_template: str | None = None, ignore_merges: bool = False,
                 name: str = "tokenizer"):
        self.name = name
        self.pre_tokenizer = pre_tokenizer or PreTokenizer()
        self.chat_template = chat_template
        self.ignore_merges = ignore_merges
        self._tokens = list(tokens)
        self._special = dict(special_tokens or {})
        self._added = {**dict(added_tokens or {}), **self._special}
        for text, i in self._added.items():
            if not isinstance(i, int) or not 0 <= i < len(self._tokens):
                raise ValueError(f"special token {text!r} has id {i!r}, outside the vocabulary "
                                 f"of {len(self._tokens)}")
            self._tokens[i] = text if self._tokens[i] is None else self._tokens[i]
        self._special_ids = frozenset(self._special.values())

        # id -> bytes. Special and added tokens stand for their own text.
        self._id_bytes: list[bytes | None] = []
        added_ids = {i: text for text, i in self._added.items()}
        for i, spelling in enumerate(self._tokens):
            if i in added_ids:
                self._id_bytes.append(added_ids[i].encode("utf-8"))
            elif spelling is None:
                self._id_bytes.append(None)
            elif is_byte_level(spelling):
                self._id_bytes.append(token_to_bytes(spelling))
            else:
                self._id_bytes.append(spelling.encode("utf-8"))
        # spelling -> id, for ordinary tokens (an ordinary token wins over a special one).
        self._ids = {s: i for i, s in enumerate(self._tokens)
                     if s is not None and i not in added_ids}  # a repeated spelling: last id
        for i in added_ids:
            self._ids.setdefault(self._tokens[i], i)
        alphabet = bytes_to_unicode()
        missing = [b for b in range(256) if alphabet[b] not in self._ids]
        if len(missing) > 128:
            raise ValueError(f"the vocabulary has no token for {len(missing)} of the 256 bytes: "
                             "not a byte-level BPE vocabulary")
        # Bytes without a token are dropped before BPE, as the Rust tokenizer does. SmolLM2 has
        # 21 such bytes (six control characters, and lead bytes of rare or invalid UTF-8).
        self.missing_bytes = bytes(missing)
        self._byte_ids = [self._ids.get(alphabet[b]) for b in range(256)]

        # merges[rank] = (left id, right id); _ranks: pair -> rank; _table[rank] = (left, right,
        # merged id). A pair listed twice keeps its first rank.
        self.merges: list[tuple[int, int]] = []
        self._ranks: dict[tuple[int, int], int] = {}
        self._table: list[tuple[int, int, int]] = []
        for rank, (left, right) in enumerate(merges):
            try:
                pair = (self._ids[left], self._ids[right])
                merged = self._ids[left + right]
            except KeyError as error:
                raise ValueError(f"merge {rank} ({left!r} + {right!r}) uses {error.args[0]!r}, "
                                 "which is not in the vocabulary") from None
            self._ranks.setdefault(pair, rank)
            self.merges.append(pair)
            self._table.append((*pair, merged))

        self._special_re = None
        if self._added:
            alternatives = sorted(self._added, key=len, reverse=True)
            self._special_re = regex.compile("|".join(regex.escape(t) for t in alternatives))
        self._cache: dict[str, list[int]] = {}

        self.bos_token_id = self._optional_id(bos_token_id, "bos_token_id")
        self.eos_token_id = self._optional_id(eos_token_id, "eos_token_id")
        self.pad_token_id = self._optional_id(pad_token_id, "pad_token_id")
        stops = [] if self.eos_token_id is None else [self.eos_token_id]
        for i in list(eos_token_ids) + [self._added.get("<|endoftext|>")]:
            if i is not None and self._check_id(i) not in stops:
                stops.append(i)
        self.eos_token_ids: tuple[int, ...] = tuple(stops)

    # --- the vocabulary -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._id_bytes)

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special token text -> id (a copy)."""
        return dict(self._special)

    def special_token_id(self, text: str) -> int:
        """The id of a special token, by its text, e.g. "<|im_end|>"."""
        if text not in self._special:
            known = ", ".join(sorted(self._special, key=self._special.get)[:20])
            raise ValueError(f"unknown special token {text!r}; this tokenizer's special tokens "
                             f"are: {known or '(none)'}")
        return self._special[text]

    def id_to_token(self, token_id) -> str:
        """The vocabulary's spelling of a token, e.g. 'Ġthe' (Ġ stands for the space byte)."""
        return self._tokens[self._check_id(token_id)]

    def token_bytes(self, token_id) -> bytes:
        """The bytes a token stands for, e.g. b' the'."""
        return self._id_bytes[self._check_id(token_id)]

    def _check_id(self, token_id) -> int:
        try:
            i = operator.index(token_id)
        except TypeError:
            raise TypeError(f"token ids must be integers, got {type(token_id).__name__} "
                            f"{token_id!r}") from None
        if not 0 <= i < len(self._id_bytes) or self._id_bytes[i] is None:
            raise ValueError(f"token id {i} is outside the vocabulary: valid ids are 0 to "
                             f"{len(self._id_bytes) - 1} (vocab_size {len(self._id_bytes)})")
        return i

    def _optional_id(self, token_id, what: str):
        if token_id is None:
            return None
        try:
            return self._check_id(token_id)
        except ValueError as error:
            raise ValueError(f"{what}: {error}") from None

    # --- encoding ---------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids for `text`. Special tokens written in the text (`<|im_end|>`) become their
        one id; no BOS is added."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__}"
                            + (" (decode bytes to str first)" if isinstance(text, bytes) else ""))
        if self._special_re is None:
            return self._encode_ordinary(text)
        ids, start = [], 0
        for match in self._special_re.finditer(text):
            if match.start() > start:
                ids += self._encode_ordinary(text[start:match.start()])
            ids.append(self._added[match.group()])
            start = match.end()
        if start < len(text):
            ids += self._encode_ordinary(text[start:])
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Like `encode`, but special tokens written in the text are encoded as plain text."""
        if not isinstance(text, str):
            raise TypeError(f"encode_ordinary takes a str, not {type(text).__name__}")
        return self._encode_ordinary(text)

    def _encode_ordinary(self, text: str) -> list[int]:
        cache = self._cache
        words = self.pre_tokenizer(text)
        parts = list(map(cache.get, words))  # the words seen before: one dict look-up each
        if None in parts:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            for k, part in enumerate(parts):
                if part is None:
                    part = cache.get(words[k])
                    if part is None:
                        part = cache[words[k]] = self._encode_word(words[k])
                    parts[k] = part
        return list(chain.from_iterable(parts))

    def _encode_word(self, word: str) -> list[int]:
        try:
            data = word.encode("utf-8")
        except UnicodeEncodeError as error:
            bad = word[error.start]
            raise ValueError(f"the text holds a lone surrogate U+{ord(bad):04X}, which is not "
                             "a character and has no UTF-8 bytes; fix the text first") from None
        if self.ignore_merges:
            whole = self._ids.get("".join(bytes_to_unicode()[b] for b in data))
            if whole is not None:
                return [whole]
        if self.missing_bytes:
            data = data.translate(None, self.missing_bytes)
        byte_ids = self._byte_ids
        return bpe_word([byte_ids[b] for b in data], self._ranks, self._table)

    def tokens(self, text: str) -> list[str]:
        """The text of each token of `text` (a token that ends inside a character shows the
        bytes it has, written as \\xNN)."""
        return [self.token_bytes(i).decode("utf-8", errors="backslashreplace")
                for i in self.encode(text)]

    # --- decoding ---------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`. Bytes that do not form valid UTF-8 become U+FFFD."""
        if isinstance(ids, (str, bytes)):
            raise TypeError(f"decode takes a list of token ids, not {type(ids).__name__}")
        if not hasattr(ids, "__iter__"):
            raise TypeError(f"decode takes a list of token ids, not {type(ids).__name__}")
        table, check, skip = self._id_bytes, self._check_id, skip_special_tokens
        parts = []
        for token_id in ids:
            i = check(token_id)
            if skip and i in self._special_ids:
                continue
            parts.append(table[i])
        return b"".join(parts).decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special_tokens: bool = False) -> StreamDecoder:
        """An incremental decoder: `push(token_id)` returns the text completed so far."""
        return StreamDecoder(self, skip_special_tokens)

    # --- chat -----------------------------------------------------------------------------

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **extra) -> str:
        """The conversation `messages` ([{"role": ..., "content": ...}, ...]) written in the
        model's chat format, ending with the assistant's header when `add_generation_prompt`."""
        if self.chat_template is None:
            raise ValueError(f"{self.name} has no chat template; set `tokenizer.chat_template` "
                             "to a Jinja template (minillm.tokenizer.CHATML_TEMPLATE is ChatML)")
        return chat.render(self.chat_template, messages, add_generation_prompt, **extra)

    # --- saving ---------------------------------------------------------------------------

    def to_dict(self) -> dict:
        spell = {i: s for i, s in enumerate(self._tokens)}
        return {
            "format": FORMAT, "version": 1, "name": self.name,
            "tokens": self._tokens,
            "merges": [f"{spell[a]} {spell[b]}" for a, b in self.merges],
            "special_tokens": self._special,
            "added_tokens": {t: i for t, i in self._added.items() if t not in self._special},
            "pre_tokenizer": self.pre_tokenizer.to_dict(),
            "bos_token_id": self.bos_token_id, "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id, "eos_token_ids": list(self.eos_token_ids),
            "chat_template": self.chat_template, "ignore_merges": self.ignore_merges,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer to one JSON file; `minillm.load_tokenizer(path)` reads it back."""
        path = Path(path)
        if path.is_dir():
            path = path / "minillm-tokenizer.json"
        path.write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: dict) -> "Tokenizer":
        if data.get("format") != FORMAT:
            raise ValueError(f"not a saved minillm tokenizer (format {data.get('format')!r})")
        pre = data.get("pre_tokenizer") or {}
        return cls(data["tokens"], [tuple(m.split(" ")) for m in data["merges"]],
                   data.get("special_tokens"), added_tokens=data.get("added_tokens"),
                   pre_tokenizer=PreTokenizer(pre.get("steps"), pre.get("normalizer")),
                   bos_token_id=data.get("bos_token_id"), eos_token_id=data.get("eos_token_id"),
                   pad_token_id=data.get("pad_token_id"),
                   eos_token_ids=data.get("eos_token_ids") or (),
                   chat_template=data.get("chat_template"),
                   ignore_merges=bool(data.get("ignore_merges")), name=data.get("name", "tokenizer"))

    def __repr__(self) -> str:
        return (f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, merges={len(self.merges)}, "
                f"special_tokens={len(self._special)})")
