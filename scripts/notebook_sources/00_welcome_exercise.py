# %% [markdown]
# # Exercises 00 · Warm-up
#
# Three small tasks on the numbers of the welcome notebook. Write each function in its cell,
# run the cell, then run the check cell below it. A check says in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/00_welcome.ipynb`.

# %%
import minillm
from minillm.checks import ch00_welcome as checks

model, tokenizer = minillm.load_reference("smollm2-135m")

# %% [markdown]
# ## 1 · Count the prompt's tokens
#
# Write `count_tokens(tokenizer, text)` that returns how many token ids the tokenizer makes
# from `text`. (`tokenizer(text).input_ids` is the list of ids.)

# %% [task]
def count_tokens(tokenizer, text):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def count_tokens(tokenizer, text):
    return len(tokenizer(text).input_ids)

# %% [check]
checks.check_count_tokens(count_tokens, tokenizer)

# %% [markdown]
# ## 2 · Prefill's share of the time
#
# `timings` maps each stage ("tokenize", "prefill", "decode", "detokenize") to seconds, as in the
# welcome notebook. Write `prefill_fraction(timings)`: the fraction (between 0 and 1) of the total
# time that prefill took.

# %% [task]
def prefill_fraction(timings):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def prefill_fraction(timings):
    return timings["prefill"] / sum(timings.values())

# %% [check]
checks.check_prefill_fraction(prefill_fraction)

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
