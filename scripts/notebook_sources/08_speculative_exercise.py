# %% [markdown]
# # Exercises 08 · Speculative decoding
#
# One task from the lesson: the acceptance rule (接受规则) of speculative sampling, for one
# drafted token. Write the function in its cell, run the cell, then run the check cell below it.
# The checker calls your function thousands of times on a toy target `p` and draft `q` and tests
# (chi-square) that the tokens it emits follow `p`, not `q`; it says in plain words what is wrong.
#
# Check your work from a terminal too: `pytest --nbval-lax exercises/08_speculative.ipynb`.

# %%
import torch

from minillm.checks import ch08_speculative as checks

torch.manual_seed(0)

# %% [markdown]
# ## 1 · Accept or resample
#
# The draft drew token `draft_token` from its distribution `q`; the target's distribution at the
# same place is `p` (both 1-D float tensors over the vocabulary, each summing to 1). Write
# `accept_step(p, q, draft_token, generator)` that returns `(token, accepted)`:
#
# - draw `u = torch.rand((), generator=generator)`; **accept** when `u < min(1, p[x] / q[x])`:
#   return `(draft_token, True)`;
# - otherwise **resample**: the residual `r = max(0, p - q)` (`torch.clamp(p - q, min=0)`),
#   divided by its sum, and return `(a token drawn from r, False)`; draw with
#   `torch.multinomial(r, 1, generator=generator)`.
#
# Return the token as a Python `int` and `accepted` as a `bool`.

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
import minillm
from minillm.speculative import accept_or_resample

minillm.show_source(accept_or_resample)
