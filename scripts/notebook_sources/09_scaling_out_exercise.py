# %% [markdown]
# # Exercises 09 · Scaling out
#
# Tensor parallelism (张量并行) splits each weight matrix across processes ("ranks"). Here you
# split a linear layer both ways on one process, with plain tensors, and show that the pieces
# recombine exactly; then you count the bytes the ranks must exchange, and compute the
# percentile a load test reports.
#
# Write each function in its cell, run it, then run the check cell below it. Check your work from
# a terminal with `pytest --nbval-lax exercises/09_scaling_out.ipynb`.

# %%
import torch

from minillm.checks import ch09_scaling as checks
from minillm.distributed import split_evenly

torch.manual_seed(0)
x = torch.randn(1, 3, 8, dtype=torch.float64)       # (batch, tokens, in_features)
weight = torch.randn(6, 8, dtype=torch.float64)     # (out_features, in_features), as nn.Linear
print("x @ weight.T:", tuple((x @ weight.T).shape))
print("split_evenly(6, 4):", split_evenly(6, 4))    # how features are shared out among ranks

# %% [markdown]
# ## 1 · Column-parallel (列并行): each rank computes some output features
#
# A linear layer computes `x @ weight.T`: output feature j uses row j of `weight`. Give rank r the
# rows `split_evenly(out_features, world_size)[r]`; it computes only those output features, from
# the whole input.
#
# Write `column_parallel_parts(x, weight, world_size)`: return a list with rank r's output
# `x @ weight[rows_r].T` for each rank. Concatenated along the last dimension they must give the
# full output.

# %% [task]
def column_parallel_parts(x, weight, world_size):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def column_parallel_parts(x, weight, world_size):
    ranges = split_evenly(weight.shape[0], world_size)
    return [x @ weight[r.start:r.stop].T for r in ranges]

# %% [check]
checks.check_column_parallel(column_parallel_parts)

# %% [markdown]
# ## 2 · Row-parallel (行并行): each rank adds its share of every output
#
# Now split the *input* features: rank r holds columns `split_evenly(in_features, world_size)[r]`
# of `weight` and the same slice of `x`. Its product is a partial sum of the whole output; adding
# the ranks' parts (what an all-reduce does) gives the full output.
#
# Write `row_parallel_parts(x, weight, world_size)`: return each rank's partial sum
# `x[..., cols_r] @ weight[:, cols_r].T`.

# %% [task]
def row_parallel_parts(x, weight, world_size):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def row_parallel_parts(x, weight, world_size):
    ranges = split_evenly(weight.shape[1], world_size)
    return [x[..., r.start:r.stop] @ weight[:, r.start:r.stop].T for r in ranges]

# %% [check]
checks.check_row_parallel(row_parallel_parts)

# %% [markdown]
# Megatron-LM pairs the two: a column-parallel layer feeds a row-parallel one, so the split
# activations in between never travel. Only the row-parallel output is summed, once per pair:

# %%
up = torch.randn(10, 8, dtype=torch.float64)     # column-parallel: 8 -> 10
down = torch.randn(8, 10, dtype=torch.float64)   # row-parallel:    10 -> 8
whole = torch.relu(x @ up.T) @ down.T
parts = split_evenly(10, 2)  # rank r owns hidden features parts[r] of both layers
h_parts = [torch.relu(x @ up[p.start:p.stop].T) for p in parts]             # column-parallel
partial = [h @ down[:, p.start:p.stop].T for h, p in zip(h_parts, parts)]   # row-parallel
print("max difference after one all-reduce:", (sum(partial) - whole).abs().max().item())

# %% [markdown]
# ## 3 · The all-reduce bytes per token
#
# A tensor-parallel transformer block does this twice: after attention and after the
# feed-forward. Each all-reduce sums one hidden vector (`hidden_size` values) per token.
#
# Write `all_reduce_bytes_per_token(n_layers, hidden_size, bytes_per_value)`: the bytes one rank
# contributes to all-reduces for one token of a forward pass.

# %% [task]
def all_reduce_bytes_per_token(n_layers, hidden_size, bytes_per_value):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def all_reduce_bytes_per_token(n_layers, hidden_size, bytes_per_value):
    return 2 * n_layers * hidden_size * bytes_per_value

# %% [check]
checks.check_all_reduce_bytes(all_reduce_bytes_per_token)

# %% [markdown]
# ## 4 · Pipeline parallelism (流水线并行): bytes between stages
#
# A pipeline gives each of `stages` processes consecutive layers. Per token, each stage hands one
# hidden vector to the next one.
#
# Write `pipeline_bytes_per_token(hidden_size, bytes_per_value, stages)`.

# %% [task]
def pipeline_bytes_per_token(hidden_size, bytes_per_value, stages):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def pipeline_bytes_per_token(hidden_size, bytes_per_value, stages):
    return (stages - 1) * hidden_size * bytes_per_value

# %% [check]
checks.check_pipeline_bytes(pipeline_bytes_per_token)

# %% [markdown]
# ## 5 · A load test's p99 (第 99 百分位)
#
# A load test reports percentiles: p99 latency is the value 99 % of requests beat. Write
# `percentile(values, q)` as numpy's default does: sort the values, find position
# `(n - 1) * q / 100`, and interpolate linearly between the values on either side of it.

# %% [task]
def percentile(values, q):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def percentile(values, q):
    data = sorted(values)
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)

# %% [check]
checks.check_percentile(percentile)
