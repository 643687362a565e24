"""The block manager (块管理器): who owns which KV-cache block.

The paged KV cache (分页 KV 缓存) cuts the cache into fixed-size blocks (块) of `block_size` tokens
(16 by default). A sequence holds a *block table* (块表): the list of block ids that store its
tokens, in order, so token t lives in block `table[t // block_size]` at offset `t % block_size`.
A sequence asks for a new block only when its last one is full, so at most `block_size - 1` slots
of it are ever empty: memory is reserved as it is used, not for the longest possible answer.

Prefix caching (前缀缓存): a *full* block is named by a hash of its tokens and of the hash of the
block before it, so the name stands for the whole prefix up to that block's end. A new request
whose prompt starts with the same blocks reuses them: each block has a reference count (引用计数),
the number of sequences whose tables hold it. A block whose count falls to 0 goes back to the free
list but keeps its hash, so a later request can still hit it until the block is handed out again
(the least recently freed is handed out first).

Copy-on-write (写时复制): the n samples of one request share its prompt's blocks (their counts
are n). A full block is never written again, so sharing it is free. The last, partly filled block
is written by every sample's next token: before a sample writes into a block it shares, it gets a
copy of its own (`copy_on_write`; the engine copies the block's keys and values), and the shared
block loses one reference. The last sample left holding it writes in place.

This file knows nothing about tensors: it hands out block ids. `paged_cache.py` holds the tensors.
"""

from __future__ import annotations

from collections import OrderedDict

from ..utils.validate import check_int


def block_hash(parent: int | None, tokens) -> int:
    """The name of a full block: its tokens and the name of the block before it."""
    return hash((parent, tuple(tokens)))


class Block:
    __slots__ = ("id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int):
        self.id = block_id
        self.ref_count = 0
        self.hash: int | None = None  # set once the block is full and registered
        self.token_ids: tuple = ()

    def __repr__(self):
        return f"Block(id={self.id}, ref_count={self.ref_count}, cached={self.hash is not None})"


class BlockManager:
    """A pool of `num_blocks` blocks: allocate, share, free, and find cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = True):
        check_int("num_blocks", num_blocks, 1, allowed="a positive int")
        check_int("block_size", block_size, 1, allowed="a positive int")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.hit_tokens = 0  # prompt tokens found in the prefix cache
        self.queried_tokens = 0  # prompt tokens looked up

    # --- counting ---------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def blocks_for(self, n_tokens: int) -> int:
        """Blocks needed to hold `n_tokens` tokens."""
        return -(-n_tokens // self.block_size)

    # --- one block at a time ----------------------------------------------------------------------

    def allocate(self) -> int:
        """A free block, with reference count 1. Its old prefix-cache entry (if any) is dropped."""
        if not self.free:
            raise RuntimeError("no free KV-cache block left: free or preempt a sequence first")
        block_id, _ = self.free.popitem(last=False)  # least recently freed first
        block = self.blocks[block_id]
        if block.hash is not None and self.cached.get(block.hash) == block_id:
            del self.cached[block.hash]
        block.hash, block.token_ids, block.ref_count = None, (), 1
        return block_id

    def share(self, block_id: int) -> None:
        """One more sequence holds `block_id` (a prefix-cache hit)."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]  # back in use: no longer free
        block.ref_count += 1

    def release(self, block_id: int) -> None:
        """One sequence lets go of `block_id`; at count 0 it is free again (its hash kept)."""
        block = self.blocks[block_id]
        if block.ref_count <= 0:
            raise RuntimeError(f"block {block_id} is already free: freed twice")
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free[block_id] = None

    # --- a sequence's table -----------------------------------------------------------------------

    def grow(self, table: list[int], n_tokens: int) -> None:
        """Append blocks to `table` until it can hold `n_tokens` tokens."""
        need = self.blocks_for(n_tokens) - len(table)
        if need > len(self.free):
            raise RuntimeError(f"need {need} blocks, only {len(self.free)} free")
        for _ in range(need):
            table.append(self.allocate())

    def is_shared(self, table: list[int], position: int) -> bool:
        """Whether the block that token `position` of a sequence goes into is already in its
        table and shared with another sequence (writing there needs a copy first)."""
        k = position // self.block_size
        return k < len(table) and self.blocks[table[k]].ref_count > 1

    def copy_on_write(self, table: list[int], position: int) -> tuple[int, int] | None:
        """Before writing token `position` of a sequence: if its block is shared, give the table
        a new block in its place and return (shared block, new block), whose contents the caller
        copies; else None."""
        if not self.is_shared(table, position):
            return None
        k = position // self.block_size
        shared, table[k] = table[k], self.allocate()
        self.release(shared)
        return shared, table[k]

    def free_table(self, table: list[int]) -> None:
        """Release every block of a table (last block first, so the end of a sequence is
        evicted from the prefix cache before its shared beginning)."""
        for block_id in reversed(table):
            self.release(block_id)
        table.clear()

    # --- prefix caching ---------------------------------------------------------------------------

    def match_prefix(self, token_ids: list[int], salt: int | None = None) -> list[int]:
        """Ids of the cached blocks that hold the start of `token_ids`, longest run first to last.
        At least one token is always left to compute (its logits give the next token). `salt`
        names what else the keys and values depend on (a LoRA adapter): the first block's
        parent, so blocks computed under another salt never match."""
        if not self.enable_prefix_caching:
            return []
        bs, found, parent = self.block_size, [], salt
        for i in range((len(token_ids) - 1) // bs):
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            h = block_hash(parent, tokens)
            block_id = self.cached.get(h)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            found.append(block_id)
            parent = h
        return found

    def register(self, block_id: int, parent: int | None, tokens) -> int:
        """Name a block that just became full, so later requests can find it. Returns its hash."""
        tokens = tuple(tokens)
        h = block_hash(parent, tokens)
        block = self.blocks[block_id]
        if self.enable_prefix_caching and h not in self.cached:
            block.hash, block.token_ids = h, tokens
            self.cached[h] = block_id
        return h

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    def check(self) -> None:
        """Assert the books balance: free blocks have count 0, used ones more."""
        for block in self.blocks:
            if (block.ref_count == 0) != (block.id in self.free):
                raise AssertionError(f"{block} is {'' if block.id in self.free else 'not '}"
                                     "on the free list")
