"""Tree verification (树形验证): several drafts checked in one target pass.

A chain draft offers one guess per position; when it misses at position i, everything after i is
wasted. A **draft tree** offers several: node i holds a token and its parent (-1: the root, the
last token of the context), so every path from the root is one candidate continuation, and paths
share their common prefixes. The target scores every node in ONE forward pass:

    input      [last] + the nodes' tokens, in an order where parents come before children
    positions  the root at `start` (= the cache length), a node at start + its depth
    mask       each token sees the cache, its ancestors and itself; never a sibling's branch

Then the acceptance walks down from the root: greedy takes the child whose token is the target's
argmax; sampling tries the children one after another with the multi-draft rule (`choose_child`)
and descends into the one it accepts. The accepted path's keys and values are moved to sit right
after the context (`keep_path`) and the rest of the tree is cropped away, as a chain's rejected
tokens are. Medusa and EAGLE verify their trees this way; SpecInfer introduced the multi-draft
rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..generation.kv_cache import KVCache
from ..utils.validate import check_int
from .acceptance import residual_distribution


@dataclass
class DraftTree:
    """Candidate continuations as a tree: node i is `tokens[i]`, its parent `parents[i]` (-1 for
    the root, a node that comes earlier otherwise)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)

    def __post_init__(self):
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"a DraftTree needs one parent per token: {len(self.tokens)} tokens, "
                             f"{len(self.parents)} parents")
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i}'s parent is {parent}: a parent is -1 (the root) or "
                                 "an earlier node")

    @classmethod
    def from_paths(cls, paths) -> "DraftTree":
        """The tree whose root-to-node paths include every path in `paths` (lists of token ids),
        common prefixes stored once."""
        tree, node_at = cls(), {}
        for path in paths:
            parent = -1
            for token in path:
                key = (parent, int(token))
                if key not in node_at:
                    node_at[key] = len(tree.tokens)
                    tree.tokens.append(int(token))
                    tree.parents.append(parent)
                parent = node_at[key]
        return tree

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        """The nodes whose parent is `node` (-1: the root), in order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's first child down to `node`."""
        nodes = []
        while node != -1:
            nodes.append(node)
            node = self.parents[node]
        return nodes[::-1]

    def depths(self) -> list[int]:
        """Each node's depth: 1 for a child of the root."""
        depth = []
        for parent in self.parents:
            depth.append(1 if parent == -1 else depth[parent] + 1)
        return depth

    def positions(self, start: int) -> torch.Tensor:
        """(1, n + 1) position ids for [root] + nodes: the root at `start`, a node at start +
        its depth (siblings share a position: each is the same next token, guessed otherwise)."""
        return torch.tensor([[start] + [start + d for d in self.depths()]])

    def attention_mask(self, cached: int) -> torch.Tensor:
        """(1, 1, n + 1, cached + n + 1) booleans for [root] + nodes: each row sees the `cached`
        tokens, the root, its ancestors and itself."""
        n = len(self)
        mask = torch.zeros(n + 1, cached + n + 1, dtype=torch.bool)
        mask[:, :cached + 1] = True  # the cache and the root
        for i in range(n):
            for node in self.path(i):
                mask[i + 1, cached + 1 + node] = True
        return mask[None, None]


def tree_forward(model, cache: KVCache, last: int, tree: DraftTree) -> torch.Tensor:
    """One pass of `model` over [last] + the tree's nodes after the `cache`: the (n + 1, vocab)
    logits after the root and after each node. The cache then holds all n + 1 tokens;
    `keep_path` keeps the accepted ones."""
    device = cache.keys[0].device
    start = cache.length
    ids = torch.tensor([[last] + tree.tokens], device=device)
    logits = model(ids, cache=cache, position_ids=tree.positions(start).to(device),
                   attention_mask=tree.attention_mask(start).to(device))
    return logits[0].float()


def keep_path(cache: KVCache, start: int, nodes: list[int]) -> None:
    """After `tree_forward` at cache length `start`: keep the root and the accepted `nodes`
    (in path order), moved to sit right after it, and forget the rest of the tree."""
    rows = torch.tensor([start + 1 + node for node in nodes], dtype=torch.long,
                        device=cache.keys[0].device)
    for stored in cache.keys + cache.values:
        stored[:, :, start + 1:start + 1 + len(nodes)] = stored[:, :, rows]
    cache.crop(start + 1 + len(nodes))


def verify_tree_greedy(scores: torch.Tensor, tree: DraftTree) -> tuple[list[int], list[int]]:
    """Greedy verification of a tree: from the root, descend into the child holding the target's
    argmax while there is one; then add the argmax. `(new_tokens, accepted_nodes)`; the tokens
    are what greedy decoding of the target gives. `scores`: (n + 1, vocab), root first."""
    _check_scores(scores, tree)
    best = scores.argmax(-1).tolist()
    node, accepted = -1, []
    while True:
        token = best[node + 1]
        child = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if child is None:
            return [tree.tokens[n] for n in accepted] + [token], accepted
        accepted.append(child)
        node = child


def choose_child(p: torch.Tensor, candidates: list[int], q: torch.Tensor | None = None,
                 generator=None) -> tuple[int, int | None]:
    """The multi-draft rule at one position: `(token, index)`, `index` the accepted candidate's
    place in `candidates` or None when every candidate was rejected.

    p           the target's probabilities here, (vocab,)
    candidates  the drafted tokens: distinct tokens of a deterministic draft (q None), or tokens
                drawn independently from the draft's q (vocab,)
    The candidates are tried in turn, each with the one-draft rule against what is left of p: a
    rejection replaces p by the residual normalise(max(0, p - q_i)) (q_i all on candidate i for a
    deterministic draft). When all are rejected the token is drawn from the last residual. Each
    step keeps the distribution it starts from, so the token is distributed as p."""
    if p.dim() != 1:
        raise ValueError(f"p must be one position's probabilities, shape (vocab,), got "
                         f"{tuple(p.shape)}")
    rest = p.float()
    for index, token in enumerate(candidates):
        q_i = q.float() if q is not None else torch.zeros_like(rest).index_fill_(0, torch.tensor(
            [token], device=rest.device), 1.0)
        ratio = rest[token] / q_i[token].clamp_min(1e-30)
        if torch.rand((), generator=generator, device=rest.device) < ratio:
            return int(token), index
        rest = residual_distribution(rest, q_i)
    return int(torch.multinomial(rest, 1, generator=generator)), None


def verify_tree_sampled(probs: torch.Tensor, tree: DraftTree,
                        generator=None) -> tuple[list[int], list[int]]:
    """Sampled verification of a deterministic draft's tree: from the root, `choose_child` among
    the children's tokens with the target's probabilities there; descend into the accepted
    child, or end with the token drawn from the residual. `(new_tokens, accepted_nodes)`, the
    tokens distributed as sampling from the target gives. `probs`: (n + 1, vocab), root first."""
    _check_scores(probs, tree)
    node, accepted = -1, []
    while True:
        children = tree.children(node)
        token, index = choose_child(probs[node + 1], [tree.tokens[c] for c in children],
                                    generator=generator)
        if index is None:
            return [tree.tokens[n] for n in accepted] + [token], accepted
        accepted.append(children[index])
        node = children[index]


def acceptance_with_candidates(p: torch.Tensor, q: torch.Tensor, m: int) -> float:
    """The chance that one of m candidates drawn independently from q is accepted (the
    multi-draft rule, exactly): 1 - prod_i (1 - beta_i), beta_i = sum min(r_i, q) with r_0 = p and
    r_(i+1) the residual of r_i against q."""
    check_int("m (candidates per position)", m, 1)
    rest, missed = p.double(), 1.0
    for _ in range(m):
        missed *= 1.0 - float(torch.minimum(rest, q.double()).sum())
        rest = residual_distribution(rest, q.double())
    return 1.0 - missed


def _check_scores(scores: torch.Tensor, tree: DraftTree) -> None:
    if scores.dim() != 2 or scores.shape[0] != len(tree) + 1:
        raise ValueError(f"scores must be shaped (nodes + 1, vocab) = ({len(tree) + 1}, vocab): "
                         f"the root, then each of the tree's {len(tree)} nodes; got "
                         f"{tuple(scores.shape)}")
