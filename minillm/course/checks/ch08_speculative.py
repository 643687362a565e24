"""Checkers for exercises/08_speculative.ipynb, and the chi-square test they (and the tests) use.

- `prompt_lookup(ids, k, max_ngram)`: the draft that copies from the context, compared with
  `minillm.speculative.PromptLookupDraft.lookup`;
- `verify_greedy(target_scores, draft_tokens)`: greedy verification with its bonus token, compared
  with `minillm.speculative.acceptance.verify_greedy`;
- `accept_step(p, q, draft_token, generator)`: the sampled acceptance rule, tested by its
  statistics (the tokens follow p) and by its use of the generator it is given;
- `tree_mask(parents, cached)`: a draft tree's attention mask, compared with
  `minillm.speculative.DraftTree.attention_mask`.

Every message says both languages side by side (`say`), chosen by the notebook's set_language.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ...speculative.acceptance import verify_greedy
from ...speculative.drafts import PromptLookupDraft
from ..language import say
from ._base import (CheckFailed, as_int, call, checker, end_check, end_variant_check, expect,
                    first_failure, passed, short, with_hint)

# A toy target p and draft q over six tokens (the lesson uses the same pair).
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)
Q = torch.tensor([0.10, 0.15, 0.30, 0.05, 0.25, 0.15], dtype=torch.float64)


@dataclass(frozen=True)
class _AcceptCase:
    """One scenario of check_accept_step: the pair (p, q); a draft token with q <= p; a target
    that rules a token out (p_zero, q_zero, that token); the seeds; the tokens drafted in the
    generator test (ones the draft over-proposes, so often rejected)."""

    p: torch.Tensor
    q: torch.Tensor
    sure_token: int
    p_zero: torch.Tensor
    q_zero: torch.Tensor
    zero_token: int
    seed: int
    run_seeds: tuple  # (generator seed, global seed, the other global seed, the other generator)
    drafted: tuple


def _f64(values):
    return torch.tensor(values, dtype=torch.float64)


ACCEPT_CASE = _AcceptCase(P, Q, 0, _f64([0.0, 0.5, 0.5]), _f64([0.6, 0.2, 0.2]), 0, 0,
                          (123, 0, 1, 456), (2, 4, 5, 2, 4, 1))
HIDDEN_ACCEPT_CASE = _AcceptCase(
    _f64([0.05, 0.30, 0.20, 0.35, 0.10]), _f64([0.25, 0.10, 0.30, 0.15, 0.20]), 3,
    _f64([0.3, 0.0, 0.1, 0.6]), _f64([0.1, 0.5, 0.3, 0.1]), 1, 7, (321, 2, 3, 654),
    (0, 4, 2, 0, 2, 4, 0))


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test: the chance of counts at least this far from `probs` if they
    were drawn from `probs`. Near 0: the counts do not follow `probs`. A count in a cell of
    probability 0 gives 0."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    if counts.shape != probs.shape:
        raise ValueError(say("counts and probs must have the same shape, got {counts} and "
                             "{probs}", "counts 与 probs 的形状必须相同，得到的是 {counts} 和 "
                             "{probs}", counts=tuple(counts.shape), probs=tuple(probs.shape)))
    if (counts[probs == 0] > 0).any():
        return 0.0
    keep = probs > 0
    expected = counts.sum() * probs[keep] / probs[keep].sum()
    statistic = ((counts[keep] - expected) ** 2 / expected).sum()
    df = int(keep.sum()) - 1
    if df < 1:
        return 1.0
    # the chi-square survival function: the regularised upper incomplete gamma function
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         statistic / 2))


def _one(accept_step, p, q, token, generator):
    try:
        got = call(accept_step, p, q, token, generator,
                   what=f"accept_step(p, q, draft_token={token}, generator)")
    except CheckFailed as failure:
        if failure.__cause__ is None:  # not the learner's own exception
            raise
        raise CheckFailed(str(failure) + _why_it_raised(failure.__cause__, p, q)
                          ) from failure.__cause__
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed(say("accept_step returned {kind} {got!r}; return a pair "
                              "(token, accepted): the token to emit and whether the draft's token "
                              "was accepted",
                              "accept_step 返回了 {kind} {got!r}；请返回一对 (token, accepted)："
                              "要输出的词元，以及草稿的词元是否被接受",
                              kind=type(got).__name__, got=got))
    token_out, accepted = got
    if isinstance(token_out, torch.Tensor) and token_out.numel() == 1:
        token_out = int(token_out)
    if isinstance(accepted, torch.Tensor) and accepted.numel() == 1:
        accepted = bool(accepted)
    if not isinstance(token_out, int) or isinstance(token_out, bool):
        raise CheckFailed(say("the token accept_step returned is {kind} {got!r}; return an int "
                              "token id (int(tensor) converts one)",
                              "accept_step 返回的词元是 {kind} {got!r}；请返回 int 类型的词元 id"
                              "（int(tensor) 可以转换）",
                              kind=type(token_out).__name__, got=token_out))
    if not isinstance(accepted, bool):
        raise CheckFailed(say("`accepted` is {kind} {got!r}; return True or False",
                              "`accepted` 是 {kind} {got!r}；请返回 True 或 False",
                              kind=type(accepted).__name__, got=accepted))
    expect(0 <= token_out < len(p),
           say("accept_step returned token {got}, outside the vocabulary 0..{last}",
               "accept_step 返回了词元 {got}，超出了词表的范围 0..{last}",
               got=token_out, last=len(p) - 1))
    if accepted and token_out != token:
        raise CheckFailed(say("accept_step said the draft token {token} was accepted but "
                              "returned token {got}; an accepted draft token is emitted as it is",
                              "accept_step 说草稿词元 {token} 被接受了，返回的却是词元 {got}；"
                              "被接受的草稿词元应原样输出",
                              token=token, got=token_out))
    return token_out, accepted


def _why_it_raised(error: Exception, p, q) -> str:
    """What the case tells about an exception raised by the learner's accept_step: torch's
    multinomial refusing the residual, or else what the function was given."""
    words = str(error)
    if "multinomial" in words or "probability" in words:
        if not bool((p > q).any()):
            return say(". Here q equals p, so every draft token is accepted (min(1, p(x)/q(x)) "
                       "= 1) and the residual max(0, p - q) is all zeros, which "
                       "torch.multinomial cannot draw from: compute and draw from the residual "
                       "only after a rejection",
                       "。这里 q 与 p 相同，所以每个草稿词元都会被接受（min(1, p(x)/q(x)) = 1），"
                       "而残差 max(0, p - q) 全为 0，torch.multinomial 无法从中抽取：只在拒绝"
                       "之后才计算残差并从中抽取")
        return say(". torch.multinomial needs weights that are not negative and not all zero: "
                   "the residual is torch.clamp(p - q, min=0), divided by its sum (p - q itself "
                   "has negative entries and sums to 0)",
                   "。torch.multinomial 要求权重不能为负、也不能全为 0：残差是 "
                   "torch.clamp(p - q, min=0) 再除以它的和（p - q 本身有负数，而且和为 0）")
    return say(". It is called with p and q, 1-D float64 tensors that each sum to 1, draft_token "
               "an int and generator a torch.Generator: draw u = torch.rand((), "
               "generator=generator)",
               "。调用它时，p 和 q 是各自和为 1 的一维 float64 张量，draft_token 是 int，"
               "generator 是一个 torch.Generator：用 u = torch.rand((), generator=generator) "
               "抽取 u")


@checker
def check_accept_step(accept_step, draws: int = 10_000, *, hidden=False) -> None:
    """`accept_step(p, q, draft_token, generator) -> (token, accepted)` must emit tokens that
    follow the target distribution p, whatever the draft q."""
    case = HIDDEN_ACCEPT_CASE if hidden else ACCEPT_CASE
    p, q = case.p, case.q
    g = torch.Generator().manual_seed(case.seed)
    # 1. a draft that agrees with the target is always accepted
    for token in range(len(p)):
        _, accepted = _one(accept_step, p, p, token, g)
        expect(accepted, say("with q equal to p, accept_step rejected draft token {token}; when "
                             "q(x) <= p(x) the acceptance probability min(1, p(x)/q(x)) is 1",
                             "q 与 p 相同时，accept_step 拒绝了草稿词元 {token}；q(x) <= p(x) "
                             "时接受概率 min(1, p(x)/q(x)) 等于 1", token=token))
    # 2. q(x) <= p(x): always accepted
    x = case.sure_token
    px, qx = float(p[x]), float(q[x])
    for _ in range(50):
        _, accepted = _one(accept_step, p, q, x, g)
        expect(accepted, say("draft token {x} has p = {px:.2f} >= q = {qx:.2f}, so it must always "
                             "be accepted (probability min(1, {px:.2f}/{qx:.2f}) = 1), but it was "
                             "rejected",
                             "草稿词元 {x} 的 p = {px:.2f} >= q = {qx:.2f}，应当总被接受"
                             "（概率 min(1, {px:.2f}/{qx:.2f}) = 1），它却被拒绝了",
                             x=x, px=px, qx=qx))
    # 3. a token the target rules out is never emitted
    p0, q0, zero = case.p_zero, case.q_zero, case.zero_token
    for _ in range(50):
        token, accepted = _one(accept_step, p0, q0, zero, g)
        expect(not accepted and token != zero,
               say("p = {p} gives token {zero} probability 0, so draft token {zero} must be "
                   "rejected and a different token drawn; got token {token}, accepted={accepted} "
                   "(a rejected token is drawn from max(0, p - q), normalised, which has no mass "
                   "where p is 0)",
                   "p = {p} 给词元 {zero} 的概率是 0，所以草稿词元 {zero} 必须被拒绝，并另抽一个"
                   "词元；得到的却是词元 {token}，accepted={accepted}（被拒绝后从归一化的 "
                   "max(0, p - q) 里抽取，它在 p 为 0 的地方没有概率质量）",
                   p=p0.tolist(), zero=zero, token=token, accepted=accepted))
    # 4. every draw comes from the generator it is given
    with torch.random.fork_rng():
        _check_generator_use(accept_step, case)
    # 5. the statistics: tokens follow p, the acceptance rate is sum min(p, q)
    counts = torch.zeros(len(p), dtype=torch.float64)
    n_accepted = 0
    drafted = torch.multinomial(q, draws, replacement=True, generator=g).tolist()
    for x in drafted:
        token, accepted = _one(accept_step, p, q, x, g)
        counts[token] += 1
        n_accepted += accepted
    freq = [round(c / draws, 3) for c in counts.tolist()]
    beta = float(torch.minimum(p, q).sum())
    rate = n_accepted / draws
    if chi_square_p_value(counts, p) > 1e-4:
        expect(abs(rate - beta) < 0.03,
               say("the tokens follow p, but {rate:.1%} of the drafts were accepted; the rule "
                   "accepts sum_x min(p(x), q(x)) = {beta:.0%} of them",
                   "输出的词元服从 p，但只有 {rate:.1%} 的草稿被接受；接受规则应接受其中的 "
                   "sum_x min(p(x), q(x)) = {beta:.0%}", rate=rate, beta=beta))
        passed("accept_step", 5)
        print(say("   {draws} draws: frequencies {freq}, target p {p}; "
                  "{rate:.1%} accepted (theory {beta:.0%})",
                  "   抽取 {draws} 次：频率 {freq}，目标分布 p {p}；"
                  "接受了 {rate:.1%}（理论值 {beta:.0%}）",
                  draws=draws, freq=freq, p=p.tolist(), rate=rate, beta=beta))
        return
    if chi_square_p_value(counts, q) > 1e-4:
        raise CheckFailed(say("the emitted tokens follow the draft q, not the target p: "
                              "frequencies {freq}, q = {q}. Accept the draft token only "
                              "with probability min(1, p(x)/q(x)); otherwise draw from "
                              "max(0, p - q), normalised",
                              "输出的词元服从的是草稿分布 q，而不是目标分布 p：频率 {freq}，"
                              "q = {q}。草稿词元只能以概率 min(1, p(x)/q(x)) 接受；否则从归一化"
                              "的 max(0, p - q) 里抽取", freq=freq, q=q.tolist()))
    from_p = torch.minimum(p, q) + (1 - beta) * p
    if chi_square_p_value(counts, from_p) > 1e-4:
        raise CheckFailed(say("the acceptance looks right, but after a rejection the new token "
                              "seems drawn from p itself: frequencies {freq}, target {p}. "
                              "Draw it from the residual max(0, p - q), normalised to sum to 1: "
                              "p's mass that the accepted draft tokens did not already cover",
                              "接受这一步看起来是对的，但拒绝之后的新词元似乎是直接从 p 里抽的："
                              "频率 {freq}，目标 {p}。应当从残差分布 max(0, p - q) 里抽，归一化"
                              "使其和为 1：它是 p 中被接受的草稿词元还没有覆盖到的那部分概率质量",
                              freq=freq, p=p.tolist()))
    raise CheckFailed(say("the emitted tokens do not follow the target p: frequencies {freq} "
                          "over {draws} draws, target {p}, and {rate:.1%} of drafts were "
                          "accepted (should be {beta:.0%}). Accept with probability "
                          "min(1, p(x)/q(x)) (draw u uniform in [0, 1) and accept when u < "
                          "that); on rejection draw from normalise(max(0, p - q))",
                          "输出的词元不服从目标分布 p：抽取 {draws} 次的频率为 {freq}，目标为 "
                          "{p}，草稿被接受的比例是 {rate:.1%}（应为 {beta:.0%}）。应以概率 "
                          "min(1, p(x)/q(x)) 接受（在 [0, 1) 上均匀抽取 u，u 小于它时接受）；"
                          "被拒绝时从 normalise(max(0, p - q)) 里抽取",
                          freq=freq, draws=draws, p=p.tolist(), rate=rate, beta=beta))


def _run(accept_step, case, generator_seed: int, global_seed: int, draws: int = 60):
    torch.manual_seed(global_seed)
    g = torch.Generator().manual_seed(generator_seed)
    drafted = case.drafted  # tokens the draft over-proposes: often rejected
    return [_one(accept_step, case.p, case.q, drafted[i % len(drafted)], g)
            for i in range(draws)]


def _check_generator_use(accept_step, case=ACCEPT_CASE) -> None:
    """The same generator seed must give the same tokens whatever the global RNG holds, and
    another seed other tokens: every draw goes through `generator`."""
    seed, global_seed, other_global, other_seed = case.run_seeds
    first = _run(accept_step, case, seed, global_seed)
    again = _run(accept_step, case, seed, other_global)
    if first != again:
        raise CheckFailed(say("with the same generator, seeded the same, accept_step gave "
                              "different results when torch's global random state changed: it "
                              "draws from the global RNG. Pass `generator=generator` to "
                              "torch.rand and to torch.multinomial, so a seeded generation can be "
                              "reproduced",
                              "生成器相同、种子也相同，torch 的全局随机状态一变，accept_step "
                              "的结果就变了：它在从全局随机数生成器里抽取。请把 "
                              "`generator=generator` 传给 torch.rand 和 torch.multinomial，"
                              "这样设了种子的生成才能复现"))
    other = _run(accept_step, case, other_seed, global_seed)
    if first == other:
        raise CheckFailed(say("accept_step gave the same 60 results with two differently "
                              "seeded generators: draw u = torch.rand((), generator=generator) "
                              "and the replacement token with "
                              "torch.multinomial(..., generator=generator)",
                              "换了两个种子不同的生成器，accept_step 给出的 60 个结果却完全一样："
                              "请用 u = torch.rand((), generator=generator) 抽取 u，用 "
                              "torch.multinomial(..., generator=generator) 抽取替换的词元"))


# --- prompt lookup --------------------------------------------------------------------------------

LOOKUP_CASES = [  # (ids, k, max_ngram); 40 random cases follow them
    ([1, 2, 3, 4, 1, 2], 3, 3), ([1, 2, 3, 1, 2, 9, 1, 2], 2, 3), ([5, 6, 7], 4, 3),
    ([7, 7, 7, 7], 3, 2), ([1, 2, 3, 9, 2, 3, 8, 2, 3], 2, 3), ([4], 3, 3), ([], 2, 3),
    ([10, 20, 30, 40, 10, 20, 30], 5, 3), ([1, 2, 3, 4, 1, 2], 0, 3),
    ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3], 4, 2)]
HIDDEN_LOOKUP_CASES = [
    ([9, 8, 7, 9, 8], 2, 3), ([1, 1], 3, 3), ([2, 3], 2, 2), ([5, 5, 5], 0, 2), ([], 4, 1),
    ([8], 1, 1), ([1, 2, 1, 3, 1, 2], 4, 1),  # n = 1 only: the latest earlier 2
    ([4, 5, 6, 4, 5, 7, 4, 5, 6, 4, 5], 3, 3),  # the 3-gram wins over the more recent 2-gram
    ([0, 1, 0, 1, 0, 1], 10, 2),  # fewer than k tokens follow the match
    ([2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0, 2, 8, 7, 4, 7, 1, 8, 2], 5,
     4)]


def _lookup_cases(rng: random.Random, hand=None):
    cases = list(LOOKUP_CASES if hand is None else hand)
    for _ in range(40):
        alphabet = rng.choice([[0, 1], [0, 1, 2], [5, 17, 256, 1000]])
        ids = [rng.choice(alphabet) for _ in range(rng.randint(0, 25))]
        cases.append((ids, rng.randint(1, 6), rng.randint(1, 4)))
    return cases


def _lookup_variant(ids, k, max_ngram, *, most_recent=True, longest_first=True, self_match=False,
                    cap=True):
    if k < 1:
        return []
    sizes = range(min(max_ngram, len(ids) - 1), 0, -1)
    for n in (sizes if longest_first else reversed(list(sizes))):
        suffix = ids[-n:]
        last = len(ids) - n if self_match else len(ids) - n - 1
        starts = range(last, -1, -1) if most_recent else range(0, last + 1)
        for start in starts:
            if ids[start:start + n] == suffix:
                return list(ids[start + n:start + n + k]) if cap else list(ids[start + n:])
    return []


@checker
def check_prompt_lookup(prompt_lookup, *, hidden=False) -> None:
    """`prompt_lookup(ids, k, max_ngram)`: up to k tokens that followed the most recent earlier
    occurrence of the context's last n tokens, trying n = max_ngram first, down to 1."""
    cases = (_lookup_cases(random.Random(18), HIDDEN_LOOKUP_CASES) if hidden
             else _lookup_cases(random.Random(8)))
    answers = []
    for ids, k, n in cases:
        what = f"prompt_lookup({short(ids, 80)}, k={k}, max_ngram={n})"
        got = call(prompt_lookup, ids, k, n, what=what)
        expect(isinstance(got, (list, tuple)),
               say("{what} returned {kind}; return a list of token ids ([] when nothing matches)",
                   "{what} 返回了 {kind}；请返回词元 id 的列表（没有匹配时返回 []）",
                   what=what, kind=type(got).__name__))
        answers.append([as_int(t, say("a token {what} returned", "{what} 返回的一个词元",
                                      what=what)) for t in got])
    wants = [PromptLookupDraft(max_ngram=n, min_ngram=1).lookup(ids, k) for ids, k, n in cases]

    def model(**kind):
        return [_lookup_variant(ids, k, n, **kind) for ids, k, n in cases]

    failure = first_failure("prompt_lookup", answers, wants, mistakes=lambda: [
        (say("you took the first occurrence; take the most recent one before the end (search "
             "backwards from len(ids) - n - 1): recent text is the better guess",
             "你取的是第一次出现的位置；应取结尾之前最近的那一次（从 len(ids) - n - 1 "
             "往前找）：越近的文本越值得参考"),
         model(most_recent=False)),
        (say("try the longest n-gram first (n = max_ngram, then smaller): a longer match is "
             "stronger evidence",
             "先试最长的 n-gram（n = max_ngram，再依次减小）：匹配得越长，证据越强"),
         model(longest_first=False)),
        (say("return at most k tokens", "最多返回 k 个词元"), model(cap=False)),
    ])
    if failure is None:
        return
    i, hint = failure
    if hint is None and not any(answers):
        hint = _empty_everywhere(prompt_lookup, cases, wants)
    ids, k, n = cases[i]
    raise CheckFailed(say("prompt_lookup({ids}, k={k}, max_ngram={n}) returned {got}, "
                          "expected {want}: {hint}",
                          "prompt_lookup({ids}, k={k}, max_ngram={n}) 返回了 {got}，应为 "
                          "{want}：{hint}", ids=short(ids, 80), k=k, n=n, got=answers[i],
                          want=wants[i],
                          hint=hint or say("for n from max_ngram down to 1, find the latest "
                                           "earlier place where the last n ids occur and "
                                           "return up to k ids after it",
                                           "让 n 从 max_ngram 递减到 1，找出最后 n 个 id 在更早"
                                           "处最近的一次出现，返回它后面至多 k 个 id")))


class _WatchedIds(list):
    """A context that notes the windows sliced out of it, `ids[start:stop]`: how a search
    walked it."""

    def __init__(self, ids):
        super().__init__(ids)
        self.windows = []

    def __getitem__(self, key):
        if isinstance(key, slice):
            self.windows.append((key.start, key.stop))
        return super().__getitem__(key)


def _empty_everywhere(prompt_lookup, cases, wants) -> str:
    """The hint for a prompt_lookup that returned [] on every case. A search that starts at
    len(ids) - n finds the last n tokens themselves, with nothing after them, so it returns []
    every time; it is named only when the function was seen reading that window
    (ids[len(ids) - n:len(ids)]). Any other cause gets the facts of one case."""
    ids, k, n = next(case for case, want in zip(cases, wants) if want)
    watched = _WatchedIds(ids)
    try:
        prompt_lookup(watched, k, n)
    except Exception:  # the cases ran it without error; a list subclass may still upset it
        pass
    end = len(ids)
    if any(isinstance(start, int) and 0 <= start < end and stop == end and end - start <= n
           for start, stop in watched.windows):
        return say("the last n tokens match themselves at the end, where nothing follows them; "
                   "look for an EARLIER occurrence (start at most len(ids) - n - 1)",
                   "最后 n 个词元在结尾处匹配的是它们自己，后面什么也没有；要找的是更早的一次"
                   "出现（起点最多为 len(ids) - n - 1）")
    for size in range(min(n, end - 1), 0, -1):
        start = next((s for s in range(end - size - 1, -1, -1)
                      if ids[s:s + size] == ids[-size:]), None)
        if start is not None:
            return say("it returned [] for every case, though here the last {size} ids "
                       "{suffix} occur earlier, at position {start}, followed by {follow}",
                       "它对每个用例都返回了 []，可这里最后 {size} 个 id {suffix} 在更早的位置 "
                       "{start} 出现过，后面跟着 {follow}", size=size, suffix=ids[-size:],
                       start=start, follow=ids[start + size:start + size + k])
    return ""


# --- greedy verification --------------------------------------------------------------------------

VERIFY_SIZES = [(6, 3), (10, 1), (8, 5), (5, 0), (50, 4), (7, 6)]  # (vocab, drafted tokens)
HIDDEN_VERIFY_SIZES = [(4, 2), (12, 1), (9, 4), (3, 0), (32, 5), (6, 7)]


def _verify_cases(rng: random.Random, sizes=VERIFY_SIZES):
    cases = []
    for vocab, n in sizes:
        for _ in range(5):
            gen = torch.Generator().manual_seed(rng.randint(0, 10**6))
            scores = torch.randn(n + 1, vocab, generator=gen)
            best = scores.argmax(-1).tolist()
            agree = rng.randint(0, n)  # the draft matches the target's argmax this far
            draft = best[:agree] + [(b + 1 + rng.randint(0, vocab - 2)) % vocab
                                    for b in best[agree:n]]
            cases.append((scores, draft))
    return cases


def _verify_variant(scores, draft, *, bonus=True, keep_draft=False, go_on=False,
                    count_replacement=False):
    best = scores.argmax(-1).tolist()
    out, accepted = [], 0
    for i, x in enumerate(draft):
        if best[i] == x:
            out.append(x)
            accepted += 1
            continue
        out.append(x if keep_draft else best[i])
        if not go_on:
            return out, accepted + (1 if count_replacement else 0)
    return (out + [best[len(draft)]] if bonus else out), accepted


@checker
def check_verify_greedy(verify, *, hidden=False) -> None:
    """`verify_greedy(target_scores, draft_tokens)` -> (new_tokens, n_accepted): drafted tokens
    kept while each is the target's argmax, then the target's own token at the first mismatch,
    or the bonus token after the last one when all pass."""
    cases = (_verify_cases(random.Random(19), HIDDEN_VERIFY_SIZES) if hidden
             else _verify_cases(random.Random(9)))
    answers = []
    for scores, draft in cases:
        what = say("verify_greedy(target_scores of shape {shape}, {draft})",
                   "verify_greedy(形状为 {shape} 的 target_scores, {draft})",
                   shape=tuple(scores.shape), draft=draft)
        got = call(verify, scores, draft, what=what)
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               say("{what} returned {got}; return a pair (new_tokens, n_accepted)",
                   "{what} 返回了 {got}；请返回一对 (new_tokens, n_accepted)",
                   what=what, got=short(got)))
        expect(isinstance(got[0], (list, tuple)),
               say("{what} returned new_tokens {got}; return them as a list of ints",
                   "{what} 返回的 new_tokens 是 {got}；请以 int 列表的形式返回",
                   what=what, got=short(got[0])))
        answers.append(([as_int(t, say("a token {what} returned", "{what} 返回的一个词元",
                                       what=what)) for t in got[0]],
                        as_int(got[1], say("n_accepted from {what}", "{what} 返回的 n_accepted",
                                           what=what))))
    wants = [verify_greedy(scores, draft) for scores, draft in cases]

    def model(**kind):
        return [_verify_variant(scores, draft, **kind) for scores, draft in cases]

    end_check("verify_greedy", answers, wants, cases, _verify_failure, _same_outcome, lambda: [
        (say("when every drafted token passes, add the bonus token: the target's argmax after "
             "the last one, target_scores[n]. It comes free with the same forward pass",
             "所有草稿词元都通过时，要再加上额外词元：目标模型在最后一个之后的 argmax，即 "
             "target_scores[n]。它由同一次前向传播白送"),
         model(bonus=False)),
        (say("at the first mismatch emit the TARGET's token (its argmax), not the draft's",
             "在第一个不一致处输出目标模型的词元（它的 argmax），而不是草稿的"),
         model(keep_draft=True)),
        (say("stop at the first mismatch: the tokens after it were drafted from a context that "
             "is now wrong",
             "在第一个不一致处停下：它之后的词元是按一个已经不对的上下文起草的"),
         model(go_on=True)),
        (say("n_accepted counts the drafted tokens that passed; the target's replacement is not "
             "one of them",
             "n_accepted 数的是通过检查的草稿词元；目标模型换上的那个词元不算在内"),
         model(count_replacement=True)),
    ])


def _same_outcome(got, want) -> bool:
    """Whether two (new_tokens, n_accepted) pairs are equal, a tuple or a list alike."""
    return tuple(got) == tuple(want)


def _verify_failure(case, got, want, hint) -> str:
    scores, draft = case
    return with_hint(say("verify_greedy(target_scores of shape {shape}, {draft}) returned {got}, "
                         "expected {want} (the target's argmax at each position: {best})",
                         "verify_greedy(形状为 {shape} 的 target_scores, {draft}) 返回了 {got}，"
                         "应为 {want}（目标模型在各位置的 argmax：{best}）",
                         shape=tuple(scores.shape), draft=draft, got=got, want=tuple(want),
                         best=scores.argmax(-1).tolist()),
                     hint)


# --- the tree attention mask ------------------------------------------------------------------

TREE_CASES = [([], 0), ([-1], 2), ([-1, 0, 1], 0), ([-1, 0, 1, 0, -1], 2), ([-1, -1, -1], 1),
              ([-1, 0, 0, 1, 2, 3], 3)]  # (parents, cached)
HIDDEN_TREE_CASES = [([-1, -1], 0), ([-1, 0, 0, 2], 1), ([-1, 0, -1, 2, 3, 1], 4)]


def _tree_cases(rng: random.Random, hand):
    cases = list(hand)
    for _ in range(12):
        parents = []
        for i in range(rng.randint(1, 9)):
            parents.append(rng.randint(-1, i - 1))
        cases.append((parents, rng.randint(0, 5)))
    return cases


def _tree_variant(parents, cached, kind):
    """The mask (rows: the root, then each node) as lists of bools; `kind` a mistake or
    "reference"."""
    n = len(parents)
    rows = []
    for row in range(n + 1):
        seen = [kind != "no_cache"] * cached + [True] + [False] * n  # the cache, the root
        node = row - 1
        if kind == "causal":
            seen[cached + 1:cached + 1 + row] = [True] * row
        elif node >= 0:
            seen[cached] = kind != "no_root"
            seen[cached + 1 + node] = kind != "no_self"
            up = parents[node]
            while up != -1:
                seen[cached + 1 + up] = True
                up = -1 if kind == "parent_only" else parents[up]
        rows.append(seen)
    return rows


TREE_MISTAKES = [
    ("causal", ("a plain causal mask lets each node see every node before it, other branches "
                "included: a node sees only the root, its own ancestors and itself",
                "普通的因果掩码会让每个节点看见它前面的所有节点，包括别的分支上的：一个节点只能看见根、"
                "它自己的祖先和它自己")),
    ("parent_only", ("a node sees ALL its ancestors, back to the root, not only its parent: "
                     "follow parents[...] until -1",
                     "一个节点要看见它的全部祖先，一直到根，而不只是它的父节点：沿着 parents[...] "
                     "一直往上走到 -1")),
    ("no_self", ("each node sees itself too: a token attends to its own key, as under any "
                 "causal mask",
                 "每个节点也要看见它自己：和任何因果掩码一样，一个词元要关注它自己的键")),
    ("no_root", ("every row sees the root (column `cached`): the context's last token, fed "
                 "first in the same pass",
                 "每一行都要看见根（第 `cached` 列）：上下文的最后一个词元，在同一次传播里最先送入")),
    ("no_cache", ("every row sees the `cached` tokens already in the KV cache (the first "
                  "`cached` columns)",
                  "每一行都要看见 KV 缓存里已有的 `cached` 个词元（前 `cached` 列）")),
]


def _grid(rows) -> str:
    return " / ".join("".join("x" if seen else "." for seen in row) for row in rows)


def _tree_failure(case, got, want, hint) -> str:
    parents, cached = case
    return with_hint(say("tree_mask(parents={parents}, cached={cached}) returned {got}, expected "
                         "{want} (rows: the root, then each node; x: may attend)",
                         "tree_mask(parents={parents}, cached={cached}) 返回了 {got}，应为 "
                         "{want}（各行依次是根和每个节点；x：可以关注）",
                         parents=parents, cached=cached, got=_grid(got), want=_grid(want)),
                     hint)


@checker
def check_tree_mask(tree_mask, *, hidden=False) -> None:
    """`tree_mask(parents, cached)` -> (n + 1, cached + n + 1) booleans: the root's row, then
    each node's; every row sees the cache and the root, a node also its ancestors and itself."""
    cases = (_tree_cases(random.Random(21), HIDDEN_TREE_CASES) if hidden
             else _tree_cases(random.Random(11), TREE_CASES))
    answers = []
    for parents, cached in cases:
        what = f"tree_mask({parents}, {cached})"
        got = call(tree_mask, list(parents), cached, what=what)
        shape = (len(parents) + 1, cached + len(parents) + 1)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == shape,
               say("{what} returned {got}; return a torch tensor of shape {shape}: a row for the "
                   "root and one per node, a column per cached token, the root and each node",
                   "{what} 返回了 {got}；请返回形状为 {shape} 的 torch 张量：根一行，每个节点一行；"
                   "每个缓存词元、根和每个节点各一列",
                   what=what, got=short(got), shape=shape))
        expect(got.dtype == torch.bool,
               say("{what} returned a {dtype} tensor; return booleans (torch.bool): True where "
                   "the row may attend", "{what} 返回的是 {dtype} 张量；请返回布尔值"
                   "（torch.bool）：可以关注的地方为 True", what=what, dtype=got.dtype))
        answers.append(got.tolist())
    end_variant_check("tree_mask", answers, cases, _tree_variant, TREE_MISTAKES, _tree_failure)
