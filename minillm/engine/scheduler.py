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

Parallel samples (n > 1): a request counts as n sequences from its admission on. It prefills its
prompt once; when its first token is due, `fork` starts the other n - 1 samples on the same blocks
(shared, counted), and from then on each sample is scheduled as a request of its own. A sample
that writes into a block it shares gets a copy first (copy-on-write): the schedule counts that
block among the ones it needs and lists the copy in `ScheduledBatch.copies`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from ..utils.validate import check_int
from .block_manager import BlockManager
from .request import RUNNING, WAITING, Request


@dataclass
class ScheduledBatch:
    """One step's plan.

    items      (request, tokens to run) pairs
    passes     how the items are grouped into forward passes: lists of indices into `items`
               (rows of one pass are left-padded to its longest)
    preempted  requests that lost their blocks this step
    copies     (source block, new block) pairs to copy before the passes run (copy-on-write)
    """

    items: list[tuple[Request, int]] = field(default_factory=list)
    passes: list[list[int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)

    def __bool__(self):
        return bool(self.items)


class Scheduler(ABC):
    """The contract between the engine and a scheduling policy, and what every policy shares.

    The engine calls, and only calls:

        add(request)            a new request waits
        schedule()              -> ScheduledBatch: what the next step runs, and in which passes
                                (and which blocks to copy before they run)
        computed(request, n)    after a pass: n more tokens of request are in the KV cache;
                                True when the request now needs its next token chosen
        fork(request)           its next token is due: -> the samples that start from it now
                                (n > 1), sharing its blocks; they run from the next step on
        finish(request)         the request has ended (its last token was chosen): free it
        cancel(request)         drop it wherever it is
        has_unfinished()        anything left to do?
        kind(request, n)        what an item of the last schedule was, for records: "prefill",
                                "decode", "recompute" or a policy's own ("ghost")
        live()                  the running requests that still produce tokens

    A policy subclasses this and implements `schedule()`; it keeps its own bookkeeping."""

    uses_prefix_cache = True  # whether the block manager may share cached prompt blocks

    def __init__(self, block_manager: BlockManager, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, max_seq_len: int | None = None):
        check_int("max_num_seqs", max_num_seqs, 1, allowed="a positive int")
        check_int("max_num_batched_tokens", max_num_batched_tokens, 1, allowed="a positive int")
        self.blocks = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_seq_len = max_seq_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    @abstractmethod
    def schedule(self) -> ScheduledBatch:
        """What the next step runs (see ScheduledBatch)."""

    def add(self, request: Request) -> None:
        request.status = WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.live())

    def live(self) -> list[Request]:
        return list(self.running)

    def num_seqs(self) -> int:
        """Sequences the running requests hold or will fork (each counts against
        max_num_seqs)."""
        return sum(r.num_seqs for r in self.running)

    def fork(self, request: Request) -> list[Request]:
        """`request` is about to choose its first token: start the samples still due from it
        (none unless it asked for n > 1). Each holds every block of its table once more."""
        if not request.forks_due:
            return []
        children = request.fork()
        for child in children:
            for block_id in child.block_table:
                self.blocks.share(block_id)
            self.running.append(child)
        return children

    def blocks_needed(self, request: Request, n: int) -> int:
        """Free blocks `request` needs to run `n` more tokens: new blocks at the end of its table,
        plus a copy of the shared block its next token goes into, if it shares one."""
        bm = self.blocks
        grow = max(0, bm.blocks_for(request.num_computed + n) - len(request.block_table))
        return grow + int(bm.is_shared(request.block_table, request.num_computed))

    def _reserve(self, request: Request, n: int, batch: ScheduledBatch) -> None:
        """Make room to write `n` more tokens of `request` (see blocks_needed)."""
        copy = self.blocks.copy_on_write(request.block_table, request.num_computed)
        if copy is not None:
            batch.copies.append(copy)
        self.blocks.grow(request.block_table, request.num_computed + n)

    def kind(self, request: Request, n: int) -> str:
        if request.num_preemptions and request.num_computed < len(request.tokens) - 1:
            return "recompute"
        return "prefill" if request.in_prefill else "decode"

    def group(self, items) -> list[list[int]]:
        """Forward passes for `items`: all one-token rows together, then prompt chunks in groups
        of similar length (a new group when padding would waste over a quarter of it)."""
        singles = [i for i, (_, n) in enumerate(items) if n == 1]
        chunks = sorted((i for i, (_, n) in enumerate(items) if n > 1), key=lambda i: -items[i][1])
        passes = [singles] if singles else []
        for i in chunks:
            group = passes[-1] if passes and passes[-1] is not singles else None
            if group is not None:
                longest = items[group[0]][1]
                tokens = sum(items[j][1] for j in group) + items[i][1]
                if longest * (len(group) + 1) <= 1.25 * tokens:
                    group.append(i)
                    continue
            passes.append([i])
        return passes

    def computed(self, request: Request, n: int) -> bool:
        """`n` more tokens of `request` are in the cache: name the blocks that became full.
        True when the request has caught up and needs its next token."""
        request.num_computed += n
        bs, table = self.blocks.block_size, request.block_table
        for k in range(len(request.block_hashes), request.num_computed // bs):
            parent = request.block_hashes[-1] if request.block_hashes else request.cache_salt
            tokens = request.tokens[k * bs:(k + 1) * bs]
            request.block_hashes.append(self.blocks.register(table[k], parent, tokens))
        return request.remaining == 0

    def finish(self, request: Request) -> None:
        """`request` has ended: give its blocks back."""
        self._release(request)

    def cancel(self, request: Request) -> None:
        """Drop `request` wherever it is and give its blocks back."""
        self._release(request)

    def _release(self, request: Request) -> None:
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self.blocks.free_table(request.block_table)
        request.block_hashes = []

    def _planned(self, batch: ScheduledBatch) -> ScheduledBatch:
        batch.passes = self.group(batch.items)
        return batch

    def _admit(self, request: Request, hits: list[int]) -> None:
        for block_id in hits:
            self.blocks.share(block_id)
        request.block_table = list(hits)
        request.block_hashes = [self.blocks.blocks[b].hash for b in hits]
        request.num_computed = len(hits) * self.blocks.block_size
        if not request.admitted:  # count prefix-cache hits on the prompt once
            request.admitted = True
            request.scheduled_time = time.perf_counter()
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
            while self.blocks_needed(request, n) > bm.num_free:
                victim = self.running[-1]  # the most recently admitted
                budget += self._unschedule(batch, victim)
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is request:
                    break
            if request.status != RUNNING:
                continue
            self._reserve(request, n, batch)
            batch.items.append((request, n))
            budget -= n
        if batch.preempted:  # short of blocks: admit nobody new this step
            return self._planned(batch)
        # 2. waiting requests, first come first served
        while (self.waiting and budget > 0
               and self.num_seqs() + self.waiting[0].num_seqs <= self.max_num_seqs):
            request = self.waiting[0]
            hits = ([] if request.needs_prompt_logits
                    else bm.match_prefix(request.tokens, request.cache_salt))
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
        return self._planned(batch)

    @staticmethod
    def _unschedule(batch: ScheduledBatch, request: Request) -> int:
        """Take `request` out of this step's plan, if it was in it already (a decode scheduled
        before the request that now needs its blocks), with the copies made for it; returns
        the tokens that frees in the budget."""
        held = set(request.block_table)
        batch.copies = [(src, dst) for src, dst in batch.copies if dst not in held]
        freed = sum(n for r, n in batch.items if r is request)
        batch.items = [(r, n) for r, n in batch.items if r is not request]
        return freed

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
    padded pass, and nobody new joins until every member has finished. A member that finishes
    early keeps its row as a "ghost": its row runs padding (the last token again) until the
    batch's longest member is done, as a padded `generate()` batch does. Blocks for every row
    up to the batch's longest possible length are checked at admission, so a static batch never
    needs preemption. No prefix cache: each batch starts from nothing."""

    uses_prefix_cache = False

    def __init__(self, block_manager: BlockManager, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, max_seq_len: int | None = None):
        super().__init__(block_manager, max_num_seqs, max_num_batched_tokens, max_seq_len)
        self.ghosts: set = set()     # finished members whose rows still run
        self.limits: dict = {}       # each member's row length at the batch's longest answer

    def live(self) -> list[Request]:
        return [r for r in self.running if r not in self.ghosts]

    def kind(self, request: Request, n: int) -> str:
        return "ghost" if request in self.ghosts else super().kind(request, n)

    def group(self, items) -> list[list[int]]:
        """One pass for the one-token rows, one padded pass for every prompt of a new batch."""
        singles = [i for i, (_, n) in enumerate(items) if n == 1]
        prompts = [i for i, (_, n) in enumerate(items) if n > 1]
        return [p for p in (singles, prompts) if p]

    def fork(self, request: Request) -> list[Request]:
        children = super().fork(request)
        for child in children:  # a sample's row runs as long as the batch does
            self.limits[child] = self.limits[request]
        return children

    def computed(self, request: Request, n: int) -> bool:
        if request not in self.running:
            return False  # its batch ended earlier in this step
        needs_token = super().computed(request, n)
        if request in self.ghosts:
            if needs_token:
                request.tokens.append(request.tokens[-1])  # padding for a finished row
            return False
        return needs_token

    def finish(self, request: Request) -> None:
        if request in self.running:
            self.ghosts.add(request)  # keeps its row and blocks until the batch ends
        else:
            self._release(request)
        self._end_batch_if_done()

    def cancel(self, request: Request) -> None:
        self._release(request)
        self.ghosts.discard(request)
        self._end_batch_if_done()

    def _end_batch_if_done(self) -> None:
        """When every row of the batch is a ghost, the batch is over: free all its blocks."""
        if self.running and all(r in self.ghosts for r in self.running):
            for r in list(self.running):
                self._release(r)
            self.ghosts.clear()
            self.limits.clear()

    def _limit(self, request: Request, longest_new: int) -> int:
        limit = len(request.prompt_ids) + longest_new
        return min(limit, self.max_seq_len) if self.max_seq_len else limit

    def schedule(self) -> ScheduledBatch:
        bm = self.blocks
        if not self.running:  # form the next batch
            chosen, longest = [], 0
            for request in self.waiting:
                if sum(r.num_seqs for r in chosen + [request]) > self.max_num_seqs:
                    break
                new_longest = max(longest, request.config.max_new_tokens)
                need = sum(bm.blocks_for(self._limit(r, new_longest)) * r.num_seqs
                           for r in chosen + [request])
                if need > bm.num_free:
                    break
                chosen.append(request)
                longest = new_longest
            for request in chosen:
                self.waiting.remove(request)
                self._admit(request, [])
                self.limits[request] = self._limit(request, longest)
        batch = ScheduledBatch()
        for request in self.running:
            if request in self.ghosts and request.num_tokens >= self.limits[request]:
                continue  # a ghost that has reached the batch's longest possible length
            n = request.remaining
            self._reserve(request, n, batch)
            batch.items.append((request, n))
        return self._planned(batch)


SCHEDULERS = {"continuous": ContinuousScheduler, "static": StaticScheduler}
