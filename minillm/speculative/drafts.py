"""Drafts (草稿): whatever proposes the next few tokens cheaply, for the target to check.

A draft has one method, `propose(ids, k, process, do_sample, generator) -> (tokens, probs)`:

    ids        every token so far (prompt and generated), a list of ints
    k          propose at most k tokens (fewer, even none, is allowed)
    process    the logits processors of the generation config, `(input_ids, scores) -> scores`
    do_sample  False: greedy, so propose what the draft thinks most likely
    returns    the proposed tokens, and the distribution q each was drawn from as an (n, vocab)
               tensor, or None when the proposal is deterministic (q all on the proposed token)

Two drafts:

- PromptLookupDraft (提示词查找): no model at all. Find the latest n-gram of the context earlier in
  the context and propose what followed it there. Costs microseconds; shines when the output
  repeats the input (editing, copying code, quoting a document), and proposes nothing otherwise.
- ModelDraft: a smaller, cheaper language model with the same vocabulary, run autoregressively
  for k steps with its own KV cache. `first_layers(model, n)` makes one from the target itself:
  its first n layers, then its final norm and LM head, sharing the target's weights (an
  "early exit" draft, 早退).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import torch
import torch.nn as nn

from ..utils.devices import model_device
from ..generation.kv_cache import KVCache
from ..utils.validate import check_int


def earlier_occurrences(ids: list[int], longest: int, shortest: int):
    """The longest suffix of `ids` (longest down to shortest tokens) that occurred earlier in
    `ids`: (its length n, an iterator over where it started, most recent first). (0, nothing)
    when no suffix of `shortest` tokens recurs. Lazy, so prompt lookup stops at the first."""
    for n in range(min(longest, len(ids) - 1), shortest - 1, -1):
        suffix = ids[-n:]
        starts = (s for s in range(len(ids) - n - 1, -1, -1) if ids[s:s + n] == suffix)
        first = next(starts, None)
        if first is not None:
            return n, itertools.chain([first], starts)
    return 0, iter(())


class Draft:
    """The interface every draft follows (see the module docstring)."""

    def propose(self, ids: list[int], k: int, process=None, do_sample: bool = False,
                generator=None) -> tuple[list[int], torch.Tensor | None]:
        raise NotImplementedError

    def reset(self, max_tokens: int | None = None) -> None:
        """Forget any state kept from an earlier sequence; `max_tokens` is the longest context
        the next sequence will reach (a model draft sizes its KV cache by it)."""


class PromptLookupDraft(Draft):
    """Propose the continuation of the latest n-gram's most recent earlier occurrence.

    Tries n = max_ngram first, down to min_ngram: a longer match is stronger evidence that the
    text is repeating. Deterministic, so `propose` returns probs=None."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        check_int("max_ngram", max_ngram, 1)
        check_int("min_ngram", min_ngram, 1)
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def __repr__(self):
        return f"PromptLookupDraft(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"

    def lookup(self, ids: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest n-gram's most recent earlier occurrence."""
        if k < 1:
            return []
        n, starts = earlier_occurrences(ids, self.max_ngram, self.min_ngram)
        start = next(starts, None)
        return [] if start is None else list(ids[start + n:start + n + k])

    def propose(self, ids, k, process=None, do_sample=False, generator=None):
        return self.lookup(list(ids), k), None


class ModelDraft(Draft):
    """A smaller language model as the draft. It keeps its own KV cache across rounds and, each
    round, crops it back to the longest prefix it shares with the context (the drafted tokens
    the target rejected are forgotten), feeds the tokens it has not seen, then proposes k tokens
    one forward pass at a time."""

    def __init__(self, model: nn.Module):
        if not callable(model) or not hasattr(model, "config"):
            raise TypeError(f"ModelDraft needs a minillm model (with a .config), got "
                            f"{type(model).__name__}")
        self.model = model
        self.max_tokens = min(model.config.max_seq_len, 512)
        self.cache: KVCache | None = None
        self.cached: list[int] = []  # the tokens whose keys and values are in self.cache

    def __repr__(self):
        return f"ModelDraft({type(self.model).__name__}, {self.model.config.n_layers} layers)"

    def reset(self, max_tokens: int | None = None) -> None:
        self.cache, self.cached = None, []
        if max_tokens is not None:
            self.max_tokens = min(int(max_tokens), self.model.config.max_seq_len)

    def _sync(self, ids: list[int], k: int) -> list[int]:
        """Roll the cache back to the prefix it shares with `ids` (keeping at least the last
        token out, so there is always one to feed); return the tokens still to feed."""
        if self.cache is None or self.cache.max_tokens < len(ids) + k:
            size = min(max(self.max_tokens, len(ids) + k + 64), self.model.config.max_seq_len)
            self.cache = KVCache.for_model(self.model, 1, size)
            self.cached = []
        common = 0
        limit = min(len(self.cached), len(ids) - 1)
        while common < limit and self.cached[common] == ids[common]:
            common += 1
        self.cache.crop(common)
        del self.cached[common:]
        return ids[common:]

    def propose(self, ids, k, process=None, do_sample=False, generator=None):
        ids = list(ids)
        if k < 1:
            return [], None
        device = model_device(self.model)
        feed = self._sync(ids, k)
        context = torch.tensor([ids], device=device)
        tokens, probs = [], []
        with torch.inference_mode():
            for step in range(k):
                logits = self.model(torch.tensor([feed], device=device), cache=self.cache)
                self.cached.extend(feed)
                scores = logits[:, -1, :].float()
                if process is not None:
                    scores = process(context, scores)
                if do_sample:
                    q = torch.softmax(scores, dim=-1)
                    token = int(torch.multinomial(q, 1, generator=generator))
                    probs.append(q[0])
                else:
                    token = int(scores.argmax(-1))
                tokens.append(token)
                if step + 1 < k:
                    feed = [token]
                    context = torch.cat([context, context.new_tensor([[token]])], dim=1)
        return tokens, (torch.stack(probs) if do_sample else None)


def first_layers(model: nn.Module, n_layers: int) -> nn.Module:
    """`model` (any minillm model, fast or readable) cut down to its first `n_layers` layers,
    then its final norm and LM head: a cheaper model over the same vocabulary, for a draft:
    `ModelDraft(first_layers(model, 8))`. It is a model of the same class sharing the original's
    weights (no copy), with the same forward contract; its config is the original's with
    n_layers changed, so `KVCache.for_model` sizes its cache."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config") \
            or not isinstance(getattr(model, "layers", None), nn.ModuleList):
        raise TypeError(f"first_layers takes a minillm model from minillm.load (not a "
                        f"transformers model), got {type(model).__name__}")
    n_layers = check_int("n_layers", n_layers, 1, model.config.n_layers,
                         allowed=f"an int from 1 to {model.config.n_layers} (the model's layers)")
    short = copy.copy(model)  # the same submodules and weights; its own registries below
    short._modules, short._parameters = dict(model._modules), dict(model._parameters)
    short._buffers = dict(model._buffers)
    short.layers = nn.ModuleList(list(model.layers)[:n_layers])
    short.config = dataclasses.replace(model.config, n_layers=n_layers)
    return short


class SuffixDraft(Draft):
    """Propose a tree of continuations from EVERY earlier occurrence of the context's longest
    repeated suffix (up to max_match tokens), each continuation counted: what SuffixDecoding
    (Oliaro et al., 2024) reads from a suffix tree over the prompt and earlier outputs, found
    here by a scan. Prompt lookup follows the most recent occurrence only; where a phrase recurs
    with different continuations, the tree keeps several, the most frequent first. Deterministic
    (no model), so the tree's tokens are checked as one-hot drafts."""

    def __init__(self, max_match: int = 8, min_match: int = 1, depth: int = 8):
        check_int("max_match", max_match, 1)
        check_int("min_match", min_match, 1)
        check_int("depth", depth, 1)
        if min_match > max_match:
            raise ValueError(f"min_match ({min_match}) must be <= max_match ({max_match})")
        self.max_match, self.min_match, self.depth = max_match, min_match, depth

    def __repr__(self):
        return (f"SuffixDraft(max_match={self.max_match}, min_match={self.min_match}, "
                f"depth={self.depth})")

    def continuations(self, ids: list[int]) -> list[list[int]]:
        """What followed each earlier occurrence of the longest repeated suffix, latest first
        (up to `depth` tokens each); [] when no suffix of min_match tokens recurs."""
        ids = list(ids)
        n, starts = earlier_occurrences(ids, self.max_match, self.min_match)
        return [ids[s + n:s + n + self.depth] for s in starts]

    def tree(self, ids: list[int], budget: int):
        """A DraftTree of at most `budget` nodes: the continuations' prefixes that occur most
        often (ties: the shorter, then the most recent). A prefix occurs at least as often as
        any longer one, so every kept node's parent is kept too."""
        from .tree import DraftTree

        check_int("budget (nodes per tree)", budget, 0)
        seen = {}  # prefix -> (occurrences, the rank of its most recent occurrence)
        for rank, path in enumerate(self.continuations(ids)):
            for end in range(1, len(path) + 1):
                count, first = seen.get(tuple(path[:end]), (0, rank))
                seen[tuple(path[:end])] = (count + 1, first)
        best = sorted(seen, key=lambda p: (-seen[p][0], len(p), seen[p][1]))[:budget]
        return DraftTree.from_paths(best)

    def propose(self, ids, k, process=None, do_sample=False, generator=None):
        """As a chain: the tree's most frequent path, up to k tokens."""
        tree = self.tree(ids, k * self.depth) if k > 0 else None
        chain, node = [], -1
        while tree is not None and len(chain) < k:
            children = tree.children(node)
            if not children:
                break
            node = children[0]
            chain.append(tree.tokens[node])
        return chain, None
