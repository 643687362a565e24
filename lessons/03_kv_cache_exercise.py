# %% [markdown]
# # Exercises 03 · The KV cache, the decode loop and the online softmax
#
# Six tasks: how big a KV cache is, how a cache stores a new token's keys and values, the
# generation loop itself (prefill, then decode one token at a time), attention over keys that
# arrive in blocks, with the online softmax of FlashAttention, and, from lesson 03b, partial
# attentions merged as Flash-Decoding does and a sliding window that keeps its sinks. Write each
# function in its cell, run the cell, then run the check cell below it. A check says in plain
# words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/03_kv_cache.ipynb`.

# %%
import math

import torch

import minillm
from minillm.course.checks import ch03_kv_cache as checks
from minillm.generation.kv_cache import KVCache

model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")

# %% [markdown]
# ## 1 · The size of a KV cache
#
# Every token leaves one key vector and one value vector per key/value head in every layer.
# Write `kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)`: the bytes
# that the cache of one sequence holds, as an int.

# %% [task]
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_value

# %% [check]
checks.check_kv_cache_bytes(kv_cache_bytes)

# %% [markdown]
# ## 2 · The cache update
#
# A cache preallocates, per layer, `keys` and `values` shaped
# (batch, kv_heads, max_tokens, head_dim). `length` positions are already filled. Write
# `append_kv(keys, values, k, v, length)`: store the new `k` and `v`, shaped
# (batch, kv_heads, new_tokens, head_dim), at positions `length` to `length + new_tokens - 1`,
# **in place** (no new tensor: the cache must not be copied every step), and return the pair
# (keys, values) of all `length + new_tokens` positions filled so far. If they do not fit in
# `max_tokens`, raise `ValueError`.

# %% [task]
def append_kv(keys, values, k, v, length):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def append_kv(keys, values, k, v, length):
    end = length + k.shape[2]
    if end > keys.shape[2]:
        raise ValueError(f"the cache holds {length} of {keys.shape[2]} tokens and cannot take "
                         f"{k.shape[2]} more")
    keys[:, :, length:end] = k
    values[:, :, length:end] = v
    return keys[:, :, :end], values[:, :, :end]

# %% [check]
checks.check_append_kv(append_kv)

# %% [markdown]
# ## 3 · The decode loop
#
# Write `greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids)`, returning the list of
# new token ids:
#
# 1. make a cache: `cache = KVCache.for_model(model, batch_size=1, max_tokens=...)`;
# 2. prefill: `logits = model(torch.tensor([prompt_ids]), cache=cache)` runs the whole prompt
#    and fills the cache; the last position's logits, `logits[0, -1]`, give the first new token
#    (take the argmax);
# 3. decode: feed **only the newest token**, `model(torch.tensor([[token]]), cache=cache)`, and
#    take the argmax again, until you have `max_new_tokens` tokens or the token you just
#    chose is in `eos_token_ids` (keep that EOS token in the result, then stop).
#
# Wrap the loop in `with torch.inference_mode():` so that torch keeps no gradients.

# %% [task]
def greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids):
    cache = KVCache.for_model(model, batch_size=1, max_tokens=len(prompt_ids) + max_new_tokens)
    new = []
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids]), cache=cache)  # prefill
        while True:
            token = int(logits[0, -1].argmax())
            new.append(token)
            if token in eos_token_ids or len(new) == max_new_tokens:
                return new
            logits = model(torch.tensor([[token]]), cache=cache)  # decode: the new token only

# %% [check]
checks.check_greedy_decode(greedy_decode, model, tokenizer)

# %% [markdown]
# Your loop generates what `minillm.generate` generates. Try it on a chat prompt; the model ends
# its turn with an EOS token:

# %%
chat = tokenizer.encode(tokenizer.apply_chat_template(
    [{"role": "user", "content": "What is the capital of France?"}]))
try:
    print(tokenizer.decode(greedy_decode(model, chat, 24, list(model.config.eos_token_ids))))
except NotImplementedError:
    print("write greedy_decode above first")

# %% [markdown]
# ## 4 · Attention one block at a time: the online softmax
#
# Lesson 03b builds FlashAttention on one idea, the online softmax (在线 softmax). Here you write
# it for one query, as a decode step could run it over a cache read in blocks.
#
# Write `attend_in_blocks(q, blocks)`. `q` is one query, a vector of d numbers. `blocks` hands
# out the keys and values in pairs `(k, v)`, `k` shaped (b, d) and `v` shaped (b, d_v), and can
# be read only once. Return the attention output over all the keys, a vector of d_v numbers:
# softmax(K q / √d) V. Between blocks, keep only three running values:
#
# - `m`, the largest score so far (start at `float("-inf")`);
# - `l`, the sum of e^(score − m) over the keys so far (start at 0);
# - `o`, the sum of e^(score − m) × that key's value (start at 0; it becomes a vector of d_v
#   numbers with the first block).
#
# For each block: the scores `s = k @ q / math.sqrt(d)`; `m_new = max(m, s.max().item())`;
# multiply `l` and `o` by e^(m − m_new), since they were summed against the old maximum; add the
# block's terms e^(s − m_new), summed into `l` and weighted by `v` into `o`; then `m = m_new`.
# At the end return `o / l`.
#
# Do not keep the blocks or join them (the check watches): holding one block at a time is the
# whole point.

# %% [task]
def attend_in_blocks(q, blocks):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def attend_in_blocks(q, blocks):
    m, l, o = float("-inf"), 0.0, 0.0
    for k, v in blocks:
        s = k @ q / math.sqrt(q.shape[0])
        m_new = max(m, s.max().item())
        rescale = math.exp(m - m_new)  # 0 for the first block: nothing is summed yet
        p = torch.exp(s - m_new)
        l = l * rescale + p.sum()
        o = o * rescale + p @ v
        m = m_new
    return o / l

# %% [check]
checks.check_attend_in_blocks(attend_in_blocks)

# %% [markdown]
# Your function at SmolLM2's head width: one query against 300 random keys and values, read in
# blocks of 64, compared with PyTorch's attention over all of them at once.

# %%
gen = torch.Generator().manual_seed(0)
d = model.config.head_dim
q, keys, values = torch.randn(d, generator=gen), torch.randn(300, d, generator=gen), \
    torch.randn(300, d, generator=gen)
whole = torch.nn.functional.scaled_dot_product_attention(q[None, None], keys[None], values[None])
try:
    pieces = ((keys[i:i + 64], values[i:i + 64]) for i in range(0, 300, 64))
    mine = attend_in_blocks(q, pieces)
    print(f"largest difference from the whole attention: {(mine - whole[0, 0]).abs().max():.1e}")
except NotImplementedError:
    print("write attend_in_blocks above first")

# %% [markdown]
# ## 5 · Two partial attentions merged: split-KV (lesson 03b)
#
# At batch 1 with a long cache, one decode step has one query per head: too little work for a
# GPU's many cores. **Flash-Decoding** splits the cache into parts, lets each core run your
# `attend_in_blocks` loop over its own part, and merges the partial results. Each part ends with
# its own `(m, l, o)` (the running values of task 4, before the division).
#
# Write `merge_partials(a, b)` that merges two of them, `a = (m1, l1, o1)` and `b = (m2, l2, o2)`,
# into the `(m, l, o)` of all their keys: `m = max(m1, m2)`, and each part's `l` and `o`
# multiplied by e^(m_part − m) before they are added. Return the sums, not `o / l`: a third
# part may still come.

# %% [task]
def merge_partials(a, b):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def merge_partials(a, b):
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = max(m1, m2)
    r1, r2 = math.exp(m1 - m), math.exp(m2 - m)
    return m, l1 * r1 + l2 * r2, o1 * r1 + o2 * r2

# %% [check]
checks.check_merge_partials(merge_partials)

# %% [markdown]
# The same 300 keys as above, cut into 4 parts as 4 cores would take them, each part's
# `(m, l, o)` computed alone, then merged in any order:

# %%
def partial(q, k, v):
    s = k @ q / math.sqrt(q.shape[0])
    m = s.max().item()
    p = torch.exp(s - m)
    return m, p.sum(), p @ v


try:
    parts = [partial(q, keys[i:i + 75], values[i:i + 75]) for i in range(0, 300, 75)]
    merged = merge_partials(merge_partials(parts[3], parts[1]), merge_partials(parts[0],
                                                                                parts[2]))
    print(f"largest difference from the whole attention: "
          f"{(merged[2] / merged[1] - whole[0, 0]).abs().max():.1e}")
except NotImplementedError:
    print("write merge_partials above first")

# %% [markdown]
# ## 6 · A window that keeps its sinks (lesson 03b)
#
# A sliding window of W keys forgets the first tokens, on which a trained model parks much of its
# attention (attention sinks). StreamingLLM keeps them: write `sink_window_mask(n, window, sinks)`,
# an (n, n) tensor of booleans for n tokens, True where query i may see key j:
#
# - never a key after the query (j <= i);
# - the first `sinks` tokens, once they are in the past;
# - and the last `window - sinks` keys up to the query itself (i − j < window − sinks),
#
# so that no query sees more than `window` keys.
#
# ```
# sink_window_mask(6, 4, 2)        query 5 sees keys 0, 1 (the sinks) and 4, 5
# ```

# %% [task]
def sink_window_mask(n, window, sinks):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def sink_window_mask(n, window, sinks):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & ((j < sinks) | (i - j < window - sinks))

# %% [check]
checks.check_sink_window_mask(sink_window_mask)

# %% [markdown]
# Lesson 03b measures what the sinks win back on SmolLM2: most of what a plain window loses.
