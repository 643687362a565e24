"""Checkers for exercises/04_decoding.ipynb: temperature, top-k, top-p, the repetition penalty and
one beam-search step, each against minillm's own processors on random logits of several batch and
vocabulary sizes. A hint names a mistake only when the learner's scores equal that mistake's
scores on every case. Every message says both languages side by side (`say`)."""

from __future__ import annotations

import torch

from ...decoding.processors import (RepetitionPenaltyProcessor, TemperatureProcessor,
                                   TopKProcessor, TopPProcessor)
from ..language import say
from ._base import CheckFailed, call, checker, expect, first_failure, matching_mistake, short

NEG_INF = float("-inf")


def _logits(seed: int, batch: int = 3, vocab: int = 20, ties: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(-2, 3, (batch, vocab), generator=gen).float()
    return torch.randn(batch, vocab, generator=gen) * 2


def _as_scores(got, what: str, shape) -> torch.Tensor:
    expect(isinstance(got, torch.Tensor),
           say("{what} returned {kind}; return a torch.Tensor of scores",
               "{what} 返回了 {kind}；请返回一个由分数组成的 torch.Tensor",
               what=what, kind=type(got).__name__))
    expect(tuple(got.shape) == tuple(shape),
           say("{what} returned shape {got}, expected {want} (same as the logits)",
               "{what} 返回的形状是 {got}，应为 {want}（与 logits 相同）",
               what=what, got=tuple(got.shape), want=tuple(shape)))
    expect(got.is_floating_point(),
           say("{what} returned a {dtype} tensor; return the float scores (removed tokens at "
               "-inf), not a mask or indices",
               "{what} 返回了一个 {dtype} 张量；请返回浮点分数（被去掉的词元记为 -inf），"
               "而不是掩码或下标", what=what, dtype=got.dtype))
    return got.detach()


def _same_scores(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The same tokens removed (-inf) and the kept scores equal."""
    if got.shape != want.shape or not torch.equal(torch.isneginf(got), torch.isneginf(want)):
        return False
    keep = ~torch.isneginf(want)
    return bool(torch.allclose(got[keep], want[keep], rtol=1e-5, atol=1e-6))


def _score_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    removed_got, removed_want = torch.isneginf(got), torch.isneginf(want)
    extra = int((removed_got & ~removed_want).sum())
    missing = int((~removed_got & removed_want).sum())
    if extra or missing:
        return say("{extra} token(s) set to -inf that should stay, and {missing} that should be "
                   "-inf but are not",
                   "有 {extra} 个本该保留的词元被设成了 -inf，另有 {missing} 个本该是 -inf 的"
                   "词元没有设", extra=extra, missing=missing)
    return say("the kept scores changed; a filter only sets removed tokens to -inf and leaves the "
               "others exactly as they were",
               "保留下来的分数被改动了；过滤只把被去掉的词元设为 -inf，其余分数必须原样不动")


def _check_all(fn, name, cases, reference, mistakes, describe, fallback, scores_at=0) -> None:
    """Run `fn` on every case (args tuples, the logits at position `scores_at`), compare with
    `reference(*args)`; on a difference name the mistake whose scores match everywhere, else
    `fallback(got, want)`."""
    answers = []
    for args, if_raises in cases:
        what = describe(*args)
        answers.append(_as_scores(call(fn, *args, what=what, if_raises=if_raises), what,
                                  args[scores_at].shape))
    wants = [reference(*args) for args, _ in cases]
    failure = first_failure(name, answers, wants, _same_scores)
    if failure is None:
        return
    i = failure[0]
    models = [(hint, [model(*args) for args, _ in cases]) for hint, model in mistakes]
    hint = matching_mistake(answers, models, _same_scores)
    raise CheckFailed(say("{what}: {why}", "{what}：{why}", what=describe(*cases[i][0]),
                          why=hint or fallback(answers[i], wants[i])))


# --- 1. temperature ---------------------------------------------------------------------------

TEMPERATURES = [(0, 3, 20, 1.0), (1, 3, 20, 0.5), (2, 2, 50, 2.0), (3, 3, 20, 0.01),
                (4, 1, 7, 1.3), (5, 4, 100, 0.8)]
HIDDEN_TEMPERATURES = [(20, 2, 9, 1.0), (21, 4, 30, 0.25), (22, 1, 64, 5.0), (23, 3, 11, 0.05),
                       (24, 5, 3, 1.7), (25, 2, 200, 0.9)]


@checker
def check_apply_temperature(apply_temperature, *, hidden=False) -> None:
    """`apply_temperature(logits, temperature)` -> logits / temperature."""
    cases = [((_logits(seed, batch, vocab), t), "")
             for seed, batch, vocab, t in (HIDDEN_TEMPERATURES if hidden else TEMPERATURES)]
    _check_all(
        apply_temperature, "apply_temperature", cases,
        lambda logits, t: TemperatureProcessor(t)(None, logits),
        [(say("you multiplied by the temperature; divide: P_i = e^(z_i/T) / sum_j e^(z_j/T)",
              "你乘上了温度；应该除以温度：P_i = e^(z_i/T) / sum_j e^(z_j/T)"),
          lambda logits, t: logits * t),
         (say("you returned probabilities; return the scaled logits (the softmax comes later)",
              "你返回的是概率；应返回缩放后的 logits（softmax 在后面才做）"),
          lambda logits, t: torch.softmax(logits / t, -1)),
         (say("you subtracted the temperature; divide the logits by it",
              "你减去了温度；应该用 logits 除以温度"),
          lambda logits, t: logits - t)],
        lambda logits, t: say("apply_temperature(logits of shape {shape}, {t})",
                              "apply_temperature(形状为 {shape} 的 logits, {t})",
                              shape=tuple(logits.shape), t=t),
        lambda got, want: say("expected logits / temperature", "应为 logits / temperature"))


# --- 2. top-k ---------------------------------------------------------------------------------

TOP_K_CASES = [(0, 3, 20, 1, False), (1, 3, 20, 5, False), (2, 3, 20, 3, True),
               (3, 3, 20, 20, False), (4, 3, 20, 50, False), (5, 3, 20, 2, True),
               (6, 2, 100, 40, False), (7, 1, 5, 4, True), (8, 4, 64, 64, False)]
HIDDEN_TOP_K_CASES = [(30, 2, 12, 1, True), (31, 4, 30, 7, False), (32, 3, 16, 4, True),
                      (33, 2, 10, 10, True), (34, 3, 10, 12, False), (35, 1, 40, 3, True),
                      (36, 3, 80, 25, False), (37, 2, 6, 5, False), (38, 5, 25, 2, False)]


def _strict_top_k(logits, k):
    k = min(k, logits.shape[-1])
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(
        -1, torch.topk(logits, k).indices, True)
    return logits.masked_fill(~keep, NEG_INF)


def _top_k_variant(logits, k, *, shift=0, largest=True, fill=NEG_INF):
    k = max(1, min(k + shift, logits.shape[-1]))
    kth = torch.topk(logits, k, largest=largest).values[..., -1:]
    drop = logits < kth if largest else logits > kth
    return logits.masked_fill(drop, fill)


@checker
def check_top_k(top_k_filter, *, hidden=False) -> None:
    """`top_k_filter(logits, k)`: keep the k highest scores of each row (and any tied with the
    k-th), set the rest to -inf."""
    cases = []
    for seed, batch, vocab, k, ties in HIDDEN_TOP_K_CASES if hidden else TOP_K_CASES:
        if_raises = (say("k = {k} is at least the vocabulary size ({vocab}): every token stays "
                         "(use min(k, vocab))",
                         "k = {k} 不小于词表大小（{vocab}）：所有词元都保留（用 min(k, vocab)）",
                         k=k, vocab=vocab) if k > vocab else "")
        cases.append(((_logits(seed, batch, vocab, ties), k), if_raises))
    _check_all(
        top_k_filter, "top_k_filter", cases, lambda logits, k: TopKProcessor(k)(None, logits),
        [(say("you removed tokens tied with the k-th best: keep every token whose score is >= "
              "the k-th highest score",
              "你去掉了与第 k 名分数相同的词元：分数 >= 第 k 高分数的词元都要保留"), _strict_top_k),
         (say("you kept k + 1 tokens: the k-th highest score is topk(logits, k).values[..., -1]",
              "你保留了 k + 1 个词元：第 k 高的分数是 topk(logits, k).values[..., -1]"),
          lambda logits, k: _top_k_variant(logits, k, shift=1)),
         (say("you kept k - 1 tokens: the k-th highest score is topk(logits, k).values[..., -1]",
              "你保留了 k - 1 个词元：第 k 高的分数是 topk(logits, k).values[..., -1]"),
          lambda logits, k: _top_k_variant(logits, k, shift=-1)),
         (say("you kept the k lowest scores; keep the highest (torch.topk's default, "
              "largest=True)",
              "你保留的是最低的 k 个分数；应保留最高的（torch.topk 的默认值 largest=True）"),
          lambda logits, k: _top_k_variant(logits, k, largest=False)),
         (say("removed tokens must get the score -inf, not 0 (a score of 0 still has a chance)",
              "被去掉的词元分数必须是 -inf，而不是 0（分数为 0 的词元仍有机会被选中）"),
          lambda logits, k: _top_k_variant(logits, k, fill=0.0))],
        lambda logits, k: (say("top_k_filter(logits of shape {shape}, {k})",
                               "top_k_filter(形状为 {shape} 的 logits, {k})",
                               shape=tuple(logits.shape), k=k)
                           + (say(" on logits with ties", "，logits 中有并列的分数")
                              if logits.eq(logits.round()).all() else "")),
        _score_difference)


# --- 3. top-p ---------------------------------------------------------------------------------

def _clear_of_boundary(logits: torch.Tensor, p: float) -> bool:
    """True when no cumulative probability lies within 1e-4 of p, so summing in another order
    cannot change which token crosses the line."""
    probs = logits.softmax(-1).sort(descending=True).values
    return bool(((probs.cumsum(-1) - p).abs() > 1e-4).all())


TOP_P_CASES = [(0.1, 3, 20), (0.5, 3, 20), (0.8, 3, 20), (0.9, 2, 50), (0.95, 3, 20),
               (1.0, 3, 20), (0.7, 4, 100), (0.3, 1, 6)]  # (p, batch, vocab)
TOP_P_BY_HAND = ([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]], 0.7)  # probabilities, p
HIDDEN_TOP_P_CASES = [(0.05, 2, 12), (0.6, 4, 30), (0.85, 3, 16), (0.99, 2, 40), (0.4, 3, 25),
                      (1.0, 2, 8), (0.75, 1, 200), (0.2, 5, 5)]
HIDDEN_TOP_P_BY_HAND = ([[0.1, 0.6, 0.25, 0.05], [0.25, 0.05, 0.1, 0.6]], 0.8)


def _top_p_logits(hidden=False):
    cases, seed = [], 50 if hidden else 0
    for p, batch, vocab in HIDDEN_TOP_P_CASES if hidden else TOP_P_CASES:
        logits = _logits(seed, batch, vocab)
        while p < 1.0 and not _clear_of_boundary(logits, p):
            seed += 1
            logits = _logits(seed, batch, vocab)
        seed += 1
        cases.append((logits, p))
    probs, p = HIDDEN_TOP_P_BY_HAND if hidden else TOP_P_BY_HAND
    cases.append((torch.tensor(probs).log(), p))
    return cases


def _top_p_variant(logits, p, *, crossing=True, descending=True, softmax=True, unsort=True):
    sorted_logits, order = torch.sort(logits, descending=descending)
    probs = sorted_logits.softmax(-1) if softmax else sorted_logits
    total = probs.cumsum(-1)
    remove = (total - probs >= p) if crossing else (total > p)
    if unsort:
        remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, NEG_INF)


def _one_too_many(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(-1)
    before = probs.cumsum(-1) - probs
    remove = torch.cat([torch.zeros_like(before[..., :1], dtype=torch.bool),
                        (before >= p)[..., :-1]], -1)
    return logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)


@checker
def check_top_p(top_p_filter, *, hidden=False) -> None:
    """`top_p_filter(logits, p)`: keep the smallest set of most likely tokens whose probability
    adds up to at least p — including the token that crosses p — and set the rest to -inf."""
    cases = [(args, "") for args in _top_p_logits(hidden)]
    _check_all(
        top_p_filter, "top_p_filter", cases, lambda logits, p: TopPProcessor(p)(None, logits),
        [(say("you dropped the token that crosses p: keep tokens until the running total "
              "reaches p, and keep the one that gets it there",
              "你去掉了越过 p 的那个词元：一直保留词元，直到累计概率达到 p，并且让累计概率达到 "
              "p 的那个词元也要保留"),
          lambda logits, p: _top_p_variant(logits, p, crossing=False)),
         (say("you kept one token too many: stop right after the token whose running total "
              "first reaches p",
              "你多保留了一个词元：在累计概率第一次达到 p 的那个词元之后立刻停下"), _one_too_many),
         (say("you kept the least likely tokens: sort the probabilities from the most likely "
              "down (descending=True)",
              "你保留的是最不可能的词元：概率要从最可能的往下排（descending=True）"),
          lambda logits, p: _top_p_variant(logits, p, descending=False)),
         (say("you added up the logits; add up probabilities: softmax the sorted logits first",
              "你累加的是 logits；要累加的是概率：先对排好序的 logits 做 softmax"),
          lambda logits, p: _top_p_variant(logits, p, softmax=False)),
         (say("the mask is still in sorted order: put it back in vocabulary order "
              "(remove.scatter(-1, order, remove)) before masking the logits",
              "掩码还是排序后的顺序：先把它放回词表顺序（remove.scatter(-1, order, remove)），"
              "再去屏蔽 logits"),
          lambda logits, p: _top_p_variant(logits, p, unsort=False))],
        lambda logits, p: say("top_p_filter(logits of shape {shape}, {p})",
                              "top_p_filter(形状为 {shape} 的 logits, {p})",
                              shape=tuple(logits.shape), p=p),
        _score_difference)


# --- 4. repetition penalty --------------------------------------------------------------------

PENALTY_BY_HAND = ([[0, 0, 0, 1]], [[2.0, -2.0, 2.0, 1.0]], 2.0)  # input_ids, logits, penalty
PENALTY_CASES = [(0, 3, 20, 7, 1.2), (1, 3, 20, 7, 1.8), (2, 3, 20, 7, 0.5), (3, 3, 20, 7, 3.0),
                 (4, 2, 50, 30, 1.3), (5, 1, 6, 12, 2.5)]  # (seed, batch, vocab, length, penalty)
HIDDEN_PENALTY_BY_HAND = ([[3, 1, 3, 3, 0], [2, 2, 1, 1, 1]],
                          [[-1.0, 3.0, 0.5, -4.0], [1.5, -0.5, -2.0, 4.0]], 4.0)
HIDDEN_PENALTY_CASES = [(10, 2, 15, 9, 1.5), (11, 4, 12, 5, 2.2), (12, 3, 30, 1, 1.1),
                        (13, 2, 8, 20, 0.8), (14, 1, 100, 40, 1.25), (15, 5, 10, 3, 4.0)]


def _penalty_cases(hidden=False):
    ids, logits, penalty = HIDDEN_PENALTY_BY_HAND if hidden else PENALTY_BY_HAND
    cases = [(torch.tensor(ids), torch.tensor(logits), penalty)]
    for seed, batch, vocab, length, penalty in HIDDEN_PENALTY_CASES if hidden else PENALTY_CASES:
        logits = _logits(seed, batch, vocab)
        ids = torch.randint(0, vocab, (batch, length),
                            generator=torch.Generator().manual_seed(100 + seed))
        cases.append((ids, logits, penalty))
    return cases


def _per_occurrence(ids, logits, penalty):
    out = logits.clone()
    for row in range(ids.shape[0]):
        for token in ids[row].tolist():
            value = out[row, token]
            out[row, token] = value * penalty if value < 0 else value / penalty
    return out


@checker
def check_repetition_penalty(repetition_penalty, *, hidden=False) -> None:
    """`repetition_penalty(input_ids, logits, penalty)`: each token that appears in input_ids
    (prompt included) has its score divided by penalty when positive, multiplied when negative —
    once, however often it appeared."""
    cases = [(args, "") for args in _penalty_cases(hidden)]
    _check_all(
        repetition_penalty, "repetition_penalty", cases,
        lambda ids, logits, p: RepetitionPenaltyProcessor(p)(ids, logits),
        [(say("you divided negative scores too (-2 became -1), which makes those tokens MORE "
              "likely; multiply a negative score by the penalty",
              "你把负分数也除了（-2 变成了 -1），这反而让这些词元*更*可能被选中；负分数应该乘以"
              "惩罚系数"),
          lambda ids, logits, p: logits.scatter(1, ids, logits.gather(1, ids) / p)),
         (say("you applied the penalty once per occurrence (token 0 appears 3 times in "
              "[[0, 0, 0, 1]]: its 2.0 became 0.25); apply it once per distinct token",
              "你每出现一次就惩罚一次（词元 0 在 [[0, 0, 0, 1]] 里出现了 3 次：它的 2.0 变成了 "
              "0.25）；每个不同的词元只惩罚一次"),
          _per_occurrence),
         (say("positive and negative are the wrong way round: divide a positive score by the "
              "penalty and multiply a negative one",
              "正负弄反了：正分数除以惩罚系数，负分数乘以惩罚系数"),
          lambda ids, logits, p: logits.scatter(1, ids, torch.where(
              logits.gather(1, ids) < 0, logits.gather(1, ids) / p, logits.gather(1, ids) * p))),
         (say("every row has its own input_ids: penalise the tokens of row b in row b only",
              "每一行都有自己的 input_ids：第 b 行的词元只在第 b 行受罚"),
          lambda ids, logits, p: RepetitionPenaltyProcessor(p)(
              ids.reshape(1, -1).expand(ids.shape[0], -1), logits))],
        lambda ids, logits, p: say("repetition_penalty(input_ids {ids}, logits of shape "
                                   "{shape}, {p})",
                                   "repetition_penalty(input_ids {ids}, 形状为 {shape} 的 "
                                   "logits, {p})",
                                   ids=short(ids.tolist(), 40), shape=tuple(logits.shape), p=p),
        lambda got, want: say("{n} scores differ: each token seen in its row's input_ids gets "
                              "score / penalty if positive, score * penalty if negative",
                              "有 {n} 个分数不对：在本行 input_ids 中出现过的词元，分数为正时取 "
                              "score / penalty，为负时取 score * penalty",
                              n=int((~torch.isclose(got, want)).sum())), scores_at=1)


# --- 5. one beam-search step ------------------------------------------------------------------

def reference_beam_step(log_probs: torch.Tensor, beam_scores: torch.Tensor, num_beams: int):
    """The reference: the num_beams best (score, parent beam, token) over all beams."""
    vocab = log_probs.shape[-1]
    totals = (beam_scores[:, None] + log_probs).reshape(-1)
    scores, flat = torch.topk(totals, num_beams)
    return scores, flat // vocab, flat % vocab


BEAM_CASES = [(0, 2, 10), (1, 3, 7), (2, 4, 50), (3, 1, 5), (4, 5, 12), (5, 3, 200)]
HIDDEN_BEAM_CASES = [(10, 3, 4), (11, 2, 30), (12, 6, 9), (13, 1, 12),
                     (14, 4, 3),  # more beams than tokens: a beam must keep several children
                     (15, 2, 500)]  # (seed, beams, vocab)


def _beam_cases(hidden=False):
    cases = []
    for seed, beams, vocab in HIDDEN_BEAM_CASES if hidden else BEAM_CASES:
        gen = torch.Generator().manual_seed(seed)
        log_probs = torch.log_softmax(torch.randn(beams, vocab, generator=gen) * 2, -1)
        beam_scores = -torch.rand(beams, generator=gen) * 3
        cases.append((log_probs, beam_scores, beams))
    return cases


def _as_triple(got, what, beams):
    expect(isinstance(got, (tuple, list)) and len(got) == 3,
           say("{what} returned {kind} {got}; return a tuple (scores, parents, tokens)",
               "{what} 返回了 {kind} {got}；请返回一个元组 (scores, parents, tokens)",
               what=what, kind=type(got).__name__, got=short(got)))
    out = []
    for name, part in zip(("scores", "parents", "tokens"), got):
        try:
            t = torch.as_tensor(part)
        except Exception:
            raise CheckFailed(say("{what}: {name} is {kind} {part}; return a tensor (or a list) "
                                  "of numbers",
                                  "{what}：{name} 是 {kind} {part}；请返回由数字组成的张量"
                                  "（或列表）", what=what, name=name, kind=type(part).__name__,
                                  part=short(part))) from None
        expect(t.numel() == beams,
               say("{what}: {name} has {n} entries, expected num_beams = {beams}",
                   "{what}：{name} 有 {n} 个元素，应为 num_beams = {beams} 个",
                   what=what, name=name, n=t.numel(), beams=beams))
        out.append(t.flatten())
    return out


def _same_beams(got, want) -> bool:
    return (torch.allclose(got[0].cpu().double(), want[0].cpu().double(), atol=1e-5)
            and torch.equal(got[1].long(), want[1].long())
            and torch.equal(got[2].long(), want[2].long()))


def _per_beam_best(log_probs, beam_scores, num_beams):
    totals = beam_scores[:, None] + log_probs
    best = totals.max(-1)
    order = best.values.argsort(descending=True)[:num_beams]
    return best.values[order], order, best.indices[order]


@checker
def check_beam_step(beam_step, *, hidden=False) -> None:
    """`beam_step(log_probs, beam_scores, num_beams)` -> (scores, parents, tokens), each of
    length num_beams, best first: the num_beams best continuations over ALL beams, scored
    beam_scores[parent] + log_probs[parent, token]."""
    cases = _beam_cases(hidden)
    answers = []
    for log_probs, beam_scores, beams in cases:
        what = say("beam_step on {beams} beams x {vocab} tokens",
                   "beam_step（{beams} 条束 × {vocab} 个词元）", beams=beams,
                   vocab=log_probs.shape[-1])
        answers.append(_as_triple(call(beam_step, log_probs, beam_scores, beams, what=what),
                                  what, beams))
    wants = [reference_beam_step(*case) for case in cases]
    failure = first_failure("beam_step", answers, wants, _same_beams)
    if failure is None:
        return
    i = failure[0]

    def model(f):
        return [tuple(t.flatten() for t in f(*case)) for case in cases]

    mistakes = [
        (say("parents and tokens are swapped: in the flattened (beams x vocab) index, "
             "parent = index // vocab, token = index % vocab",
             "parents 和 tokens 弄反了：在展平的 (beams x vocab) 下标里，"
             "parent = index // vocab，token = index % vocab"),
         model(lambda lp, bs, n: (lambda s, p, t: (s, t, p))(*reference_beam_step(lp, bs, n)))),
        (say("the scores ignore the beams' running scores; add beam_scores[:, None] to "
             "log_probs before ranking",
             "得分里没有算上各条束已有的累计得分；排序之前先把 beam_scores[:, None] 加到 "
             "log_probs 上"),
         model(lambda lp, bs, n: reference_beam_step(lp, torch.zeros_like(bs), n))),
        (say("you took the best token of each beam; rank all beams x vocab continuations "
             "together, so a strong beam may keep two children and a weak one none",
             "你取的是每条束各自最好的词元；应把全部 beams x vocab 个续写放在一起排序，"
             "这样强的束可能留下两个后代，弱的束一个也留不下"), model(_per_beam_best)),
        (say("return the candidates best first (torch.topk sorts them)",
             "候选要按从好到差的顺序返回（torch.topk 会排好序）"),
         model(lambda lp, bs, n: (lambda s, p, t: (s.flip(0), p.flip(0), t.flip(0)))(
             *reference_beam_step(lp, bs, n)))),
    ]
    hint = matching_mistake(answers, mistakes, _same_beams)
    log_probs, _, beams = cases[i]
    got, want = answers[i], wants[i]
    raise CheckFailed(
        say("beam_step on {beams} beams x {vocab} tokens: scores {got_scores}, (parent, token) "
            "pairs {got_pairs}; expected scores {want_scores} and pairs {want_pairs}. ",
            "beam_step（{beams} 条束 × {vocab} 个词元）：得分 {got_scores}，(parent, token) 对 "
            "{got_pairs}；应为得分 {want_scores}，对 {want_pairs}。",
            beams=beams, vocab=log_probs.shape[-1],
            got_scores=[round(x, 4) for x in got[0].tolist()],
            got_pairs=list(zip(got[1].tolist(), got[2].tolist())),
            want_scores=[round(x, 4) for x in want[0].tolist()],
            want_pairs=list(zip(want[1].tolist(), want[2].tolist())))
        + (hint or say("Flatten beam_scores[:, None] + log_probs, take torch.topk, then parent = "
                       "index // vocab and token = index % vocab",
                       "把 beam_scores[:, None] + log_probs 展平，取 torch.topk，再令 "
                       "parent = index // vocab、token = index % vocab")))
