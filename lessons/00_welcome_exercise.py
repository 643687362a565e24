# %% [markdown]
# # Exercises 00 · The inference path, by hand
#
# Three pieces of the path the welcome notebook walked: the chat prompt the model reads, the whole
# path from messages to the answer's text, and the decode speed of a run. Write each function in
# its cell, run the cell, then run the check cell below it. A check compares your function with
# minillm's own on several inputs and says in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/00_welcome.ipynb`.

# %%
import torch

import minillm
from minillm.course.checks import ch00_welcome as checks

model, tokenizer = minillm.load_reference("smollm2-135m")

# %% [markdown]
# ## 1 · The chat prompt (对话模板)
#
# A chat model reads one string. SmolLM2's template (ChatML) writes each message as
#
# ```
# <|im_start|>ROLE
# CONTENT<|im_end|>
# ```
#
# followed by a newline, and ends with `<|im_start|>assistant` and a newline, which opens the
# model's turn. When the conversation has no system message, the template first puts its default
# one: `<|im_start|>system`, a newline, `You are a helpful AI assistant named SmolLM, trained by
# Hugging Face<|im_end|>`, a newline.
#
# Write `chat_prompt(messages)` for a list of `{"role": ..., "content": ...}` dicts, without
# calling the tokenizer's template.

# %% [task]
def chat_prompt(messages):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def chat_prompt(messages):
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    parts = []
    if not messages or messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for message in messages:
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)

# %% [check]
checks.check_chat_prompt(chat_prompt)

# %% [markdown]
# Your string is the one the tokenizer's own template builds:

# %%
messages = [{"role": "user", "content": "What is the capital of France?"}]
try:
    print(chat_prompt(messages))
    print(chat_prompt(messages) == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False))
except NotImplementedError:
    print("write chat_prompt above first")

# %% [markdown]
# ## 2 · Messages in, answer out
#
# Write `answer(model, tokenizer, messages, max_new_tokens)`: the whole path of the welcome
# notebook, returning the answer's text.
#
# 1. the prompt: `tokenizer.apply_chat_template(messages, add_generation_prompt=True,
#    tokenize=False)`, the string your `chat_prompt` builds;
# 2. text → tokens: `tokenizer(prompt, return_tensors="pt").input_ids`;
# 3. prefill and decode: `model.generate(ids, max_new_tokens=..., do_sample=False)` (greedy)
#    inside `with torch.inference_mode():`;
# 4. tokens → text: decode **only the new tokens** (the ids after the prompt's), with
#    `skip_special_tokens=True` so that the end-of-turn token `<|im_end|>` does not show.

# %% [task]
def answer(model, tokenizer, messages, max_new_tokens):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def answer(model, tokenizer, messages, max_new_tokens):
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

# %% [check]
checks.check_answer(answer, model, tokenizer)

# %% [markdown]
# ## 3 · Decode speed
#
# `token_times` lists the moment (in seconds) each new token appeared; the first one came out of
# prefill. Write `decode_speed(token_times)`: decode tokens per second, counting only the tokens
# *after* the first, over the time from the first to the last. With fewer than two tokens there is
# no decode step: raise `ValueError`.

# %% [task]
def decode_speed(token_times):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def decode_speed(token_times):
    if len(token_times) < 2:
        raise ValueError("need at least two token times to measure decode speed")
    return (len(token_times) - 1) / (token_times[-1] - token_times[0])

# %% [check]
checks.check_decode_speed(decode_speed)

# %% [markdown]
# `minillm.generate` records every token's time; its result's `.metrics` computes the same speed
# (`decode_tokens_per_second`), and chapter 05 builds the rest of the measurements.
