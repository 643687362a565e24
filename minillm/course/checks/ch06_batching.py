"""Checkers for exercises/06_batching.ipynb: a block allocator, then one continuous-batching step in
parts (admitting waiting requests, planning the running ones with preemption, the whole step),
each replayed on fixed and random cases and compared with minillm.engine's own BlockManager and
ContinuousScheduler; and `trace_plan_running`, which plans a case the same way and says why.

Every message says both languages side by side (`say`), chosen by the notebook's set_language.
"""

from __future__ import annotations

import random

from ..language import say
from ._base import (CheckFailed, as_int, call, checker, expect, expect_raises, function_name,
                    matching_mistake, passed, short)

# --- 1. the block allocator -----------------------------------------------------------------------

# A trace is a list of operations. ("allocate", name) stores the returned block under `name`;
# ("share", name) and ("free", name) act on that block; ("exhausted",) expects allocate to raise
# RuntimeError; ("double free", name) expects free on an already-free block to raise RuntimeError.
ALLOCATOR_TRACES = [
    (3, [("allocate", "a"), ("allocate", "b"), ("allocate", "c"), ("exhausted",),
         ("free", "b"), ("allocate", "d"), ("free", "a"), ("free", "c"), ("free", "d")]),
    (2, [("allocate", "a"), ("share", "a"), ("free", "a"), ("allocate", "b"), ("exhausted",),
         ("free", "a"), ("allocate", "c"), ("free", "b"), ("free", "c"), ("double free", "c")]),
    (4, [("allocate", "sys"), ("share", "sys"), ("share", "sys"), ("allocate", "x"),
         ("free", "sys"), ("free", "sys"), ("allocate", "y"), ("free", "x"), ("free", "sys"),
         ("free", "y")]),
    (1, [("allocate", "only"), ("exhausted",), ("free", "only"), ("double free", "only"),
         ("allocate", "again")]),
]
HIDDEN_ALLOCATOR_TRACES = [
    (3, [("allocate", "x"), ("share", "x"), ("allocate", "y"), ("allocate", "z"), ("exhausted",),
         ("free", "x"), ("exhausted",), ("free", "x"), ("allocate", "w"), ("free", "y"),
         ("free", "z"), ("free", "w")]),  # a shared block, half released, is still held
    (5, [("allocate", "p"), ("share", "p"), ("share", "p"), ("share", "p"), ("free", "p"),
         ("free", "p"), ("free", "p"), ("allocate", "q"), ("free", "p"), ("double free", "p"),
         ("free", "q")]),
    (2, [("allocate", "a"), ("allocate", "b"), ("exhausted",), ("free", "a"),
         ("double free", "a"), ("allocate", "c"), ("exhausted",), ("free", "b"), ("free", "c")]),
]


def _random_trace(rng: random.Random, num_blocks: int, steps: int):
    """A random trace on a pool of `num_blocks`: allocations until the pool is exhausted, shares,
    frees, and now and then a second free of a block that was just freed."""
    trace, counts, n = [], {}, 0
    for _ in range(steps):
        live = [name for name, c in counts.items() if c > 0]
        choice = rng.random()
        if choice < 0.4 or not live:
            if len(live) == num_blocks:
                trace.append(("exhausted",))
                continue
            n += 1
            trace.append(("allocate", f"s{n}"))
            counts[f"s{n}"] = 1
        elif choice < 0.55:
            name = rng.choice(live)
            trace.append(("share", name))
            counts[name] += 1
        else:
            name = rng.choice(live)
            trace.append(("free", name))
            counts[name] -= 1
            if counts[name] == 0 and rng.random() < 0.3:
                trace.append(("double free", name))
    return num_blocks, trace


def _num_free(alloc, where: str) -> int:
    try:
        value = alloc.num_free
    except NotImplementedError:
        raise CheckFailed(say("`num_free` is not written yet", "`num_free` 还没有写")) from None
    except AttributeError:
        raise CheckFailed(say("the allocator has no `num_free` {where}: give it an attribute or "
                              "a property with the number of free blocks",
                              "{where}，分配器没有 `num_free`：给它一个属性或 property，值为"
                              "空闲块的个数", where=where)) from None
    except Exception as error:
        raise CheckFailed(say("reading num_free {where} raised {kind}: {error}",
                              "{where}读取 num_free 时抛出了 {kind}：{error}", where=where,
                              kind=type(error).__name__, error=error)) from None
    if callable(value):
        raise CheckFailed(say("num_free {where} is a method; make it a number: an attribute, or "
                              "a method with @property above it",
                              "{where}，num_free 是一个方法；应让它是一个数：一个属性，或者上面"
                              "加了 @property 的方法", where=where))
    return as_int(value, say("num_free {where}", "{where}的 num_free", where=where))


def _replay_allocator(BlockAllocator, num_blocks, trace):
    alloc = call(BlockAllocator, num_blocks, what=f"BlockAllocator({num_blocks})")
    held: dict = {}  # name -> block id
    counts: dict = {}  # block id -> holders, as the trace says they should be
    done = []
    for op in trace:
        where = (say("after {done} on BlockAllocator({n})", "在 BlockAllocator({n}) 上做完 {done} 之后",
                     done=", ".join(done[-6:]), n=num_blocks) if done
                 else say("on a new BlockAllocator({n})", "在新建的 BlockAllocator({n}) 上",
                          n=num_blocks))
        kind = op[0]
        if kind == "allocate":
            what = say("allocate() {where}", "{where}调用 allocate()", where=where)
            block = as_int(call(alloc.allocate, what=what), what)
            expect(0 <= block < num_blocks,
                   say("{what} returned block {block}, outside 0..{last}",
                       "{what} 返回了块 {block}，不在 0..{last} 之内", what=what, block=block,
                       last=num_blocks - 1))
            expect(counts.get(block, 0) == 0,
                   say("{what} returned block {block}, which is still held: hand out only free "
                       "blocks", "{what} 返回了块 {block}，可它还被占用着：只能分出空闲的块",
                       what=what, block=block))
            held[op[1]] = block
            counts[block] = 1
        elif kind == "share":
            call(alloc.share, held[op[1]], what=say("share({b}) {where}", "{where}调用 share({b})",
                                                    b=held[op[1]], where=where))
            counts[held[op[1]]] += 1
        elif kind == "free":
            call(alloc.free, held[op[1]], what=say("free({b}) {where}", "{where}调用 free({b})",
                                                  b=held[op[1]], where=where))
            counts[held[op[1]]] -= 1
        elif kind == "exhausted":
            expect_raises(alloc.allocate, error=RuntimeError,
                          what=say("allocate() {where}", "{where}调用 allocate()", where=where),
                          why=say("every block is held", "所有的块都被占用了"))
        elif kind == "double free":
            expect_raises(alloc.free, held[op[1]], error=RuntimeError,
                          what=say("free({b}) {where}", "{where}调用 free({b})", b=held[op[1]],
                                   where=where),
                          why=say("that block is already free (freeing twice is a bug)",
                                  "那个块已经是空闲的了（释放两次是个错误）"))
        done.append(op[0] if len(op) == 1 else f"{op[0]} {op[1]}")
        want_free = num_blocks - sum(1 for c in counts.values() if c > 0)
        after = say("after {done} on BlockAllocator({n})", "在 BlockAllocator({n}) 上做完 {done} 之后",
                    done=", ".join(done[-6:]), n=num_blocks)
        got = _num_free(alloc, after)
        if got != want_free:
            hint = ""
            if kind == "free" and counts[held[op[1]]] > 0:
                hint = say(": that block is still held by another sequence (its reference count "
                           "is not 0 yet), so it must not go back to the pool",
                           "：那个块还被另一条序列占用着（它的引用计数还没到 0），所以不能回到池里")
            raise CheckFailed(say("num_free is {got} {after}; expected {want}{hint}",
                                  "{after}，num_free 是 {got}；应为 {want}{hint}", got=got,
                                  after=after, want=want_free, hint=hint))


@checker
def check_block_allocator(BlockAllocator, *, hidden=False) -> None:
    """`BlockAllocator(num_blocks)` with allocate(), share(block), free(block) and num_free;
    RuntimeError when no block is free and when a free block is freed again."""
    if hidden:
        rng = random.Random(16)
        traces = HIDDEN_ALLOCATOR_TRACES + [_random_trace(rng, n, 60) for n in (3, 10, 32)]
    else:
        rng = random.Random(6)
        traces = ALLOCATOR_TRACES + [_random_trace(rng, n, 60) for n in (5, 16, 64)]
    for num_blocks, trace in traces:
        _replay_allocator(BlockAllocator, num_blocks, trace)
    passed("BlockAllocator", len(traces))


# --- the requests the scheduler steps see ---------------------------------------------------------

# A request is {"id", "num_tokens", "computed", "blocks"}: how many tokens it has so far (prompt
# and generated), how many of them are in the cache, and how many blocks it holds.
def _r(rid, num_tokens, computed, blocks=None, block_size=4):
    if blocks is None:
        blocks = -(-computed // block_size)
    return {"id": rid, "num_tokens": num_tokens, "computed": computed, "blocks": blocks}


def _random_running(rng, block_size=4):
    running = []
    for i in range(rng.randint(0, 5)):
        tokens = rng.randint(1, 30)
        computed = tokens - 1 if rng.random() < 0.7 else rng.randint(0, tokens - 1)
        running.append(_r(f"r{i}", tokens, computed, -(-computed // block_size)))
    return running


def _random_waiting(rng):
    return [_r(f"w{i}", rng.randint(1, 30), 0, 0) for i in range(rng.randint(0, 4))]


def _reference_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    """The step, run by minillm.engine.ContinuousScheduler on equivalent requests."""
    from ...decoding import GenerationConfig
    from ...engine import BlockManager, ContinuousScheduler, Request
    from ...engine.request import RUNNING
    from ...model.toy import LetterTokenizer

    held = sum(r["blocks"] for r in running)
    bm = BlockManager(held + free_blocks + 1, block_size, enable_prefix_caching=False)
    bm.allocate()  # one block held outside the case, so an empty pool is possible
    sched = ContinuousScheduler(bm, max_num_seqs=max(max_seqs, 1), max_num_batched_tokens=budget)
    for r in running + waiting:
        req = Request(r["id"], [1] * r["num_tokens"], GenerationConfig(max_new_tokens=1), [], None,
                      LetterTokenizer(), [], arrival_time=0.0)
        if any(r is x for x in running):
            req.num_computed = r["computed"]
            req.block_table = [bm.allocate() for _ in range(r["blocks"])]
            req.status = RUNNING
            sched.running.append(req)
        else:
            sched.waiting.append(req)
    if max_seqs < 1:
        sched.waiting.clear()  # no seat: nobody is admitted
    batch = sched.schedule()
    return {"run": [(req.id, n) for req, n in batch.items],
            "preempted": sorted((req.id for req in batch.preempted), key=str),
            "free_blocks": bm.num_free}


def _plan(got, what, keys):
    expect(isinstance(got, dict) and set(keys) <= set(got),
           say("{what} returned {got}; return a dict with the keys {keys}",
               "{what} 返回了 {got}；请返回一个含 {keys} 这几个键的字典", what=what,
               got=short(got), keys=", ".join(f"'{k}'" for k in keys)))
    out = {}
    if "run" in keys:
        run = got["run"]
        expect(isinstance(run, (list, tuple)) and all(
            isinstance(x, (list, tuple)) and len(x) == 2 for x in run),
            say("{what}: 'run' is {run}; make it a list of (id, tokens) pairs",
                "{what}：'run' 是 {run}；应是由 (id, 词元数) 对组成的列表", what=what,
                run=short(run)))
        out["run"] = [(rid, as_int(n, say("{what}: the tokens of {rid!r}", "{what}：{rid!r} 的词元数",
                                          what=what, rid=rid))) for rid, n in run]
    if "preempted" in keys:
        expect(isinstance(got["preempted"], (list, tuple)),
               say("{what}: 'preempted' is {got}; make it a list of ids",
                   "{what}：'preempted' 是 {got}；应是由 id 组成的列表", what=what,
                   got=short(got["preempted"])))
        out["preempted"] = sorted(got["preempted"], key=str)
    out["free_blocks"] = as_int(got["free_blocks"], say("{what}: 'free_blocks'",
                                                        "{what}：'free_blocks'", what=what))
    return out


def _step_diagnosis(answers, wants, calls, shown, mistakes, rules):
    """The message for the first case where the plan differs from the reference: `calls` are
    the arguments each mistake model takes, `shown` how each case is written."""
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        return None
    i = wrong[0]
    models = []
    for hint, f in mistakes:
        plans = [f(*c) for c in calls]
        for plan in plans:
            if "preempted" in plan:
                plan["preempted"] = sorted(plan["preempted"], key=str)
        models.append((hint, plans))
    hint = matching_mistake(answers, models, lambda a, b: a == b)
    got, want = answers[i], wants[i]
    if hint is None:
        if "preempted" in want and got["preempted"] != want["preempted"]:
            hint = say("preempt only when a running request needs more blocks than are free, "
                       "and take the most recently admitted (the last in `running`) first, until "
                       "the blocks suffice",
                       "只有当运行中的请求需要的块多于空闲的块时才抢占，并且先抢占最近接纳的那个"
                       "（`running` 里的最后一个），直到块够用为止")
        elif got["run"] != want["run"]:
            hint = rules
        else:
            hint = say("count the blocks each planned request adds, ceil((computed + n) / "
                       "block_size) - blocks, and the blocks a preempted request gives back",
                       "算清每个排进计划的请求新增的块数，ceil((computed + n) / block_size) - "
                       "blocks，以及被抢占的请求交还的块")
    return say("{call}: you planned {got}, expected {want}. {hint}",
               "{call}：你的计划是 {got}，应为 {want}。{hint}", call=shown[i], got=got,
               want=want, hint=hint[0].upper() + hint[1:])


def _need(r, n, block_size):
    return -(-(r["computed"] + n) // block_size) - r["blocks"]


# --- 2. admitting waiting requests ----------------------------------------------------------------

def _admit_variant(waiting, free_blocks, budget, free_seats, block_size=4, *, stop=True,
                   seats=True, chunk=True, blocks=True):
    plan = []
    for r in waiting:
        if budget == 0 or (seats and len(plan) >= free_seats):
            break
        n = min(r["num_tokens"], budget) if chunk else r["num_tokens"]
        need = _need(r, n, block_size)
        if blocks and need > free_blocks:
            if stop:
                break
            continue
        free_blocks -= need
        plan.append((r["id"], n))
        budget -= n
    return {"run": plan, "free_blocks": free_blocks}


ADMIT_CASES = [  # (waiting, free_blocks, budget, free_seats, block_size)
    ([_r("c", 6, 0), _r("d", 3, 0)], 10, 16, 4, 4),
    ([_r("long", 40, 0)], 20, 16, 4, 4),  # the budget cuts the prompt into a chunk
    ([_r("c", 2, 0), _r("d", 2, 0), _r("e", 2, 0)], 10, 16, 2, 4),  # two free seats
    ([_r("c", 20, 0), _r("d", 2, 0)], 3, 32, 4, 4),  # c does not fit: d waits too
    ([_r("c", 5, 0), _r("d", 5, 0)], 10, 8, 4, 4),  # d gets what the budget leaves
    ([], 5, 16, 4, 4),
    ([_r("c", 9, 0)], 2, 16, 4, 8),
    ([_r("c", 3, 0)], 5, 16, 0, 4),  # no seat at all
]
HIDDEN_ADMIT_CASES = [
    ([_r("x", 7, 0), _r("y", 4, 0), _r("z", 1, 0)], 6, 16, 4, 2),  # the blocks run out at z
    ([_r("p", 100, 0)], 4, 12, 2, 4),  # the budget cuts the prompt into a chunk
    ([_r("c", 1, 0), _r("d", 3, 0), _r("e", 2, 0), _r("f", 1, 0)], 20, 32, 3, 4),  # three seats
    ([_r("big", 17, 0), _r("s", 1, 0)], 4, 32, 4, 4),  # big does not fit: s waits too
    ([_r("c", 10, 0), _r("d", 10, 0), _r("e", 3, 0)], 10, 12, 4, 4),  # d gets a chunk, e nothing
    ([], 0, 8, 2, 4),
    ([_r("c", 3, 0), _r("d", 2, 0)], 4, 16, 4, 1),
    ([_r("c", 1, 0), _r("d", 1, 0)], 3, 8, 0, 2),  # no seat at all
    ([_r("c", 4, 0)], 0, 16, 1, 4),  # no free block at all
]


def _admit_reference(waiting, free_blocks, budget, free_seats, block_size):
    out = _reference_step([], waiting, free_blocks, block_size, budget, free_seats)
    return {"run": out["run"], "free_blocks": out["free_blocks"]}


@checker
def check_admit_waiting(admit_waiting, *, hidden=False) -> None:
    """`admit_waiting(waiting, free_blocks, budget, free_seats, block_size)` admits waiting
    requests first come, first served, as ContinuousScheduler does when nothing is running."""
    rng = random.Random(17 if hidden else 7)
    cases = (HIDDEN_ADMIT_CASES if hidden else ADMIT_CASES) + [
        (_random_waiting(rng), rng.randint(0, 8), rng.choice([4, 8, 16, 32]), rng.randint(0, 4),
         rng.choice([2, 4, 8])) for _ in range(40)]

    shown = [f"admit_waiting({w}, free_blocks={f}, budget={b}, free_seats={s}, block_size={bs})"
             for w, f, b, s, bs in cases]
    answers = [_plan(call(admit_waiting, *c, what=what), what, ("run", "free_blocks"))
               for c, what in zip(cases, shown)]
    wants = [_admit_reference(*c) for c in cases]
    message = _step_diagnosis(
        answers, wants, cases, shown,
        [(say("first come, first served: stop at the first request that does not fit, even if "
              "a later one would",
              "先到先得：遇到第一个放不下的请求就停下，即使后面的请求放得下"),
          lambda *c: _admit_variant(*c, stop=False)),
         (say("admit at most free_seats requests", "最多接纳 free_seats 个请求"),
          lambda *c: _admit_variant(*c, seats=False)),
         (say("a prompt longer than the budget left is cut into a chunk: run min(tokens, budget "
              "left) tokens now (chunked prefill)",
              "比剩余预算长的提示词要切成一块：现在只跑 min(词元数, 剩余预算) 个词元，"
              "这就是分块预填充（chunked prefill）"),
          lambda *c: _admit_variant(*c, chunk=False)),
         (say("admit a request only when the blocks for its n tokens, ceil(n / block_size), are "
              "free", "只有当它那 n 个词元所需的块，即 ceil(n / block_size) 个，都空闲时，才接纳"
              "这个请求"),
          lambda *c: _admit_variant(*c, blocks=False))],
        say("admit waiting requests in order while budget and seats are left: each runs "
            "n = min(num_tokens, budget left) and needs ceil(n / block_size) free blocks",
            "只要还有预算和座位，就按顺序接纳等待中的请求：每个跑 n = min(num_tokens, 剩余预算) "
            "个词元，需要 ceil(n / block_size) 个空闲块"))
    if message:
        raise CheckFailed(message)
    passed("admit_waiting", len(cases))


# --- 3. planning the running requests, with preemption --------------------------------------------

def _running_variant(running, free_blocks, budget, block_size=4, *, decodes_first=True,
                     victim=-1, preempt=True, run_self=False, use_budget=True,
                     budget_back=True):
    running, plan, preempted = list(running), [], []
    order = sorted(running, key=lambda r: r["num_tokens"] - r["computed"] > 1) if decodes_first \
        else list(running)
    for r in order:
        if budget <= 0 and use_budget:
            break
        if r["id"] in preempted:
            continue
        left = r["num_tokens"] - r["computed"]
        n = min(left, budget) if use_budget else left
        while preempt and _need(r, n, block_size) > free_blocks and running:
            out = running.pop(victim)
            free_blocks += out["blocks"]
            preempted.append(out["id"])
            for rid, m in [item for item in plan if item[0] == out["id"]]:
                plan.remove((rid, m))  # planned earlier in this step: undone
                budget += m if budget_back else 0
                free_blocks += _need(out, m, block_size)
            if out is r:
                break
        if r["id"] in preempted and not run_self:
            continue
        free_blocks -= _need(r, n, block_size)
        plan.append((r["id"], n))
        budget -= n
    return {"run": plan, "preempted": preempted, "free_blocks": free_blocks}


def _narrated_plan(running, free_blocks, budget, block_size=4):
    """plan_running as the exercise states its rules, with one line for each decision."""
    def left(r):
        return r["num_tokens"] - r["computed"]

    def blocks(k):
        return say("{k} block{s}", "{k} 个块", k=k, s="s" if k != 1 else "")

    lines = [f"free_blocks={free_blocks}, budget={budget}, block_size={block_size}"]
    still, plan, preempted = list(running), [], []
    order = [r for r in running if left(r) == 1] + [r for r in running if left(r) > 1]
    def kind(r):
        return (say("decode", "解码") if left(r) == 1 else
                say("chunk, {n} tokens left", "分块，还剩 {n} 个词元", n=left(r)))

    lines.append(say("order: ", "顺序：") + (", ".join(
        f"{r['id']} ({kind(r)})" for r in order) or say("nobody is running", "没有请求在运行")))
    for r in order:
        if budget == 0:
            lines.append(say("the budget is spent: stop", "预算用完了：停止"))
            break
        if r["id"] in preempted:
            lines.append(say("{id}: preempted earlier in this step, skipped",
                             "{id}：在这一步里早先被抢占了，跳过", id=r["id"]))
            continue
        n = min(left(r), budget)
        need = _need(r, n, block_size)
        line = say("{id}: runs {n} token{s}, needs {need} more, {free} free",
                   "{id}：跑 {n} 个词元，还需要 {need}，空闲 {free} 个", id=r["id"], n=n,
                   s="s" if n != 1 else "", need=blocks(need), free=free_blocks)
        while need > free_blocks:
            victim = still.pop()
            free_blocks += victim["blocks"]
            preempted.append(victim["id"])
            line += say("\n    -> preempt {id} (the newest still running): +{blocks}, "
                        "{free} free",
                        "\n    -> 抢占 {id}（仍在运行的请求里最新的那个）：+{blocks}，空闲 {free} 个",
                        id=victim["id"], blocks=blocks(victim["blocks"]), free=free_blocks)
            for rid, m in [item for item in plan if item[0] == victim["id"]]:
                plan.remove((rid, m))
                budget += m
                back = _need(victim, m, block_size)
                free_blocks += back
                line += say("\n    -> {id} was planned: out of the plan, +{blocks}, +{m} budget; "
                            "{free} free, budget {budget}",
                            "\n    -> {id} 原本已排进计划：移出计划，+{blocks}，预算 +{m}；空闲 "
                            "{free} 个，预算 {budget}", id=rid, blocks=blocks(back), m=m,
                            free=free_blocks, budget=budget)
            if victim is r:
                line += say("\n    -> {id} preempted itself: it does not run",
                            "\n    -> {id} 抢占了它自己：这一步不运行", id=r["id"])
                break
        if r["id"] in preempted:
            lines.append(line)
            continue
        free_blocks -= need
        plan.append((r["id"], n))
        budget -= n
        lines.append(line + say("\n    -> planned: {free} free, budget {budget}",
                                "\n    -> 排进计划：空闲 {free} 个，预算 {budget}",
                                free=free_blocks, budget=budget))
    result = {"run": plan, "preempted": preempted, "free_blocks": free_blocks}
    lines.append(say("result: {result}", "结果：{result}", result=result))
    return result, lines


def trace_plan_running(running, free_blocks, budget, block_size=4) -> dict:
    """Print how one step plans `running` (requests as the exercise writes them), decision by
    decision, as minillm's ContinuousScheduler does; return the plan."""
    result, lines = _narrated_plan(running, free_blocks, budget, block_size)
    print("\n".join(lines))
    return result


RUNNING_CASES = [  # (running, free_blocks, budget, block_size)
    ([_r("a", 9, 8), _r("b", 5, 4)], 10, 16, 4),  # two decodes
    ([_r("long", 40, 12), _r("a", 9, 8)], 20, 10, 4),  # the decode goes before the chunk
    ([_r("a", 9, 8), _r("b", 5, 4)], 0, 16, 4),  # a needs a block: b (the newest) is preempted
    ([_r("a", 9, 8)], 0, 16, 4),  # a can only preempt itself: nothing runs
    ([_r("a", 9, 8), _r("b", 13, 12), _r("c", 3, 2)], 0, 16, 4),
    ([_r("a", 30, 4), _r("b", 6, 5)], 3, 12, 4),
    ([], 4, 16, 4),
    # A's chunk preempts the planned decode d: d's token goes back to the budget, so B runs 1
    ([_r("A", 10, 0), _r("B", 10, 0), _r("d", 9, 8)], 1, 8, 4),
]
HIDDEN_RUNNING_CASES = [
    ([_r("x", 13, 12), _r("y", 2, 1), _r("z", 7, 6)], 5, 16, 4),  # three decodes
    ([_r("chunk", 25, 8), _r("d1", 5, 4), _r("d2", 17, 16)], 10, 12, 4),  # decodes first
    ([_r("a", 5, 4), _r("b", 9, 8), _r("c", 13, 12)], 0, 16, 4),  # a preempts c, the newest
    ([_r("solo", 5, 4)], 0, 8, 4),  # solo can only preempt itself: nothing runs
    ([_r("old", 20, 4), _r("new", 6, 5)], 2, 16, 4),  # old's chunk preempts the planned new
    ([_r("a", 17, 16, block_size=8), _r("b", 30, 9, block_size=8)], 3, 24, 8),
    ([_r("a", 4, 3, block_size=2), _r("b", 3, 2, block_size=2)], 1, 8, 2),
    ([_r("p", 50, 0), _r("q", 40, 0)], 30, 20, 4),  # p spends the budget: q waits
    ([], 0, 8, 4),
    # P's chunk preempts the planned decode d, whose token goes back to the budget: Q runs 1
    ([_r("P", 20, 8, block_size=8), _r("Q", 20, 0), _r("d", 17, 16, block_size=8)], 1, 12, 8),
]


@checker
def check_plan_running(plan_running, *, hidden=False) -> None:
    """`plan_running(running, free_blocks, budget, block_size)` plans the running requests of one
    step, preempting when blocks run out, as ContinuousScheduler does when nobody waits."""
    if hidden:
        rng = random.Random(18)
        cases = list(HIDDEN_RUNNING_CASES)
        while len(cases) < len(HIDDEN_RUNNING_CASES) + 50:
            size = rng.choice([2, 4, 8])
            cases.append((_random_running(rng, size), rng.randint(0, 6),
                          rng.choice([8, 12, 16, 32]), size))
    else:
        rng = random.Random(8)
        cases = list(RUNNING_CASES)
        while len(cases) < len(RUNNING_CASES) + 50:
            cases.append((_random_running(rng), rng.randint(0, 6), rng.choice([8, 16, 32]), 4))

    shown = [f"plan_running({r}, free_blocks={f}, budget={b}, block_size={bs})"
             for r, f, b, bs in cases]
    answers = [_plan(call(plan_running, *c, what=what), what, ("run", "preempted", "free_blocks"))
               for c, what in zip(cases, shown)]
    wants = [_reference_step(running, [], free, bs, budget) for running, free, budget, bs in cases]
    message = _step_diagnosis(
        answers, wants, cases, shown,
        [(say("decodes (one token left) go first, then prompt chunks, each group in list order: "
              "sorted(running, key=lambda r: r['num_tokens'] - r['computed'] > 1)",
              "解码（只剩一个词元）排在前面，然后是提示词的分块，每组内部按列表顺序："
              "sorted(running, key=lambda r: r['num_tokens'] - r['computed'] > 1)"),
          lambda *c: _running_variant(*c, decodes_first=False)),
         (say("preempt the most recently admitted request, the LAST one still in `running`, not "
              "the first", "抢占最近接纳的请求，也就是 `running` 里仍在的最后一个，而不是第一个"),
          lambda *c: _running_variant(*c, victim=0)),
         (say("when a request needs more blocks than are free, preempt until the blocks "
              "suffice; planning it anyway leaves free_blocks below 0",
              "一个请求需要的块多于空闲的块时，要一直抢占到块够用为止；照样把它排进计划，"
              "free_blocks 就会小于 0"),
          lambda *c: _running_variant(*c, preempt=False)),
         (say("a request that preempts itself gives its blocks back and is not run this step",
              "抢占了自己的请求交还它的块，这一步不运行"),
          lambda *c: _running_variant(*c, run_self=True)),
         (say("each request runs n = min(num_tokens - computed, budget left), and the step "
              "stops when the budget is spent",
              "每个请求跑 n = min(num_tokens - computed, 剩余预算) 个词元，预算用完这一步就停"),
          lambda *c: _running_variant(*c, use_budget=False)),
         (say("a decode planned earlier in the step and then preempted gives back its blocks "
              "AND its tokens: add its n to the budget again, or a later request loses them",
              "一个在这一步里先排进计划、后来又被抢占的解码，要交还它的块，也要交还它的词元："
              "把它的 n 加回预算，否则后面的请求就少了这些预算"),
          lambda *c: _running_variant(*c, budget_back=False))],
        say("running requests go first (one-token decodes, then prompt chunks), each taking "
            "min(num_tokens - computed, budget left); checks.trace_plan_running(...) on this "
            "case shows each decision",
            "运行中的请求排在前面（先是一个词元的解码，再是提示词的分块），每个取 "
            "min(num_tokens - computed, 剩余预算) 个词元；对这个用例调用 "
            "checks.trace_plan_running(...) 可以看到每一个决定"))
    if message:
        raise CheckFailed(message)
    passed("plan_running", len(cases))


# --- 4. the whole step ----------------------------------------------------------------------------

STEP_CASES = [  # (running, waiting, free_blocks, settings)
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 6, 0), _r("d", 3, 0)], 10, {}),
    ([_r("a", 9, 8)], [_r("long", 40, 0)], 20, {"budget": 16}),
    ([_r("long", 40, 12), _r("a", 9, 8)], [], 20, {"budget": 10}),
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 2, 0), _r("d", 2, 0)], 10, {"max_seqs": 3}),
    ([_r("a", 5, 4)], [_r("c", 20, 0), _r("d", 2, 0)], 3, {}),
    ([_r("a", 9, 8), _r("b", 5, 4)], [_r("c", 2, 0)], 0, {}),  # preempts: nobody admitted
    ([_r("a", 9, 8)], [], 0, {}),
    ([_r("a", 9, 8), _r("b", 5, 4), _r("c", 5, 4), _r("d", 5, 4)], [_r("e", 2, 0)], 9, {}),
]
HIDDEN_STEP_CASES = [
    ([_r("a", 13, 12), _r("b", 2, 1)], [_r("c", 9, 0), _r("d", 4, 0)], 6, {}),
    ([_r("a", 5, 4)], [_r("long", 64, 0)], 30, {"budget": 24}),  # a chunk of long's prompt
    ([_r("chunk", 33, 16), _r("d", 6, 5)], [], 10, {"budget": 12}),
    ([_r("a", 5, 4), _r("b", 5, 4), _r("c", 5, 4)], [_r("w", 2, 0), _r("v", 2, 0)], 10,
     {}),  # one seat left: v waits
    ([_r("a", 9, 8)], [_r("big", 30, 0), _r("s", 1, 0)], 4, {}),  # big does not fit: s waits
    ([_r("a", 5, 4), _r("b", 9, 8)], [_r("c", 1, 0)], 0, {}),  # preempts: nobody admitted
    ([], [_r("c", 3, 0), _r("d", 3, 0)], 2, {"max_seqs": 1}),
    ([_r("a", 9, 8, block_size=8)], [_r("c", 10, 0)], 3, {"block_size": 8}),
]


def _step_variant(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4, *,
                  admit_after_preempt=False, seats_from_max=False):
    plan = _running_variant(running, free_blocks, budget, block_size)
    if plan["preempted"] and not admit_after_preempt:
        return plan
    left = budget - sum(n for _, n in plan["run"])
    staying = len(running) - len(plan["preempted"])
    seats = max_seqs if seats_from_max else max_seqs - staying
    admitted = _admit_variant(waiting, plan["free_blocks"], left, seats, block_size)
    return {"run": plan["run"] + admitted["run"], "preempted": plan["preempted"],
            "free_blocks": admitted["free_blocks"]}


def _call_naming_the_stub(fn, *args, what, **kwargs):
    """`call`, except that when a function `fn` calls is the stub that is not written yet (the
    learner's plan_running inside the schedule_step the notebook gives), the message names that
    function instead of `fn`."""
    try:
        return call(fn, *args, what=what, **kwargs)
    except CheckFailed as failure:
        stub = failure.__context__  # call() turns a NotImplementedError into this message
        if not isinstance(stub, NotImplementedError) or stub.__traceback__ is None:
            raise
        frame = stub.__traceback__
        while frame.tb_next is not None:
            frame = frame.tb_next
        code = frame.tb_frame.f_code
        name = getattr(code, "co_qualname", code.co_name).rsplit("<locals>.", 1)[-1]
        caller = function_name(fn).rsplit("<locals>.", 1)[-1]
        if name == caller:
            raise
        raise CheckFailed(say("`{name}` is not written yet (`{caller}` calls it): replace "
                              "`raise NotImplementedError` in it with your code, run its cell, "
                              "then run this check again.",
                              "`{name}` 还没有写（`{caller}` 要调用它）：把其中的 "
                              "`raise NotImplementedError` 换成你的代码，运行它所在的单元格，"
                              "再运行这个检查。", name=name, caller=caller)) from None


@checker
def check_schedule_step(schedule_step, *, hidden=False) -> None:
    """`schedule_step(running, waiting, free_blocks, block_size, budget, max_seqs)` must plan
    the step exactly as minillm's ContinuousScheduler does."""
    fixed = HIDDEN_STEP_CASES if hidden else STEP_CASES
    rng = random.Random(16 if hidden else 6)
    cases = [(r, w, f, {"block_size": 4, "budget": 16, "max_seqs": 4, **s})
             for r, w, f, s in fixed]
    while len(cases) < len(fixed) + 50:
        if hidden:
            size = rng.choice([2, 4, 8])
            cases.append((_random_running(rng, size), _random_waiting(rng), rng.randint(0, 6),
                          {"block_size": size, "budget": rng.choice([8, 12, 16, 32]),
                           "max_seqs": rng.choice([1, 3, 4, 6])}))
            continue
        cases.append((_random_running(rng), _random_waiting(rng), rng.randint(0, 6),
                      {"block_size": 4, "budget": rng.choice([8, 16, 32]),
                       "max_seqs": rng.choice([2, 4, 6])}))

    shown = [f"schedule_step({r}, {w}, free_blocks={f}, "
             + ", ".join(f"{k}={v}" for k, v in s.items()) + ")" for r, w, f, s in cases]
    answers = [_plan(_call_naming_the_stub(schedule_step, r, w, f, **s, what=what), what,
                     ("run", "preempted", "free_blocks"))
               for (r, w, f, s), what in zip(cases, shown)]
    wants = [_reference_step(r, w, f, **s) for r, w, f, s in cases]
    flat = [(r, w, f, s["block_size"], s["budget"], s["max_seqs"]) for r, w, f, s in cases]
    message = _step_diagnosis(
        answers, wants, flat, shown,
        [(say("a step that preempted is short of blocks: admit nobody new in it",
              "发生了抢占的一步说明块不够：这一步里不接纳任何新请求"),
          lambda *c: _step_variant(*c, admit_after_preempt=True)),
         (say("the free seats are max_seqs minus the requests still running, not max_seqs",
              "空闲座位数是 max_seqs 减去仍在运行的请求数，而不是 max_seqs"),
          lambda *c: _step_variant(*c, seats_from_max=True))],
        say("plan the running requests first (your plan_running), then, if nobody was "
            "preempted, admit waiting requests (your admit_waiting) with the budget, seats and "
            "blocks left",
            "先为运行中的请求做计划（你的 plan_running），然后，如果没有请求被抢占，再用剩下的"
            "预算、座位和块接纳等待中的请求（你的 admit_waiting）"))
    if message:
        raise CheckFailed(message)
    passed("schedule_step", len(cases))
