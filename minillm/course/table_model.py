"""A language model written as a table, small enough to decode by hand.

For each sequence of new tokens so far (a tuple of token names, after the prompt) the table
gives the probabilities of the next token; a sequence it does not list gets the uniform
distribution. Called like a model, `model(ids) -> logits (batch, seq, vocab)`, it runs in
`beam_search` and in a greedy loop, so a worked example on paper can be checked by the package.
"""

from __future__ import annotations

import math

import torch


class TableModel:
    def __init__(self, vocab: list[str], table: dict[tuple[str, ...], dict[str, float]],
                 prompt_len: int = 1):
        if len(set(vocab)) != len(vocab) or not vocab:
            raise ValueError(f"vocab must be a non-empty list of distinct names, got {vocab!r}")
        if not isinstance(prompt_len, int) or prompt_len < 0:
            raise ValueError(f"prompt_len must be an int >= 0, got {prompt_len!r}")
        self.vocab, self.prompt_len = list(vocab), prompt_len
        self.table = {}
        for prefix, row in table.items():
            unknown = [name for name in (*prefix, *row) if name not in vocab]
            if unknown:
                raise ValueError(f"table entry {prefix!r} names {unknown[0]!r}, which is not in "
                                 f"the vocabulary {vocab}")
            if any(p < 0 for p in row.values()) or not math.isclose(sum(row.values()), 1.0,
                                                                     abs_tol=1e-9):
                raise ValueError(f"the probabilities after {prefix!r} must be >= 0 and sum to 1, "
                                 f"got {row}")
            self.table[tuple(prefix)] = [row.get(name, 0.0) for name in vocab]

    def next_probabilities(self, prefix: tuple[str, ...]) -> list[float]:
        """P(next token | the new tokens `prefix`), in vocabulary order."""
        return self.table.get(tuple(prefix), [1 / len(self.vocab)] * len(self.vocab))

    def probability(self, names) -> float:
        """P(the new tokens `names`): the product of the table's entries along them."""
        p = 1.0
        for i, name in enumerate(names):
            p *= self.next_probabilities(tuple(names[:i]))[self.vocab.index(name)]
        return p

    def __call__(self, input_ids: torch.Tensor, cache=None, **_) -> torch.Tensor:
        rows = []
        for ids in input_ids.tolist():
            new = tuple(self.vocab[i] for i in ids[self.prompt_len:])
            rows.append(torch.tensor(self.next_probabilities(new)).log())
        last = torch.stack(rows)[:, None, :]  # only the last position is ever read
        return last.expand(-1, input_ids.shape[1], -1).float()
