# %% [markdown]
# # Exercises 06 · Batching and the paged KV cache
#
# Pieces of the engine from the lesson, written by you and checked against minillm's own:
#
# 1. a block allocator (块分配器) with reference counts (引用计数), the heart of the paged KV
#    cache;
# 2. – 3. one step of a continuous-batching (连续批处理) scheduler, in two parts: admitting
#    waiting requests, and planning the running ones (who is preempted, 抢占). A worked trace
#    walks through the second before you write it; then the two parts make the whole step.
#
# Each checker replays fixed and random cases against `minillm.engine`. Write each piece in its
# cell, run the cell, then run the check cell below it. From a terminal:
# `pytest --nbval-lax exercises/06_batching.ipynb`.

# %%
import minillm
from minillm.course import show_source
from minillm.course.checks import ch06_batching as checks
from minillm.engine import BlockManager, ContinuousScheduler

# %% [markdown]
# ## 1 · A block allocator with reference counts
#
# The pool has `num_blocks` blocks, numbered 0 to `num_blocks - 1`. Write a class with:
#
# - `allocate()`: hand out a free block (any one) with reference count 1; raise `RuntimeError`
#   when no block is free;
# - `share(block)`: one more sequence holds `block` (a prefix-cache hit): count + 1;
# - `free(block)`: one sequence lets go: count − 1; at 0 the block is free again. Freeing a block
#   that is already free is a bug: raise `RuntimeError`;
# - `num_free`: how many blocks are free (an attribute or a property).

# %% [task]
class BlockAllocator:
    def __init__(self, num_blocks):
        # YOUR CODE HERE
        raise NotImplementedError

    def allocate(self):
        # YOUR CODE HERE
        raise NotImplementedError

    def share(self, block):
        # YOUR CODE HERE
        raise NotImplementedError

    def free(self, block):
        # YOUR CODE HERE
        raise NotImplementedError
# ==== solution ====
class BlockAllocator:
    def __init__(self, num_blocks):
        self.ref_count = [0] * num_blocks
        self.free_list = list(range(num_blocks))

    @property
    def num_free(self):
        return len(self.free_list)

    def allocate(self):
        if not self.free_list:
            raise RuntimeError("no free block")
        block = self.free_list.pop(0)
        self.ref_count[block] = 1
        return block

    def share(self, block):
        self.ref_count[block] += 1

    def free(self, block):
        if self.ref_count[block] == 0:
            raise RuntimeError(f"block {block} is already free")
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self.free_list.append(block)

# %% [check]
checks.check_block_allocator(BlockAllocator)

# %% [markdown]
# Compare yours with the engine's: `BlockManager` adds prefix hashing on top of the same books.

# %%
show_source(BlockManager.release)

# %% [markdown]
# ## The requests a scheduler sees
#
# The next two tasks plan one forward pass. Each request is a dict of four numbers:
#
# - `"id"`: its name;
# - `"num_tokens"`: how many tokens it has so far, prompt and generated;
# - `"computed"`: how many of them are already in the KV cache (the rest run in this step);
# - `"blocks"`: how many blocks it holds; a block holds `block_size` tokens.
#
# A request that runs `n` more tokens needs `ceil((computed + n) / block_size)` blocks in all,
# so it must get `ceil((computed + n) / block_size) - blocks` more. Every function returns a new
# plan and leaves the lists and dicts it was given as they were.

# %%
def blocks_to_add(request, n, block_size):
    """Blocks `request` must get before it can run `n` more tokens."""
    return -(-(request["computed"] + n) // block_size) - request["blocks"]

# %% [markdown]
# ## 2 · Admit waiting requests
#
# Write `admit_waiting(waiting, free_blocks, budget, free_seats, block_size)`. Go through
# `waiting` in order (first come, first served). While budget is left and fewer than
# `free_seats` requests have been admitted, the next request runs
# `n = min(num_tokens, budget left)` tokens (a long prompt is cut into chunks: chunked prefill,
# 分块预填充) and needs `blocks_to_add(request, n, block_size)` free blocks. Stop at the first
# request that does not fit, even if a later one would. Return
# `{"run": [(id, n), ...], "free_blocks": blocks free afterwards}`.

# %% [task]
def admit_waiting(waiting, free_blocks, budget, free_seats, block_size):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def admit_waiting(waiting, free_blocks, budget, free_seats, block_size):
    plan = []
    for request in waiting:
        if budget == 0 or len(plan) >= free_seats:
            break
        n = min(request["num_tokens"], budget)
        need = blocks_to_add(request, n, block_size)
        if need > free_blocks:
            break
        free_blocks -= need
        plan.append((request["id"], n))
        budget -= n
    return {"run": plan, "free_blocks": free_blocks}

# %% [check]
checks.check_admit_waiting(admit_waiting)

# %% [markdown]
# ## 3 · Plan the running requests, preempting when blocks run out
#
# `plan_running(running, free_blocks, budget, block_size)` plans the requests already running.
# `running` lists them in the order they were admitted, oldest first. The rules:
#
# 1. **Order.** Requests with one token left to run (decodes) go first, then those with more
#    (prompt chunks), each group in list order. Stop when the budget is spent.
# 2. **Size.** Each runs `n = min(num_tokens - computed, budget left)` tokens and needs
#    `blocks_to_add(request, n, block_size)` more blocks.
# 3. **Preemption.** While it needs more blocks than are free, preempt the *newest* request still
#    running (the last one left in the list): all its blocks go back to the pool, it joins
#    `preempted`, and it does not run in this step. Two cases follow from that one rule:
#    - the newest request still running may be the very request being planned: it preempts
#      itself, and does not run;
#    - it may be a decode planned earlier in this step: take it out of the plan again, with the
#      budget and the blocks counted for it.
#
#    A request preempted earlier in the step is skipped when its turn comes.
#
# Return `{"run": [(id, n), ...], "preempted": [ids], "free_blocks": blocks free afterwards}`.
#
# Before writing it, watch the rules work. `checks.trace_plan_running` plans any case the way
# the engine does and says why at each request. Here the pool has one free block; the decodes
# `b` and `c` go first, and `a`'s prompt chunk comes last:

# %%
case = [{"id": "a", "num_tokens": 30, "computed": 4, "blocks": 1},
        {"id": "b", "num_tokens": 9, "computed": 8, "blocks": 2},
        {"id": "c", "num_tokens": 5, "computed": 4, "blocks": 1}]
checks.trace_plan_running(case, free_blocks=1, budget=16, block_size=4)

# %% [markdown]
# `c` needed a block and was itself the newest request still running; `a` then needed four and
# preempted `b`, which had been planned: its token and its block came back. When a check below
# names a case you plan differently, trace that case the same way.

# %% [task]
def plan_running(running, free_blocks, budget, block_size):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def plan_running(running, free_blocks, budget, block_size):
    still_running, plan, preempted = list(running), [], []
    decodes = [r for r in running if r["num_tokens"] - r["computed"] == 1]
    chunks = [r for r in running if r["num_tokens"] - r["computed"] > 1]
    for request in decodes + chunks:
        if budget == 0:
            break
        if request["id"] in preempted:
            continue
        n = min(request["num_tokens"] - request["computed"], budget)
        while blocks_to_add(request, n, block_size) > free_blocks:
            victim = still_running.pop()  # the newest still running
            free_blocks += victim["blocks"]
            preempted.append(victim["id"])
            for rid, m in [item for item in plan if item[0] == victim["id"]]:
                plan.remove((rid, m))  # planned earlier in this step: undo it
                budget += m
                free_blocks += blocks_to_add(victim, m, block_size)
            if victim is request:
                break  # it preempted itself
        if request["id"] in preempted:
            continue
        free_blocks -= blocks_to_add(request, n, block_size)
        plan.append((request["id"], n))
        budget -= n
    return {"run": plan, "preempted": preempted, "free_blocks": free_blocks}

# %% [check]
checks.check_plan_running(plan_running)

# %% [markdown]
# ## The whole step
#
# Your two functions make one step of the scheduler: plan the running requests first; if nobody
# was preempted (the pool has room), admit waiting requests with the budget and the free blocks
# that are left, into the seats the running requests leave free. A step that preempted is short
# of blocks: it admits nobody.

# %%
def schedule_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    plan = plan_running(running, free_blocks, budget, block_size)
    if plan["preempted"]:
        return plan
    left = budget - sum(n for _, n in plan["run"])
    admitted = admit_waiting(waiting, plan["free_blocks"], left, max_seqs - len(running),
                             block_size)
    return {"run": plan["run"] + admitted["run"], "preempted": [],
            "free_blocks": admitted["free_blocks"]}

# %% [check]
checks.check_schedule_step(schedule_step)

# %% [markdown]
# The engine's version is `ContinuousScheduler.schedule`: the same rules in one method, plus
# prefix-cache hits at admission.

# %%
show_source(ContinuousScheduler.schedule)
