# 中文版 · 09_scaling_out_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=edb5d222
# # 练习 09 · 横向扩展
#
# 张量并行（tensor parallelism）把每个权重矩阵切开，分给多个进程。在这里，我们在一个
# 进程里、只用普通的张量，搭出 minillm 张量并行模型的各个部件：怎样把特征分给各个进程，怎样
# 把一个线性层按两种方式切开，以及怎样像 Megatron-LM 那样切分前馈网络块；每个检查器都会验证
# 这些部件能精确地重新组合起来。最后是负载测试报告的百分位数。
#
# 在各自的单元格里写好函数并运行，然后运行它下面的检查单元格。也可以在终端里检查：
# `pytest --nbval-lax exercises/zh/09_scaling_out.ipynb`。

# %% en=f68284c9
import torch

import torch.nn.functional as F

from minillm.course.checks import ch09_scaling as checks

torch.manual_seed(0)
x = torch.randn(1, 3, 8, dtype=torch.float64)       # (batch, tokens, in_features)
weight = torch.randn(6, 8, dtype=torch.float64)     # (out_features, in_features)，与 nn.Linear 相同
print("x @ weight.T：", tuple((x @ weight.T).shape))

# %% [markdown] en=ed725811
# ## 1 · 把特征分给各个进程
#
# `total` 个特征（输出行、注意力头、隐藏单元）分给 `parts` 个进程，每个进程拿到一段连续的范围，
# 各段的大小最多相差一：前 `total % parts` 个进程各多拿一个。请写出 `split_evenly(total, parts)`，
# 返回一个由 `range` 组成的列表，每个进程一个。进程数小于 1，或者进程比特征还多时，抛出
# `ValueError`。
#
# ```
# split_evenly(10, 3)  ->  [range(0, 4), range(4, 7), range(7, 10)]
# ```

# %% [task] en=b4a73e3f
def split_evenly(total, parts):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def split_evenly(total, parts):
    if not 1 <= parts <= total:
        raise ValueError(f"无法把 {total} 个特征分给 {parts} 个进程")
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for rank in range(parts):
        size = base + (1 if rank < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges

# %% [check] en=23a549bf
checks.check_split_evenly(split_evenly)

# %% [markdown] en=69994a31
# ## 2 · 列并行（column-parallel）：每个进程算一部分输出特征
#
# 线性层计算 `x @ weight.T`：第 j 个输出特征用到 `weight` 的第 j 行。把
# `split_evenly(out_features, world_size)[r]` 这些行交给进程 r；它只用完整的输入算出这些输出特征。
#
# 请写出 `column_parallel_parts(x, weight, world_size)`：返回一个列表，依次是每个进程 r 的输出
# `x @ weight[rows_r].T`。把它们沿最后一维拼接起来，必须得到完整的输出。

# %% [task] en=5cceb270
def column_parallel_parts(x, weight, world_size):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def column_parallel_parts(x, weight, world_size):
    ranges = split_evenly(weight.shape[0], world_size)
    return [x @ weight[r.start:r.stop].T for r in ranges]

# %% [check] en=8340fd88
checks.check_column_parallel(column_parallel_parts)

# %% [markdown] en=381761f8
# ## 3 · 行并行（row-parallel）：每个进程为每个输出贡献自己的一份
#
# 这回切的是*输入*特征：进程 r 持有 `weight` 的第 `split_evenly(in_features, world_size)[r]` 列，
# 以及 `x` 中对应的那一片。它的乘积是整个输出的一个部分和；把各进程的部分加起来（这正是全归约
# 做的事），就得到完整的输出。
#
# 请写出 `row_parallel_parts(x, weight, world_size)`：返回每个进程的部分和
# `x[..., cols_r] @ weight[:, cols_r].T`。

# %% [task] en=ea3b315c
def row_parallel_parts(x, weight, world_size):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def row_parallel_parts(x, weight, world_size):
    ranges = split_evenly(weight.shape[1], world_size)
    return [x[..., r.start:r.stop] @ weight[:, r.start:r.stop].T for r in ranges]

# %% [check] en=b0009fe5
checks.check_row_parallel(row_parallel_parts)

# %% [markdown] en=de7609e7
# Megatron-LM 把两者配成一对：列并行的层后面接行并行的层，于是两层之间被切开的激活值根本不必
# 传输。只有行并行的输出需要求和，每一对只做一次：

# %% en=f1296eaf
up = torch.randn(10, 8, dtype=torch.float64)     # 列并行：8 -> 10
down = torch.randn(8, 10, dtype=torch.float64)   # 行并行：10 -> 8
whole = torch.relu(x @ up.T) @ down.T
parts = [range(0, 5), range(5, 10)]  # 进程 r 持有两层中的隐藏特征 parts[r]
h_parts = [torch.relu(x @ up[p.start:p.stop].T) for p in parts]             # 列并行
partial = [h @ down[:, p.start:p.stop].T for h, p in zip(h_parts, parts)]   # 行并行
print("一次全归约之后的最大差值：", (sum(partial) - whole).abs().max().item())

# %% [markdown] en=105e658c
# ## 4 · 把前馈网络块切分给各个进程
#
# minillm 的 SwiGLU 块计算 `down(silu(gate(x)) * up(x))`（一个 `minillm.layers.GatedMLP`，
# 带有 `gate_proj`、`up_proj` 和 `down_proj`，都是不带偏置的 `nn.Linear`）。它的隐藏特征用
# `split_evenly(intermediate_size, world_size)` 来分：进程 r 持有 `gate_proj` 和 `up_proj` 的第
# `rows_r` 行（列并行），以及 `down_proj` 的同样这些列（行并行），这样切开的隐藏激活值就不必传输。
# （检查器还会把 10 个隐藏特征分给 3 个进程：4、3、3。）
#
# 请写出 `tp_feed_forward_parts(x, mlp, world_size)`：返回由每个进程的部分输出组成的列表，即
# `down[:, rows_r](silu(gate[rows_r] x) * up[rows_r] x)`。把它们加起来（一次全归约）就得到
# `mlp(x)`。

# %% [task] en=ea645b85
def tp_feed_forward_parts(x, mlp, world_size):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def tp_feed_forward_parts(x, mlp, world_size):
    parts = []
    for rows in split_evenly(mlp.gate_proj.weight.shape[0], world_size):
        gate = x @ mlp.gate_proj.weight[rows.start:rows.stop].T
        up = x @ mlp.up_proj.weight[rows.start:rows.stop].T
        parts.append((F.silu(gate) * up) @ mlp.down_proj.weight[:, rows.start:rows.stop].T)
    return parts

# %% [check] en=5ed52249
checks.check_tp_feed_forward(tp_feed_forward_parts)

# %% [markdown] en=c770775f
# 这就是 `minillm.distributed.tensor_parallel.shard_mlp`；注意力块也用同样的方法按键/值头切分，
# 所以一个张量并行的块需要两次全归约：注意力之后一次，前馈网络之后一次。

# %% [markdown] en=8dd72d8d
# ## 5 · 负载测试的 p99（第 99 百分位）
#
# 负载测试报告的是百分位数：p99 延迟是 99 % 的请求都不超过的那个值。请按 numpy 的默认做法写出
# `percentile(values, q)`：把数值排序，找到位置 `(n - 1) * q / 100`，再在它两侧的两个值之间
# 做线性插值。

# %% [task] en=cf9bcaed
def percentile(values, q):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def percentile(values, q):
    data = sorted(values)
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)

# %% [check] en=2dd29ea4
checks.check_percentile(percentile)
