# %% [markdown]
# # Exercises 08 · Speculative decoding
#
# Four pieces of minillm's speculative decoder (推测解码): a draft that needs no second model
# (prompt lookup), the greedy check of the drafted tokens, the acceptance rule (接受规则) of
# speculative sampling for one drafted token, and the attention mask that checks a whole draft
# tree in one pass. Write each function in its cell, run the cell, then run the check cell
# below it. Each checker compares your function with `minillm.speculative`; the acceptance
# rule's calls yours thousands of times on a toy target `p` and draft `q` and tests
# (chi-square) that the tokens it emits follow `p`, not `q`.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/08_speculative.ipynb`.

# %%
import torch

import minillm
from minillm.course import show_source
from minillm.course.checks import ch08_speculative as checks

torch.manual_seed(0)

# %% [markdown]
# ## 1 · Prompt lookup: a draft copied from the context
#
# Text often repeats itself (code, names, quoted passages). Prompt lookup guesses that the last
# few tokens continue the way they did the last time they appeared. Write
# `prompt_lookup(ids, k, max_ngram)`:
#
# - for n = `max_ngram`, `max_ngram - 1`, ..., 1 (but at most `len(ids) - 1`): take the last n ids,
#   `ids[-n:]`, and look for their most recent **earlier** occurrence, a start position from
#   `len(ids) - n - 1` down to 0;
# - at the first match, return the (up to) `k` ids that followed it;
# - if no n matches (or `k` is 0), return `[]`.
#
# ```
# prompt_lookup([1, 2, 3, 4, 1, 2], k=3, max_ngram=3)  ->  [3, 4, 1]
# ```

# %% [task]
def prompt_lookup(ids, k, max_ngram):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def prompt_lookup(ids, k, max_ngram):
    if k < 1:
        return []
    for n in range(min(max_ngram, len(ids) - 1), 0, -1):
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start:start + n] == suffix:
                return list(ids[start + n:start + n + k])
    return []

# %% [check]
checks.check_prompt_lookup(prompt_lookup)

# %% [markdown]
# ## 2 · Greedy verification
#
# The target runs once over the context and the n drafted tokens, and gives its scores at each
# drafted position and after the last one: `target_scores` of shape (n + 1, vocab). Write
# `verify_greedy(target_scores, draft_tokens)` that returns `(new_tokens, n_accepted)`:
#
# - go through the drafted tokens; while each one is the target's argmax at its position, keep it;
# - at the first that is not, emit the target's argmax there instead and stop;
# - if all n pass, add the **bonus token** (额外词元), the target's argmax after the last one
#   (`target_scores[n]`), which the same forward pass gave for free.
#
# `n_accepted` counts the drafted tokens kept. The tokens are exactly what plain greedy decoding of
# the target gives, one pass producing between 1 and n + 1 of them.

# %% [task]
def verify_greedy(target_scores, draft_tokens):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def verify_greedy(target_scores, draft_tokens):
    best = target_scores.argmax(dim=-1).tolist()
    new_tokens = []
    for i, token in enumerate(draft_tokens):
        new_tokens.append(best[i])
        if best[i] != token:
            return new_tokens, i
    return new_tokens + [best[len(draft_tokens)]], len(draft_tokens)

# %% [check]
checks.check_verify_greedy(verify_greedy)

# %% [markdown]
# ## 3 · Accept or resample
#
# With sampling, the draft drew token `draft_token` from its distribution `q`; the target's
# distribution at the same place is `p` (both 1-D float tensors over the vocabulary, each summing
# to 1). Write `accept_step(p, q, draft_token, generator)` that returns `(token, accepted)`:
#
# - draw `u = torch.rand((), generator=generator)`; **accept** when `u < min(1, p[x] / q[x])`:
#   return `(draft_token, True)`;
# - otherwise **resample**: the residual `r = max(0, p - q)` (`torch.clamp(p - q, min=0)`),
#   divided by its sum, and return `(a token drawn from r, False)`; draw with
#   `torch.multinomial(r, 1, generator=generator)`.
#
# Draw only with `generator`, so that a seeded generation can be reproduced. Return the token as
# a Python `int` and `accepted` as a `bool`.

# %% [task]
def accept_step(p, q, draft_token, generator):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def accept_step(p, q, draft_token, generator):
    x = int(draft_token)
    u = torch.rand((), generator=generator, dtype=p.dtype)
    if u < torch.clamp(p[x] / q[x], max=1.0):
        return x, True
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum()
    return int(torch.multinomial(residual, 1, generator=generator)), False

# %% [check]
checks.check_accept_step(accept_step)

# %% [markdown]
# The package's version, `minillm.speculative.accept_or_resample`, does the same for a whole
# batch of rows at once. Compare yours with it:

# %%
from minillm.speculative import accept_or_resample

show_source(accept_or_resample)

# %% [markdown]
# ## 4 · A draft tree's attention mask
#
# A draft tree (草稿树) offers several guesses per position; the target checks them all in one
# pass over the root (the context's last token) and the tree's n nodes. `parents[i]` is node
# i's parent: -1 for the root, else an earlier node. `cached` tokens are already in the KV cache.
# Write `tree_mask(parents, cached)` that returns the attention mask as a `torch.bool` tensor of
# shape (n + 1, cached + n + 1):
#
# - row 0 is the root, row i + 1 is node i; column j < `cached` is cached token j, column
#   `cached` the root, column `cached` + 1 + i node i;
# - every row sees every cached token and the root;
# - node i's row also sees node i itself and each of its ancestors (its parent, its parent's
#   parent, ... up to the root), and nothing else: never a node on another branch.
#
# ```
# tree_mask([-1, 0, -1], cached=1)      x: True, .: False
#   root     x x . . .
#   node 0   x x x . .
#   node 1   x x x x .       (its parent is node 0)
#   node 2   x x . . x       (another branch: it does not see nodes 0 and 1)
# ```

# %% [task]
def tree_mask(parents, cached):
    # YOUR CODE HERE
    raise NotImplementedError
# ==== solution ====
def tree_mask(parents, cached):
    n = len(parents)
    mask = torch.zeros(n + 1, cached + n + 1, dtype=torch.bool)
    mask[:, :cached + 1] = True
    for i in range(n):
        node = i
        while node != -1:
            mask[i + 1, cached + 1 + node] = True
            node = parents[node]
    return mask

# %% [check]
checks.check_tree_mask(tree_mask)

# %% [markdown]
# The lesson's `DraftTree.attention_mask` builds the same mask from a tree's paths; it goes to
# the model as a 4-d `attention_mask`, with each node's position set by its depth:

# %%
from minillm.speculative import DraftTree

show_source(DraftTree.attention_mask)
