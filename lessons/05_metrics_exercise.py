# %% [markdown]
# # Exercises 05 · Measuring inference
#
# The lesson timed every token of a generation. Here you build the measuring part of minillm
# yourself: the metrics of one request, the latency formula, a timer for a token stream, the
# throughput of many requests, and the least time of a forward pass under the roofline. Then,
# from lesson 05b, the CUDA graph a serving step replays and the list of batch sizes to capture. Each
# request is a `start` time and a list `token_times`: the moment (in seconds, one clock) each
# new token was ready.
#
# Write each function in its cell, run it, then run the check cell below it. Each checker compares
# your function with minillm's own (`minillm.measure.metrics`, `minillm.measure.roofline`) on many
# cases. Check your work from a terminal with
# `pytest --nbval-lax exercises/05_metrics.ipynb`.

# %%
import math
import os
import time

import minillm
from minillm.course.checks import ch05_metrics as checks

start, token_times = 0.0, [0.30, 0.35, 0.40, 0.45, 0.50]

# %% [markdown]
# ## 1 · One request's metrics
#
# Write `request_metrics(start, token_times)` returning a dict with three numbers, in seconds:
#
# - `"ttft"`: time to first token (首个词元生成时间), from the start to the first token;
# - `"tpot"`: time per output token (每个输出词元的时间), the mean gap between tokens *after*
#   the first: n tokens have n − 1 gaps. The first token comes out of prefill, so it is left out.
#   With a single token there is no gap: return `float("nan")`;
# - `"latency"`: end-to-end latency (端到端延迟), how long the user waited for the whole answer.

# %% [task]
def request_metrics(start, token_times):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def request_metrics(start, token_times):
    n = len(token_times)
    gaps = (token_times[-1] - token_times[0]) / (n - 1) if n > 1 else math.nan
    return {"ttft": token_times[0] - start, "tpot": gaps, "latency": token_times[-1] - start}

# %% [check]
checks.check_request_metrics(request_metrics)

# %% [markdown]
# ## 2 · Predict the latency
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
# ## 3 · Time a token stream
#
# `minillm.generation.loop.stream(model, tokenizer, prompt, ...)` yields the answer piece by piece, as
# each becomes ready. Write `time_stream(stream, clock)` that consumes such a stream and returns
# `(start, token_times, items)`:
#
# - `start = clock()`, read *before* asking the stream for anything (prefill happens while you
#   wait for the first item, and belongs in the TTFT);
# - for each item, read `clock()` right after it arrives, and keep the item.
#
# Always read the time with the `clock` you are given (the checker gives you a clock it moves
# by hand; the demo below gives `time.perf_counter`).

# %% [task]
def time_stream(stream, clock):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def time_stream(stream, clock):
    start, token_times, items = clock(), [], []
    for item in stream:
        token_times.append(clock())
        items.append(item)
    return start, token_times, items

# %% [check]
checks.check_time_stream(time_stream)

# %% [markdown]
# Your two functions, on the real model:

# %%
from minillm.generation.loop import stream

model, tokenizer = minillm.load("smollm2-135m", device="cpu")
new_tokens = 8 if os.environ.get("CI") else 24
try:
    t0, times, pieces = time_stream(
        stream(model, tokenizer, "The capital of France is", max_new_tokens=new_tokens),
        time.perf_counter)
    print("".join(pieces))
    print({k: f"{1000 * v:.1f} ms" for k, v in request_metrics(t0, times).items()})
except NotImplementedError:
    print("write time_stream and request_metrics above first")

# %% [markdown]
# ## 4 · Throughput (吞吐量)
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
# `minillm.measure.metrics` holds the same definitions (`RequestMetrics`, `predict_latency`, `TokenClock`,
# `throughput`), and every `minillm.generate` result carries them as `.metrics`.

# %% [markdown]
# ## 5 · The roofline (屋顶线模型)
#
# A forward pass of `rows` tokens (a decode step of `rows` requests, or a prompt of `rows`
# tokens) multiplies with every weight once per row: 2 FLOP per weight per row, a multiply and
# an add. It reads every weight once, whatever the rows: `n_weights × bytes_per_weight` bytes
# (leave the KV cache out). A machine does at most `peak_flops` FLOP/s and reads at most
# `bandwidth` bytes/s, and it can do both at once.
#
# Write `roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth)`: the least
# time the pass can take on that machine, in seconds.

# %% [task]
def roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def roofline_seconds(rows, n_weights, bytes_per_weight, peak_flops, bandwidth):
    arithmetic = 2 * n_weights * rows / peak_flops
    reading = n_weights * bytes_per_weight / bandwidth
    return max(arithmetic, reading)

# %% [check]
checks.check_roofline_seconds(roofline_seconds)

# %% [markdown]
# Your function on published figures: a 7B model (Llama-2-7B, 6.74 billion weights) in fp16 on
# one H100 (989 TFLOP/s, 3.35 TB/s). Up to the ridge, more rows cost almost nothing per step;
# past it, each step grows with its rows.

# %%
try:
    for rows in [1, 16, 64, 256, 1024, 4096]:
        seconds = roofline_seconds(rows, 6.74e9, 2, 989e12, 3.35e12)
        print(f"{rows:>5} rows: at least {1000 * seconds:7.2f} ms a step, at most "
              f"{rows / seconds:9,.0f} tokens/s")
except NotImplementedError:
    print("write roofline_seconds above first")

# %% [markdown]
# ## 6 · The graph a step replays (lesson 05b)
#
# A serving engine captures one CUDA graph per batch size in a list (`capture_sizes`) and pads
# each decode step up to the next captured size. Write `graph_batch_size(batch, capture_sizes)`:
# the captured size a step of `batch` requests replays, the smallest one that holds it, or
# `None` when the batch is larger than every captured size (the step then runs without a graph).
# The list need not be sorted; do not change it.

# %% [task]
def graph_batch_size(batch, capture_sizes):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def graph_batch_size(batch, capture_sizes):
    fitting = [size for size in capture_sizes if size >= batch]
    return min(fitting) if fitting else None

# %% [check]
checks.check_graph_batch_size(graph_batch_size)

# %% [markdown]
# ## 7 · Which sizes to capture (lesson 05b)
#
# Each graph costs capture time at start-up and some memory, so an engine limits how many it
# keeps; each padded row is work thrown away. Write
# `choose_capture_sizes(batch_sizes, candidates, max_graphs)`:
#
# - `batch_sizes`: the batch size of every step a workload ran (a size the engine ran often
#   appears often);
# - `candidates`: a dict, name -> list of capture sizes;
# - return the name of the list that pads the fewest rows over all the steps, among the lists
#   of at most `max_graphs` sizes whose largest size holds the largest batch (every step gets a
#   graph); on equal padding, the list with fewer graphs, then the one listed first. Return
#   `None` when no list qualifies.
#
# Your `graph_batch_size` gives each step's padded size.

# %% [task]
def choose_capture_sizes(batch_sizes, candidates, max_graphs):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def choose_capture_sizes(batch_sizes, candidates, max_graphs):
    best = None
    for name, sizes in candidates.items():
        if len(sizes) > max_graphs or max(sizes) < max(batch_sizes):
            continue
        padding = sum(graph_batch_size(b, sizes) - b for b in batch_sizes)
        if best is None or (padding, len(sizes)) < best[:2]:
            best = (padding, len(sizes), name)
    return None if best is None else best[2]

# %% [check]
checks.check_choose_capture_sizes(choose_capture_sizes)

# %% [markdown]
# Your function on a measured run: minillm's engine serves 16 requests of different lengths on
# SmolLM2 (8 under CI) and records the batch size of every step; your choice at each limit on
# graphs is compared with minillm's `choose_capture_sizes`.

# %%
from minillm.decoding import GenerationConfig  # noqa: E402
from minillm.engine import Engine  # noqa: E402
from minillm.engine import capture_sizes as reference  # noqa: E402

SEQS = 8 if os.environ.get("CI") else 16
model, tokenizer = minillm.load("smollm2-135m")
engine = Engine(model, tokenizer, max_num_seqs=SEQS, record=True)
prompts = [f"Question {i}: name a colour and say why you like it." for i in range(SEQS)]
engine.generate(prompts, [GenerationConfig(max_new_tokens=4 + 3 * i) for i in range(SEQS)])
steps = [len(step.items) for step in engine.steps]
lists = {"every size": list(range(1, SEQS + 1)),
         "powers of two": [2 ** i for i in range(SEQS.bit_length()) if 2 ** i <= SEQS],
         "1, then steps of 4": [1] + list(range(4, SEQS + 1, 4)),
         f"1 and {SEQS}": [1, SEQS]}
print(f"{len(steps)} steps of batch sizes {sorted(set(steps))}")
try:
    for most in sorted({2, 3, 5, SEQS}):
        mine, theirs = choose_capture_sizes(steps, lists, most), \
            reference.choose_capture_sizes(steps, lists, most)
        rows = reference.padded_rows(steps, lists[mine]) if mine else 0
        print(f"at most {most:>2} graphs: you chose {mine!r} ({rows} padded rows); "
              f"minillm chose {theirs!r}")
        assert mine == theirs
except NotImplementedError:
    print("write graph_batch_size and choose_capture_sizes above first")

