"""A radix-tree prefix cache (基数树前缀缓存), SGLang's RadixAttention idea, beside the engine's
block-hash chain (block_manager.py).

The engine names each *full block* by a hash of its tokens and of the block before it, so two
prompts share cached keys and values only in whole blocks: a prefix of 37 equal tokens shares 32
with blocks of 16. SGLang keeps its cache as a radix tree over token ids instead: each edge holds
a run of tokens, a path from the root spells a cached sequence, and a new prompt reuses the
longest path that matches it, to the token. Sequences that branch share the edges before the
branch.

When the cache is full, the least recently used leaf goes first (LRU eviction, LRU 淘汰): a
leaf ends a cached sequence that no other cached sequence continues, so evicting it never breaks
another sequence's prefix. A whole leaf edge is evicted at once, as SGLang does.

This tree keeps token ids only: where SGLang keeps, on each edge, the indices of the slots that
hold those tokens' keys and values, `tokens` counts the slots the cache would hold.
`block_cache_hit_rate` replays the same requests through the engine's BlockManager, so the two
schemes can be compared at the same memory.
"""

from __future__ import annotations

from ..utils.validate import check_int
from .block_manager import BlockManager


class _Node:
    __slots__ = ("edge", "children", "parent", "last_used")

    def __init__(self, edge: tuple, parent: "_Node | None", last_used: int):
        self.edge = edge  # the tokens on the edge from the parent to this node
        self.children: dict[int, _Node] = {}  # first token of each child's edge -> child
        self.parent = parent
        self.last_used = last_used


class RadixCache:
    """Cached token sequences in a radix tree of at most `capacity` tokens (None: no limit).

    match(tokens)   how many leading tokens of a prompt are cached (at least one is left to
                    compute, as in the engine); marks the path as just used and counts the hit
    insert(tokens)  cache a sequence (a finished request's prompt and output), then evict the
                    least recently used leaves until the tree fits its capacity
    """

    def __init__(self, capacity: int | None = None):
        check_int("capacity", capacity, 1, allow_none=True,
                  allowed="a positive int (tokens), or None for no limit")
        self.capacity = capacity
        self.root = _Node((), None, 0)
        self.tokens = 0  # tokens held on all edges: the slots the cache occupies
        self.hit_tokens = 0
        self.queried_tokens = 0
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def walk(self, tokens) -> tuple[_Node, int, list[_Node]]:
        """Follow `tokens` from the root as far as the tree spells them. Returns (the last node
        reached, tokens matched, the nodes passed). An edge matched only part way is cut at the
        mismatch, so that the matched part ends at a node of its own (as SGLang does)."""
        node, matched, path = self.root, 0, []
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            common = 0
            for a, b in zip(child.edge, tokens[matched:]):
                if a != b:
                    break
                common += 1
            if common < len(child.edge):
                child = self._split(child, common)
            node, matched = child, matched + common
            path.append(child)
        return node, matched, path

    @staticmethod
    def _split(child: _Node, at: int) -> _Node:
        """Cut `child`'s edge after `at` tokens: a new node holds the first part."""
        parent = child.parent
        middle = _Node(child.edge[:at], parent, child.last_used)
        parent.children[middle.edge[0]] = middle
        child.edge, child.parent = child.edge[at:], middle
        middle.children[child.edge[0]] = child
        return middle

    def match(self, tokens) -> int:
        """Cached leading tokens of `tokens`, leaving the last token to compute; the path
        matched counts as just used."""
        tokens = tuple(tokens)
        _, matched, path = self.walk(tokens[:-1])
        now = self._tick()
        for node in path:
            node.last_used = now
        self.queried_tokens += len(tokens)
        self.hit_tokens += matched
        return matched

    def insert(self, tokens) -> None:
        """Cache `tokens` (a sequence whose keys and values were computed), then evict the least
        recently used leaves until at most `capacity` tokens are held."""
        tokens = tuple(tokens)
        node, matched, path = self.walk(tokens)
        now = self._tick()
        for n in path:
            n.last_used = now
        if matched < len(tokens):
            leaf = _Node(tokens[matched:], node, now)
            node.children[leaf.edge[0]] = leaf
            self.tokens += len(leaf.edge)
        if self.capacity is not None:
            self.evict(self.tokens - self.capacity)

    def leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self.root:
                out.append(node)
            stack.extend(node.children.values())
        return out

    def evict(self, n_tokens: int) -> int:
        """Drop least recently used leaves until at least `n_tokens` tokens are freed (or the
        tree is empty); returns the tokens freed."""
        freed = 0
        while freed < n_tokens:
            leaves = self.leaves()
            if not leaves:
                break
            leaf = min(leaves, key=lambda n: n.last_used)
            del leaf.parent.children[leaf.edge[0]]
            freed += len(leaf.edge)
            self.tokens -= len(leaf.edge)
        return freed

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


def radix_cache_hit_rate(requests, capacity: int | None) -> RadixCache:
    """Serve `requests`, (prompt ids, output ids) pairs, one after another through a RadixCache
    of `capacity` tokens: each prompt is matched, then the prompt and the output but its last
    token (whose keys and values were never computed) are inserted. Returns the cache."""
    cache = RadixCache(capacity)
    for prompt, output in requests:
        cache.match(prompt)
        cache.insert(list(prompt) + list(output)[:-1])
    return cache


def block_cache_hit_rate(requests, num_blocks: int, block_size: int = 16) -> BlockManager:
    """The same replay through the engine's BlockManager with `num_blocks` blocks, doing what the
    scheduler does for a request that runs alone: match its prompt's full blocks, share them,
    allocate the rest, name each block as it fills, free the table when the request ends (the
    blocks stay cached until handed out again, least recently freed first). Returns the manager."""
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=True)
    for prompt, output in requests:
        tokens = list(prompt) + list(output)[:-1]
        hits = bm.match_prefix(list(prompt))
        bm.queried_tokens += len(prompt)
        bm.hit_tokens += len(hits) * block_size
        if bm.blocks_for(len(tokens)) > num_blocks:
            raise ValueError(f"a request of {len(tokens)} tokens needs more than the pool's "
                             f"{num_blocks} blocks of {block_size}")
        for block_id in hits:
            bm.share(block_id)
        table = list(hits)
        bm.grow(table, len(tokens))
        parent = bm.blocks[hits[-1]].hash if hits else None
        for k in range(len(hits), len(tokens) // block_size):
            parent = bm.register(table[k], parent, tokens[k * block_size:(k + 1) * block_size])
        bm.free_table(table)
    return bm
