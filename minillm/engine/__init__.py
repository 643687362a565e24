"""Serving many requests at once (chapter 06): continuous batching over a paged KV cache.

    block_manager.py  BlockManager: the block pool, reference counts, prefix hashing,
                      copy-on-write
    paged_cache.py    PagedKVPool (the tensors) and PagedBatch: attention reads keys and values
                      through each sequence's block table
    quantized_pool.py QuantizedKVPool: the pool's keys and values in int8 or fp8-e4m3
    request.py        Request (one request inside the engine, or one of its n samples) and
                      RequestOutput
    logprobs.py       TokenLogprob: a token's log-probability under the raw distribution
    scheduler.py      StaticScheduler and ContinuousScheduler (token budget, chunked prefill,
                      preemption by recompute)
    engine.py         Engine: add_request, step, cancel, run, generate
    weights.py        the weight format the engine serves, and which of its passes go past
                      that format's multi-row kernel (said once)
    radix_cache.py    RadixCache: SGLang's token-level prefix cache with LRU eviction, and hit
                      rates of it and of the block-hash chain on the same requests
    virtual_clock.py  ClockedEngine: an engine whose clock moves only by its measured steps
    interference.py   a long prompt arriving into running decodes, chunked or not
    disaggregation.py prefill/decode disaggregation: a prefill engine hands KV blocks to a
                      decode engine, each on its own clock
    routing.py        replicas behind a router: round robin against prefix-aware routing,
                      each replica with its own radix cache (chapter 09)
    capture_sizes.py  CUDA graphs by batch size: the graph a step replays, the rows padding
                      adds, the capture list to keep under a limit on graphs (lesson 05b)
"""

from .block_manager import Block, BlockManager, block_hash
from .engine import Engine, StepRecord
from .logprobs import TokenLogprob
from .paged_cache import PagedBatch, PagedKVPool, paged_forward
from .quantized_pool import QuantizedKVPool
from .request import Request, RequestOutput
from .scheduler import ContinuousScheduler, ScheduledBatch, Scheduler, StaticScheduler

__all__ = ["Engine", "StepRecord", "BlockManager", "Block", "block_hash", "PagedKVPool",
           "QuantizedKVPool", "PagedBatch", "paged_forward", "Request", "RequestOutput", "Scheduler",
           "ContinuousScheduler", "StaticScheduler", "ScheduledBatch", "TokenLogprob"]
