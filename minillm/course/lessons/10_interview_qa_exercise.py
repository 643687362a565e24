# %% [markdown]
# # Exercises 10 · Interview questions, answered in code (面试题)
#
# Three questions from the chapter that interviewers like to ask at a whiteboard. Each answer is a
# small piece of the engine: write it, run it, and run the check cell below it; the checker
# compares your function with minillm's own on several real model shapes. Predict each number
# before you run it.
#
# Check your work from a terminal with `pytest --nbval-lax exercises/10_interview_qa.ipynb`.

# %%
import torch

import minillm
from minillm.course.checks import ch10_interview as checks
from minillm.decoding.processors import TopKProcessor, TopPProcessor

smollm2 = checks.PARAM_CONFIGS["SmolLM2-135M"]
print(smollm2)

# %% [markdown]
# ## 1 · Q3 · Top-k and top-p together: in which order? (Top-k 和 Top-p 可以同时使用吗？)
#
# `generate()` turns the logits into the scores it samples from in a fixed order: divide by the
# temperature, then top-k, then top-p over what top-k left (the source text says top-p first; the
# lesson shows that the order can change the result). Write
# `sampling_filter(logits, temperature, top_k, top_p)` for logits of shape (batch, vocab):
# `top_k = 0` means no top-k filter and `top_p = 1.0` no top-p filter. Use minillm's processors
# for the two filters (`TopKProcessor(k)(None, scores)`, `TopPProcessor(p)(None, scores)`) or
# your own from exercise 04.

# %% [task]
def sampling_filter(logits, temperature, top_k, top_p):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def sampling_filter(logits, temperature, top_k, top_p):
    scores = logits / temperature
    if top_k:
        scores = TopKProcessor(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPProcessor(top_p)(None, scores)
    return scores

# %% [check]
checks.check_sampling_filter(sampling_filter)

# %% [markdown]
# ## 2 · Q10 · How many parameters? (模型有多少参数？)
#
# A Llama-family model (`minillm.model.ModelConfig`) has an embedding table (vocab_size ×
# hidden_size); in each of its n_layers blocks the projections q (n_heads × head_dim rows),
# k and v (n_kv_heads × head_dim rows each) and o, all over hidden_size, the SwiGLU matrices gate,
# up and down (hidden_size × intermediate_size each), and two RMSNorm weights (hidden_size each);
# a final RMSNorm; and an LM head (vocab_size × hidden_size), unless `tie_embeddings` makes it the
# embedding table itself. Write `count_parameters(config)`. Predict first: SmolLM2's 135M?

# %% [task]
def count_parameters(config):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def count_parameters(config):
    c = config
    attention = c.hidden_size * c.head_dim * (2 * c.n_heads + 2 * c.n_kv_heads)
    feed_forward = 3 * c.hidden_size * c.intermediate_size
    per_layer = attention + feed_forward + 2 * c.hidden_size
    embedding = c.vocab_size * c.hidden_size
    head = 0 if c.tie_embeddings else c.vocab_size * c.hidden_size
    return embedding + c.n_layers * per_layer + c.hidden_size + head

# %% [check]
checks.check_count_parameters(count_parameters)

# %% [markdown]
# The rule of thumb "n billion parameters need about 2n GB in fp16", for each model:

# %%
try:
    for name in ["SmolLM2-135M", "SmolLM2-360M", "Llama-2-7B", "Llama-3-8B"]:
        n = count_parameters(checks.PARAM_CONFIGS[name])
        print(f"{name:>14}: {n / 1e9:7.3f} B parameters, {2 * n / 1e9:7.2f} GB in fp16")
except NotImplementedError:
    print("write count_parameters above first")

# %% [markdown]
# ## 3 · Q13 · How large is the KV cache? (KV 缓存有多大？)
#
# Every layer keeps one key and one value vector per key/value head for every token of every
# sequence. Write `kv_cache_bytes(config, tokens, batch, dtype)`: the bytes the cache of `batch`
# sequences of `tokens` tokens takes, with values of the torch dtype `dtype`
# (`torch.tensor([], dtype=dtype).element_size()` gives its bytes). Predict first: Llama-3-8B,
# 8 sequences of 8,192 tokens in bfloat16, against its 16 GB of weights?

# %% [task]
def kv_cache_bytes(config, tokens, batch, dtype):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def kv_cache_bytes(config, tokens, batch, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens * batch * size

# %% [check]
checks.check_kv_cache_bytes(kv_cache_bytes)

# %% [markdown]
# Your formula against a real cache for the course model, and what grouped-query attention saves:

# %%
try:
    real = minillm.KVCache(smollm2.n_layers, 1, smollm2.n_kv_heads, smollm2.head_dim, 2048)
    print(f"formula {kv_cache_bytes(smollm2, 2048, 1, torch.float32):,} bytes, "
          f"KVCache.capacity_bytes {real.capacity_bytes:,}")
    llama3 = checks.PARAM_CONFIGS["Llama-3-8B"]
    gqa = kv_cache_bytes(llama3, 8192, 8, torch.bfloat16)
    print(f"Llama-3-8B, 8 x 8,192 tokens: {gqa / 1e9:.1f} GB; with a K/V head per query head "
          f"it would be {gqa * llama3.n_heads // llama3.n_kv_heads / 1e9:.1f} GB")
except NotImplementedError:
    print("write kv_cache_bytes above first")
