# %% [markdown]
# # 08 · Speculative decoding: guess cheaply, check in one pass
#
# Decode makes one token per forward pass of the whole model, and (chapter 05) each pass is
# bound by memory bandwidth: it reads every weight to do very little arithmetic. **Speculative
# decoding (推测解码)** spends that idle arithmetic. A cheap **draft (草稿)** guesses the next k
# tokens; the real model, the **target (目标模型)**, scores all k in *one* forward pass; an
# **acceptance rule (接受规则)** keeps the guesses the target agrees with. The output is exactly
# what the target alone would produce (token for token when greedy, in distribution when
# sampling), only in fewer passes.
#
# This notebook measures each step on SmolLM2-135M, on this machine:
#
# 1. why verifying k tokens costs far less than k decode steps;
# 2. the acceptance rule, derived and checked numerically;
# 3. two drafts: prompt lookup (提示词查找) and the target's own first layers;
# 4. the draft-and-verify loop with KV-cache rollback (回滚);
# 5. acceptance rates (接受率) and speed-ups on three tasks;
# 6. when it does not help;
# 7. drafts built into the target (Medusa, EAGLE, multi-token prediction): what an acceptance
#    rate buys at what draft cost;
# 8. draft trees: several guesses per position in one pass, suffix drafts, and the
#    multi-draft rule that keeps sampling exact.

# %%
import os

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.columns import Label, columns
from minillm.utils.devices import Timer
from minillm.generation.kv_cache import KVCache
from minillm.speculative import (ModelDraft, PromptLookupDraft, accept_or_resample,
                                 expected_tokens_per_pass, first_layers, speculative_generate)

CI = bool(os.environ.get("CI"))  # smaller runs under `make test` in CI
torch.manual_seed(0)
device = minillm.pick_device("auto")
print(minillm.use_free_cores())  # one thread fewer for each core other programs keep busy
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"device {device}, {torch.get_num_threads()} threads, "
      f"{model.config.n_layers} layers, vocabulary {model.config.vocab_size:,}")

# %% [markdown]
# ## 1 · Verifying k tokens costs far less than k decode steps
#
# Fill a KV cache (KV 缓存) with a 64-token context, then time one forward pass that feeds n new
# tokens at once, for n = 1 (a decode step) up to 16. Each pass reads the same weights once; only
# the arithmetic grows with n.

# %%
def pass_seconds(n_new, context=64, repeats=5):
    ids = torch.randint(100, 20_000, (1, context + n_new), generator=torch.Generator()
                        .manual_seed(0)).to(device)
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            cache = KVCache.for_model(model, 1, context + n_new)
            model(ids[:, :context], cache=cache)
            with Timer(device) as stopwatch:
                model(ids[:, context:], cache=cache)
            times.append(stopwatch.seconds)
    return min(times)


sizes = [1, 2, 4, 8, 16]
pass_times = {n: pass_seconds(n, repeats=3 if CI else 5) for n in tqdm(sizes)}
for n, t in pass_times.items():
    print(f"{n:>2} new tokens: {1000 * t:6.1f} ms per pass "
          f"({t / pass_times[1]:.2f}x a one-token step, {t / pass_times[1] / n:.2f} of a step "
          f"per token)")
per_token_8 = pass_times[8] / pass_times[1] / 8
print(f"8 tokens in one pass: {per_token_8:.2f} of a decode step per token: "
      + ("far less than 8 separate steps" if per_token_8 < 0.5 else
         "not far below 8 separate steps here: the pass is compute-bound on this device"))

# %%
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sizes, [1000 * pass_times[n] for n in sizes], "o-", label="measured")
ax.plot(sizes, [1000 * pass_times[1] * n for n in sizes], ":", label="n separate steps")
ax.set_xlabel("tokens fed in one pass")
ax.set_ylabel("ms")
ax.legend()
plt.show()

# %% [markdown]
# The dotted line is what n separate decode steps would cost. The gap between the two lines is
# the room speculative decoding works in: if the draft is cheap and often right, one pass
# yields several tokens for far less than the price of that many steps. How far below depends on
# the path and the device. On a CPU with minillm's kernels a one-token step is the leanest path
# there is (all the layers in one C call), while a pass of several tokens goes through the
# prompt's path, and a CPU core soon runs out of arithmetic: k tokens cost a few steps, not one.
# On a GPU the flat part of the curve reaches much further (far more arithmetic hides behind
# each weight read), and k tokens cost little more than one step.

# %% [markdown]
# ## 2 · The acceptance rule
#
# At one position the draft drew token x from its distribution q; the target's distribution
# there is p. The rule:
#
# - accept x with probability min(1, p(x) / q(x));
# - on rejection, draw a replacement from the **residual** r = max(0, p − q) / Σ max(0, p − q).
#
# Why the emitted token is distributed exactly as p. Let β = Σ_x min(p(x), q(x)), the chance of
# accepting. The chance of emitting y is
#
# P(y) = q(y) · min(1, p(y)/q(y)) + (1 − β) · r(y) = min(p(y), q(y)) + (1 − β) · r(y).
#
# Since p and q both sum to 1, Σ max(0, p − q) = 1 − Σ min(p, q) = 1 − β: the residual's
# normaliser cancels the (1 − β), leaving min(p(y), q(y)) + max(0, p(y) − q(y)) = p(y).
#
# Check it on a toy pair over six tokens, exactly first:

# %%
from minillm.course.checks.ch08_speculative import P, Q, chi_square_p_value
from minillm.speculative import residual_distribution

beta = torch.minimum(P, Q).sum()
emitted = torch.minimum(P, Q) + (1 - beta) * residual_distribution(P, Q)
print("p       ", [round(v, 3) for v in P.tolist()])
print("q       ", [round(v, 3) for v in Q.tolist()])
print("P(emit) ", [round(v, 3) for v in emitted.tolist()])
print(f"acceptance probability beta = {beta:.2f}; the algebra above, in numbers: P(emit) "
      f"equals p: {torch.allclose(emitted, P)}")

# %% [markdown]
# Now by drawing: run the rule many times and count which tokens come out. To judge whether
# counts follow a distribution we use **Pearson's chi-square test (卡方检验)**. For each token
# it compares the count observed with the count expected, (observed − expected)² / expected,
# and adds these up. Its **p-value** is the chance that draws truly from that distribution
# would land at least this far from it:
#
# - a p-value well above 0 (say 0.01 or more): the counts are what that distribution gives;
# - a p-value near 0 (1e-6 and below): the counts almost surely did not come from it.
#
# minillm's `accept_or_resample` runs the rule on a batch of rows at once:

# %%
show_source(accept_or_resample)

# %%
draws = 20_000 if CI else 100_000
g = torch.Generator().manual_seed(0)
drafted = torch.multinomial(Q, draws, replacement=True, generator=g)
tokens, accepted = accept_or_resample(P.expand(draws, -1), Q.expand(draws, -1), drafted, g)
counts = torch.bincount(tokens, minlength=len(P)).double()
print(f"{draws:,} draws: accepted {accepted.double().mean():.3f} (theory {beta:.3f})")
p_target, p_draft = chi_square_p_value(counts, P), chi_square_p_value(counts, Q)
print(f"chi-square p-value against the target p: {p_target:.3f}")
print(f"chi-square p-value against the draft q:  {p_draft:.1e}")
assert p_target > 1e-3 and p_draft < 1e-6  # the emitted tokens follow p, not q

# %%
fig, ax = plt.subplots(figsize=(6, 3))
x = torch.arange(len(P))
ax.bar(x - 0.27, Q, 0.27, label="draft q")
ax.bar(x, P, 0.27, label="target p")
ax.bar(x + 0.27, counts / draws, 0.27, label="emitted (measured)")
ax.set_xlabel("token")
ax.set_ylabel("probability")
ax.legend()
plt.show()

# %% [markdown]
# The draft over-proposes tokens 2, 4 and 5; the rule rejects just enough of them, and the
# residual puts the mass back on 0, 1 and 3. A better draft (q closer to p) raises β, the
# acceptance rate; it never changes what comes out.
#
# With k drafted tokens the rule runs left to right and stops at the first rejection. When all
# k pass, the target has already computed its distribution after the last one (same pass), so
# one more token comes free: the **bonus token (额外词元)**. A pass yields 1 to k + 1 tokens; if
# each draft passes independently with probability α, the expected number is
# (1 − α^(k+1)) / (1 − α).
#
# **Greedy decoding** is the special case where p and q are all on their argmax: accept the
# drafted token exactly when it is the target's argmax, otherwise emit the argmax. So greedy
# speculative decoding gives the plain greedy tokens, one for one.

# %%
from minillm.speculative import verify_greedy

show_source(verify_greedy)

# %% [markdown]
# ## 3 · Two drafts
#
# **Prompt lookup.** No model at all: take the last few tokens of the context, find their most
# recent earlier occurrence, and propose what followed. When the answer copies the prompt
# (editing a text, quoting a document, rewriting code) the guesses are right for long runs.

# %%
lookup = PromptLookupDraft(max_ngram=3)
show_source(PromptLookupDraft.lookup)
words = "the cat sat on the mat . the cat sat on".split()
ids = [{w: i for i, w in enumerate(dict.fromkeys(words))}[w] for w in words]
proposal = lookup.lookup(ids, 4)
print(" ".join(words), "->", [list(dict.fromkeys(words))[i] for i in proposal])

# %% [markdown]
# **A smaller model.** Any model with the same vocabulary can draft. Without a second model at
# hand we cut SmolLM2 itself short: `first_layers(model, n)` runs its first n of 30 layers, then
# its final norm and LM head, sharing the weights (an "early exit", 早退). How often does its
# top token agree with the full model's, on a text the model has not seen?

# %%
text = ("Speculative decoding lets a small draft model propose several tokens, which the large "
        "model then checks in a single forward pass. When the guesses are right, the large "
        "model produces several tokens for the cost of one step; when they are wrong, it "
        "simply keeps its own choice and the draft tries again.")
ids_t = torch.tensor([tokenizer.encode(text)], device=device)
with torch.inference_mode():
    full = model(ids_t)[0].argmax(-1)
    agreement = {n: (first_layers(model, n)(ids_t)[0].argmax(-1) == full).float().mean().item()
                 for n in tqdm([2, 4, 8, 12, 16, 20, 24, 28])}
for n, a in agreement.items():
    print(f"first {n:>2} layers: top token agrees {100 * a:5.1f}% of the time")

# %% [markdown]
# The layers were never trained to be read early, so a short prefix makes a poor guesser,
# while a long one costs nearly as much as the target. We keep that honest below: the
# first-layers draft is measured next to prompt lookup.

# %% [markdown]
# ## 4 · The loop: draft, verify, roll back
#
# The target's KV cache holds every token but the last. Each round feeds [last, d1, ..., dn]
# in one pass, gets n + 1 distributions, applies the rule, and then **crops** the cache
# (`KVCache.crop`) to forget the rejected drafts' keys and values.

# %%
from minillm.speculative import SpeculativeDecoder

show_source(SpeculativeDecoder.run)

# %% [markdown]
# One request from the *edit* task (correct a paragraph and write it out again), greedy,
# with plain decoding and with prompt lookup. The two runs feed the target different shapes
# (one token a step against k + 1 a pass), so they add the same products in different orders.
# As in lesson 03, `agree` says how their tokens are compared here:

# %%
from minillm.generation.agreement import agree, rule
from minillm.tools.bench.speculative import TASKS, compare, speedup_text, task_prompt

print(TASKS["edit"][:200], "...")
edit_ids = task_prompt(tokenizer, "edit")
new_tokens = 24 if CI else 48
plain = minillm.generate(model, tokenizer, edit_ids, max_new_tokens=new_tokens)
spec = speculative_generate(model, tokenizer, edit_ids, PromptLookupDraft(), k=4,
                            max_new_tokens=new_tokens)
print("comparing", rule(model))
print("same tokens:", agree(model, edit_ids, spec.token_ids, plain.token_ids))
print(spec.stats.summary())
print(repr(spec.text[:300]))

# %% [markdown]
# ## 5 · Acceptance and speed-up on three tasks
#
# `compare` times plain greedy decoding and speculative decoding for each draft and k, on the
# same prompt, in the same run, and checks with `agree` that they give the same tokens. The
# tasks: *edit* (the answer repeats the prompt), *summarise* (it partly copies) and *chat* (an
# open question: nothing to copy). The first-layers draft uses 8 of the 30 layers.

# %%
ks = [2, 4] if CI else [2, 4, 8]
drafts = {"prompt lookup": PromptLookupDraft(),
          "first 8 layers": ModelDraft(first_layers(model, 8))}
results = {}
for task in tqdm(TASKS):
    ids_task = task_prompt(tokenizer, task)
    rows = compare(model, tokenizer, ids_task, {"prompt lookup": drafts["prompt lookup"]}, ks,
                   new_tokens)
    rows += compare(model, tokenizer, ids_task, {"first 8 layers": drafts["first 8 layers"]},
                    [2], new_tokens)[1:]
    results[task] = rows
    for r in rows:
        if r["draft"] == "plain":
            print(f"{task:>9} {Label('plain decoding'):>19} {r['seconds']:6.2f} s")
            continue
        print(f"{task:>9} {Label(r['draft']):>15} k={r['k']} {r['seconds']:6.2f} s "
              f"speed-up {speedup_text(r)} accepted {100 * r['acceptance']:5.1f}% "
              f"tokens/pass {r['tokens_per_pass']:4.2f} same tokens={r['same_tokens']}")

# %%
assert all(r["same_tokens"] for rows in results.values() for r in rows)
fig, ax = plt.subplots(figsize=(6, 3.5))
for task, rows in results.items():
    look = [r for r in rows if r["draft"] == "prompt lookup" and not r["disturbed"]]
    ax.plot([r["k"] for r in look], [r["speedup"] for r in look], "o-", label=task)
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_xlabel("k (tokens drafted per round)")
ax.set_ylabel("speed-up over plain greedy")
ax.set_title("prompt lookup, SmolLM2-135M, this machine")
ax.legend()
plt.show()

# %% [markdown]
# ## 6 · When it does not help
#
# A round costs one target pass (more than a decode step, less than k of them: section 1) plus
# the draft's work, and yields 1 + (accepted drafts) tokens. Speculation loses when:
#
# - **the draft is usually wrong**: open chat gives prompt lookup nothing to copy, so it
#   proposes little and the passes are plain decode steps with extra bookkeeping;
# - **the draft is not cheap**: 8 of 30 layers plus the full LM head costs a sizeable share of a
#   target step, k times per round, while its guesses agree with the target only part of the
#   time;
# - **k is too large**: a rejection early in the run wastes the arithmetic spent on the rest;
# - **the hardware is already busy**: with large batches, decode is no longer bandwidth-bound,
#   and verifying k extra positions per sequence costs real time (serving engines lower k or
#   switch speculation off under load);
# - **a draft that is sure where the target is not**, or the other way round: β = Σ min(p, q)
#   measures how much the two distributions overlap. Temperature changes that overlap, but it
#   does not simply lower it: a higher temperature flattens *both* p and q, and as T grows they
#   both approach the uniform distribution, so β rises towards 1. At T → 0 both become one-hot:
#   β is 1 where their top tokens agree and 0 where not. In between, it depends on the pair.
#
# Measured with a first-24-layers draft on section 3's text, averaged over its positions:

# %%
with torch.inference_mode():
    target_logits = model(ids_t)[0].cpu().double()  # float64 on the CPU: Apple GPUs have none
    draft_logits = first_layers(model, 24)(ids_t)[0].cpu().double()
temperatures = [0.05, 0.5, 1.0, 2.0, 4.0, 16.0]
beta_at = {}
for T in temperatures:
    p_T, q_T = (torch.softmax(z / T, -1) for z in (target_logits, draft_logits))
    beta_at[T] = torch.minimum(p_T, q_T).sum(-1).mean().item()
    print(f"T = {T:>5}: acceptance probability beta = {beta_at[T]:.3f}")
print(f"top-token agreement of the same draft (section 3): {agreement[24]:.3f}; the lowest "
      f"beta here is at T = {min(beta_at, key=beta_at.get)}")
assert beta_at[16.0] > beta_at[1.0] and beta_at[16.0] > 0.8  # both flatten: beta -> 1
assert abs(beta_at[0.05] - agreement[24]) < 0.1  # near-greedy: beta ≈ top-token agreement

# %% [markdown]
# So the two ends are fixed: near greedy, β is the share of positions where the draft's top
# token is the target's; at a very high temperature both flatten and β approaches 1 (a uniform
# draft matches a uniform target). Between them β follows how the two distributions' shapes
# overlap, which is where the usual sampling temperatures sit. What a high temperature costs is
# the quality of the text, not the acceptance rate.
#
# The expected tokens per pass at the measured acceptance rate, (1 − α^(k+1)) / (1 − α), against
# what the runs gave (the formula assumes independent acceptances; real text comes in runs,
# copied stretches and free stretches):

# %%
for task, rows in results.items():
    for r in rows:
        if r["draft"] != "plain" and r["acceptance"] == r["acceptance"]:
            model_says = expected_tokens_per_pass(r["acceptance"], r["k"])
            print(f"{task:>9} {Label(r['draft']):>15} k={r['k']}: measured "
                  f"{r['tokens_per_pass']:4.2f} tokens/pass, formula {model_says:4.2f}")

# %% [markdown]
# ## 7 · Drafts built into the target: Medusa, EAGLE, MTP
#
# A separate draft model is a trade: small enough to be cheap means too small to guess well,
# and each drafted token still costs a forward pass of it. Since 2024 the fastest systems draft
# from the **target's own hidden state** instead, with a small trained part bolted on:
#
# - **Medusa** (Cai et al., 2024) adds a few **draft heads (草稿头)** on the last layer's hidden
#   state. Head i predicts the token i + 1 places ahead, all from the same hidden state, so one
#   target pass drafts every position at once: no draft loop. Each head offers its top few
#   tokens; the combinations form a tree, and the target checks the whole tree in one pass with
#   a tree-shaped attention mask.
# - **EAGLE** (Li et al., 2024) drafts one step at a time, but on features, not tokens. A
#   one-layer head takes the target's last hidden state and the embedding of the token just
#   chosen, predicts the next hidden state, and reads a token from it with the target's own LM
#   head. Hidden states are smoother to extrapolate than tokens, so the guesses are better.
#   EAGLE-2 grows the draft tree where the head is confident; EAGLE-3 feeds the head features
#   from a low, a middle and a high layer.
# - **Multi-token prediction (多词元预测, MTP)**, in DeepSeek-V3 (2024), is trained *with* the
#   model: extra modules (one transformer block each, sharing the embedding and the output head)
#   learn to predict the second, third, ... next token, which makes training signal denser. At
#   inference the first module can be dropped, or used as the draft.
#
# The target checks every draft in one pass, but not every check keeps its output. Section 2's
# two checks, greedy verification and the rule for sampling (**rejection sampling**), are exact:
# token for token, or in distribution. EAGLE checks its draft tree with rejection sampling,
# trying a position's candidates one after another, and is exact; vLLM and SGLang check MTP
# drafts the same way. Medusa as published samples with **typical acceptance** instead: a
# drafted token stays when the target's probability for it clears a threshold that falls as the
# target's distribution flattens. More drafts stay per pass, but the sampled text no longer
# follows the target's distribution (greedy Medusa is exact). All three need training, and none
# exists for SmolLM2. What this machine can show is the other half of the trade: what each kind
# of draft costs per token, and what an acceptance rate buys at that cost.

# %% [markdown]
# **What a drafted token costs.** Each cost below is measured against one decode step of the
# target (30 layers and the LM head, one token, KV cache of section 3's text): the two are
# timed interleaved, several times, and the cell prints the spread. A Medusa head is a small
# block plus an LM-head-sized projection, so the LM head alone stands in for it; EAGLE's head
# and one MTP module are one transformer layer plus the LM head, which `first_layers(model, 1)`
# is; `first_layers(model, 8)` is section 3's draft.

# %%
from minillm.measure import compare as interleaved, load_average

context = ids_t[:, :-1]


def decode_step(m, steps=4):
    """`steps` single-token decode steps of `m` after section 3's text, as one call."""
    cache = KVCache.for_model(m, 1, ids_t.shape[1])
    with torch.inference_mode():
        m(context, cache=cache)

    def run():
        with torch.inference_mode():
            for _ in range(steps):
                cache.crop(context.shape[1])
                m(ids_t[:, -1:], cache=cache)
    return run


def head_step(steps=4):
    hidden = torch.randn(1, 1, model.config.hidden_size, device=device)

    def run():
        with torch.inference_mode():
            for _ in range(steps):
                model.logits(hidden)
    return run


edit_context = edit_ids + spec.token_ids
drafters = {
    "LM head only (a Medusa head)": head_step(),
    "1 layer + LM head (EAGLE, MTP)": decode_step(first_layers(model, 1)),
    "8 layers + LM head (section 3)": decode_step(first_layers(model, 8)),
    "prompt lookup": lambda: [PromptLookupDraft().lookup(edit_context, 4) for _ in range(4)],
}
target_step = decode_step(model)
print(load_average())
costs = {name: interleaved(target_step, run, repeats=3 if CI else 5, device=device)
         for name, run in tqdm(drafters.items())}
width = max(columns(name) for name in costs)
for name, c in costs.items():
    print(f"{Label(name):<{width}} a drafted token against a target decode step: "
          f"{c.spread_text()}")

# %% [markdown]
# **What the acceptance rate buys.** A round drafts k tokens at a cost c each and verifies them
# in one target pass over k + 1 tokens, which costs v decode steps (section 1 measured v). With
# each drafted token accepted with probability α, the round yields (1 − α^(k+1)) / (1 − α)
# tokens, so the speed-up over plain decoding is
#
# speed-up = (1 − α^(k+1)) / (1 − α) / (k·c + v).
#
# `minillm.speculative.expected_speedup` computes it, and `break_even_acceptance` finds the α at
# which a draft starts to pay:

# %%
import numpy as np

from minillm.speculative import break_even_acceptance, expected_speedup

show_source(expected_speedup)


def verify_cost(k):
    """What section 1 measured for a pass over k + 1 tokens, in one-token steps."""
    return float(np.interp(k + 1, sizes, [pass_times[n] / pass_times[1] for n in sizes]))


k_chart = 4
alphas = np.linspace(0, 1, 101)
fig, ax = plt.subplots(figsize=(6.5, 4))
for name, c in costs.items():
    curve = [expected_speedup(a, k_chart, c.ratio, verify_cost(k_chart)) for a in alphas]
    ax.plot(alphas, curve, label=f"{name}: c = {c.ratio:.3f}")
    even = break_even_acceptance(k_chart, c.ratio, verify_cost(k_chart))
    print(f"{Label(name):<{width}} pays off above alpha = "
          + (f"{even:.2f}" if even is not None else "never (k + 1 tokens cost more)"))
look = [(task, r) for task, rows in results.items() for r in rows
        if r["draft"] == "prompt lookup" and r["k"] == k_chart]
ax.plot([r["acceptance"] for _, r in look], [r["speedup"] for _, r in look], "k*",
        markersize=10, label=f"prompt lookup, measured (section 5, k = {k_chart})")
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_xlabel("acceptance rate alpha")
ax.set_ylabel("speed-up over plain decoding")
ax.set_title(f"k = {k_chart}: the formula with costs measured on {device}")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# The curves share one shape: with k = 4 a pass yields at most 5 tokens, and the draft's cost
# decides how much of that is left. The stars are section 5's runs, placed by their measured
# acceptance rate. The formula against every run of section 5, with its measured α, c and v:

# %%
lookup_cost = costs["prompt lookup"].ratio
layers_cost = costs["8 layers + LM head (section 3)"].ratio
for task, rows in results.items():
    for r in rows:
        if r["draft"] == "plain" or r["acceptance"] != r["acceptance"]:  # NaN: nothing drafted
            continue
        c = lookup_cost if r["draft"] == "prompt lookup" else layers_cost
        predicted = expected_speedup(r["acceptance"], r["k"], c, verify_cost(r["k"]))
        print(f"{task:>9} {Label(r['draft']):>15} k={r['k']}: alpha {r['acceptance']:.2f}, "
              f"measured {speedup_text(r)}, formula {predicted:4.2f}x")

# %% [markdown]
# The formula is a guide, not a forecast: it assumes every round drafts k tokens and each is
# accepted independently. Prompt lookup does neither. Where the context has no earlier
# match it drafts nothing, and where it copies, it is right for long stretches. Over the rounds
# of the *edit* run that drafted all k tokens, how many did each accept, against what
# independent acceptances at the same α would give?

# %%
from minillm.speculative import accepted_per_round

edit_row = next(r for r in results["edit"]
                if r["draft"] == "prompt lookup" and r["k"] == k_chart)
full = [a for a, p in zip(edit_row["accepted_per_pass"], edit_row["proposed_per_pass"])
        if p == k_chart]
alpha_full = sum(full) / (k_chart * len(full))
measured_share = [full.count(m) / len(full) for m in range(k_chart + 1)]
independent = accepted_per_round(alpha_full, k_chart)
print(f"{len(full)} of {len(edit_row['proposed_per_pass'])} rounds drafted {k_chart} tokens; "
      f"they accepted alpha = {alpha_full:.2f} of them")
for m in range(k_chart + 1):
    print(f"  accepted {m}: {100 * measured_share[m]:5.1f}% of rounds "
          f"(independent acceptances: {100 * independent[m]:5.1f}%)")
ends = measured_share[0] + measured_share[k_chart]
assert ends > independent[0] + independent[k_chart]  # all or nothing, more than chance

# %% [markdown]
# Copying is all or nothing: a round either follows the text it copies to the end or misses at
# once, more often than independent guesses would. A trained draft head sits nearer the
# formula's picture, though its acceptance falls with each step ahead: guessing three tokens
# ahead is harder than guessing the next.
#
# The published figures, read with the same formula (they are the papers' measurements on GPUs,
# not ours): DeepSeek-V3 reports its one MTP module's token accepted 85–90% of the time, and
# 1.8 times the tokens per second. With k = 1 and a nearly free draft, the formula gives:

# %%
for a in (0.85, 0.90):
    print(f"alpha = {a:.2f}, k = 1, c = 0, v = 1: {expected_speedup(a, 1, 0.0):.2f}x "
          "(printed arithmetic, not a measurement)")

# %% [markdown]
# The formula's 1.85–1.90 leaves out the draft's cost (c = 0) and the longer verify pass
# (v = 1); the reported 1.8 includes both. Medusa reports 2.2–3.6 times on Vicuna chat models
# and EAGLE 2.7–3.5 times on LLaMA2-Chat 70B, with draft trees: several candidates per position
# raise the chance that one of them is accepted. On a model as small as SmolLM2 the LM head is
# a large share of every step (the cell above measured it), so a head-based draft costs more
# here than on a 70B model, where one layer of 80 and the head are a small share of a step.

# %% [markdown]
# ## 8 · Several guesses per position: draft trees
#
# A chain draft offers one guess per position, and a miss at position i wastes every guess
# after it. The published speed-ups of section 7 came with **draft trees (草稿树)**: several
# candidates per position, each with its own continuation. Every path from the root (the last
# token of the context) is one candidate continuation, and paths share their common prefixes.
# The target still checks them all in **one** pass:
#
# - the input is the root and then every node, parents before their children;
# - a node's position is the root's plus its depth: siblings share a position, since each is
#   a guess at the same next token;
# - the **tree attention mask (树形注意力掩码)** lets each node see the cache, the root, its
#   ancestors and itself, and nothing on another branch.
#
# So each node's logits are what a chain pass over its own path would give. A tree of three
# paths, [10, 11, 12], [10, 13] and [14], with nothing cached (x: may attend):

# %%
from minillm.speculative import DraftTree, tree_forward, verify_tree_greedy

show_source(DraftTree.attention_mask)
demo = DraftTree.from_paths([[10, 11, 12], [10, 13], [14]])
print("nodes   ", demo.tokens, "\nparents ", demo.parents, "\ndepths  ", demo.depths())
print("        root " + " ".join(f"{t:>2}" for t in demo.tokens))
for name, row in zip(["root"] + demo.tokens, demo.attention_mask(0)[0, 0].tolist()):
    print(f"{name:>7} " + "   ".join("x" if seen else "." for seen in row))

# %% [markdown]
# The check that the mask is right: one tree pass on SmolLM2, after section 3's text, against
# a separate pass over each node's own path. Same logits, up to the rounding of a pass of
# another shape:

# %%
from minillm.speculative import SuffixDraft

context_ids = ids_t[0].tolist()
tree = DraftTree.from_paths([[int(full[-1])], context_ids[5:8],
                             context_ids[5:7] + [context_ids[20]], [context_ids[30]]])
cache = KVCache.for_model(model, 1, len(context_ids) + len(tree))
with torch.inference_mode():
    model(ids_t[:, :-1], cache=cache)
    tree_logits = tree_forward(model, cache, context_ids[-1], tree)
    alone = [model(torch.tensor([context_ids + [tree.tokens[n] for n in tree.path(i)]],
                                device=device))[0, -1].float() for i in range(len(tree))]
gap = max((tree_logits[i + 1] - a).abs().max().item() for i, a in enumerate(alone))
same_top = all(tree_logits[i + 1].argmax() == a.argmax() for i, a in enumerate(alone))
print(f"{len(tree)} nodes in one pass: largest logit difference from their own passes "
      f"{gap:.1e}, same top token at every node: {same_top}")
assert same_top and gap < 1e-2

# %% [markdown]
# **Greedy verification of a tree** walks down from the root: take the target's argmax there;
# if a child holds it, accept that child and go on from it; otherwise emit the argmax and stop.
# The accepted nodes are scattered through the pass, so their keys and values are moved to sit
# right after the context (`keep_path`) before the rest of the tree is cropped away.
#
# **Suffix drafts (后缀草稿).** Prompt lookup copies what followed the *most recent* occurrence of the
# context's last n-gram. **SuffixDecoding** (Oliaro et al., 2024) keeps a suffix tree of the
# prompt and of earlier outputs and proposes from *every* occurrence of the longest matching
# suffix, as a tree weighted by how often each continuation occurred. minillm's `SuffixDraft`
# does the same with a scan instead of a suffix tree, keeping the `budget` most frequent
# prefixes:

# %%
from minillm.speculative import tree_speculative_generate

show_source(SuffixDraft.tree)

# %% [markdown]
# The three tasks of section 5, greedy: plain decoding, prompt lookup as a chain (k = 4) and a
# suffix tree of up to 4, 8 or 16 nodes. Tokens per target pass are counts; the times are one
# run each:

# %%
budgets = [8] if CI else [4, 8, 16]


def run_name(key):
    """'plain', 'chain' or a tree's budget, as the table names it."""
    return {"plain": "plain", "chain": "prompt lookup, k = 4"}.get(key) \
        or f"suffix tree, {key} nodes"


tree_rows = {}
print(load_average())
for task in tqdm(["edit"] if CI else TASKS):
    ids_task = task_prompt(tokenizer, task)
    with Timer(device) as clock:
        plain_task = minillm.generate(model, tokenizer, ids_task, max_new_tokens=new_tokens)
    runs = {"plain": (plain_task, clock.seconds)}
    with Timer(device) as clock:
        chain = speculative_generate(model, tokenizer, ids_task, PromptLookupDraft(), k=4,
                                     max_new_tokens=new_tokens)
    runs["chain"] = (chain, clock.seconds)
    for budget in budgets:
        with Timer(device) as clock:
            grown = tree_speculative_generate(model, tokenizer, ids_task, SuffixDraft(),
                                              budget=budget, max_new_tokens=new_tokens)
        runs[budget] = (grown, clock.seconds)
    tree_rows[task] = runs
    for key, (out, seconds) in runs.items():
        per_pass = out.stats.tokens_per_pass if key != "plain" else 1.0
        same = agree(model, ids_task, out.token_ids, plain_task.token_ids)
        print(f"{task:>9} {Label(run_name(key)):>22}: {per_pass:4.2f} tokens/pass, "
              f"{seconds:5.2f} s, same tokens as plain: {same}")
assert all(agree(model, task_prompt(tokenizer, task), out.token_ids,
                 runs["plain"][0].token_ids)
           for task, runs in tree_rows.items() for out, _ in runs.values())
edit_tree = tree_rows["edit"][budgets[-1]][0].stats.tokens_per_pass
edit_chain = tree_rows["edit"]["chain"][0].stats.tokens_per_pass
print(f"edit: the tree of {budgets[-1]} nodes made {edit_tree:.2f} tokens per pass, the chain "
      f"{edit_chain:.2f}: " + ("more per pass" if edit_tree > edit_chain else "no more per pass"))

# %% [markdown]
# Every run gives the plain tokens. Where the text repeats itself with variations (the edit
# task), the tree keeps the variants the chain cannot, and each pass yields more tokens. Where
# there is nothing to copy (chat), neither drafts anything useful, and the passes over guesses
# the target rejects cost time: both run slower than plain decoding. Whether more tokens per pass
# is also more speed depends on section 1's curve: every node is one more row in the verify
# pass. On a CPU a pass of 17 tokens costs several decode steps; on a GPU the flat part of the
# curve reaches past 64 rows, which is why EAGLE and Medusa verify trees of about 60 nodes
# there, and why serving engines shrink the tree, or drop it, when a large batch already fills
# the arithmetic (section 6).
#
# **Sampling with several candidates: the multi-draft rule (多草稿接受规则).** At one position the
# candidates x₁, ..., x_m are tried in turn (SpecInfer, Miao et al., 2024). Candidate i is
# accepted with probability min(1, r(xᵢ) / q(xᵢ)), where r starts as the target's p; on a
# rejection r becomes the residual normalise(max(0, r − q)), and the next candidate is tried
# against it. When all are rejected, the token is drawn from the last residual. Each step is
# section 2's rule applied to the r it starts from, so each keeps that distribution, and the
# token comes out distributed as p. For a deterministic draft (prompt lookup, a suffix tree) q
# is all on the candidate itself: accept with probability r(xᵢ), else remove xᵢ from r and
# renormalise.

# %%
from minillm.speculative import acceptance_with_candidates, choose_child

show_source(choose_child)

# %% [markdown]
# On section 2's toy pair, with 1, 2 and 3 candidates drawn independently from q:

# %%
trials = 4_000 if CI else 20_000
g = torch.Generator().manual_seed(1)
for m in (1, 2, 3):
    drawn = torch.multinomial(Q, trials * m, replacement=True, generator=g).view(trials, m)
    picks = [choose_child(P, row.tolist(), Q, g) for row in drawn]
    counts = torch.bincount(torch.tensor([token for token, _ in picks]), minlength=len(P))
    accepted_share = sum(index is not None for _, index in picks) / trials
    p_value = chi_square_p_value(counts.double(), P)
    exact = acceptance_with_candidates(P, Q, m)
    print(f"m = {m}: accepted {accepted_share:.3f} (exactly {exact:.3f}), chi-square p-value "
          f"against p {p_value:.3f}")
    assert p_value > 1e-3

# %% [markdown]
# More candidates, more acceptances, and the output still follows p. On the real model, with
# section 6's first-24-layers draft at temperature 1, the exact acceptance probability averaged
# over section 3's text:

# %%
p_text, q_text = torch.softmax(target_logits, -1), torch.softmax(draft_logits, -1)
by_m = {m: sum(acceptance_with_candidates(p, q, m) for p, q in zip(p_text, q_text)) / len(p_text)
        for m in (1, 2, 4, 8)}
for m, a in by_m.items():
    print(f"m = {m}: accepted {100 * a:4.1f}% of the time")
assert all(by_m[a] <= by_m[b] + 1e-9 for a, b in zip(by_m, list(by_m)[1:]))

# %% [markdown]
# Each extra candidate takes some of what the last one left, so the gain shrinks as m grows.
# That is the shape EAGLE-2 exploits: it spends the tree's nodes where the draft is unsure
# (several candidates) and grows deep where it is sure (one candidate). Medusa's typical
# acceptance (section 7) accepts more per pass than this rule, and pays with the target's
# distribution; the multi-draft rule keeps it exactly.

# %% [markdown]
# ## Closing note
#
# The figures of this run (greedy decoding, so every speculative output is the plain output):

# %%
def line(task):
    rows = [r for r in results[task] if r["draft"] == "prompt lookup" and not r["disturbed"]]
    best = max(rows, key=lambda r: r["speedup"], default=None)
    layer = [r for r in results[task] if r["draft"] == "first 8 layers"][0]
    layer_text = (f"the first-8-layers draft accepted {100 * layer['acceptance']:.0f}% at k=2, "
                  f"{speedup_text(layer).strip()}.")
    if best is None:  # every prompt lookup row broke its bound: no speed-up is a finding
        return f"- **{task}**: prompt lookup's timings were all disturbed; {layer_text}"
    return (f"- **{task}**: prompt lookup accepted {100 * best['acceptance']:.0f}% of its "
            f"drafts at k={best['k']}, {best['tokens_per_pass']:.2f} tokens per target pass, "
            f"**{best['speedup']:.2f}x** the speed of plain decoding; {layer_text}")


head_cost = costs["1 layer + LM head (EAGLE, MTP)"].ratio
display(Markdown("\n".join(line(t) for t in results) + f"\n\nVerifying 8 tokens in one pass "
                 f"cost {pass_times[8] / pass_times[1]:.1f}x a one-token step on {device} "
                 f"({new_tokens} new tokens per request; timings from a single run, noisy on a "
                 f"shared machine). A drafted token cost {head_cost:.2f} of a target step from "
                 f"a one-layer head (EAGLE, MTP) against {layers_cost:.2f} from the first "
                 f"8 layers."))

# %% [markdown]
# Prompt lookup is free and exact, and it pays off exactly where the output repeats the
# input; an early-exit draft of an untrained prefix rarely pays off on a CPU. Real systems
# use a separately trained small model of the same family, or a draft trained on the target's
# hidden states (Medusa, EAGLE, MTP), and tune k to the acceptance rate: section 7's formula
# says where each kind of draft starts to pay.
#
# `scripts/bench_speculative.py` runs the same comparison with more tokens and all k and saves
# the chart; the exercise asks you to write prompt lookup, greedy verification and the
# acceptance rule yourself.
