# 中文版 · 06_batching_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=00a0ddc3
# # 练习 06 · 组批与分页 KV 缓存
#
# 课上引擎里的几个部件，由你亲手写出来，再和 minillm 自己的实现对照：
#
# 1. 一个带引用计数（reference count）的块分配器（block allocator），它是分页 KV 缓存
#    （paged KV cache）的核心；
# 2. – 3. 连续批处理（continuous batching）调度器的一步，分两部分写：接纳等待中的请求，以及为运行中
#    的请求做计划（谁被抢占（preempt））。动手写第二部分之前，会先逐步跟踪一个例子；最后两部分合成
#    完整的一步。
#
# 每个检查都会用固定的和随机的用例，与 `minillm.engine` 对照重放。在各自的单元格里写好每个部件并
# 运行，然后运行它下面的检查单元格。也可以在终端里检查：
# `pytest --nbval-lax exercises/zh/06_batching.ipynb`。

# %% en=846b249b
import minillm
from minillm.course import show_source
from minillm.course.checks import ch06_batching as checks
from minillm.engine import BlockManager, ContinuousScheduler

# %% [markdown] en=a2c0d684
# ## 1 · 带引用计数的块分配器
#
# 池里有 `num_blocks` 个块，编号从 0 到 `num_blocks - 1`。请写一个类，包含：
#
# - `allocate()`：分出一个空闲块（哪个都行），引用计数为 1；没有空闲块时抛出 `RuntimeError`；
# - `share(block)`：又有一条序列持有 `block`（前缀缓存命中）：计数 + 1；
# - `free(block)`：一条序列放手：计数 − 1；减到 0 时这个块重新变为空闲。释放一个已经空闲的块是个
#   错误：抛出 `RuntimeError`；
# - `num_free`：有多少个空闲块（一个属性或 property）。

# %% [task] en=495dea93
class BlockAllocator:
    def __init__(self, num_blocks):
        # 在这里写你的代码
        raise NotImplementedError

    def allocate(self):
        # 在这里写你的代码
        raise NotImplementedError

    def share(self, block):
        # 在这里写你的代码
        raise NotImplementedError

    def free(self, block):
        # 在这里写你的代码
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
            raise RuntimeError("没有空闲块")
        block = self.free_list.pop(0)
        self.ref_count[block] = 1
        return block

    def share(self, block):
        self.ref_count[block] += 1

    def free(self, block):
        if self.ref_count[block] == 0:
            raise RuntimeError(f"块 {block} 已经是空闲的")
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self.free_list.append(block)

# %% [check] en=691123b2
checks.check_block_allocator(BlockAllocator)

# %% [markdown] en=e2a6a6d2
# 把你的实现和引擎的对比一下：`BlockManager` 在同样的账本之上又加了前缀哈希。

# %% en=75ca3aee
show_source(BlockManager.release)

# %% [markdown] en=2460a02b
# ## 调度器看到的请求
#
# 接下来的两个任务为一次前向传播做计划。每个请求是一个含四个数的字典：
#
# - `"id"`：它的名字；
# - `"num_tokens"`：它目前有多少个词元，提示词和已生成的都算；
# - `"computed"`：其中有多少个已经在 KV 缓存里（其余的在这一步里运行）；
# - `"blocks"`：它持有多少个块；一个块装 `block_size` 个词元。
#
# 一个请求要再跑 `n` 个词元，总共需要 `ceil((computed + n) / block_size)` 个块，所以它还得再拿
# `ceil((computed + n) / block_size) - blocks` 个。每个函数都返回一个新的计划，传进来的列表和字典
# 保持原样。

# %% en=3bd8e691
def blocks_to_add(request, n, block_size):
    """`request` 再跑 `n` 个词元之前必须拿到的块数。"""
    return -(-(request["computed"] + n) // block_size) - request["blocks"]

# %% [markdown] en=9c522b68
# ## 2 · 接纳等待中的请求
#
# 请写出 `admit_waiting(waiting, free_blocks, budget, free_seats, block_size)`。按顺序遍历 `waiting`
# （先到先得）。只要还有预算，并且接纳的请求还不到 `free_seats` 个，下一个请求就跑
# `n = min(num_tokens, 剩余预算)` 个词元（长提示词会被切成块，这就是分块预填充（chunked prefill）），
# 需要 `blocks_to_add(request, n, block_size)` 个空闲块。遇到第一个放不下的请求就停下，即使后面的
# 请求放得下。返回 `{"run": [(id, n), ...], "free_blocks": 之后剩下的空闲块数}`。

# %% [task] en=d2db043c
def admit_waiting(waiting, free_blocks, budget, free_seats, block_size):
    # 在这里写你的代码
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

# %% [check] en=25286efb
checks.check_admit_waiting(admit_waiting)

# %% [markdown] en=531aeb05
# ## 3 · 为运行中的请求做计划，块不够时抢占
#
# `plan_running(running, free_blocks, budget, block_size)` 为已经在运行的请求做计划。`running` 按
# 接纳的先后列出它们，最早的在前。规则如下：
#
# 1. **顺序。** 只剩一个词元要跑的请求（解码）排在前面，然后是剩下更多的（提示词分块），每组内部按
#    列表顺序。预算用完就停。
# 2. **大小。** 每个请求跑 `n = min(num_tokens - computed, 剩余预算)` 个词元，还需要
#    `blocks_to_add(request, n, block_size)` 个块。
# 3. **抢占。** 只要它需要的块多于空闲的块，就抢占仍在运行的*最新*请求（列表里剩下的最后一个）：
#    它的块全部还给池，它进入 `preempted`，这一步里不运行。这一条规则引出两种情况：
#    - 仍在运行的最新请求可能恰好就是正在计划的这个：它抢占了自己，不运行；
#    - 它也可能是这一步早先已排进计划的一个解码：把它重新移出计划，连同为它算上的预算和块。
#
#    在这一步里早先被抢占的请求，轮到它时跳过。
#
# 返回 `{"run": [(id, n), ...], "preempted": [ids], "free_blocks": 之后剩下的空闲块数}`。
#
# 动手写之前，先看看这些规则怎么运作。`checks.trace_plan_running` 会像引擎那样为任意用例做计划，
# 并在每个请求处说明理由。这里池中只有一个空闲块；解码 `b` 和 `c` 排在前面，`a` 的提示词分块排在
# 最后：

# %% en=3be19f63
case = [{"id": "a", "num_tokens": 30, "computed": 4, "blocks": 1},
        {"id": "b", "num_tokens": 9, "computed": 8, "blocks": 2},
        {"id": "c", "num_tokens": 5, "computed": 4, "blocks": 1}]
checks.trace_plan_running(case, free_blocks=1, budget=16, block_size=4)

# %% [markdown] en=bb93593a
# `c` 需要一个块，而它自己就是仍在运行的最新请求；接着 `a` 需要四个块，抢占了已经排进计划的 `b`：
# `b` 的那个词元和那个块都回来了。下面的检查指出某个用例你计划得不一样时，用同样的办法跟踪那个用例。

# %% [task] en=68d3d0f3
def plan_running(running, free_blocks, budget, block_size):
    # 在这里写你的代码
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
            victim = still_running.pop()  # 仍在运行的最新请求
            free_blocks += victim["blocks"]
            preempted.append(victim["id"])
            for rid, m in [item for item in plan if item[0] == victim["id"]]:
                plan.remove((rid, m))  # 这一步早先已排进计划：撤销它
                budget += m
                free_blocks += blocks_to_add(victim, m, block_size)
            if victim is request:
                break  # 它抢占了自己
        if request["id"] in preempted:
            continue
        free_blocks -= blocks_to_add(request, n, block_size)
        plan.append((request["id"], n))
        budget -= n
    return {"run": plan, "preempted": preempted, "free_blocks": free_blocks}

# %% [check] en=922d8b93
checks.check_plan_running(plan_running)

# %% [markdown] en=f65d987d
# ## 完整的一步
#
# 你的两个函数合起来就是调度器的一步：先为运行中的请求做计划；如果没有请求被抢占（池里还有空间），
# 再用剩下的预算和空闲块，把等待中的请求接纳进运行中的请求空出来的座位。发生了抢占的一步说明块不够：
# 它不接纳任何请求。

# %% en=3c787371
def schedule_step(running, waiting, free_blocks, block_size=4, budget=16, max_seqs=4):
    plan = plan_running(running, free_blocks, budget, block_size)
    if plan["preempted"]:
        return plan
    left = budget - sum(n for _, n in plan["run"])
    admitted = admit_waiting(waiting, plan["free_blocks"], left, max_seqs - len(running),
                             block_size)
    return {"run": plan["run"] + admitted["run"], "preempted": [],
            "free_blocks": admitted["free_blocks"]}

# %% [check] en=7190e4ab
checks.check_schedule_step(schedule_step)

# %% [markdown] en=f2df80b8
# 引擎里对应的是 `ContinuousScheduler.schedule`：同样的规则写在一个方法里，接纳时还多了前缀缓存命中。

# %% en=4248f9ee
show_source(ContinuousScheduler.schedule)
