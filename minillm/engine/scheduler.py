"""Schedulers (调度器): which requests run in the next forward pass, and how many tokens each.

Static batching (静态批处理), the baseline: take a batch of requests, run them together until the
*longest* has finished, then take the next batch. A request that finishes early keeps its row (a
"ghost" that runs padding, as a padded `generate()` batch does), so the batch's cost is that of its
longest member.

Continuous batching (连续批处理, iteration-level scheduling): decide again before *every* pass.
Running requests go first (decodes, then unfinished prompt chunks); then waiting requests are
admitted as long as the token budget (`max_num_batched_tokens`), the sequence limit
(`max_num_seqs`) and the free blocks allow. A long prompt is cut into chunks that fit the budget
(chunked prefill, 分块预填充), so prefill and decode share a pass.

Preemption (抢占) by recompute: when a running request needs a block and none is free, the most
recently admitted running request gives all its blocks back and goes to the front of the queue;
when admitted again, its prompt *and* the tokens it already generated are recomputed (full blocks
still in the prefix cache are reused), so no output is lost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .request import RUNNING, WAITING, Request


@dataclass
class ScheduledBatch:
    """One pass's plan: `items` are (request, tokens to run) pairs; `preempted` lost their blocks."""

    items: list[tuple[Request, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)

    def __bool__(self):
        return bool(self.items)


class Scheduler:
    """What both schedulers share: the waiting queue, the running list, finishing and freeing."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512):
        for name, value in [("max_num_seqs", max_num_seqs),
                            ("max_num_batched_tokens", max_num_batched_tokens)]:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.blocks = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        request.status = WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or any(not r.ghost for r in self.running)

    def computed(self, request: Request, n: int) -> None:
        """`n` more tokens of `request` are in the cache: name the blocks that became full."""
        request.num_computed += n
        bs, table = self.blocks.block_size, request.block_table
        for k in range(len(request.block_hashes), request.num_computed // bs):
            parent = request.block_hashes[-1] if request.block_hashes else None
            tokens = request.tokens[k * bs:(k + 1) * bs]
            request.block_hashes.append(self.blocks.register(table[k], parent, tokens))

    def finish(self, request: Request) -> None:
        """`request` has ended (or was cancelled): give its blocks back."""
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self.blocks.free_table(request.block_table)
        request.block_hashes = []

    def cancel(self, request: Request) -> None:
        """Drop `request` wherever it is and give its blocks back."""
        Scheduler.finish(self, request)

    def _admit(self, request: Request, hits: list[int]) -> None:
        for block_id in hits:
            self.blocks.share(block_id)
        request.block_table = list(hits)
        request.block_hashes = [self.blocks.blocks[b].hash for b in hits]
        request.num_computed = len(hits) * self.blocks.block_size
        if not request.admitted:  # count prefix-cache hits on the prompt once
            request.admitted = True
            request.num_cached_tokens = request.num_computed
            self.blocks.queried_tokens += len(request.prompt_ids)
            self.blocks.hit_tokens += request.num_computed
        request.status = RUNNING
        self.running.append(request)


class ContinuousScheduler(Scheduler):
    """Iteration-level scheduling with a token budget, chunked prefill and preemption."""

    def schedule(self) -> ScheduledBatch:
        batch, budget = ScheduledBatch(), self.max_num_batched_tokens
        bm = self.blocks
        # 1. running requests: decodes first, then unfinished prompt chunks, oldest first
        order = sorted(self.running, key=lambda r: r.remaining > 1)
        for request in order:
            if budget == 0:
                break
            if request.status != RUNNING:  # preempted earlier in this loop
                continue
            n = min(request.remaining, budget)
            while bm.blocks_for(request.num_computed + n) - len(request.block_table) > bm.num_free:
                victim = self.running[-1]  # the most recently admitted
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is request:
                    break
            if request.status != RUNNING:
                continue
            bm.grow(request.block_table, request.num_computed + n)
            batch.items.append((request, n))
            budget -= n
        if batch.preempted:  # short of blocks: admit nobody new this step
            return batch
        # 2. waiting requests, first come first served
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hits = bm.match_prefix(request.tokens)
            cached = len(hits) * bm.block_size
            n = min(request.num_tokens - cached, budget)
            revived = sum(1 for b in hits if bm.blocks[b].ref_count == 0)  # taken off the free list
            if bm.blocks_for(cached + n) - len(hits) + revived > bm.num_free:
                break
            self.waiting.popleft()
            self._admit(request, hits)
            bm.grow(request.block_table, request.num_computed + n)
            batch.items.append((request, n))
            budget -= n
        return batch

    def preempt(self, request: Request) -> None:
        """Take all of `request`'s blocks back; it waits at the front and is recomputed later."""
        self.running.remove(request)
        self.blocks.free_table(request.block_table)
        request.block_hashes = []
        request.num_computed = 0
        request.num_preemptions += 1
        request.status = WAITING
        self.waiting.appendleft(request)
        self.num_preemptions += 1


class StaticScheduler(Scheduler):
    """Batch-level scheduling: a batch is admitted together, whole prompts are prefilled in one
    padded pass, and nobody new joins until every member has finished (early finishers keep
    running as ghosts). Blocks for every row up to the batch's longest possible length are
    checked at admission, so a static batch never needs preemption."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, max_seq_len: int | None = None):
        super().__init__(block_manager, max_num_seqs, max_num_batched_tokens)
        self.max_seq_len = max_seq_len

    def finish(self, request: Request) -> None:
        if request in self.running and not request.ghost:
            request.ghost = True  # keeps its row and blocks until the batch ends
        else:
            super().finish(request)
        self._end_batch_if_done()

    def cancel(self, request: Request) -> None:
        super().cancel(request)
        self._end_batch_if_done()

    def _end_batch_if_done(self) -> None:
        """When every row of the batch is a ghost, the batch is over: free all its blocks."""
        if self.running and all(r.ghost for r in self.running):
            for r in list(self.running):
                super().finish(r)

    def _limit(self, request: Request, longest_new: int) -> int:
        limit = len(request.prompt_ids) + longest_new
        return min(limit, self.max_seq_len) if self.max_seq_len else limit

    def schedule(self) -> ScheduledBatch:
        bm = self.blocks
        if not self.running:  # form the next batch
            chosen, longest = [], 0
            for request in self.waiting:
                if len(chosen) == self.max_num_seqs:
                    break
                new_longest = max(longest, request.config.max_new_tokens)
                need = sum(bm.blocks_for(self._limit(r, new_longest))
                           for r in chosen + [request])
                if need > bm.num_free:
                    break
                chosen.append(request)
                longest = new_longest
            for request in chosen:
                self.waiting.remove(request)
                self._admit(request, [])
                request.ghost_limit = self._limit(request, longest)
        batch = ScheduledBatch()
        for request in self.running:
            if request.ghost and request.num_tokens >= request.ghost_limit:
                continue  # a ghost that has reached the batch's longest possible length
            n = request.remaining
            bm.grow(request.block_table, request.num_computed + n)
            batch.items.append((request, n))
        return batch
