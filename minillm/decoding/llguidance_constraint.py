"""The same JSON constraint as json_constraint.py, with the token masks computed by llguidance, a
maintained grammar engine (Rust; the optional extra `minillm-course[grammar]`).

    constraint = LLGuidanceConstraint(tokenizer, schema)     # as JSONConstraint(tokenizer, schema)

The schema goes through minillm's own compile_schema (the same subset, the same SchemaError
naming what is not supported), then json_lark.lark_grammar writes it as a Lark grammar that
llguidance compiles. At each step an LLMatcher per row says which tokens may come next; the end
of the answer follows minillm's rule (the end-of-sequence tokens once the JSON is complete, or
when nothing else fits), and special tokens are never allowed, so the masks are minillm's masks
(json_lark.py says how the grammar is kept the same).

minillm's grammar is the one the lessons teach; this one is for speed: llguidance walks the
vocabulary's trie in compiled code, where minillm walks it in Python and keeps each state's mask.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from .json_constraint import end_tokens, fit_mask
from .json_grammar import SchemaError, compile_schema
from .json_lark import lark_grammar
from .processors import NEG_INF, GeneratedTokens
from .vocabulary import special_token_ids, token_bytes

MAX_KEPT_MATCHERS = 256  # rows' matchers kept between calls (a row not kept is replayed)
EXTRA = "grammar"
INSTALL = f"pip install 'minillm-course[{EXTRA}]' (or pip install llguidance)"


def import_llguidance():
    """The llguidance module, or an ImportError that says how to install it."""
    try:
        import llguidance
    except ImportError:
        raise ImportError(f"the llguidance grammar backend needs the package llguidance, which "
                          f"is not installed: {INSTALL}; or use the minillm backend") from None
    return llguidance


class _TokenizerView:
    """What llguidance's TokenizerWrapper reads of a tokenizer: every token's bytes, the special
    ones and the end-of-sequence token."""

    def __init__(self, tokenizer, size: int, eos: int):
        special = special_token_ids(tokenizer)
        self.tokens = []
        for i in range(size):
            try:
                self.tokens.append(token_bytes(tokenizer, i))
            except (ValueError, KeyError, IndexError):  # an id with no token
                self.tokens.append(b"")
        self.special_token_ids = sorted(i for i in special if i < size)
        self.eos_token_id, self.bos_token_id = eos, None
        self._tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text))


_built: dict[int, tuple] = {}


def ll_tokenizer(tokenizer, size: int, eos: list[int]):
    """llguidance's view of `tokenizer`, built once per tokenizer, size and end tokens (it reads
    every token's bytes)."""
    llguidance = import_llguidance()
    key = (id(tokenizer), size, tuple(eos))
    kept = _built.get(key)
    if kept is None or kept[0] is not tokenizer:
        view = llguidance.TokenizerWrapper(_TokenizerView(tokenizer, size, eos[0]))
        kept = _built[key] = (tokenizer, llguidance.LLTokenizer(view, eos_token=eos))
    return kept[1]


class LLGuidanceConstraint(GeneratedTokens):
    """JSONConstraint's masks from llguidance. The same arguments and errors as JSONConstraint,
    and one more refusal: an object of more than json_lark.MAX_PROPERTIES properties."""

    def __init__(self, tokenizer, schema=None, eos_token_ids=None,
                 prompt_length: int | None = None):
        super().__init__(prompt_length)
        llguidance = import_llguidance()
        grammar = lark_grammar(compile_schema(schema))
        self.eos = end_tokens(tokenizer, eos_token_ids)
        self.size = getattr(tokenizer, "vocab_size", None) or len(tokenizer)
        self.schema, self.grammar = schema, grammar
        self.tokenizer = ll_tokenizer(tokenizer, self.size, self.eos)
        start = llguidance.LLMatcher(self.tokenizer, llguidance.grammar_from("lark", grammar))
        if start.is_error():
            raise SchemaError(f"llguidance could not compile the schema's grammar: "
                              f"{start.get_error()}")
        self._matchers: dict[tuple, object | None] = {(): start}
        self._bits = np.zeros((self.size + 31) // 32, dtype=np.int32)
        special = special_token_ids(tokenizer) | set(self.eos)
        self._special = np.array(sorted(i for i in special if i < self.size), dtype=np.int64)
        self._eos = np.array([i for i in self.eos if i < self.size], dtype=np.int64)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = [tuple(r) for r in self.generated(input_ids).tolist()]
        mask = torch.ones_like(scores, dtype=torch.bool)  # a row that left the grammar: as is
        # a kept matcher that only one row goes on from moves on in place (else: copied)
        extends = Counter(tokens[:-1] for tokens in rows if tokens)
        found = {}
        for row, tokens in enumerate(rows):
            matcher = found[tokens] = self.state_after(tokens, extends[tokens[:-1]] == 1)
            if matcher is not None:
                mask[row] = fit_mask(self.allowed(matcher), scores.shape[-1]).to(scores.device)
        for prefix in extends:  # gone on from: not needed again (moved, or copied by each row)
            if prefix:
                self._matchers.pop(prefix, None)
        # the others stay: the engine calls once per sample, each with its own row
        self._matchers.update(found)
        while len(self._matchers) > MAX_KEPT_MATCHERS:
            self._matchers.pop(next(k for k in self._matchers if k))  # the oldest
        return scores.masked_fill(~mask, NEG_INF)

    def state_after(self, tokens: tuple, in_place: bool = False):
        """A matcher after the generated `tokens` (None: they are not a valid start). With
        `in_place`, a kept matcher one token short moves on instead of being copied."""
        known = len(tokens)
        while tokens[:known] not in self._matchers:
            known -= 1
        matcher = self._matchers[tokens[:known]]
        if known == len(tokens) or matcher is None:
            return matcher
        if not (in_place and known == len(tokens) - 1 and known > 0):
            matcher = matcher.deep_copy()  # the kept one may be another row's too
        for token in tokens[known:]:
            if not matcher.consume_token(token) or matcher.is_error():
                return None
        return matcher

    def allowed(self, matcher) -> torch.Tensor:
        """(vocab,) bool: the tokens that may come next for `matcher`."""
        matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        mask = np.unpackbits(self._bits.view(np.uint8), count=self.size,
                             bitorder="little").view(np.bool_)
        mask[self._special] = False  # never allowed, as in minillm (the eos ids are special too)
        if matcher.is_accepting() or not mask.any():  # done (or stuck): the end
            mask[self._eos] = True
        return torch.from_numpy(mask)


__all__ = ["LLGuidanceConstraint", "import_llguidance"]
