# %% [markdown]
# # Exercises 10 · Interview estimates (面试估算题)
#
# Interviewers like questions you answer on the back of an envelope: how much memory do the
# weights take, how large is the KV cache (KV 缓存), how many users fit on one GPU, how fast can
# decode (解码) possibly be? Each task below is one such estimate, written as a small function.
# GB here means 10⁹ bytes, as GPU makers count.
#
# Predict the answer first, then write the function, run it, and run the check cell below it.
# Check your work from a terminal with `pytest --nbval-lax exercises/10_interview_qa.ipynb`.

# %%
from minillm.checks import ch10_interview as checks

# %% [markdown]
# ## 1 · Weight memory (权重显存)
#
# A model of n parameters stored at b bits per weight takes n × b / 8 bytes. The source text's
# rule "n billion parameters need about 2n GB in fp16" is this formula at b = 16.
#
# Write `weight_memory_gb(n_params, bits_per_weight)`. Predict first: a 70B model in int4?

# %% [task]
def weight_memory_gb(n_params, bits_per_weight):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def weight_memory_gb(n_params, bits_per_weight):
    return n_params * bits_per_weight / 8 / 1e9

# %% [check]
checks.check_weight_memory_gb(weight_memory_gb)

# %% [markdown]
# ## 2 · KV-cache memory (KV 缓存显存)
#
# Every layer keeps a key and a value vector per key/value head for every token of every
# sequence: 2 × layers × kv_heads × head_dim × tokens × batch × bytes per value.
#
# Write `kv_cache_gb(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value)`. Predict
# first: Llama-2-7B (32 layers, 32 KV heads of width 128) for one 4,096-token sequence in fp16?

# %% [task]
def kv_cache_gb(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def kv_cache_gb(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * batch * bytes_per_value / 1e9

# %% [check]
checks.check_kv_cache_gb(kv_cache_gb)

# %% [markdown]
# ## 3 · How many sequences fit? (能同时服务多少请求)
#
# The weights are loaded once; what memory is left holds the KV caches, one per sequence.
#
# Write `max_batch(gpu_memory_gb, weight_gb, kv_gb_per_sequence)`: the number of whole sequences
# that fit (0 when the weights alone do not fit). Predict first: a 7B fp16 model (14 GB) on an
# 80 GB GPU with 4k-token sequences (your answer to task 2)?

# %% [task]
def max_batch(gpu_memory_gb, weight_gb, kv_gb_per_sequence):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def max_batch(gpu_memory_gb, weight_gb, kv_gb_per_sequence):
    free = gpu_memory_gb - weight_gb
    return max(0, int(free // kv_gb_per_sequence))

# %% [check]
checks.check_max_batch(max_batch)

# %% [markdown]
# ## 4 · The bandwidth bound on decode (带宽上限)
#
# At batch size 1 every decode step reads every weight once from memory, so no step can be
# faster than (weight bytes) / (memory bandwidth).
#
# Write `decode_tokens_per_s_bound(weight_bytes, bandwidth_gb_per_s)`: the most tokens per second
# a batch-1 decode can reach. Predict first: a 7B fp16 model (14e9 bytes) on a GPU with
# 3,350 GB/s?

# %% [task]
def decode_tokens_per_s_bound(weight_bytes, bandwidth_gb_per_s):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def decode_tokens_per_s_bound(weight_bytes, bandwidth_gb_per_s):
    return bandwidth_gb_per_s * 1e9 / weight_bytes

# %% [check]
checks.check_decode_bound(decode_tokens_per_s_bound)

# %% [markdown]
# ## Going further
#
# Apply your functions to the course model: its config is `minillm.load("smollm2-135m")[0].config`
# (30 layers, 3 KV heads of width 64). How many 2,048-token fp32 sequences fit in 1 GB after its
# weights? Compare your KV estimate with `minillm.KVCache.for_model(model, 1, 2048).capacity_bytes`.
