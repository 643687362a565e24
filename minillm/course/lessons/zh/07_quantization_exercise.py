# 中文版 · 07_quantization_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=fedd29e7
# # 练习 07 · 量化
#
# 这里有四个任务，都来自本章的课文：对一个张量做 absmax int8 量化及其逆运算；每个输出通道一个
# 缩放因子的 int8，也就是 minillm 的 `Int8Linear` 存的东西；带缩放因子和最小值的分组 int4，
# 即 GGUF Q4_1 的思路；以及 GPTQ 的一步。在各自的单元格里写好函数并运行，然后运行它下面的检查
# 单元格。检查会在随机张量上把你算出的数和 `minillm.quant` 的结果作对比，出错时直接告诉你错在
# 哪里。
#
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/07_quantization.ipynb`。

# %% en=cb0427a3
import torch

from minillm.course.checks import ch07_quantization as checks

torch.manual_seed(0)

# %% [markdown] en=4ba46760
# ## 1 · absmax int8（对称量化）
#
# 请写出 `quantize_absmax(x)`，返回 `(q, scale)`：
#
# - `scale = max|x| / 127`（一个 Python float 或 0 维张量），
# - `q = round(x / scale)`，截断到 -127..127 之间，存成 `torch.int8`，形状与 x 相同；
#
# 再写出 `dequantize_absmax(q, scale)`，返回浮点张量 `q * scale`。

# %% [task] en=2318b97b
def quantize_absmax(x):
    # 在这里写你的代码
    raise NotImplementedError


def dequantize_absmax(q, scale):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def quantize_absmax(x):
    scale = x.abs().max().item() / 127
    q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_absmax(q, scale):
    return q.float() * scale

# %% [check] en=92f1ec00
checks.check_absmax_int8(quantize_absmax, dequantize_absmax)

# %% [markdown] en=f442325b
# 动手试试：如果张量里有一个离群值（某个数比其余的大 100 倍），误差会有多大？这正是 minillm 给
# 每个输出通道各配一个缩放因子的原因。

# %% en=3e0e5e96
x = torch.randn(1000)
x[0] = 100.0
try:
    q, scale = quantize_absmax(x)
    error = (dequantize_absmax(q, scale) - x)[1:].abs().mean().item()
    print(f"缩放因子 {scale:.4f}：其余数的平均误差 {error:.4f}")
except NotImplementedError:
    print("请先写好 quantize_absmax 和 dequantize_absmax")

# %% [markdown] en=784332cd
# ## 2 · 每个输出通道一个缩放因子（逐通道量化）
#
# 一个离群值会拖垮整个张量的分辨率。所以 minillm 的 int8 权重给形状为 (out_features,
# in_features) 的权重的每一行，也就是每个输出通道，各配一个缩放因子。请写出
# `quantize_per_channel(w)`，返回 `(q, scale)`：
#
# - `scale[r] = max_c |w[r, c]| / 127`，形状为 (out_features,) 的张量；全为 0 的行缩放因子取 1
#   （反正它的 q 都是 0，这样也不会除以 0）；
# - `q[r, c] = round(w[r, c] / scale[r])`，截断到 -127..127 之间，存成 `torch.int8`。

# %% [task] en=4ca78485
def quantize_per_channel(w):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def quantize_per_channel(w):
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale

# %% [check] en=d3043c86
checks.check_quantize_int8(quantize_per_channel)

# %% [markdown] en=6b39fd7d
# 在一个各行大小相差很大的权重上，比较整个张量一个缩放因子和每个通道一个缩放因子：

# %% en=63ef07cb
w = torch.randn(64, 256) * torch.logspace(-2, 0, 64)[:, None]  # 各行的大小从 0.01 到 1
try:
    q, scale = quantize_absmax(w)
    per_tensor = (dequantize_absmax(q, scale) - w).abs().mean().item()
    q, scale = quantize_per_channel(w)
    per_row = (q.float() * scale[:, None] - w).abs().mean().item()
    print(f"平均误差：整个张量一个缩放因子 {per_tensor:.2e}，每个通道一个 {per_row:.2e}")
except NotImplementedError:
    print("请先写好 quantize_absmax、dequantize_absmax 和 quantize_per_channel")

# %% [markdown] en=851e6995
# ## 3 · 分组的 int4，带缩放因子和最小值
#
# 请为二维权重 `w`（rows, cols）写出 `quantize_groups(w, group_size)`。把每一行切成每组
# `group_size` 个数（`w.reshape(rows, cols // group_size, group_size)`）。对每一组：
#
# - `minimum` = 组里最小的数，`scale = (max - minimum) / 15`，
# - `q = round((w - minimum) / scale)`，取值为 0..15 的整数。
#
# 返回 `(q, scale, minimum)`，形状分别是 (rows, cols)、(rows, cols / group_size) 和
# (rows, cols / group_size)。如果 `group_size` 不能整除 `cols`，抛出 `ValueError`。
# 然后写出 `dequantize_groups(q, scale, minimum)`：逐组计算 `q * scale + minimum`，形状为
# (rows, cols)。（可以假定没有哪一组是常数，所以 `scale` 不会是 0。）

# %% [task] en=008c7ea0
def quantize_groups(w, group_size):
    # 在这里写你的代码
    raise NotImplementedError


def dequantize_groups(q, scale, minimum):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def quantize_groups(w, group_size):
    rows, cols = w.shape
    if cols % group_size:
        raise ValueError(f"group_size {group_size} 不能整除行长 {cols}")
    g = w.reshape(rows, cols // group_size, group_size)
    minimum = g.amin(dim=-1, keepdim=True)
    scale = (g.amax(dim=-1, keepdim=True) - minimum) / 15
    q = torch.round((g - minimum) / scale).clamp(0, 15)
    return q.reshape(rows, cols), scale.squeeze(-1), minimum.squeeze(-1)


def dequantize_groups(q, scale, minimum):
    rows, n_groups = scale.shape
    g = q.float().reshape(rows, n_groups, -1)
    return (g * scale[..., None] + minimum[..., None]).reshape(rows, -1)

# %% [check] en=5eeb16ca
checks.check_int4_groups(quantize_groups, dequantize_groups)

# %% [markdown] en=33084826
# ## 4 · GPTQ 的一步
#
# GPTQ（课文第 8 节）一次舍入权重的一列。舍入完第 i 列之后，它调整那些还没舍入的列，让层在
# 校准输入上的输出变化最小。关于这些输入，它需要知道的一切都在 `u` 里：`u` 是海森矩阵之逆的
# 上三角 Cholesky 因子（`minillm.quant.gptq.inverse_cholesky`），`u` 的第 i 行说明第 i 列的误差
# 该怎样分摊给后面的各列。
#
# 请写出 `gptq_step(w, u, i, round_column)`，返回一个**新的**权重（不要改动 `w`）：
#
# - `q = round_column(w[:, i])`：第 i 列落到网格上；
# - `error = (w[:, i] - q) / u[i, i]`；
# - 后面的每一列 j > i 移动 `-error * u[i, j]`；
# - 第 i 列变成 `q`；第 i 列之前的列保持不变。

# %% [task] en=8da34f8d
def gptq_step(w, u, i, round_column):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def gptq_step(w, u, i, round_column):
    w = w.clone()
    q = round_column(w[:, i])
    error = (w[:, i] - q) / u[i, i]
    w[:, i + 1:] -= error[:, None] * u[i, i + 1:]
    w[:, i] = q
    return w

# %% [check] en=9cc5bf6a
checks.check_gptq_step(gptq_step)

# %% [markdown] en=63e94b7b
# 在一个输入彼此相关的权重上，把你的这一步依次作用于每一列，再把输出误差与同一个 3 比特网格上的
# 就近舍入、以及 minillm 的 `gptq` 作比较：

# %% en=15498b53
from minillm.quant.gptq import gptq, hessian, inverse_cholesky  # noqa: E402
from minillm.quant.grid import fit, output_error, rtn, snap  # noqa: E402

x = torch.randn(512, 64) @ (torch.eye(64) + torch.randn(64, 64) / 16)
w = torch.randn(32, 64)
h = hessian(x)
u = inverse_cholesky(h).float()
scale, minimum = fit(w, 3)  # 每行一个 3 比特网格


def round_column(column):
    return snap(column[:, None], scale, minimum, 3)[:, 0]


try:
    yours = w
    for i in range(w.shape[1]):
        yours = gptq_step(yours, u, i, round_column)
    for name, rounded in [("就近舍入", rtn(w, 3)), ("你的 GPTQ 步骤", yours),
                          ("minillm 的 gptq", gptq(w, h, 3))]:
        print(f"{name:>16}：输出误差 {output_error(w, rounded, h):.2f}")
except NotImplementedError:
    print("请先写好 gptq_step")
