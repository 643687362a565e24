"""Constrained decoding (约束解码): a logits processor that lets the model write only JSON that
matches a schema.

    from minillm.decoding import JSONConstraint
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}
    out = minillm.generate(model, tokenizer, prompt, max_new_tokens=60,
                           logits_processor=JSONConstraint(tokenizer, schema))
    json.loads(out.text)                      # parses, and matches the schema

Before each token is chosen, it asks of every token in the vocabulary: would the text so far,
followed by this token's bytes, still be the beginning of valid JSON for the schema
(json_grammar.JSONGrammar)? Every token that would not gets the score -inf, so no sampler can
pick it; the model's preferences among the allowed tokens are kept. Once the JSON is complete,
only the end-of-sequence token is allowed, so the answer ends there.

Asking 49,152 tokens one at a time at every step would be slow in Python. Three things make it
quick:
- the vocabulary is a trie (前缀树) of token bytes: tokens that begin alike are checked together,
  and a beginning that fails rules out every token under it at once;
- inside a string, a plain byte (not a quote, a backslash or a control byte) leaves the state as
  it is (or only counts a character, under a maxLength), so every token of plain bytes that fits
  is allowed without a look; only the others are walked;
- the allowed tokens of each state are kept, so a state met again costs nothing.

The rule looks only at the generated tokens. Like the penalties in processors.py it learns where
they start at its first call (see `GeneratedTokens`), so one constraint serves one generation:
the rows of one batch, or the n samples of one engine request.
"""

from __future__ import annotations

import torch

from .json_grammar import JSONGrammar, SchemaError
from .processors import NEG_INF, GeneratedTokens
from .vocabulary import Vocabulary, token_bytes

MAX_KEPT_STATES = 2048  # allowed-token masks kept (each one bool per token: 48 kB for SmolLM2)


class JSONConstraint(GeneratedTokens):
    """Allow only the tokens that keep the answer valid JSON for `schema` (a dict in the subset
    json_grammar supports; None: any JSON object), then only `eos_token_ids` (default: the
    tokenizer's). Raises SchemaError (a ValueError) naming what the schema uses that is not
    supported."""

    def __init__(self, tokenizer, schema=None, eos_token_ids=None,
                 prompt_length: int | None = None):
        super().__init__(prompt_length)
        self.grammar = JSONGrammar(schema)
        self.eos = end_tokens(tokenizer, eos_token_ids)
        self.vocab = Vocabulary.of(tokenizer)
        self.tokenizer = tokenizer
        self._states: dict[tuple, tuple | None] = {(): self.grammar.start}
        self._allowed: dict[tuple, torch.Tensor] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = self.generated(input_ids).tolist()
        mask = torch.ones_like(scores, dtype=torch.bool)  # a row that left the grammar: as is
        for row, tokens in enumerate(rows):
            state = self.state_after(tuple(tokens))
            if state is not None:
                mask[row] = fit_mask(self.allowed(state), scores.shape[-1]).to(scores.device)
        return scores.masked_fill(~mask, NEG_INF)

    def state_after(self, tokens: tuple):
        """The grammar's state after the generated `tokens` (None: they are not a valid start)."""
        known = len(tokens)
        while tokens[:known] not in self._states:
            known -= 1
        state = self._states[tokens[:known]]
        for k in range(known, len(tokens)):
            if state is not None:
                state = self.grammar.feed(state, token_bytes(self.tokenizer, tokens[k]))
            self._states[tokens[:k + 1]] = state
        return state

    def allowed(self, state) -> torch.Tensor:
        """(vocab,) bool: the tokens that may come next in `state`."""
        mask = self._allowed.get(state)
        if mask is None:
            if len(self._allowed) >= MAX_KEPT_STATES:
                self._allowed.clear()
            mask = self._allowed[state] = self._compute(state)
        return mask

    def _compute(self, state) -> torch.Tensor:
        if self.grammar.in_string_text(state):
            mask, trie = self.vocab.plain.clone(), self.vocab.others
            room = self.grammar.string_room(state)
            if room is not None:
                mask &= self.vocab.characters <= room
        else:
            mask, trie = torch.zeros(self.vocab.size, dtype=torch.bool), self.vocab.trie
        found, todo = [], [(trie, state)]
        while todo:  # depth first through the trie, dropping a branch at its first bad byte
            node, at = todo.pop()
            for byte, child in node.children.items():
                after = self.grammar.feed_byte(at, byte)
                if after is not None:
                    found.extend(child.tokens)
                    todo.append((child, after))
        mask[found] = True
        if self.grammar.is_complete(state) or not mask.any():  # done (or stuck): the end
            mask[[i for i in self.eos if i < self.vocab.size]] = True
        return mask


def end_tokens(tokenizer, eos_token_ids=None) -> list[int]:
    """The end-of-sequence ids a constraint allows once the JSON is complete: `eos_token_ids`,
    or the tokenizer's."""
    eos = getattr(tokenizer, "eos_token_ids", ()) if eos_token_ids is None else eos_token_ids
    eos = sorted({int(i) for i in eos})
    if not eos:
        raise ValueError("JSONConstraint needs an end-of-sequence token id to end the answer "
                         "once the JSON is complete (eos_token_ids, or ignore_eos off)")
    return eos


def fit_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """`mask` cut or padded (with False) to the model's vocabulary width."""
    if mask.shape[0] >= width:
        return mask[:width]
    return torch.cat([mask, torch.zeros(width - mask.shape[0], dtype=torch.bool)])


__all__ = ["JSONConstraint", "SchemaError"]
