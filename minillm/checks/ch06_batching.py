"""Checkers for exercises/06_batching.ipynb: a block allocator and one continuous-batching step,
replayed on fixed request traces and compared with minillm.engine's own scheduler."""

from __future__ import annotations

import random

from ._base import CheckFailed, call, expect, passed

# --- 1. the block allocator -----------------------------------------------------------------------

# A trace is a list of operations. ("allocate", name) stores the returned block under `name`;
# ("share", name) and ("free", name) act on that block; ("exhausted",) expects allocate to fail;
# ("double free", name) expects free on an already-free block to fail.
ALLOCATOR_TRACES = [
    (3, [("allocate", "a"), ("allocate", "b"), ("allocate", "c"), ("exhausted",),
         ("free", "b"), ("allocate", "d"), ("free", "a"), ("free", "c"), ("free", "d")]),
    (2, [("allocate", "a"), ("share", "a"), ("free", "a"), ("allocate", "b"), ("exhausted",),
         ("free", "a"), ("allocate", "c"), ("free", "b"), ("free", "c"), ("double free", "c")]),
    (4, [("allocate", "sys"), ("share", "sys"), ("share", "sys"), ("allocate", "x"),
         ("free", "sys"), ("free", "sys"), ("allocate", "y"), ("free", "x"), ("free", "sys"),
         ("free", "y")]),
]


def _replay_allocator(BlockAllocator, num_blocks, trace):
    alloc = call(BlockAllocator, num_blocks)
    held: dict = {}  # name -> block id
    counts: dict = {}  # block id -> holders, as the trace says they should be
    done = []
    for op in trace:
        where = (f"after {done} on BlockAllocator({num_blocks})" if done
                 else f"on a new BlockAllocator({num_blocks})")
        kind = op[0]
        if kind == "allocate":
            block = call(alloc.allocate)
            expect(isinstance(block, int) and not isinstance(block, bool),
                   f"allocate() {where} returned {block!r}; return a block id (an int)")
            expect(0 <= block < num_blocks, f"allocate() {where} returned block {block}, "
                   f"outside 0..{num_blocks - 1}")
            expect(counts.get(block, 0) == 0, f"allocate() {where} returned block {block}, "
                   "which is still held: hand out only free blocks")
            held[op[1]] = block
            counts[block] = 1
        elif kind == "share":
            call(alloc.share, held[op[1]])
            counts[held[op[1]]] += 1
        elif kind == "free":
            call(alloc.free, held[op[1]])
            counts[held[op[1]]] -= 1
        elif kind == "exhausted":
            try:
                block = alloc.allocate()
            except NotImplementedError:
                raise CheckFailed("`allocate` is not written yet") from None
            except Exception:
                pass
            else:
                raise CheckFailed(f"allocate() {where} returned {block!r}, but every block is "
                                  "held: raise an error (RuntimeError) when none is free")
        elif kind == "double free":
            try:
                alloc.free(held[op[1]])
            except NotImplementedError:
                raise CheckFailed("`free` is not written yet") from None
            except Exception:
                pass
            else:
                raise CheckFailed(f"free({held[op[1]]}) {where} did not fail, but that block is "
                                  "already free: raise an error (freeing twice is a bug)")
        done.append(op[0] if len(op) == 1 else f"{op[0]} {op[1]}")
        want_free = num_blocks - sum(1 for c in counts.values() if c > 0)
        got = alloc.num_free
        if got != want_free:
            hint = ""
            if kind == "free" and counts[held[op[1]]] > 0:
                hint = (": that block is still held by another sequence (its reference count "
                        "is not 0 yet), so it must not go back to the pool")
            raise CheckFailed(f"num_free is {got} after {done} on BlockAllocator({num_blocks}); "
                              f"expected {want_free}{hint}")


def check_block_allocator(BlockAllocator) -> None:
    """`BlockAllocator(num_blocks)` with allocate(), share(block), free(block) and num_free."""
    for num_blocks, trace in ALLOCATOR_TRACES:
        _replay_allocator(BlockAllocator, num_blocks, trace)
    passed("BlockAllocator", len(ALLOCATOR_TRACES))


# --- 2. one continuous-batching step --------------------------------------------------------------

# (running, waiting, free_blocks, settings). A request is {"id", "tokens", "computed", "blocks"}:
# its total tokens so far, how many are in the cache, and how many blocks it holds.
def _r(rid, tokens, computed, blocks=None, block_size=4):
    if blocks is None:
        blocks = -(-computed // block_size)
    return {"id": rid, "tokens": tokens, "computed": computed, "blocks": blocks}


STEP_CASES = [
    # every running request decodes one token; two waiting requests join
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 6, 0), _r("d", 3, 0)], 10, {}),
    # the token budget cuts the waiting prompt into a chunk
    ([_r("a", 9, 8)], [_r("long", 40, 0)], 20, {"budget": 16}),
    # a running prompt part-way through its chunks comes after the decodes
    ([_r("long", 40, 12), _r("a", 9, 8)], [], 20, {"budget": 10}),
    # max_seqs stops admission
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 2, 0), _r("d", 2, 0)], 10, {"max_seqs": 3}),
    # first come, first served: c does not fit, so d (which would) waits too
    ([_r("a", 5, 4)], [_r("c", 20, 0), _r("d", 2, 0)], 3, {}),
    # a needs a new block, none is free: the newest running request (b) is preempted
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 2, 0)], 0, {}),
    # the only request that could be preempted is the one that needs the block
    ([_r("a", 9, 8)], [], 0, {}),
]


def _reference_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    """The same step, run by minillm.engine.ContinuousScheduler on equivalent requests."""
    from ..decoding import GenerationConfig
    from ..engine import BlockManager, ContinuousScheduler, Request
    from ..engine.request import RUNNING
    from ..engine.toy import LetterTokenizer

    held = sum(r["blocks"] for r in running)
    bm = BlockManager(held + free_blocks + 1, block_size, enable_prefix_caching=False)
    bm.allocate()  # one block held outside the trace, so an empty pool is possible
    sched = ContinuousScheduler(bm, max_num_seqs=max_seqs, max_num_batched_tokens=budget)
    for r in running + waiting:
        req = Request(r["id"], [1] * r["tokens"], GenerationConfig(max_new_tokens=1), [], None,
                      LetterTokenizer(), [], arrival_time=0.0)
        if r in running:
            req.num_computed = r["computed"]
            req.block_table = [bm.allocate() for _ in range(r["blocks"])]
            req.status = RUNNING
            sched.running.append(req)
        else:
            sched.waiting.append(req)
    batch = sched.schedule()
    return {"run": [(req.id, n) for req, n in batch.items],
            "preempted": [req.id for req in batch.preempted], "free_blocks": bm.num_free}


def _random_case(rng):
    bs = 4
    running = []
    for i in range(rng.randint(0, 4)):
        tokens = rng.randint(1, 30)
        computed = tokens - 1 if rng.random() < 0.7 else rng.randint(0, tokens - 1)
        running.append(_r(f"r{i}", tokens, computed, -(-computed // bs) if computed else 0))
    waiting = [_r(f"w{i}", rng.randint(1, 30), 0, 0) for i in range(rng.randint(0, 3))]
    return running, waiting, rng.randint(0, 6), {"budget": rng.choice([8, 16, 32]),
                                                 "max_seqs": rng.choice([2, 4, 6])}


def check_schedule_step(schedule_step) -> None:
    """`schedule_step(running, waiting, free_blocks, block_size, budget, max_seqs)` must plan
    the step exactly as minillm's ContinuousScheduler does."""
    rng = random.Random(6)
    cases = STEP_CASES + [_random_case(rng) for _ in range(40)]
    for running, waiting, free, settings in cases:
        settings = {"block_size": 4, "budget": 16, "max_seqs": 4, **settings}
        want = _reference_step([dict(r) for r in running], [dict(r) for r in waiting], free,
                               **settings)
        got = call(schedule_step, [dict(r) for r in running], [dict(r) for r in waiting], free,
                   **settings)
        shown = (f"schedule_step(running={running}, waiting={waiting}, free_blocks={free}, "
                 + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")")
        expect(isinstance(got, dict) and {"run", "preempted", "free_blocks"} <= set(got),
               f"{shown} returned {got!r}; return a dict with keys 'run', 'preempted' and "
               "'free_blocks'")
        run = [tuple(x) for x in got["run"]]
        if set(got["preempted"]) != set(want["preempted"]):
            raise CheckFailed(f"{shown}: you preempted {list(got['preempted'])}, expected "
                              f"{want['preempted']}. Preempt only when a running request needs "
                              "a block and none is free, and take the most recently admitted "
                              "(the last in `running`) first")
        if sorted(run, key=str) != sorted(want["run"], key=str):
            raise CheckFailed(f"{shown}: you planned {run}, expected {want['run']}. Running "
                              "requests go first (one-token decodes, then prompt chunks), each "
                              "taking min(tokens - computed, budget left); a request preempted "
                              "after it was planned is not run (its tokens go back to the "
                              "budget); then waiting requests in order while the budget, "
                              "max_seqs and the free blocks allow")
        if run != want["run"]:
            raise CheckFailed(f"{shown}: the right requests ({run}) in the wrong order; expected "
                              f"{want['run']}: decodes first, then prompt chunks, then newcomers")
        expect(got["free_blocks"] == want["free_blocks"],
               f"{shown}: {got['free_blocks']} blocks left free, expected "
               f"{want['free_blocks']} (count the blocks each planned request adds, and the "
               "blocks a preempted request gives back)")
    passed("schedule_step", len(cases))
