"""Draft a tree, verify it in one pass, keep the accepted path: the loop of minillm.speculative's
`SpeculativeDecoder` with a draft tree (tree.py) in place of a chain.

One round, with `ids` every token so far and the target's KV cache holding all of them but the
last: the draft proposes a tree of at most `budget` nodes (no deeper than the tokens still to
make); the target scores [last] + the nodes in one pass; greedy or sampled verification walks
down the tree; `keep_path` moves the accepted nodes' keys and values after the context and
forgets the rest.
"""

from __future__ import annotations

import torch

from ..generation.kv_cache import KVCache
from ..utils.devices import Timer
from ..utils.validate import check_int
from .drafts import SuffixDraft
from .loop import SpeculativeDecoder, SpeculativeGeneration, SpeculativeStats, run_one
from .tree import DraftTree, keep_path, tree_forward, verify_tree_greedy, verify_tree_sampled


def _fitting(tree: DraftTree, depth: int, nodes: int) -> DraftTree:
    """The nodes no deeper than `depth`, the first `nodes` of them (a parent comes before its
    children, so they form a tree)."""
    depths = tree.depths()
    kept = DraftTree.from_paths([[tree.tokens[n] for n in tree.path(i)]
                                 for i in range(len(tree)) if depths[i] <= depth])
    return DraftTree(kept.tokens[:nodes], kept.parents[:nodes])


class TreeDecoder(SpeculativeDecoder):
    """Speculative decoding for one sequence with a draft that proposes trees (`SuffixDraft`):
    at most `budget` nodes a round. After `run`, `cache` and `stats` as SpeculativeDecoder's
    (`stats.k` is the budget; `proposed` counts nodes)."""

    def __init__(self, target, draft, budget: int = 8, config=None):
        if not callable(getattr(draft, "tree", None)):
            raise TypeError(f"a TreeDecoder needs a draft that proposes trees, such as "
                            f"SuffixDraft(); got {type(draft).__name__}")
        check_int("budget (nodes per tree)", budget, 1)
        super().__init__(target, draft, budget, config)

    def run(self, prompt_ids: list[int], sequence, on_tokens=None) -> SpeculativeStats:
        self.stats = stats = SpeculativeStats(k=self.k)
        ids = list(prompt_ids)
        max_new = sequence.max_new_tokens
        self.cache = KVCache.for_model(self.target, 1, len(ids) + max_new + self.k)
        with torch.inference_mode():
            if len(ids) > 1:
                self._forward(ids[:-1])
            while not sequence.done:
                room = max_new - len(sequence.token_ids) - 1
                # the pass adds the last token and every node to a cache of len(ids) - 1
                window = self.target.config.max_seq_len - len(ids)
                with Timer(self.device) as t:
                    tree = _fitting(self.draft.tree(ids, self.k), room, window) if room > 0 \
                        else DraftTree()
                stats.draft_seconds += t.seconds
                before = self.cache.length
                with Timer(self.device) as t:
                    logits = tree_forward(self.target, self.cache, ids[-1], tree)
                stats.target_seconds += t.seconds
                scores = torch.stack([
                    self.process(torch.tensor([ids + [tree.tokens[n] for n in tree.path(j - 1)]
                                               if j else ids], device=self.device),
                                 logits[j:j + 1])[0]
                    for j in range(len(tree) + 1)])
                if self.config.do_sample:
                    new, nodes = verify_tree_sampled(torch.softmax(scores, dim=-1), tree,
                                                     self.generator)
                else:
                    new, nodes = verify_tree_greedy(scores, tree)
                self._record(sequence, ids, new, len(tree), len(nodes))
                keep_path(self.cache, before, nodes)
                self.cache.crop(min(self.cache.length, len(ids) - 1))
                if on_tokens is not None:
                    on_tokens(sequence)
        stats.new_tokens = len(sequence.token_ids)
        return stats


def tree_speculative_generate(target, tokenizer, prompt, draft=None, *, budget: int = 8,
                              config=None, **fields) -> SpeculativeGeneration:
    """`speculative_generate` with a draft tree of at most `budget` nodes a round (`draft`: a
    SuffixDraft, the default). Greedy: exactly the target's greedy tokens; sampling: the
    target's distribution (the multi-draft rule). `.stats.proposed` counts tree nodes."""
    draft = SuffixDraft() if draft is None else draft
    return run_one(target, tokenizer, prompt, config, fields,
                   lambda request: TreeDecoder(target, draft, budget, request))
