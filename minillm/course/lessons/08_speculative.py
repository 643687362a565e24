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
# 1. why verifying k tokens costs about one decode step;
# 2. the acceptance rule, derived and checked numerically;
# 3. two drafts: prompt lookup (提示词查找) and the target's own first layers;
# 4. the draft-and-verify loop with KV-cache rollback (回滚);
# 5. acceptance rates (接受率) and speed-ups on three tasks, and when it does not help.

# %%
import os

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display
from tqdm.auto import tqdm

import minillm
from minillm.course import show_source
from minillm.utils.devices import Timer
from minillm.generation.kv_cache import KVCache
from minillm.speculative import (ModelDraft, PromptLookupDraft, accept_or_resample,
                                 expected_tokens_per_pass, first_layers, speculative_generate)

CI = bool(os.environ.get("CI"))  # smaller runs under `make test` in CI
torch.manual_seed(0)
device = minillm.pick_device("auto")
model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device)
print(f"device {device}, {torch.get_num_threads()} threads, "
      f"{model.config.n_layers} layers, vocabulary {model.config.vocab_size:,}")

# %% [markdown]
# ## 1 · Verifying k tokens costs about one decode step
#
# Fill a KV cache (KV 缓存) with a 64-token context, then time one forward pass that feeds n new
# tokens at once, for n = 1 (a decode step) up to 16. Each pass reads the same weights; only the
# arithmetic grows with n.

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
pass_times = {n: pass_seconds(n, repeats=3 if CI else 7) for n in tqdm(sizes)}
for n, t in pass_times.items():
    print(f"{n:>2} new tokens: {1000 * t:6.1f} ms per pass "
          f"({t / pass_times[1]:.2f}x a one-token step)")

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
# yields several tokens for little more than the price of one. (On a GPU the flat part of the
# curve reaches much further: far more arithmetic hides behind each weight read.)

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
print(f"acceptance probability beta = {beta:.2f}; P(emit) equals p: "
      f"{torch.allclose(emitted, P)}")

# %% [markdown]
# Now by drawing: minillm's `accept_or_resample` runs the rule on a batch of rows at once.

# %%
show_source(accept_or_resample)

# %%
draws = 20_000 if CI else 100_000
g = torch.Generator().manual_seed(0)
drafted = torch.multinomial(Q, draws, replacement=True, generator=g)
tokens, accepted = accept_or_resample(P.expand(draws, -1), Q.expand(draws, -1), drafted, g)
counts = torch.bincount(tokens, minlength=len(P)).double()
print(f"{draws:,} draws: accepted {accepted.double().mean():.3f} (theory {beta:.3f})")
print(f"chi-square p-value against the target p: {chi_square_p_value(counts, P):.3f}")
print(f"chi-square p-value against the draft q:  {chi_square_p_value(counts, Q):.1e}")

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
# with plain decoding and with prompt lookup:

# %%
from minillm.tools.bench.speculative import TASKS, compare, task_prompt

print(TASKS["edit"][:200], "...")
edit_ids = task_prompt(tokenizer, "edit")
new_tokens = 24 if CI else 64
plain = minillm.generate(model, tokenizer, edit_ids, max_new_tokens=new_tokens)
spec = speculative_generate(model, tokenizer, edit_ids, PromptLookupDraft(), k=4,
                            max_new_tokens=new_tokens)
print("identical tokens:", spec.token_ids == plain.token_ids)
print(spec.stats.summary())
print(repr(spec.text[:300]))

# %% [markdown]
# ## 5 · Acceptance and speed-up on three tasks
#
# `compare` times plain greedy decoding and speculative decoding for each draft and k, on the
# same prompt, in the same run, and checks the tokens are identical. The tasks: *edit* (the
# answer repeats the prompt), *summarise* (it partly copies) and *chat* (an open question:
# nothing to copy). The first-layers draft uses 8 of the 30 layers.

# %%
ks = [2, 4] if CI else [1, 2, 4, 8]
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
        print(f"{task:>9} {r['draft']:>15} k={r['k']} {r['seconds']:6.2f} s "
              f"speed-up {r['speedup']:4.2f}x accepted {100 * r['acceptance']:5.1f}% "
              f"tokens/pass {r['tokens_per_pass']:4.2f} identical={r['identical']}")

# %%
assert all(r["identical"] for rows in results.values() for r in rows)
fig, ax = plt.subplots(figsize=(6, 3.5))
for task, rows in results.items():
    look = [r for r in rows if r["draft"] == "prompt lookup"]
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
# A round costs one target pass (a little more than a decode step, section 1) plus the draft's
# work, and yields 1 + (accepted drafts) tokens. Speculation loses when:
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
            print(f"{task:>9} {r['draft']:>15} k={r['k']}: measured "
                  f"{r['tokens_per_pass']:4.2f} tokens/pass, formula {model_says:4.2f}")

# %% [markdown]
# ## Closing note
#
# The figures of this run (greedy decoding, so every speculative output is the plain output):

# %%
def line(task):
    rows = [r for r in results[task] if r["draft"] == "prompt lookup"]
    best = max(rows, key=lambda r: r["speedup"])
    layer = [r for r in results[task] if r["draft"] == "first 8 layers"][0]
    return (f"- **{task}**: prompt lookup accepted {100 * best['acceptance']:.0f}% of its "
            f"drafts at k={best['k']}, {best['tokens_per_pass']:.2f} tokens per target pass, "
            f"**{best['speedup']:.2f}x** the speed of plain decoding; the first-8-layers draft "
            f"accepted {100 * layer['acceptance']:.0f}% at k=2, {layer['speedup']:.2f}x.")


display(Markdown("\n".join(line(t) for t in results) + f"\n\nVerifying 8 tokens in one pass "
                 f"cost {pass_times[8] / pass_times[1]:.1f}x a one-token step on {device} "
                 f"({new_tokens} new tokens per request; timings from a single run, noisy on a "
                 f"shared machine)."))

# %% [markdown]
# Prompt lookup is free and exact, and it pays off exactly where the output repeats the
# input; an early-exit draft of an untrained prefix rarely pays off on a CPU. Real systems
# use a separately trained small model of the same family, extra prediction heads (Medusa),
# or a draft trained on the target's hidden states (EAGLE), and tune k to the acceptance rate.
#
# `scripts/bench_speculative.py` runs the same comparison with more tokens and all k and saves
# the chart; the exercise asks you to write prompt lookup, greedy verification and the
# acceptance rule yourself.
