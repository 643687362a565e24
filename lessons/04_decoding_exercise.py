# %% [markdown]
# # Exercise 04: decoding strategies (解码策略)
#
# Write five small pieces of a decoder, each a function on a batch of logits
# `(batch, vocab)`. After each, run its check cell: the checker compares your function with
# minillm's own processors (`minillm/decoding/processors.py`) on random logits and says in
# plain words what differs. A removed token gets the score `-inf`.
#
# Run `pytest --nbval-lax exercises/04_decoding.ipynb` to check the whole notebook.

# %%
import torch

from minillm.course.checks import ch04_decoding as checks
from minillm.course import show_source

# %% [markdown]
# ## 1. Temperature (温度)
#
# $P_i = e^{z_i/T} / \sum_j e^{z_j/T}$: return the logits scaled by the temperature $T$.

# %% [task]
def apply_temperature(logits, temperature):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def apply_temperature(logits, temperature):
    return logits / temperature

# %% [check]
checks.check_apply_temperature(apply_temperature)

# %% [markdown]
# ## 2. Top-k
#
# Keep the `k` highest scores of each row and set every other score to `-inf`. A token tied
# with the k-th best stays. A `k` above the vocabulary size keeps everything.
# Hint: `torch.topk` and `masked_fill`.

# %% [task]
def top_k_filter(logits, k):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def top_k_filter(logits, k):
    k = min(k, logits.shape[-1])
    kth_best = torch.topk(logits, k).values[..., -1:]
    return logits.masked_fill(logits < kth_best, float("-inf"))

# %% [check]
checks.check_top_k(top_k_filter)

# %% [markdown]
# ## 3. Top-p (nucleus, 核采样)
#
# Keep the smallest set of most likely tokens whose probabilities add up to at least `p`.
# The token that crosses `p` is kept: with probabilities 0.5, 0.3, 0.15, 0.05 and p = 0.7, the
# first two stay. Hint: sort descending, `softmax`, `cumsum`; a token stays when the total
# *before* it is still below `p`.

# %% [task]
def top_p_filter(logits, p):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def top_p_filter(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
    remove_sorted = before >= p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))

# %% [check]
checks.check_top_p(top_p_filter)

# %% [markdown]
# ## 4. Repetition penalty (重复惩罚)
#
# Every token that appears in `input_ids` (the prompt counts too) gets its score divided by
# `penalty` when the score is positive and multiplied by it when negative, once, however often
# it appeared. Hint: `torch.gather`, `torch.where`, `scatter`.

# %% [task]
def repetition_penalty(input_ids, logits, penalty):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def repetition_penalty(input_ids, logits, penalty):
    seen = torch.gather(logits, 1, input_ids)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(1, input_ids, seen)

# %% [check]
checks.check_repetition_penalty(repetition_penalty)

# %% [markdown]
# ## 5. One beam-search step (束搜索)
#
# `log_probs` is `(num_beams, vocab)`, `beam_scores` is `(num_beams,)`: the summed
# log-probability of each running beam. Return `(scores, parents, tokens)`: the `num_beams` best
# continuations over all beams together, best first, where a continuation's score is
# `beam_scores[parent] + log_probs[parent, token]`. Hint: flatten to `num_beams * vocab`
# candidates, `torch.topk`, then `//` and `%` by the vocabulary size.

# %% [task]
def beam_step(log_probs, beam_scores, num_beams):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def beam_step(log_probs, beam_scores, num_beams):
    vocab = log_probs.shape[-1]
    totals = (beam_scores[:, None] + log_probs).reshape(-1)
    scores, flat = torch.topk(totals, num_beams)
    return scores, flat // vocab, flat % vocab

# %% [check]
checks.check_beam_step(beam_step)

# %% [markdown]
# Done: compare your functions with `show_source(minillm.decoding.TopPProcessor)` and
# the others. minillm's top-p works from the unlikely end (sorted ascending), as transformers
# does; both keep the same tokens.
