# %% [markdown]
# # Exercises 07 · Quantization
#
# Five tasks from the lessons: absmax int8 quantization of a tensor and its inverse; int8 with
# one scale per output channel, what minillm's `Int8Linear` stores; group-wise int4 with a scale
# and a minimum, the idea of GGUF's Q4_1; one step of GPTQ; and, from appendix 07c, FP8 with one
# scale per block. Write each function in its cell, run the cell, then run
# the check cell below it. The checkers compare your numbers with `minillm.quant`'s on random
# tensors and say in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/07_quantization.ipynb`.

# %%
import torch

from minillm.course.checks import ch07_quantization as checks

torch.manual_seed(0)

# %% [markdown]
# ## 1 · absmax int8 (对称量化)
#
# Write `quantize_absmax(x)` that returns `(q, scale)`:
#
# - `scale = max|x| / 127` (a Python float or a 0-d tensor),
# - `q = round(x / scale)`, clamped to -127..127 and stored as `torch.int8`, the same shape as x,
#
# and `dequantize_absmax(q, scale)` that returns the float tensor `q * scale`.

# %% [task]
def quantize_absmax(x):
    # YOUR CODE HERE
    raise NotImplementedError


def dequantize_absmax(q, scale):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def quantize_absmax(x):
    scale = x.abs().max().item() / 127
    q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_absmax(q, scale):
    return q.float() * scale

# %% [check]
checks.check_absmax_int8(quantize_absmax, dequantize_absmax)

# %% [markdown]
# Try it: how large is the error on a tensor with one outlier (a single value 100 times larger than
# the rest)? That is why minillm gives each output channel its own scale.

# %%
x = torch.randn(1000)
x[0] = 100.0
try:
    q, scale = quantize_absmax(x)
    error = (dequantize_absmax(q, scale) - x)[1:].abs().mean().item()
    print(f"scale {scale:.4f}: mean error on the other numbers {error:.4f}")
except NotImplementedError:
    print("write quantize_absmax and dequantize_absmax first")

# %% [markdown]
# ## 2 · One scale per output channel (逐通道量化)
#
# One outlier spoils the resolution of the whole tensor. minillm's int8 weights therefore give
# each row of a weight (out_features, in_features), each output channel, its own scale. Write
# `quantize_per_channel(w)` that returns `(q, scale)`:
#
# - `scale[r] = max_c |w[r, c]| / 127`, a tensor of shape (out_features,); a row that is all
#   zeros gets the scale 1 (its q is 0 anyway, and nothing is divided by 0);
# - `q[r, c] = round(w[r, c] / scale[r])`, clamped to -127..127, as `torch.int8`.

# %% [task]
def quantize_per_channel(w):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def quantize_per_channel(w):
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale

# %% [check]
checks.check_quantize_int8(quantize_per_channel)

# %% [markdown]
# Per tensor against per channel, on a weight whose rows differ in size:

# %%
w = torch.randn(64, 256) * torch.logspace(-2, 0, 64)[:, None]  # rows from 0.01 to 1
try:
    q, scale = quantize_absmax(w)
    per_tensor = (dequantize_absmax(q, scale) - w).abs().mean().item()
    q, scale = quantize_per_channel(w)
    per_row = (q.float() * scale[:, None] - w).abs().mean().item()
    print(f"mean error: per tensor {per_tensor:.2e}, per channel {per_row:.2e}")
except NotImplementedError:
    print("write quantize_absmax, dequantize_absmax and quantize_per_channel first")

# %% [markdown]
# ## 3 · int4 in groups, with a scale and a minimum
#
# Write `quantize_groups(w, group_size)` for a 2-D weight `w` (rows, cols). Cut each row into
# groups of `group_size` numbers (`w.reshape(rows, cols // group_size, group_size)`). For each
# group:
#
# - `minimum` = the group's smallest number, `scale = (max - minimum) / 15`,
# - `q = round((w - minimum) / scale)`, whole numbers in 0..15.
#
# Return `(q, scale, minimum)` with shapes (rows, cols), (rows, cols / group_size) and
# (rows, cols / group_size). If `group_size` does not divide `cols`, raise `ValueError`.
# Then write `dequantize_groups(q, scale, minimum)`: `q * scale + minimum` group by group, shape
# (rows, cols). (You may assume no group is constant, so `scale` is never 0.)

# %% [task]
def quantize_groups(w, group_size):
    # YOUR CODE HERE
    raise NotImplementedError


def dequantize_groups(q, scale, minimum):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def quantize_groups(w, group_size):
    rows, cols = w.shape
    if cols % group_size:
        raise ValueError(f"group_size {group_size} does not divide the row length {cols}")
    g = w.reshape(rows, cols // group_size, group_size)
    minimum = g.amin(dim=-1, keepdim=True)
    scale = (g.amax(dim=-1, keepdim=True) - minimum) / 15
    q = torch.round((g - minimum) / scale).clamp(0, 15)
    return q.reshape(rows, cols), scale.squeeze(-1), minimum.squeeze(-1)


def dequantize_groups(q, scale, minimum):
    rows, n_groups = scale.shape
    g = q.float().reshape(rows, n_groups, -1)
    return (g * scale[..., None] + minimum[..., None]).reshape(rows, -1)

# %% [check]
checks.check_int4_groups(quantize_groups, dequantize_groups)

# %% [markdown]
# ## 4 · One step of GPTQ
#
# GPTQ (lesson section 8) rounds a weight one column at a time. After rounding column i, it moves
# the columns not yet rounded so that the layer's output on the calibration inputs changes
# least. Everything it needs about those inputs is in `u`, the upper Cholesky factor of the
# inverse Hessian (`minillm.quant.gptq.inverse_cholesky`): row i of `u` says how column i's error
# should be shared among the later columns.
#
# Write `gptq_step(w, u, i, round_column)` that returns a **new** weight (leave `w` as it is):
#
# - `q = round_column(w[:, i])`: column i on the grid;
# - `error = (w[:, i] - q) / u[i, i]`;
# - every later column j > i moves by `-error * u[i, j]`;
# - column i becomes `q`; the columns before i stay as they are.

# %% [task]
def gptq_step(w, u, i, round_column):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def gptq_step(w, u, i, round_column):
    w = w.clone()
    q = round_column(w[:, i])
    error = (w[:, i] - q) / u[i, i]
    w[:, i + 1:] -= error[:, None] * u[i, i + 1:]
    w[:, i] = q
    return w

# %% [check]
checks.check_gptq_step(gptq_step)

# %% [markdown]
# Run your step over every column of a weight whose inputs are correlated, and compare the output
# error with rounding to nearest on the same 3-bit grid, and with minillm's `gptq`:

# %%
from minillm.quant.gptq import gptq, hessian, inverse_cholesky  # noqa: E402
from minillm.quant.grid import fit, output_error, rtn, snap  # noqa: E402

x = torch.randn(512, 64) @ (torch.eye(64) + torch.randn(64, 64) / 16)
w = torch.randn(32, 64)
h = hessian(x)
u = inverse_cholesky(h).float()
scale, minimum = fit(w, 3)  # one 3-bit grid per row


def round_column(column):
    return snap(column[:, None], scale, minimum, 3)[:, 0]


try:
    yours = w
    for i in range(w.shape[1]):
        yours = gptq_step(yours, u, i, round_column)
    for name, rounded in [("round to nearest", rtn(w, 3)), ("your GPTQ steps", yours),
                          ("minillm's gptq", gptq(w, h, 3))]:
        print(f"{name:>16}: output error {output_error(w, rounded, h):.2f}")
except NotImplementedError:
    print("write gptq_step first")

# %% [markdown]
# ## 5 · FP8 with one scale per block (lesson 07c)
#
# DeepSeek-V3 stores its weights in FP8 e4m3 with one scale per block of 128 x 128 weights.
# Write `fp8_blocks(w, block)` that returns `w` (rows, columns) as such a weight gives it back:
# for each block of `block` x `block` weights (the last blocks of a row or a column may be
# smaller),
#
# - `s = max|block| / 448` (448 is e4m3's largest number; a block of zeros keeps s = 1),
# - the block becomes `(block / s).to(torch.float8_e4m3fn).float() * s`.
#
# Return a float32 tensor of `w`'s shape.

# %% [task]
def fp8_blocks(w, block):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def fp8_blocks(w, block):
    out = torch.empty_like(w)
    for i in range(0, w.shape[0], block):
        for j in range(0, w.shape[1], block):
            tile = w[i:i + block, j:j + block]
            s = tile.abs().max() / 448
            if s == 0:
                s = torch.tensor(1.0)
            out[i:i + block, j:j + block] = (tile / s).to(torch.float8_e4m3fn).float() * s
    return out

# %% [check]
checks.check_fp8_blocks(fp8_blocks)

# %% [markdown]
# An outlier now spoils only its own block: on a weight with one large number, the error with
# one scale for the whole tensor against one per block of 32:

# %%
from minillm.quant.float_formats import SCHEMES, fake_quantize  # noqa: E402

w = torch.randn(256, 256) * torch.rand(256, 1)
w[3, 17] = 20_000.0  # far past the rest: one scale pushes them below e4m3's smallest
try:
    for name, rounded in [("one scale", fake_quantize(w, SCHEMES["fp8 e4m3, per tensor"])),
                          ("your blocks of 32", fp8_blocks(w, 32))]:
        small = w.abs() < 0.05  # the numbers an outlier's scale pushes toward zero
        print(f"{name}: error on the small numbers "
              f"{((rounded - w)[small].norm() / w[small].norm()).item():.2%}")
except NotImplementedError:
    print("write fp8_blocks first")
