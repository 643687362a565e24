# %% [markdown]
# # Exercises 05 · Measuring inference
#
# The lesson timed every token of a generation. Here you turn such timestamps into the four
# numbers that describe a model's speed. Each request is a `start` time and a list `token_times`:
# the moment (in seconds, one clock) each new token was ready.
#
# Write each function in its cell, run it, then run the check cell below it. Check your work from
# a terminal with `pytest --nbval-lax exercises/05_metrics.ipynb`.

# %%
from minillm.checks import ch05_metrics as checks

start, token_times = 0.0, [0.30, 0.35, 0.40, 0.45, 0.50]

# %% [markdown]
# ## 1 · Time to first token (首个词元生成时间, TTFT)
#
# Write `ttft(start, token_times)`: the seconds from the start of the request to its first token.

# %% [task]
def ttft(start, token_times):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def ttft(start, token_times):
    return token_times[0] - start

# %% [check]
checks.check_ttft(ttft)

# %% [markdown]
# ## 2 · Time per output token (每个输出词元的时间, TPOT)
#
# Write `tpot(token_times)`: the mean gap between tokens *after* the first one. The first token
# comes out of prefill, so it is left out: n tokens have n − 1 gaps. With fewer than two tokens
# there is no gap: raise `ValueError`.

# %% [task]
def tpot(token_times):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def tpot(token_times):
    if len(token_times) < 2:
        raise ValueError("TPOT needs at least two tokens: one token has no gap after it")
    return (token_times[-1] - token_times[0]) / (len(token_times) - 1)

# %% [check]
checks.check_tpot(tpot)

# %% [markdown]
# ## 3 · End-to-end latency (端到端延迟)
#
# Write `latency(start, token_times)`: how long the user waited for the whole answer.

# %% [task]
def latency(start, token_times):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def latency(start, token_times):
    return token_times[-1] - start

# %% [check]
checks.check_latency(latency)

# %% [markdown]
# ## 4 · Predict the latency
#
# The source text says latency = TTFT + TPOT × the number of output tokens. Write
# `predict_latency(ttft, tpot, n_tokens)` for an answer of `n_tokens` new tokens. Careful: how
# many TPOT gaps does an answer of n tokens have after its first token? The checker compares your
# prediction with the measured latency of its requests.

# %% [task]
def predict_latency(ttft, tpot, n_tokens):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def predict_latency(ttft, tpot, n_tokens):
    return ttft + tpot * (n_tokens - 1)

# %% [check]
checks.check_predict_latency(predict_latency)

# %% [markdown]
# ## 5 · Throughput (吞吐量)
#
# A server runs several requests at once. Write `throughput(requests)`, where `requests` is a list
# of `(start, token_times)` pairs: all their new tokens divided by the wall time from the first
# start to the last token. (Adding up each request's own tokens per second would count the time
# they share more than once.)

# %% [task]
def throughput(requests):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def throughput(requests):
    tokens = sum(len(times) for _, times in requests)
    first = min(start for start, _ in requests)
    last = max(times[-1] for _, times in requests)
    return tokens / (last - first)

# %% [check]
checks.check_throughput(throughput)

# %% [markdown]
# `minillm.metrics` holds the same definitions (`RequestMetrics`, `throughput`), and every
# `minillm.generate` result carries them as `.metrics`.
