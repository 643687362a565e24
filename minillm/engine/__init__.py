"""Serving many requests at once (chapter 06): continuous batching over a paged KV cache.

    block_manager.py  BlockManager: the block pool, reference counts, prefix hashing,
                      copy-on-write
    paged_cache.py    PagedKVPool (the tensors) and PagedBatch: attention reads keys and values
                      through each sequence's block table
    request.py        Request (one request inside the engine, or one of its n samples) and
                      RequestOutput
    logprobs.py       TokenLogprob: a token's log-probability under the raw distribution
    scheduler.py      StaticScheduler and ContinuousScheduler (token budget, chunked prefill,
                      preemption by recompute)
    engine.py         Engine: add_request, step, cancel, run, generate
    bench.py          workloads, offline throughput, KV memory ratios, Poisson online mode
    toy.py            a tiny random Llama and toy tokenizers for tests and checkers
"""

from .block_manager import Block, BlockManager, block_hash
from .engine import Engine, StepRecord
from .logprobs import TokenLogprob
from .paged_cache import PagedBatch, PagedKVPool, paged_forward
from .request import Request, RequestOutput
from .scheduler import ContinuousScheduler, ScheduledBatch, Scheduler, StaticScheduler

__all__ = ["Engine", "StepRecord", "BlockManager", "Block", "block_hash", "PagedKVPool",
           "PagedBatch", "paged_forward", "Request", "RequestOutput", "Scheduler",
           "ContinuousScheduler", "StaticScheduler", "ScheduledBatch", "TokenLogprob"]
