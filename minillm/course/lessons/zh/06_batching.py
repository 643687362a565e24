# 中文版 · 06_batching.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=e67de042
# # 06 · 组批与分页注意力：同时服务许多用户
#
# 到目前为止，我们一次只处理一个提示词。服务器要同时回答许多用户，而每个解码步不管算一个词元还是
# 十六个，都要把模型的每个权重读一遍（第 05 章：单行的解码受内存带宽限制）。把许多请求放进一个批里
# 运行，就能分摊这笔开销。本章用足够小、读得完的代码，搭出 vLLM 和 SGLang 赖以构建的那些思想（大多数
# 部署所用的两个开源引擎；第三个 Text Generation Inference 已于 2026 年 3 月被维护者归档）：
#
# - **连续批处理**（continuous batching）：在*每一次*前向传播之前重新决定谁来运行，这样一个请求结束，
#   它的座位立刻就有人补上；与之相对的是**静态批处理**（static batching），一个批要一直跑到其中最长
#   的那个成员结束；
# - **分页 KV 缓存**（paged KV cache），即 PagedAttention 的思想：缓存切成固定大小的块（block），每条
#   序列保存一张**块表**（block table），内存用多少取多少。前缀相同的请求之间共享已满的块，这就是
#   **前缀缓存**（prefix caching）；
# - 大规模部署在此之上添加的东西：分块预填充、SGLang 的基数树前缀缓存、并行采样的写时复制，以及
#   预填充/解码分离，每一项都在这里测量。
#
# 你还会碰到第三个名字：**动态批处理**（dynamic batching）（NVIDIA Triton、TorchServe），它就是带一个
# 几毫秒收集窗口的静态批处理：批一旦组好就固定不变，直到最长的成员结束。连续批处理（迭代级调度）则在
# 每一步都改变它。
#
# 引擎在 `minillm/engine/` 里。下面的每个数字都是在这次运行中测出来的。设置了环境变量 `CI` 时（课程的
# 测试会设），规模会缩小。

# %% en=1b83592d
import os
import time

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course import show_source
from minillm.engine import BlockManager, ContinuousScheduler, Engine, PagedBatch
from minillm.measure import TOO_NOISY, Comparison, compare, load_average
from minillm.tools.bench.batching import (make_workload, memory_use, run_engine,
                                          run_online)
from minillm.utils.columns import Label  # 按屏幕列宽补齐：一个汉字占两列
from minillm.utils.devices import Timer

CI = bool(os.environ.get("CI"))
REPEATS = 2  # 每个结论背后交替重复的次数（每一边各计时两次）
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # 其他程序每占满一个核心，就少用一个线程
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"设备：{device}，{torch.get_num_threads()} 个 CPU 线程；{load_average()}"
      "（还有别的程序在用这台机器：计时会随它们波动）")

# %% [markdown] en=f4b0766e
# ## 1 · 一份工作负载
#
# 一组固定的请求（种子为 0），提示词截自课程的英文文本。这里忽略 EOS，所以每个请求跑到它自己的
# `max_new_tokens`：长度各不相同，就像真实用户之间那样。

# %% en=7f7af8d1
N = 8 if CI else 12
work = make_workload(tokenizer, N, prompt_lengths=(8, 48 if CI else 96),
                     output_lengths=(4, 24 if CI else 32), seed=0)
print("提示词词元数：", [len(w.prompt) for w in work])
print("新词元数：    ", [w.max_new_tokens for w in work])

# %% [markdown] en=2fe37cf2
# ## 2 · 静态批处理与连续批处理的对比
#
# 两次运行用的是同一个引擎、同一个分页缓存，每次前向传播最多 `SEATS` 个请求。只有调度器（scheduler）
# 不同：
#
# - `static`：取 `SEATS` 个请求，一起预填充，一直解码到*最长*的那个结束；早结束的请求仍占着它的那一行
#   （一个“幽灵”，下图中的灰色），就像带填充的 `generate()` 批那样。然后从等待的请求里取下一批：这是
#   没有收集窗口的动态批处理。
# - `continuous`：每次前向之前，运行中的请求优先，然后只要还有座位、块和词元预算（token budget），就
#   接纳等待中的请求。
#
# 两次运行交替进行，各 `REPEATS` 次，这样机器上别的活动两边都会碰上（`minillm.measure.compare`）；只有
# 每次重复都一致时才打印结论。

# %% en=77b4b2e7
SEATS = 4
BATCHING = {"static": "静态批处理", "continuous": "连续批处理"}  # 打印出来的名字


def new_engine(kind, **options):
    settings = dict(num_blocks=128, block_size=16, max_num_seqs=SEATS,
                    max_num_batched_tokens=256, record=True)
    return Engine(model, tokenizer, scheduler=kind, **{**settings, **options})


runs = {}


def serve(kind):
    engine = new_engine(kind)
    runs[kind] = {**run_engine(engine, work), "engine": engine}


# 两种调度器交替运行：static、continuous，然后 continuous、static……
timing = compare(lambda: serve("static"), lambda: serve("continuous"), repeats=REPEATS,
                 warmup=0, device=device)
for kind in ["static", "continuous"]:
    run = runs[kind]  # 最后一次重复
    print(f"{Label(BATCHING[kind]):>19}：{run['new_tokens']} 个词元，用时 {run['wall_s']:.1f} s "
          f"= 每秒 {run['tokens_per_s']:.1f} 个词元，{len(run['engine'].steps)} 次前向")
speedup = 1 / timing.ratio
print(f"用时，连续批处理 / 静态批处理：{timing.spread_text()}")
print({True: "每次重复里连续批处理都更慢",
       False: f"连续批处理：吞吐量是静态批处理的 {speedup:.2f} 倍",
       None: TOO_NOISY}[timing.above(1.0)])

# %% [markdown] en=f0a5ed2c
# 两者给每个请求的词元都一样（贪心解码，每个请求都和单独运行时一样）。两种批的形状不同，所以在 CPU 上
# 这个比较是精确的；在 GPU 上，算子按依赖形状的顺序求和，比较只到最大的两个 logits 第一次几乎打平为止
# （`minillm.generation.agreement`）：

# %% en=22b58511
from minillm.generation.agreement import agree, rule

same = all(agree(model, w.prompt, a.token_ids, b.token_ids) for w, a, b in
           zip(work, runs["static"]["outputs"], runs["continuous"]["outputs"]))
assert same
print("输出相同，比较方式：", rule(model), "：", same)

# %% [markdown] en=1f4b1dff
# 最后一次重复的时间线说明了原因。每一行是一个请求；每一段是它参与的一次前向传播（预填充、解码，或
# 幽灵：已经结束的行仍在被计算）。

# %% en=9f723b65
from minillm.course.widgets.batching import COLOURS, plot_timeline, timeline_legend

fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
kinds = set()
for ax, kind in zip(axes, ["static", "continuous"]):
    kinds |= plot_timeline(ax, runs[kind]["engine"].steps,
                           f"{BATCHING[kind]}：{runs[kind]['wall_s']:.1f} s")
axes[1].set_xlabel("秒")
timeline_legend(axes[0], kinds)
plt.tight_layout()
plt.show()

# %% [markdown] en=93611328
# 静态批处理的工作中有多少浪费在幽灵行上，批又装得有多满？

# %% en=b5df5e6c
static = runs["static"]["engine"]
row_kinds = [k for s in static.steps for _, _, k in s.items if k in COLOURS]
ghost = row_kinds.count("ghost") / len(row_kinds)
print(f"静态批处理：{ghost:.0%} 的行步在计算没人要的词元")
for kind, run in runs.items():
    e = run["engine"]
    rows = sum(len(s.items) for s in e.steps) / len(e.steps)
    print(f"{Label(BATCHING[kind]):>19}：平均每次前向 {rows:.2f} 行（共 {SEATS} 个座位）")

# %% [markdown] en=aa5533b5
# 幽灵行并不是唯一的浪费：静态批还要把每个提示词填充到批里最长的那个。`StepRecord.computed_rows` 记下
# 每次前向算了多少个词元位置，填充和幽灵都算在内，于是两次运行的工作量可以直接比较：

# %% en=3d1118af
work_ratio = (sum(s.computed_rows for s in static.steps)
              / sum(s.computed_rows for s in runs["continuous"]["engine"].steps))
print(f"静态批处理算的词元位置是连续批处理的 {work_ratio:.2f} 倍；"
      f"用时是它的 {1 / timing.ratio:.2f} 倍")

# %% [markdown] en=6f3240d4
# 省下的工作能不能变成省下的时间，取决于一个问题：一次前向传播带的行越多，代价会不会越高？在几个批宽度
# 下给一个解码步计时（每行一个新词元，每行 64 个词元的上下文）：

# %% en=33a139ce
from minillm.engine import PagedKVPool, paged_forward
from minillm.utils.devices import best_time


def decode_step(rows, context=64):
    blocks = -(-(context + 1) // 16)
    pool = PagedKVPool.for_model(model, rows * blocks, 16)
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(rows)]

    def run():
        with torch.inference_mode():
            paged_forward(model, pool, tables, [context] * rows, [[1]] * rows)
    return run


widths = [1, 2, 4, 8, 16]
steps = {w: decode_step(w) for w in widths}
step_s = [best_time(steps[w], model, repeats=3, warmup=1) for w in widths]
wide = compare(steps[1], steps[widths[-1]], repeats=5, device=device)
print(f"一步的用时，{widths[-1]} 行 / 1 行：{wide.spread_text()}")
print({True: "一步的用时随行数增长：算术决定用时（计算受限）",
       False: "几乎不要钱：读权重决定用时（带宽受限）",
       None: TOO_NOISY}[wide.above(1.5)])

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot([str(w) for w in widths], [1000 * t for t in step_s], "o-")  # evenly spaced widths
ax.set(xlabel="解码步中的行数", ylabel="每步毫秒数",
       title=f"{device} 上的一个解码步：每个宽度取 3 次中最快的")
plt.tight_layout()
plt.show()

# %% [markdown] en=a476788f
# 第 05 章的批大小扫描，读法相同。只要一步的用时几乎不变（带宽受限，GPU 上通常如此），总用时就跟着
# 步数走：每个空着的座位都是损失的吞吐量，而分页缓存腾出空间多出来的座位（第 3 节）就是白送的吞吐量。
# 一步的用时随行数增长时（计算受限：CPU 过了几行就是这样），总用时跟着工作量走：连续批处理大约能省下
# `work_ratio` 倍，多出来的座位帮不上多少忙。

# %% [markdown] en=ba13cca7
# ## 3 · KV 内存：连续存储与分页的对比
#
# 连续存储的 KV 缓存（第 03 章）在每条序列开始之前，就为它可能达到的最大长度预留好空间：这里是提示词 +
# `max_new_tokens`，在许多服务器里则是模型的整个上下文。在请求的大部分生命周期里，这片空间大多空着：
# 这就是**内存碎片**（memory fragmentation）。分页缓存一次只取一个 16 槽的块，所以每条序列最多空着 15 个槽。
#
# 把连续批处理的那次运行一步步重放，并在每一步之后给池拍一张快照：

# %% en=c80ac6e0
from minillm.course.widgets.batching import block_map_explorer, record_block_maps

engine = new_engine("continuous", num_blocks=64)
for w in work:
    engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens, ignore_eos=True)
snapshots = record_block_maps(engine)  # 每一步之后，每个运行中请求的块表
print(f"记录了 {len(snapshots)} 步")

# %% [markdown] en=575a2735
# 拖动滑块逐步查看。左边是连续存储的缓存：每个运行中请求预留的槽（灰色）和它已经填上的槽。右边是分页
# 的池：每个块一个格子，按持有它的请求着色（图例标出了请求名），块只填了一部分时颜色较浅。

# %% en=250b0b69
block_map_explorer(engine, snapshots)

# %% [markdown] en=c7513a6d
# 在连续批处理的整次运行中（每一步按它装着的词元数加权）：

# %% en=52913628
longest = max(len(w.prompt) + w.max_new_tokens for w in work)
memory = memory_use(runs["continuous"]["engine"].steps, max_len=longest)
LAYOUTS = {"paged": "分页，每块 16 个词元", "contiguous_per_request": "连续存储，提示词 + max_new",
           "contiguous_max_length": "连续存储，最大长度"}  # 打印出来的名字
for name, share in memory.items():
    print(f"{Label(LAYOUTS[name]):>28}：预留的 KV 内存中有 {share:.1%} 装着词元")

# %% [markdown] en=f0ed6c8f
# ## 4 · 逐步看块表
#
# 取一个已经跑完提示词的请求。第 `t` 个词元住在块 `table[t // 16]` 的第 `t % 16` 个槽里；池把所有层的
# 键按 `block * 16 + slot` 行存放。

# %% en=94fd8423
engine = new_engine("continuous", num_blocks=32)
for w in work[:3]:
    engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens, ignore_eos=True)
for _ in range(3):
    engine.step()
request = engine.scheduler.running[0]
table, length = request.block_table, request.num_computed
print(f"请求 {request.id}：缓存里有 {length} 个词元，块表 {table}")
for t in [0, 15, 16, length - 1]:
    block, slot = table[t // 16], t % 16
    print(f"  词元 {t:>3} -> 块 {block:>2}，槽 {slot:>2} -> 池的第 {block * 16 + slot} 行")

# %% [markdown] en=70534cd9
# 通过块表把键读回来，得到的与一个普通的连续缓存（`minillm.KVCache`，第 03 章）单独跑同样这些词元后
# 保存的内容完全一样：

# %% en=55f6deb3
cache = minillm.KVCache.for_model(model, batch_size=1, max_tokens=length)
with torch.inference_mode():
    model(torch.tensor([request.tokens[:length]], device=device), cache=cache)
paged_keys, _ = engine.pool.gather(5, table, length)  # 第 5 层
contiguous_keys = cache.keys[5][0, :, :length]
torch.testing.assert_close(paged_keys, contiguous_keys, rtol=1e-4, atol=1e-4)
print("第 5 层的键，分页对比连续：最大差值 "
      f"{(paged_keys - contiguous_keys).abs().max().item():.1e}")

# %% [markdown] en=a11065c3
# 在前向传播中，每一层把新的键和值交给缓存，再对缓存返回的内容做注意力。分页缓存把它们写进各自的槽，
# 然后通过块表收集每一行的键；注意力掩码遮住不同长度的行之间的填充，所以模型代码和第 02 章的一样：

# %% en=e101a301
show_source(PagedBatch.append)

# %% [markdown] en=2a88e7fd
# 这次收集在每一步、每一层都要复制每一行的键和值，这是注意力本身那次读取之外的额外开销。所以 CPU 上的
# 解码步跳过了收集：`PagedBatch.attend` 把查询交给一个小的 C 算子 `minillm.kernels.paged_decode_attention`，
# 由它沿着每一行的块表，在键和值原本所在的地方读取，就像 vLLM 的 PagedAttention 算子在 GPU 上做的那样。
# 两种方式都在这个引擎正在使用的池上跑一遍：

# %% en=ea18834a
from minillm import kernels
from minillm.layers.attention import attention

rows = engine.scheduler.running[:8]
lengths = torch.tensor([r.num_computed for r in rows])
slots = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
for i, r in enumerate(rows):
    slots[i, :r.num_computed] = engine.pool.slots(r.block_table, 0, r.num_computed)
q = torch.randn(len(rows), model.config.n_heads, model.config.head_dim, device=device)


def through_a_gather():
    return torch.cat([attention(q[i][None, :, None], *(t[None] for t in engine.pool.gather(
        5, r.block_table, r.num_computed)))[0, :, 0][None] for i, r in enumerate(rows)])


if device.type == "cpu" and kernels.available():
    def in_place():
        return kernels.paged_decode_attention(q, engine.pool.keys[5], engine.pool.values[5],
                                              slots, lengths)

    torch.testing.assert_close(in_place(), through_a_gather(), atol=1e-5, rtol=1e-5)
    print(f"{len(rows)} 行，每行 {lengths.min().item()}-{lengths.max().item()} 个词元，第 5 层："
          f"就地读取 {best_time(in_place, device=device) * 1e3:.2f} ms，经由收集 "
          f"{best_time(through_a_gather, device=device) * 1e3:.2f} ms（数值相同）")
else:
    print(f"在 {device.type} 上，引擎走收集：minillm 的算子是给 CPU 用的；在 GPU 上，就地读取的"
          "是 vLLM 的 CUDA 算子")

# %% [markdown] en=13fe2a49
# ## 5 · 共享系统提示词上的前缀缓存
#
# 聊天请求常常以同一段系统提示词开头。一个已满的块，用它的词元*和*它前一个块的名字一起算出的哈希来命名，
# 所以名字相同就意味着前缀相同。新请求查找它的块；每次命中都共享这个块（引用计数 + 1），而不重新计算。

# %% en=3532d7c2
show_source(BlockManager.match_prefix)

# %% en=5fe66b60
# 系统提示词的意思是：“你是一个烹饪网站的友好助手。回答要简短、礼貌。推荐用大多数厨房里都有的常见食材
# 做的简单菜谱，给出烹饪时间（有烤箱温度时也给出），提醒坚果、牛奶、鸡蛋等过敏原，绝不推荐生肉或生鱼。”
# 几个问题依次是：怎么煮鸡蛋？米饭配什么好？面包要烤多久？汤能冷冻吗？有什么快手早餐？意面怎么煮？
SYSTEM = ("You are a friendly assistant for a cooking website. Answer briefly and politely. "
          "Suggest simple recipes that use common ingredients found in most kitchens, give the "
          "cooking time and the oven temperature when there is one, warn about allergens such "
          "as nuts, milk and eggs, and never recommend raw meat or raw fish.")
QUESTIONS = ["How do I boil an egg?", "What goes well with rice?", "How long to bake bread?",
             "Can I freeze soup?", "What is a quick breakfast?", "How do I cook pasta?"]
chats = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": q}])
         for q in (QUESTIONS[:4] if CI else QUESTIONS)]
ids = [tokenizer.encode(c) for c in chats]
shared = next(i for i, (a, b) in enumerate(zip(*ids[:2])) if a != b)
print(f"{len(chats)} 段对话，每段 {min(map(len, ids))}-{max(map(len, ids))} 个词元；所有对话的"
      f"前 {shared} 个词元都相同：可以共享 {shared // 16} 个 16 词元的满块")

prefix = {}
for caching in [False, True]:
    engine = new_engine("continuous", enable_prefix_caching=caching, max_num_seqs=2)
    with Timer(device) as stopwatch:
        outs = engine.generate(chats, max_new_tokens=8)
        computed = sum(n for s in engine.steps for _, n, k in s.items if k == "prefill")
    prefix[caching] = (outs, stopwatch.seconds, computed, engine.stats())
    print(f"前缀缓存{'开' if caching else '关'}：计算了 {computed} 个提示词词元，"
          f"{prefix[caching][1]:.1f} s，命中率 {engine.stats()['prefix_cache_hit_rate']:.0%}")

assert all(agree(model, i, a.token_ids, b.token_ids)
           for i, a, b in zip(ids, prefix[True][0], prefix[False][0]))
print("开不开缓存，回答都一样；第一个回答：", repr(prefix[True][0][0].text))

# %% [markdown] en=ff72662a
# 前两个请求在任何块装满之前就一起运行，所以它们都要计算系统提示词；之后的每个请求都能在缓存里找到它的
# 满块。前缀最后那个只填了一部分的块永远不会被共享：只有满块才有名字。
#
# ## 6 · 用基数树代替块哈希链
#
# SGLang 把它的前缀缓存组织成一棵以词元 id 为键的**基数树**（radix tree）（即它的 RadixAttention）：每条
# 边存一段词元，从根出发的一条路径拼出一条已缓存的序列，新提示词复用与它匹配的最长路径，精确到词元，而
# 不是精确到块。缓存满了时，最近最少使用的叶子先走（**LRU 淘汰**（LRU eviction））：叶子是一条没有别的
# 已缓存序列接着往下走的序列的末端，所以淘汰它不会破坏任何人的前缀。`minillm/engine/radix_cache.py`
# 实现了一棵；匹配时沿树向下走，在提示词离开某条边的地方把这条边切开：

# %% en=7fe71601
from minillm.engine.radix_cache import (RadixCache, block_cache_hit_rate,
                                        radix_cache_hit_rate)

show_source(RadixCache.walk)

# %% [markdown] en=3282bff6
# 多轮对话正是前缀缓存大显身手的地方：每一轮的提示词都是到目前为止的整段对话。几个用户和上面那个烹饪
# 助手聊天，每人聊几轮；引擎回答每一轮，我们把每个请求的提示词和回答都留下来：

# %% en=5f139fc6
USERS, TURNS, ANSWER = (3, 2, 12) if CI else (4, 3, 24)
# 四个用户的追问依次是：怎么煮鸡蛋？/ 溏心的呢？/ 能趁热剥吗？；米饭配什么好？/ 有素食的吗？/
# 能放多久？；面包要烤多久？/ 用多少温度？/ 能用全麦粉吗？；汤能冷冻吗？/ 能冻多久？/ 怎么解冻？
FOLLOW_UPS = [["How do I boil an egg?", "And a soft one?", "Can I peel it warm?"],
              ["What goes well with rice?", "Something vegetarian?", "How long does it keep?"],
              ["How long to bake bread?", "At what temperature?", "Can I use whole wheat?"],
              ["Can I freeze soup?", "For how long?", "How do I thaw it?"]]
conversations = [[{"role": "system", "content": SYSTEM}] for _ in range(USERS)]
served = []  # (提示词 id, 回答 id)，按各轮被服务的顺序
chat_engine = new_engine("continuous", max_num_seqs=USERS)
for turn in range(TURNS):
    prompts = []
    for user, chat in enumerate(conversations):
        chat.append({"role": "user", "content": FOLLOW_UPS[user][turn]})
        prompts.append(tokenizer.encode(tokenizer.apply_chat_template(chat)))
    for chat, prompt, out in zip(conversations, prompts,
                                 chat_engine.generate(prompts, max_new_tokens=ANSWER)):
        chat.append({"role": "assistant", "content": out.text})
        served.append((prompt, out.token_ids))
print(f"{len(served)} 个请求，提示词 {min(len(p) for p, _ in served)}-"
      f"{max(len(p) for p, _ in served)} 个词元；引擎自己的命中率 "
      f"{chat_engine.stats()['prefix_cache_hit_rate']:.0%}")

# %% [markdown] en=fd8246a0
# 现在把这些请求一个接一个地重放，分别送进两种缓存，内存相同：一棵最多装 C 个词元的基数树，以及有
# C / 16 个块的引擎块管理器。命中率是在缓存里找到的提示词词元所占的比例。

# %% en=6a7930a4
longest = max(len(p) + len(a) for p, a in served)
everything = sum(len(p) + len(a) for p, a in served)
capacities = sorted({16 * -(-int(longest * f) // 16) for f in (1, 1.5, 2, 3, 4, 6)}
                    | {16 * -(-everything // 16)})
hits = {"基数树（SGLang）": [], "块哈希（vLLM）": []}
for c in capacities:
    hits["基数树（SGLang）"].append(radix_cache_hit_rate(served, c).hit_rate)
    hits["块哈希（vLLM）"].append(block_cache_hit_rate(served, c // 16).hit_rate)
for i, c in enumerate(capacities):
    print(f"{c:>5} 个槽：基数树 {hits['基数树（SGLang）'][i]:.1%}，"
          f"块哈希 {hits['块哈希（vLLM）'][i]:.1%}")
ahead = sum(r >= b for r, b in zip(*hits.values()))
print(f"在 {len(capacities)} 种容量中，有 {ahead} 种基数树命中的词元不少于块哈希")

fig, ax = plt.subplots(figsize=(6, 3))
for name, rates in hits.items():
    ax.plot(capacities, [100 * r for r in rates], "o-", label=name)
ax.set(xlabel="缓存容量（词元槽数）", ylabel="命中的提示词词元（%）",
       title=f"前缀缓存命中率，重放 {len(served)} 轮对话")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown] en=ccaff298
# 空间足够装下一切时，差别在于粒度：每一轮，块链都会丢掉已缓存对话末尾那个只填了一部分的块（最多 15 个
# 词元）；用户们的提示词如果在某个块的中间分叉，那个块也会丢掉。空间很少时，淘汰说了算，两种方案都先淘汰
# 最近最少使用的（块管理器先分出最早释放的块）。vLLM 保留块，是因为它的注意力算子按块读取；SGLang 按
# 单个词元分页，所以它的树能精确匹配到词元。
#
# ## 7 · 并行采样共享提示词：写时复制
#
# 一个要 n 个样本的请求（OpenAI API 里的 `n`；`minillm serve` 会把它传给引擎）只对提示词预填充一次，
# 然后分叉：每个样本的块表一开始都是提示词的块表，每个块的引用计数都是 n。满块再也不会被写，所以共享
# 它们不花任何代价。样本往最后那个只填了一部分的块里写之前，先得到一份属于自己的副本，共享的块则少一个
# 引用：这就是**写时复制**（copy-on-write），和操作系统在 `fork()` 之后共享内存页的做法一样：

# %% en=24e10bf5
show_source(BlockManager.copy_on_write)

# %% en=b057ac1c
SAMPLES = 3
fork = new_engine("continuous", num_blocks=32)
fork.add_request(ids[0], n=SAMPLES, do_sample=True, temperature=0.8, seed=0,
                 max_new_tokens=ANSWER)
fork_snapshots = record_block_maps(fork)  # 键为 (请求, 样本)
forked = next(i for i, snap in enumerate(fork_snapshots) if len(snap) == SAMPLES)
tables = [t for t, _, _ in fork_snapshots[forked + 1].values()]  # 分叉之后的一步
held = len({b for t in tables for b in t})
shared = sum(all(b in t for t in tables) for b in tables[0])
assert shared >= len(ids[0]) // 16 and held < sum(map(len, tables))
print(f"第 {forked + 1} 步：{SAMPLES} 个样本的块表共列出 {sum(map(len, tables))} 个块，"
      f"其中 {held} 个互不相同：{shared} 个由全体共享（提示词的满块），"
      "其余的各归各的样本")

# %% [markdown] en=00218da0
# 这次运行的块图：带斜线的格子是共享的（数字表示被几个样本共享）。拖动滑块：样本们写各自的块，而提示词
# 的块一直是共享的。

# %% en=ed4ae2c1
block_map_explorer(fork, fork_snapshots, step=forked)

# %% [markdown] en=9c0ea77c
# ## 8 · 抢占：块用完了的时候
#
# 池太小、装不下所有运行中的请求时，调度器会抢占（preempt）最近接纳的那个：它交还所有的块，回到队列最前面
# 等待。等它回来时，它的提示词和已经生成的词元会被重新计算（它的满块可能还在前缀缓存里），所以什么也
# 不会丢：

# %% en=7984a887
# 四个提示词短、回答长的请求：同时开始，然后一起变长
order = sorted(range(N), key=lambda i: len(work[i].prompt) - work[i].max_new_tokens)[:4]
few = [work[i] for i in order]
need = max(-(-(len(w.prompt) + w.max_new_tokens) // 16) for w in few)  # 最长的那个单独所需
at_start = sum(-(-(len(w.prompt) + 1) // 16) for w in few)  # 四个都跑完提示词之后
tight = new_engine("continuous", num_blocks=max(need, at_start))
outs = tight.generate([w.prompt for w in few],
                      [{"max_new_tokens": w.max_new_tokens} for w in few],
                      ignore_eos=True)
assert tight.scheduler.num_preemptions > 0
assert all(agree(model, w.prompt, o.token_ids, runs["continuous"]["outputs"][i].token_ids)
           for w, o, i in zip(few, outs, order))
assert tight.blocks.num_free == tight.blocks.num_blocks  # 每个块都回来了
print(f"{tight.blocks.num_blocks} 个块供 4 个请求用：{tight.scheduler.num_preemptions} 次"
      f"抢占，词元相同，结束时 {tight.blocks.num_free}/{tight.blocks.num_blocks} "
      "个块空闲")

# %% [markdown] en=38d7c50d
# 调度器的全貌：解码优先，然后在词元预算之内安排提示词的分段（即**分块预填充**（chunked prefill）），
# 缺块时抢占，最后接纳新请求：

# %% en=4248f9ee
show_source(ContinuousScheduler.schedule)

# %% [markdown] en=cb9683c0
# ## 9 · 实测分块预填充
#
# 为什么要把提示词切成块？一步里的预填充和解码是一起跑的，每个运行中的请求都要等整步跑完，才能拿到它的
# 下一个词元。这里有四个请求正在解码，这时来了一个长提示词。词元预算比提示词大时，它的整个预填充落在
# 一步里；预算小时（`CHUNK` 个词元），它分散到许多步里。`long_prompt_arrival`
# （`minillm/engine/interference.py`）先启动那几个运行中的请求，等它们都在解码时加入长提示词，一直跑到
# 它的第一个词元；它在一个 `ClockedEngine` 上运行，时钟只按各步实测的用时前进；它把每个运行中请求相邻
# 两个词元之间的间隔收进一个 `Arrival`：

# %% en=759ad8e7
from minillm.engine.interference import Arrival, long_prompt_arrival

show_source(Arrival)

# %% en=9293e7b2
LONG, CHUNK = (256, 32) if CI else (512, 64)
long_prompt = make_workload(tokenizer, 1, prompt_lengths=(LONG, LONG), output_lengths=(1, 1),
                            seed=5)[0].prompt
decoding = [w.prompt for w in work[:SEATS]]
arrivals = {"整块": [], "分块": []}
for _ in range(REPEATS):  # 交替进行
    for mode, budget in (("整块", LONG + SEATS), ("分块", CHUNK)):
        engine = new_engine("continuous", max_num_batched_tokens=budget, max_num_seqs=SEATS + 1,
                            enable_prefix_caching=False, record=False)
        arrivals[mode].append(long_prompt_arrival(engine, decoding, long_prompt))
for mode, results in arrivals.items():
    r = results[-1]
    print(f"{Label(mode):>8}（预算 {r.budget}）：{r.steps} 步；运行中请求的最长间隔 "
          f"{1000 * r.stall:.0f} ms，平均 {1000 * r.mean_gap:.0f} ms；长提示词的 TTFT "
          f"{1000 * r.ttft:.0f} ms")
stall = Comparison(tuple(r.stall for r in arrivals["整块"]),
                   tuple(r.stall for r in arrivals["分块"]))
wait = Comparison(tuple(r.ttft for r in arrivals["整块"]),
                  tuple(r.ttft for r in arrivals["分块"]))
print(f"分块 / 整块，最长间隔：{stall.spread_text()}；长提示词的 TTFT："
      f"{wait.spread_text()}")
print({True: "分块没有缩短停顿", None: TOO_NOISY,
       False: "每次重复里，分块都缩短了运行中请求最长的等待"}
      [stall.above(1.0)])

# %% [markdown] en=e0a8734e
# 从长提示词到达，到它的第一个词元出来，这段时间里一个运行中请求的各个间隔（最后一次重复）：

# %% en=0ae509dc
fig, ax = plt.subplots(figsize=(7, 2.6))
for mode, style in (("整块", "s-"), ("分块", "o-")):
    gaps = arrivals[mode][-1].gaps[:arrivals[mode][-1].steps]  # 第一个请求的
    ends = [sum(gaps[:i + 1]) for i in range(len(gaps))]
    ax.plot(ends, [1000 * g for g in gaps], style, label=f"提示词：{mode}")
ax.set(xlabel="长提示词到达之后的秒数", ylabel="每个词元之前的间隔（ms）",
       title=f"预填充 {LONG} 个提示词词元期间，一个运行中请求的词元")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown] en=647139b9
# 分块用许多短步换掉了一次长停顿：运行中的请求保持它们的节奏，而长提示词等它的第一个词元要等得更久（见
# 上面 TTFT 的比值）：它的每一块都和解码共用一步，要把自己前面的键再读一遍，还要付每一步都有的固定开销。
# vLLM 和 SGLang 默认都会把长提示词分块；预算决定这笔交换怎么做。
#
# ## 10 · 在线：请求在别的请求运行时到达
#
# 服务器不会一次收到所有请求。描述许多相互独立的用户，常用的模型是**泊松过程**（Poisson process）：请求
# 彼此独立地到达，平均每秒 λ 个，于是到下一次到达的间隔服从均值为 1/λ 的指数分布（短间隔常见，长间隔
# 少见）。`poisson_arrivals` 抽取这样的间隔：

# %% en=607e37c6
from minillm.tools.bench.batching import poisson_arrivals

times = poisson_arrivals(2000, rate=4.0, seed=0)
gaps = [b - a for a, b in zip([0.0] + times, times)]
print(f"每秒 4 个：平均间隔 {sum(gaps) / len(gaps):.3f} s（1/λ = 0.250），"
      f"{sum(g < 0.1 for g in gaps) / len(gaps):.0%} 的间隔短于 0.1 s")

# %% [markdown] en=4bb2a8d1
# 请求就这样到达，取三种速率，分别是上面离线测得的容量的几分之几。每个请求的首个词元生成时间（TTFT）从它
# 到达时算起，所以在队列里的等待也会体现在里面。

# %% en=cc696a58
capacity = N / runs["continuous"]["wall_s"]
n_online = 4 if CI else 8
online = []
for fraction in [0.3, 0.6, 0.9]:
    row = run_online(new_engine("continuous"), work[:n_online], fraction * capacity, seed=1)
    online.append((fraction, row))
    print(f"容量的 {fraction:.0%}（{row['rate']:.2f} 个请求/s）："
          f"TTFT p50 {row['ttft_p50']:.2f} s，p99 {row['ttft_p99']:.2f} s；"
          f"TPOT p50 {1000 * row['tpot_p50']:.0f} ms，p99 {1000 * row['tpot_p99']:.0f} ms")

# %% en=563bf180
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
x = [f"{f:.0%}" for f, _ in online]
for q, style in [(50, "o-"), (99, "s--")]:
    a.plot(x, [r[f"ttft_p{q}"] for _, r in online], style, label=f"p{q}")
    b.plot(x, [1000 * r[f"tpot_p{q}"] for _, r in online], style, label=f"p{q}")
a.set(title="首个词元生成时间", xlabel="负载（占容量的比例）", ylabel="秒")
b.set(title="每个输出词元的时间", xlabel="负载（占容量的比例）", ylabel="ms")
a.legend()
b.legend()
plt.tight_layout()
plt.show()

# %% [markdown] en=602ca64c
# 要看什么：负载越高，每次前向分摊给越多的请求，所以每个用户的 TPOT 变长（第 05 章的那种取舍）；而一旦
# 座位坐满，新请求就要在队列里等，这会体现在 TTFT 上，先是它的尾部（p99）。每种速率只有寥寥几个请求，
# p99 就是最慢的那一两个：想要更稳定的尾部，就用更多的请求重新跑（不在 CI 下）。
#
# ## 11 · 预填充/解码分离，模拟
#
# 分块缩短了停顿，却消除不了它：每一块仍要和解码共用一步。最大规模的部署（DistServe、Mooncake；vLLM 和
# SGLang 的 PD 模式）把两个阶段放到不同的机器上：这就是**预填充/解码分离**（prefill/decode
# disaggregation）。预填充机器算出每个提示词的键和值，把它的 KV 块交给一台解码机器，后者的每一步只带解码
# 行。这样每个阶段都能用上它想要的硬件和批大小（预填充是计算受限的，解码是带宽受限的），代价是每个提示词
# 的 KV 缓存都要经过一条链路传过去。
#
# 我们在这个进程里用两个引擎来模拟它（`minillm/engine/disaggregation.py`），每个都有自己的
# `ClockedEngine` 时钟，所以两者表现得就像并排的两台机器。预填充引擎的调度器保留已完成提示词的块，直到
# 它们被复制进解码引擎的池里；在那里，调度器接纳这个请求时，它的提示词除最后一个词元外都已算好，最后
# 那个词元的 logits 由解码引擎来算，好让它自己选出第一个词元：

# %% en=d7e60e7f
from minillm.engine.disaggregation import (DecodeScheduler, PrefillScheduler,
                                           serve_colocated, serve_disaggregated)

show_source(DecodeScheduler.receive)

# %% [markdown] en=a1750bbf
# 公平的比较在两种方式下都用同样的两台机器：两个普通引擎轮流各服务一半的请求，对比一个预填充引擎加一个
# 解码引擎。同样的请求在两边都按同样的泊松时刻到达：

# %% en=92ad7a1c
PD_N = 6 if CI else 8
pd_work = make_workload(tokenizer, PD_N, prompt_lengths=(32, 96 if CI else 160),
                        output_lengths=(8, 12 if CI else 24), seed=3)
pd_arrivals = [(t, w.prompt, {"max_new_tokens": w.max_new_tokens, "ignore_eos": True})
               for t, w in zip(poisson_arrivals(PD_N, rate=capacity, seed=2), pd_work)]
pd = {"2 个同置引擎": [], "预填充 + 解码": []}
for _ in range(REPEATS):  # 交替进行
    two = [new_engine("continuous", enable_prefix_caching=False) for _ in range(2)]
    together = serve_colocated(two, pd_arrivals)
    pd["2 个同置引擎"].append(together.summary())
    split = serve_disaggregated(new_engine(PrefillScheduler, enable_prefix_caching=False),
                                new_engine(DecodeScheduler, max_num_seqs=2 * SEATS),
                                pd_arrivals)
    pd["预填充 + 解码"].append(split.summary())
# 在引擎记录的步里数出来，不是计时：在任何机器上、无论多忙都一样
for name, served in (("2 个同置引擎", together), ("预填充 + 解码", split)):
    counts = served.interference
    print(f"{Label(name):>17}：{counts['stalled decode tokens']:>3} 个解码词元等过提示词"
          f"（这些步里算了 {counts['prompt tokens beside decodes']} 个提示词词元）")
for name, rows in pd.items():
    print(f"{Label(name):>17}："
          + "，".join(f"{k} {1000 * v:.0f} ms" for k, v in rows[-1].items()))
print(f"交接：为 {PD_N} 个提示词复制了 {split.handoff_bytes / 2**20:.1f} MiB 的 KV 块，"
      f"用时 {1000 * split.handoff_seconds:.1f} ms")
for key in ("TPOT p90", "最长间隔", "TTFT p50"):
    c = Comparison(tuple(r[key] for r in pd["2 个同置引擎"]),
                   tuple(r[key] for r in pd["预填充 + 解码"]))
    verdict = {True: "更高", False: "更低", None: TOO_NOISY}[c.above(1.0)]
    print(f"{Label(key):>12}，分离 / 同置：{c.spread_text()}：{verdict}")

# %% [markdown] en=ae548f72
# 先读计数：解码机器的步里从不带提示词，所以它的解码词元没有一个要等提示词。这就是分离所消除的干扰，
# 它是数出来的，这台机器上的任何负载都改变不了它；时钟则显示它在这里值多少。解码机器的行数是每个同置
# 引擎的两倍，而在 CPU 上更宽的一步代价更高（第 2 节），所以典型的间隔未必缩短。新提示词要为交接付出
# 代价：一台机器预填充所有的提示词，块要复制，第一个词元还要等一个解码步。在 GPU 上，32 行的解码步只比
# 16 行的贵一点点，复制则经由 NVLink 或 RDMA 在做其他工作的同时进行；部署时会分别确定两个机器池的规模，
# 以便同时满足 TTFT 和 TPOT 的目标。
#
# ## 12 · 我们测了什么

# %% en=9d3e7cd1
print(f"连续 / 静态的吞吐量：             {speedup:.2f}x")
print(f"静态 / 连续计算的行数：           {work_ratio:.2f}x")
print(f"静态批处理，幽灵行步：            {ghost:.0%}")
print(f"KV 内存 已用 / 预留，分页：       {memory['paged']:.0%}")
print(f"前缀缓存：计算的提示词词元 {prefix[False][2]} -> {prefix[True][2]}")
print(f"多轮对话，全部缓存：              基数树 {hits['基数树（SGLang）'][-1]:.0%}，"
      f"块哈希 {hits['块哈希（vLLM）'][-1]:.0%} 的提示词词元命中")
print(f"分块预填充，最长间隔：            未分块停顿的 {stall.ratio:.2f}x")
print(f"这次运行：{load_average()}")

# %% [markdown] en=c6a3ef78
# 完整的基准测试（64 个请求，提示词 16–512 个词元，输出 16–256 个，还与 transformers 的批量 `generate()`
# 对比）是 `python scripts/bench_batching.py`；`--small` 跑一个快速版本。
#
# 下一章，第 07 章让每个权重变得更小（量化），于是这里的每一步都读更少的内存。
