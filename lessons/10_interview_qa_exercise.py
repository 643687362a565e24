# %% [markdown]
# # Exercises 10 · Interview questions: estimates at the whiteboard (面试题)
#
# Three numbers an interviewer expects you to work out in a minute, with a formula and no
# computer: how fast a large model can decode, how many requests its KV cache holds, and what
# speculative decoding buys; then, from lesson 10d, the goodput a load test reports. Write each
# as a small function, predict its answer first, then run
# the check cell below it: the checker tries your function on several cases and says in plain
# words what is wrong.
#
# Check your work from a terminal with `pytest --nbval-lax exercises/10_interview_qa.ipynb`.

# %%
import dataclasses

from minillm.course.checks import ch10_interview as checks

GB, TB = 1e9, 1e12  # as GPU makers count

# %% [markdown]
# ## 1 · The decode bound of a 70B model on 4 GPUs (Q17, Q24)
#
# At batch size 1, every decode step reads every weight once, and reading, not arithmetic,
# sets the pace. With tensor parallelism (张量并行) over n GPUs, each GPU holds 1/n of every
# weight matrix and reads its share at the same time as the others. Write
# `tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth)`: the most tokens a second,
# with `bandwidth` the bytes a second one GPU reads. Leave out the all-reduces and the KV cache
# (they only lower the bound). Predict first: a 70B model in fp8 (1 byte a parameter) on 4 GPUs
# of 3.35 TB/s each?

# %% [task]
def tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth):
    bytes_per_gpu = n_params * bytes_per_param / n_gpus
    return bandwidth / bytes_per_gpu

# %% [check]
checks.check_tp_decode_bound(tp_decode_bound)

# %% [markdown]
# The bound for a few set-ups. Real systems reach a part of it: the all-reduces, the KV cache
# and each step's fixed overhead all take time.

# %%
try:
    for params, size, gpus, label in [(70e9, 1, 4, "70B fp8, 4 GPUs"),
                                      (70e9, 2, 4, "70B bf16, 4 GPUs"),
                                      (70e9, 1, 8, "70B fp8, 8 GPUs"), (8e9, 2, 1, "8B bf16, 1 GPU")]:
        print(f"{label:>17}: at most {tp_decode_bound(params, size, gpus, 3.35 * TB):6.0f} "
              "tokens/s at 3.35 TB/s a GPU")
except NotImplementedError:
    print("write tp_decode_bound above first")

# %% [markdown]
# ## 2 · The largest batch an 80 GB KV pool holds (Q5, Q13)
#
# Every sequence keeps a key and a value vector per layer and per key/value head for each of
# its tokens. A server that gives its KV cache (KV 缓存) `pool_bytes` bytes can run only as many
# sequences as fit whole. Write `max_batch(pool_bytes, config, tokens, bytes_per_value)` for
# sequences of `tokens` tokens, with a `minillm.model.ModelConfig` (fields `n_layers`,
# `n_kv_heads`, `head_dim`, ...). Predict first: Llama-3-70B, 8,192-token sequences in fp16, in
# the 80 GB left on the GPUs after the weights?

# %% [task]
def max_batch(pool_bytes, config, tokens, bytes_per_value):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def max_batch(pool_bytes, config, tokens, bytes_per_value):
    per_sequence = (2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens
                    * bytes_per_value)
    return int(pool_bytes // per_sequence)

# %% [check]
checks.check_max_batch(max_batch)

# %% [markdown]
# What grouped-query attention and an 8-bit cache are worth here:

# %%
try:
    llama70 = checks.PARAM_CONFIGS["Llama-3-70B"]
    print(f"Llama-3-70B ({llama70.n_heads} query heads, {llama70.n_kv_heads} KV heads), 8,192 "
          f"tokens, 80 GB: {max_batch(80 * GB, llama70, 8192, 2)} sequences in fp16, "
          f"{max_batch(80 * GB, llama70, 8192, 1)} in fp8")
    every_head = dataclasses.replace(llama70, n_kv_heads=llama70.n_heads)
    print(f"  with a K/V head per query head: {max_batch(80 * GB, every_head, 8192, 2)} in fp16")
except NotImplementedError:
    print("write max_batch above first")

# %% [markdown]
# ## 3 · What speculative decoding buys at α = 0.7 and k = 4 (Q22, Q32)
#
# A draft proposes k tokens; the target checks them all in one pass. If each drafted token is
# accepted with probability α, independently, a round yields the accepted prefix plus one token
# of the target's own. A round costs one target step plus k draft steps of `draft_cost` target
# steps each. Write `speculative_speedup(alpha, k, draft_cost)`: the tokens a round yields on
# average, over the round's cost in target steps (plain decoding makes one token a target
# step). Predict first: α = 0.7, k = 4, with a free draft?

# %% [task]
def speculative_speedup(alpha, k, draft_cost):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def speculative_speedup(alpha, k, draft_cost):
    tokens = sum(alpha ** i for i in range(k + 1))  # 1 + alpha + ... + alpha^k
    return tokens / (1 + k * draft_cost)

# %% [check]
checks.check_speculative_speedup(speculative_speedup)

# %% [markdown]
# More drafted tokens are not always better once the draft costs something: the best k for a
# few drafts.

# %%
try:
    for alpha, cost in [(0.7, 0.0), (0.7, 0.05), (0.7, 0.3), (0.9, 0.05)]:
        gains = {k: speculative_speedup(alpha, k, cost) for k in range(1, 11)}
        best = max(gains, key=gains.get)
        print(f"alpha {alpha}, draft cost {cost}: k = 4 gives {gains[4]:.2f}x; the best k here is "
              f"{best}, {gains[best]:.2f}x")
except NotImplementedError:
    print("write speculative_speedup above first")

# %% [markdown]
# ## 4 · Goodput under an SLO (lesson 10d, Q37)
#
# A load test records, for each request, when it started and its TTFT, TPOT and latency
# (`checks.Served`, in seconds). Throughput counts every request finished per second; **goodput**
# counts only those that met the service-level objective: TTFT within `ttft_slo` **and** TPOT
# within `tpot_slo` ("within" includes the limit). Write `goodput(requests, ttft_slo, tpot_slo)`:
# those requests per second of the test's span, from the first start to the last finish
# (`start + latency`).

# %% [task]
def goodput(requests, ttft_slo, tpot_slo):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def goodput(requests, ttft_slo, tpot_slo):
    met = sum(r.ttft <= ttft_slo and r.tpot <= tpot_slo for r in requests)
    span = max(r.start + r.latency for r in requests) - min(r.start for r in requests)
    return met / span

# %% [check]
checks.check_goodput(goodput)

# %% [markdown]
# Why an engine is tuned for goodput, not throughput: three requests that all finish, one of
# them far too slowly to start.

# %%
test = [checks.Served(start=0.0, ttft=0.3, tpot=0.02, latency=1.1),
        checks.Served(start=0.5, ttft=2.5, tpot=0.02, latency=3.3),
        checks.Served(start=1.0, ttft=0.4, tpot=0.03, latency=1.6)]
span = max(r.start + r.latency for r in test) - min(r.start for r in test)
try:
    print(f"throughput {len(test) / span:.2f} requests/s, goodput (TTFT within 1 s, TPOT within "
          f"50 ms) {goodput(test, 1.0, 0.05):.2f} requests/s")
except NotImplementedError:
    print("write goodput above first")
