# %% [markdown]
# # Exercises 06 · Batching and the paged KV cache
#
# Two pieces of the engine from the lesson, written by you and checked against minillm's own:
#
# 1. a block allocator (块分配器) with reference counts (引用计数), the heart of the paged KV
#    cache;
# 2. one step of a continuous-batching (连续批处理) scheduler: who runs next, how many tokens
#    each, who is admitted, who is preempted (抢占).
#
# Each checker replays fixed request traces. Write each piece in its cell, run the cell, then run
# the check cell below it. From a terminal: `pytest --nbval-lax exercises/06_batching.ipynb`.

# %%
import minillm
from minillm.checks import ch06_batching as checks
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
        raise NotImplementedError

    def share(self, block):
        raise NotImplementedError

    def free(self, block):
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
minillm.show_source(BlockManager.release)

# %% [markdown]
# ## 2 · One continuous-batching step
#
# `schedule_step(running, waiting, free_blocks, block_size, budget, max_seqs)` plans one forward
# pass. Each request is a dict: `"id"`, `"tokens"` (its tokens so far, prompt and generated),
# `"computed"` (how many of them are already in the KV cache) and `"blocks"` (blocks it holds; a
# block holds `block_size` tokens). A request running `n` tokens needs
# `ceil((computed + n) / block_size)` blocks in all.
#
# The rules, in order:
#
# 1. **Running requests first**: those with one token left (decodes) before those with more
#    (prompt chunks), otherwise in list order. Each runs `n = min(tokens - computed, budget left)`
#    tokens; stop when the budget is spent.
# 2. If it needs more blocks than are free, **preempt** the most recently admitted running request
#    (the last one still in `running`): it gives all its blocks back and is not run. Repeat until
#    the blocks suffice; if the request preempts itself, it is not run either.
# 3. If nobody was preempted, **admit** waiting requests in order (first come, first served) while
#    budget is left and fewer than `max_seqs` requests are running: each runs
#    `n = min(tokens, budget left)` and needs `ceil(n / block_size)` blocks. Stop at the first one
#    that does not fit.
#
# Return `{"run": [(id, n), ...], "preempted": [ids], "free_blocks": blocks free afterwards}`.

# %% [task]
def schedule_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def schedule_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    def need(r, n):  # blocks to add so r can hold computed + n tokens
        return -(-(r["computed"] + n) // block_size) - r["blocks"]

    running, plan, preempted = list(running), [], []
    for r in sorted(running, key=lambda r: r["tokens"] - r["computed"] > 1):
        if budget == 0:
            break
        if r["id"] in preempted:
            continue
        n = min(r["tokens"] - r["computed"], budget)
        while need(r, n) > free_blocks:
            victim = running.pop()
            free_blocks += victim["blocks"]
            preempted.append(victim["id"])
            for planned in [p for p in plan if p[0] == victim["id"]]:  # not run after all
                plan.remove(planned)
                budget += planned[1]
                free_blocks += need(victim, planned[1])
            if victim is r:
                break
        if r["id"] in preempted:
            continue
        free_blocks -= need(r, n)
        plan.append((r["id"], n))
        budget -= n
    if not preempted:
        for r in waiting:
            if budget == 0 or len(running) >= max_seqs:
                break
            n = min(r["tokens"], budget)
            if need(r, n) > free_blocks:
                break
            free_blocks -= need(r, n)
            running.append(r)
            plan.append((r["id"], n))
            budget -= n
    return {"run": plan, "preempted": preempted, "free_blocks": free_blocks}

# %% [check]
checks.check_schedule_step(schedule_step)

# %% [markdown]
# The engine's version is `ContinuousScheduler.schedule`: the same rules, plus prefix-cache hits
# at admission.

# %%
minillm.show_source(ContinuousScheduler.schedule)
