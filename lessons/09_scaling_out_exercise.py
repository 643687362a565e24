# %% [markdown]
# # Exercises 09 · Scaling out
#
# Tensor parallelism (张量并行) splits each weight matrix across processes ("ranks"). Here you
# build the pieces of minillm's tensor-parallel model on one process, with plain tensors: how
# features are shared out among ranks, a linear layer split both ways, and the feed-forward
# block split the way Megatron-LM does it; each checker shows that the pieces recombine exactly.
# Then the percentile a load test reports, and, from lesson 09b, a mixture-of-experts router with
# a capacity and the capacity factor to give it.
#
# Write each function in its cell, run it, then run the check cell below it. Check your work from
# a terminal with `pytest --nbval-lax exercises/09_scaling_out.ipynb`.

# %%
import math

import torch

import torch.nn.functional as F

from minillm.course.checks import ch09_scaling as checks

torch.manual_seed(0)
x = torch.randn(1, 3, 8, dtype=torch.float64)       # (batch, tokens, in_features)
weight = torch.randn(6, 8, dtype=torch.float64)     # (out_features, in_features), as nn.Linear
print("x @ weight.T:", tuple((x @ weight.T).shape))

# %% [markdown]
# ## 1 · Share the features out among ranks
#
# `total` features (output rows, heads, hidden units) go to `parts` ranks as contiguous ranges
# whose sizes differ by at most one: the first `total % parts` ranks get one more. Write
# `split_evenly(total, parts)` returning a list of `range`s, one per rank. With fewer than 1 rank
# or more ranks than features, raise `ValueError`.
#
# ```
# split_evenly(10, 3)  ->  [range(0, 4), range(4, 7), range(7, 10)]
# ```

# %% [task]
def split_evenly(total, parts):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def split_evenly(total, parts):
    if not 1 <= parts <= total:
        raise ValueError(f"cannot split {total} items over {parts} ranks")
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for rank in range(parts):
        size = base + (1 if rank < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges

# %% [check]
checks.check_split_evenly(split_evenly)

# %% [markdown]
# ## 2 · Column-parallel (列并行): each rank computes some output features
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
# ## 3 · Row-parallel (行并行): each rank adds its share of every output
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
parts = [range(0, 5), range(5, 10)]  # rank r owns hidden features parts[r] of both layers
h_parts = [torch.relu(x @ up[p.start:p.stop].T) for p in parts]             # column-parallel
partial = [h @ down[:, p.start:p.stop].T for h, p in zip(h_parts, parts)]   # row-parallel
print("max difference after one all-reduce:", (sum(partial) - whole).abs().max().item())

# %% [markdown]
# ## 4 · The feed-forward block, split across ranks
#
# minillm's SwiGLU block computes `down(silu(gate(x)) * up(x))` (a `minillm.layers.GatedMLP`
# with `gate_proj`, `up_proj` and `down_proj`, each an `nn.Linear` without bias). Its hidden
# features are shared out with `split_evenly(intermediate_size, world_size)`: rank r holds the
# rows `rows_r` of `gate_proj` and `up_proj` (column-parallel) and the same columns of
# `down_proj` (row-parallel), so the split hidden activations never travel. (The checker also
# splits 10 hidden features over 3 ranks: 4, 3, 3.)
#
# Write `tp_feed_forward_parts(x, mlp, world_size)`: the list of each rank's partial output,
# `down[:, rows_r](silu(gate[rows_r] x) * up[rows_r] x)`. Added up (one all-reduce) they give
# `mlp(x)`.

# %% [task]
def tp_feed_forward_parts(x, mlp, world_size):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def tp_feed_forward_parts(x, mlp, world_size):
    parts = []
    for rows in split_evenly(mlp.gate_proj.weight.shape[0], world_size):
        gate = x @ mlp.gate_proj.weight[rows.start:rows.stop].T
        up = x @ mlp.up_proj.weight[rows.start:rows.stop].T
        parts.append((F.silu(gate) * up) @ mlp.down_proj.weight[:, rows.start:rows.stop].T)
    return parts

# %% [check]
checks.check_tp_feed_forward(tp_feed_forward_parts)

# %% [markdown]
# This is `minillm.distributed.tensor_parallel.shard_mlp`; the attention block is split the
# same way by key/value heads, so a tensor-parallel block needs two all-reduces: one after
# attention, one after the feed-forward.

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

# %% [markdown]
# ## 6 · Top-k routing with a capacity (lesson 09b)
#
# An MoE router scores every expert for every token (`scores`, tokens x experts). Write
# `route_with_capacity(scores, k, capacity)` returning `(experts, kept)`, two tokens x k tables:
#
# - `experts[t]`: token t's k highest-scoring experts, best first (`scores.topk(k, dim=-1)`);
# - `kept[t][j]`: False where expert `experts[t][j]` was already full. Each expert takes at most
#   `capacity` tokens, and serves **every token's first choice before any second choice**; among
#   equal choices, earlier tokens first.
#
# ```
# scores = [[1, 2, 0], [3, 0, 0], [0, 3, 0]], k = 2, capacity = 1
# experts = [[1, 0], [0, 1], [1, 0]]
# kept    = [[True, False], [True, False], [False, False]]
# ```
#
# Token 0's first choice (expert 1) is served before token 2's; token 1's first choice (expert 0)
# before token 0's second.

# %% [task]
def route_with_capacity(scores, k, capacity):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def route_with_capacity(scores, k, capacity):
    experts = scores.topk(k, dim=-1).indices
    taken, kept = {}, torch.zeros_like(experts, dtype=torch.bool)
    for j in range(k):  # first choices first
        for t in range(len(scores)):
            e = experts[t, j].item()
            taken[e] = taken.get(e, 0) + 1
            kept[t, j] = taken[e] <= capacity
    return experts, kept

# %% [check]
checks.check_route_with_capacity(route_with_capacity)

# %% [markdown]
# ## 7 · Choose the capacity factor
#
# A capacity is the capacity factor times an expert's fair share: ceil(factor x tokens x k /
# experts). A small factor drops tokens; a large one reserves slots (memory, and padded compute)
# that stay empty. Write `choose_capacity_factor(scores, k, factors, max_dropped)`: the smallest of
# `factors` whose capacity drops at most `max_dropped` of the tokens x k assignments, measured
# with your `route_with_capacity`; None when none does.

# %% [task]
def choose_capacity_factor(scores, k, factors, max_dropped):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def choose_capacity_factor(scores, k, factors, max_dropped):
    tokens, n_experts = scores.shape
    for factor in sorted(factors):
        capacity = math.ceil(factor * tokens * k / n_experts)
        _, kept = route_with_capacity(scores, k, capacity)
        if 1 - kept.float().mean().item() <= max_dropped:
            return factor
    return None

# %% [check]
checks.check_choose_capacity_factor(choose_capacity_factor)

# %% [markdown]
# `minillm.distributed.moe.route` is the same rule, vectorized; lesson 09b measures what the drops
# cost SmolLM2's perplexity.
