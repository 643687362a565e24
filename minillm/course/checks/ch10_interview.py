"""Checkers for exercises/10_interview_qa.ipynb, and the chapter's self-check quiz.

The exercise asks three estimates an interviewer expects at a whiteboard, each checked against
its formula on several cases: the batch-1 decode bound of a model split by tensor parallelism,
the largest batch a KV pool holds, and the expected speed-up of speculative decoding
(`minillm.speculative.expected_tokens_per_pass`); then (lesson 10d) the goodput of a load test
under an SLO. GB here is 10^9 bytes, as GPU makers count.

The quiz (`build_quiz`, `Quiz`, `quiz_widget`) asks one question at a time, multiple-choice or
numeric (checked with a relative tolerance), reveals the answer and keeps a score. Its numeric
answers are computed from a model's config, never typed in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ...model.config import ModelConfig
from ..language import say
from ._base import (CheckFailed, as_number, call, checker, end_check, end_variant_check,
                    is_close)

GB = 1e9


# --- the formulas the lesson and the quiz use ----------------------------------------------------

def weight_memory_gb_reference(n_params, bits_per_weight):
    return n_params * bits_per_weight / 8 / GB


def kv_cache_gb_reference(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * batch * bytes_per_value / GB


def decode_bound_reference(weight_bytes, bandwidth_gb_per_s):
    return bandwidth_gb_per_s * GB / weight_bytes


# --- published shapes -----------------------------------------------------------------------------

PARAM_CONFIGS = {
    "SmolLM2-135M": ModelConfig("llama", 49152, 576, 30, 9, 3, 64, 1536, tie_embeddings=True),
    "SmolLM2-360M": ModelConfig("llama", 49152, 960, 32, 15, 5, 64, 2560, tie_embeddings=True),
    "Llama-2-7B": ModelConfig("llama", 32000, 4096, 32, 32, 32, 128, 11008),
    "Llama-3-8B": ModelConfig("llama", 128256, 4096, 32, 32, 8, 128, 14336),
    "Llama-3-70B": ModelConfig("llama", 128256, 8192, 80, 64, 8, 128, 28672),
    "a tiny model": ModelConfig("llama", 100, 16, 2, 4, 2, 4, 40),
    "Mistral-7B": ModelConfig("llama", 32000, 4096, 32, 32, 8, 128, 14336),
    "Qwen2.5-0.5B": ModelConfig("llama", 151936, 896, 24, 14, 2, 64, 4864, tie_embeddings=True),
}


def parameter_count_reference(config: ModelConfig) -> int:
    """The parameters of minillm's LlamaModel for `config`, built on the meta device (no memory)."""
    from ...model import LlamaModel

    with torch.device("meta"):
        model = LlamaModel(config)
    return sum(p.numel() for p in model.parameters())


def _shown(x: float) -> str:
    """A number with enough digits that two different answers never print the same."""
    return f"{x:.6g}"


def _close(got, want) -> bool:
    return is_close(got, want, rel=1e-6)


def _wrong(what: str, got, want, hint: str) -> str:
    """The failure of the call `what`, which returned `got` instead of `want` (both as shown)."""
    return say("{what} returned {got}, expected {want}: {hint}",
               "{what} 返回了 {got}，应为 {want}：{hint}", what=what, got=got, want=want, hint=hint)


# --- 1 · the decode bound of a tensor-parallel model ---------------------------------------------

TP_CASES = [  # (parameters, bytes per parameter, GPUs, bandwidth of one GPU in bytes/s)
    (70e9, 1, 4, 3.35e12), (70e9, 2, 8, 3.35e12), (8e9, 2, 1, 1.0e12), (405e9, 1, 8, 4.8e12),
    (135e6, 4, 1, 20e9), (70e9, 0.5, 2, 2.0e12)]
HIDDEN_TP_CASES = [
    (7e9, 2, 2, 2.0e12), (405e9, 2, 16, 3.35e12), (13e9, 0.5, 1, 1.0e12), (180e9, 1, 4, 4.8e12),
    (360e6, 2, 1, 50e9), (1.8e12, 0.5, 8, 8.0e12)]


def tp_decode_bound_reference(n_params, bytes_per_param, n_gpus, bandwidth):
    """Tokens a second at batch 1: each GPU reads its 1/n_gpus of the weights every step, all
    GPUs at once (communication and the KV cache left out)."""
    return bandwidth / (n_params * bytes_per_param / n_gpus)


@checker
def check_tp_decode_bound(tp_decode_bound, *, hidden=False) -> None:
    """`tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth)`: the most tokens a second
    batch-1 decode reaches when tensor parallelism splits the weights over `n_gpus` GPUs."""
    tp_cases = HIDDEN_TP_CASES if hidden else TP_CASES
    answers = []
    for case in tp_cases:
        what = _tp_call(case)
        answers.append(as_number(call(tp_decode_bound, *case, what=what), what))
    wants = [tp_decode_bound_reference(*case) for case in tp_cases]
    end_check("tp_decode_bound", answers, wants, tp_cases, _tp_failure, _close, lambda: [
        (say("with tensor parallelism each GPU holds and reads only 1/n_gpus of the weights, "
             "and all GPUs read at the same time: divide the weight bytes by n_gpus",
             "张量并行（tensor parallelism）下每块 GPU 只存、只读 1/n_gpus 的权重，而且所有 GPU "
             "同时读：权重字节数要除以 n_gpus"),
         [b / (n * s) for n, s, g, b in tp_cases]),
        (say("bytes_per_param is already in bytes: do not multiply by 8 (that counts bits)",
             "bytes_per_param 的单位已经是字节：不要再乘以 8（那是在数比特）"),
         [tp_decode_bound_reference(*case) / 8 for case in tp_cases]),
        (say("that is seconds per token: the bound in tokens a second is its inverse",
             "这是每个词元要花的秒数：以每秒词元数计的上限是它的倒数"),
         [1 / tp_decode_bound_reference(*case) for case in tp_cases]),
        (say("use bytes_per_param as given (1 for fp8, 0.5 for int4), not 2 bytes for every "
             "model", "按给定的 bytes_per_param 计算（fp8 为 1，int4 为 0.5），不要对每个模型都按 "
             "2 字节算"),
         [tp_decode_bound_reference(n, 2, g, b) for n, s, g, b in tp_cases]),
    ])


def _tp_call(case) -> str:
    return "tp_decode_bound({}, {}, {}, {})".format(*(_shown(v) for v in case))


def _tp_failure(case, got, want, hint) -> str:
    return _wrong(_tp_call(case), _shown(got),
                  say("{want} tokens/s", "{want} 词元/秒", want=_shown(want)),
                  hint or say("every step each GPU reads its share of the weights, n_params x "
                              "bytes_per_param / n_gpus bytes, at `bandwidth` bytes a second",
                              "每一步每块 GPU 都要读自己那份权重，共 n_params x bytes_per_param / "
                              "n_gpus 字节，读取速度是每秒 `bandwidth` 字节"))


# --- 2 · the largest batch a KV pool holds -------------------------------------------------------

BATCH_CASES = [  # (pool bytes, config name, tokens per sequence, bytes per value)
    (80e9, "Llama-3-8B", 8192, 2), (80e9, "Llama-3-70B", 8192, 2), (80e9, "Llama-2-7B", 4096, 2),
    (24e9, "Llama-3-8B", 32768, 1), (1e9, "SmolLM2-135M", 8192, 2), (10_000, "a tiny model", 10, 4),
    (40e9, "Llama-3-70B", 4000, 1)]
HIDDEN_BATCH_CASES = [
    (80e9, "Mistral-7B", 32768, 2), (16e9, "Qwen2.5-0.5B", 32768, 2),
    (80e9, "SmolLM2-360M", 2048, 2), (48e9, "Llama-2-7B", 2048, 1),
    (1e9, "Llama-3-70B", 131072, 2),  # not even one sequence fits: 0
    (5_000, "a tiny model", 3, 2), (80e9, "Llama-3-8B", 1000, 4)]


def _per_sequence(config, tokens, bytes_per_value, *, heads="kv", factor=2):
    n = config.n_kv_heads if heads == "kv" else config.n_heads
    return factor * config.n_layers * n * config.head_dim * tokens * bytes_per_value


def max_batch_reference(pool_bytes, config, tokens, bytes_per_value) -> int:
    return int(pool_bytes // _per_sequence(config, tokens, bytes_per_value))


@checker
def check_max_batch(max_batch, *, hidden=False) -> None:
    """`max_batch(pool_bytes, config, tokens, bytes_per_value)`: how many sequences of `tokens`
    tokens fit, whole, in a KV pool of `pool_bytes` bytes."""
    batch_cases = HIDDEN_BATCH_CASES if hidden else BATCH_CASES
    answers = []
    for pool, name, tokens, size in batch_cases:
        what = _batch_call(pool, name, tokens, size)
        got = call(max_batch, pool, PARAM_CONFIGS[name], tokens, size, what=what)
        value = as_number(got, what)
        if value != int(value):
            raise CheckFailed(say("{what} returned {got!r}; a batch is a whole number of "
                                  "sequences: round down, a sequence that does not fit whole "
                                  "cannot run",
                                  "{what} 返回了 {got!r}；批里的序列数是整数：向下取整，"
                                  "放不下一整条的序列没法运行", what=what, got=got))
        answers.append(int(value))
    cases = [(pool, PARAM_CONFIGS[name], tokens, size)
             for pool, name, tokens, size in batch_cases]
    wants = [max_batch_reference(*case) for case in cases]
    end_check("max_batch", answers, wants, batch_cases, _batch_failure, mistakes=lambda: [
        (say("the cache holds n_kv_heads heads per layer, not n_heads: grouped-query "
             "attention shares them",
             "缓存每层存的是 n_kv_heads 个头，不是 n_heads 个："
             "分组查询注意力（grouped-query attention）让一组查询头共用它们"),
         [int(p // _per_sequence(c, t, s, heads="q")) for p, c, t, s in cases]),
        (say("each token stores a key AND a value: the factor 2",
             "每个词元既存键也存值：别忘了因子 2"),
         [int(p // _per_sequence(c, t, s, factor=1)) for p, c, t, s in cases]),
        (say("round down: a sequence that does not fit whole cannot run",
             "向下取整：放不下一整条的序列没法运行"),
         [math.ceil(p / _per_sequence(c, t, s)) for p, c, t, s in cases]),
    ])


def _batch_call(pool, name, tokens, size) -> str:
    return say("max_batch({pool}, {name}'s config, {tokens}, {size})",
               "max_batch({pool}, {name} 的配置, {tokens}, {size})",
               pool=_shown(pool), name=name, tokens=tokens, size=size)


def _batch_failure(case, got, want, hint) -> str:
    return _wrong(_batch_call(*case), got, want,
                  hint or say("one sequence takes 2 x n_layers x n_kv_heads x head_dim x tokens "
                              "x bytes_per_value bytes; how many fit whole?",
                              "一条序列占 2 x n_layers x n_kv_heads x head_dim x tokens x "
                              "bytes_per_value 字节；能放下几条完整的序列？"))


# --- 3 · the speed-up of speculative decoding ----------------------------------------------------

SPEC_CASES = [  # (acceptance rate, drafted tokens k, draft step cost / target step cost)
    (0.7, 4, 0.0), (0.7, 4, 0.05), (0.5, 3, 0.1), (0.9, 6, 0.02), (0.3, 2, 0.2), (1.0, 4, 0.05),
    (0.0, 5, 0.1), (0.8, 1, 0.0)]
HIDDEN_SPEC_CASES = [
    (0.6, 5, 0.0), (0.8, 3, 0.1), (1.0, 2, 0.0), (0.0, 2, 0.3), (0.95, 8, 0.03), (0.4, 1, 0.25),
    (0.75, 2, 0.5), (0.2, 7, 0.01)]


def speculative_speedup_reference(alpha, k, draft_cost) -> float:
    from ...speculative.acceptance import expected_tokens_per_pass

    return expected_tokens_per_pass(alpha, k) / (1 + k * draft_cost)


@checker
def check_speculative_speedup(speculative_speedup, *, hidden=False) -> None:
    """`speculative_speedup(alpha, k, draft_cost)`: tokens a round over the round's time in
    target steps, with each of k drafted tokens accepted with probability alpha."""
    spec_cases = HIDDEN_SPEC_CASES if hidden else SPEC_CASES
    answers = []
    for alpha, k, cost in spec_cases:
        what = f"speculative_speedup({alpha}, {k}, {cost})"
        answers.append(as_number(call(
            speculative_speedup, alpha, k, cost, what=what,
            if_raises=say("at alpha = 1 every draft is accepted: k + 1 tokens a round (the "
                          "closed form's 0 / 0)",
                          "alpha = 1 时每个草稿词元都被接受：一轮得到 k + 1 个词元"
                          "（闭式公式在这里是 0 / 0）") if alpha == 1 else ""), what))
    wants = [speculative_speedup_reference(*case) for case in spec_cases]
    end_check("speculative_speedup", answers, wants, spec_cases, _speedup_failure, _close,
              lambda: _speedup_mistakes(spec_cases))


def _speedup_mistakes(spec_cases):
    return [
        (say("a token is kept only if every drafted token before it was accepted: the chance "
             "of reaching the i-th is alpha^i, not alpha (1 + alpha + ... + alpha^k, not 1 + k x "
             "alpha)",
             "一个草稿词元只有在它之前的草稿词元全部被接受时才会保留：走到第 i 个的概率是 "
             "alpha^i，而不是 alpha（1 + alpha + ... + alpha^k，而不是 1 + k x alpha）"),
         [(1 + k * a) / (1 + k * c) for a, k, c in spec_cases]),
        (say("the round always ends with one token of the target's own (after a rejection, or "
             "the bonus token when all k pass): the sum runs from alpha^0 to alpha^k",
             "每一轮最后总有一个目标模型自己的词元（拒绝之后补的那个，或 k 个全部通过时的"
             "额外词元）：求和从 alpha^0 到 alpha^k"),
         [(speculative_speedup_reference(a, k, 0) - a ** k) / (1 + k * c)
          for a, k, c in spec_cases]),
        (say("the draft's k steps take time too: divide by 1 + k x draft_cost target steps",
             "草稿的 k 步也要花时间：除以 1 + k x draft_cost 个目标模型步"),
         [speculative_speedup_reference(a, k, 0) for a, k, c in spec_cases]),
    ]


def _speedup_failure(case, got, want, hint) -> str:
    alpha, k, cost = case
    return _wrong(f"speculative_speedup({alpha}, {k}, {cost})", _shown(got), _shown(want),
                  hint or say("(1 + alpha + ... + alpha^k) tokens a round, over 1 + k x "
                              "draft_cost target steps",
                              "每轮 (1 + alpha + ... + alpha^k) 个词元，除以 1 + k x draft_cost 个"
                              "目标模型步"))


# --- 4 · goodput under an SLO (lesson 10d, Q37) --------------------------------------------------

class Served(NamedTuple):
    """One served request, as a load test records it (seconds)."""

    start: float
    ttft: float
    tpot: float
    latency: float


def _served(seed, n, ttft_slo, tpot_slo, on_the_line=False):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ttft = ttft_slo * rng.uniform(0.3, 1.6)
        tpot = tpot_slo * rng.uniform(0.4, 1.5)
        if on_the_line and i % 4 == 0:  # exactly at the limit: "within" includes it
            ttft, tpot = ttft_slo, min(tpot, tpot_slo)
        start = 1.0 + 0.5 * i + rng.uniform(0, 0.3)
        out.append(Served(start, ttft, tpot, ttft + 40 * tpot))
    return out


GOODPUT_CASES = [(1, 8, 1.0, 0.05, True), (2, 20, 0.5, 0.02, False), (3, 1, 1.0, 0.05, False),
                 (4, 12, 2.0, 0.1, True)]
HIDDEN_GOODPUT_CASES = [(11, 10, 0.8, 0.04, True), (12, 3, 1.0, 0.05, False),
                        (13, 25, 0.3, 0.03, True), (14, 6, 1.5, 0.06, False)]


def _goodput_variant(requests, ttft_slo, tpot_slo, kind):
    ok = [(r.ttft <= ttft_slo or r.tpot <= tpot_slo) if kind == "or" else
          (r.ttft < ttft_slo and r.tpot < tpot_slo) if kind == "strict" else
          (r.ttft <= ttft_slo and r.tpot <= tpot_slo) for r in requests]
    met = len(requests) if kind == "throughput" else sum(ok)
    first = 0.0 if kind == "from zero" else min(r.start for r in requests)
    span = max(r.start + r.latency for r in requests) - first
    if kind == "share":
        return met / len(requests)
    if kind == "summed latency":
        return met / sum(r.latency for r in requests)
    return met / span


GOODPUT_MISTAKES = [
    ("or", ("a request counts only if it meets both limits: TTFT and TPOT",
            "请求要同时满足两个上限才算数：TTFT 和 TPOT 都要")),
    ("strict", ("'within' includes the limit itself: ttft <= ttft_slo",
                "“不超过”包括正好等于上限：ttft <= ttft_slo")),
    ("throughput", ("that is the throughput: count only the requests within the SLO",
                    "这是吞吐量：只数满足 SLO 的请求")),
    ("share", ("goodput is a rate: requests within the SLO per second, not their share",
               "有效吞吐量是速率：每秒满足 SLO 的请求数，而不是它们所占的比例")),
    ("summed latency", ("divide by the wall-clock span, first start to last finish: requests "
                        "run at the same time",
                        "要除以墙钟时间跨度，从第一个开始到最后一个结束：请求是同时在跑的")),
    ("from zero", ("the span starts when the first request does, not at time 0",
                   "时间跨度从第一个请求开始时算起，而不是从 0 时刻")),
]


@checker
def check_goodput(goodput, *, hidden=False) -> None:
    """`goodput(requests, ttft_slo, tpot_slo)`: the requests (`Served`) whose TTFT and TPOT are
    both within their limits, per second of the span from the first start to the last finish."""
    cases = [(_served(seed, n, t, p, line), t, p)
             for seed, n, t, p, line in (HIDDEN_GOODPUT_CASES if hidden else GOODPUT_CASES)]
    answers = []
    for requests, ttft_slo, tpot_slo in cases:
        what = f"goodput(<{len(requests)} requests>, {ttft_slo}, {tpot_slo})"
        answers.append(as_number(call(goodput, list(requests), ttft_slo, tpot_slo, what=what),
                                 what))
    end_variant_check("goodput", answers, cases, _goodput_variant, GOODPUT_MISTAKES,
                      _goodput_failure, _close)


def _goodput_failure(case, got, want, hint) -> str:
    requests, ttft_slo, tpot_slo = case
    return _wrong(say("goodput(<{n} requests>, {t}, {p})", "goodput(<{n} 个请求>, {t}, {p})",
                      n=len(requests), t=ttft_slo, p=tpot_slo), _shown(got), _shown(want),
                  hint or say("count the requests with ttft <= ttft_slo and tpot <= tpot_slo, "
                              "divide by max(start + latency) - min(start)",
                              "数出 ttft <= ttft_slo 且 tpot <= tpot_slo 的请求，除以 "
                              "max(start + latency) - min(start)"))


# --- the self-check quiz -------------------------------------------------------------------------

@dataclass(frozen=True)
class QuizQuestion:
    """One quiz question. `choices` set: multiple choice, `answer` the right choice's index.
    `choices` None: numeric, `answer` a number, right within `tolerance` (relative)."""

    prompt: str
    answer: float | int
    explanation: str
    choices: tuple[str, ...] | None = None
    tolerance: float = 0.05
    unit: str = ""

    @property
    def numeric(self) -> bool:
        return self.choices is None

    def answer_text(self) -> str:
        if self.numeric:
            return f"{self.answer:.4g} {self.unit}".strip()
        return self.choices[self.answer]


def grade(question: QuizQuestion, response) -> tuple[bool, str]:
    """(correct, message) for one response: a choice index, or a number (a string is parsed)."""
    if response is None or (isinstance(response, str) and not response.strip()):
        return False, say("No answer yet: choose or type one, then press Check.",
                          "还没有作答：先选一个或填一个数，再点“检查”。")
    if question.numeric:
        try:
            value = float(str(response).replace(",", "").strip())
        except ValueError:
            return False, say("{response!r} is not a number.", "{response!r} 不是一个数。",
                              response=response)
        ok = math.isclose(value, question.answer, rel_tol=question.tolerance)
    else:
        if isinstance(response, str):
            if response not in question.choices:
                return False, say("{response!r} is not one of the choices.",
                                  "{response!r} 不在选项里。", response=response)
            response = question.choices.index(response)
        ok = int(response) == question.answer
    verdict = say("✅ Right.", "✅ 答对了。") if ok else say("❌ Not quite.", "❌ 不太对。")
    return ok, say("{verdict} Answer: {answer}. {explanation}",
                   "{verdict}答案：{answer}。{explanation}", verdict=verdict,
                   answer=question.answer_text(), explanation=question.explanation)


class Quiz:
    """Questions one at a time; each counts once, at its first check."""

    def __init__(self, questions):
        self.questions = list(questions)
        if not self.questions:
            raise ValueError("a quiz needs at least one question")
        self.index = 0
        self.results: dict[int, bool] = {}

    @property
    def current(self) -> QuizQuestion:
        return self.questions[self.index]

    @property
    def score(self) -> int:
        return sum(self.results.values())

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.questions)

    def check(self, response) -> tuple[bool, str]:
        ok, message = grade(self.current, response)
        answered = response is not None and not (isinstance(response, str)
                                                 and not response.strip())
        if answered and self.index not in self.results:
            self.results[self.index] = ok
        return ok, message

    def next(self) -> QuizQuestion:
        self.index = (self.index + 1) % len(self.questions)
        return self.current

    def status(self) -> str:
        return say("Question {i} of {n} · score {score} / {answered} answered",
                   "第 {i} 题，共 {n} 题 · 得分 {score} / 已答 {answered} 题", i=self.index + 1,
                   n=len(self.questions), score=self.score, answered=len(self.results))


def build_quiz(config) -> list[QuizQuestion]:
    """The chapter's quiz; numeric answers computed from `config` (a minillm ModelConfig)."""
    c = config
    kv_8k_fp16 = kv_cache_gb_reference(c.n_layers, c.n_kv_heads, c.head_dim, 8192, 1, 2)
    kv_mha = kv_cache_gb_reference(c.n_layers, c.n_heads, c.head_dim, 8192, 1, 2)
    per_token_kb = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 2 / 1e3
    return [
        QuizQuestion(say("Sampling with temperature T → 0 gives the same tokens as …",
                         "温度 T → 0 时采样得到的词元与哪种方法相同？"),
                     choices=(say("beam search", "束搜索"), say("greedy decoding", "贪心解码"),
                              say("top-k with k = 50", "k = 50 的 top-k"),
                              say("uniform random choice", "均匀随机选择")), answer=1,
                     explanation=say("Dividing the logits by a tiny T puts all probability on the "
                                     "largest logit: the argmax, which greedy picks.",
                                     "把 logits 除以一个极小的 T，全部概率都落到最大的 logit 上："
                                     "也就是 argmax，正是贪心解码选的那个。")),
        QuizQuestion(say("KV cache of this model ({layers} layers, {kv} KV heads of width {hd}) "
                         "for one 8,192-token sequence in fp16, in GB?",
                         "这个模型（{layers} 层，{kv} 个宽 {hd} 的 KV 头）为一条 8,192 个词元的"
                         "序列用 fp16 存 KV 缓存，要多少 GB？",
                         layers=c.n_layers, kv=c.n_kv_heads, hd=c.head_dim),
                     answer=kv_8k_fp16, unit="GB",
                     explanation=say("2 (K and V) × layers × kv_heads × head_dim × tokens × 2 "
                                     "bytes.", "2（K 和 V）× 层数 × kv_heads × head_dim × "
                                     "词元数 × 2 字节。")),
        QuizQuestion(say("The same cache if every one of the {n} query heads had its own K/V "
                         "head (no grouped-query attention), in GB?",
                         "如果 {n} 个查询头每个都有自己的 K/V 头（不用分组查询注意力），"
                         "同样的缓存要多少 GB？", n=c.n_heads), answer=kv_mha, unit="GB",
                     explanation=say("{x}× as much: GQA shares each K/V head among a group of "
                                     "query heads.",
                                     "是原来的 {x} 倍：GQA 让一组查询头共用一个 K/V 头。",
                                     x=c.n_heads // c.n_kv_heads)),
        QuizQuestion(say("KV-cache kilobytes per token of this model in fp16 (1 kB = 1000 "
                         "bytes)?", "这个模型用 fp16 时，每个词元的 KV 缓存占多少 kB"
                         "（1 kB = 1000 字节）？"),
                     answer=per_token_kb, unit="kB",
                     explanation=say("2 × layers × kv_heads × head_dim × 2 bytes.",
                                     "2 × 层数 × kv_heads × head_dim × 2 字节。")),
        QuizQuestion(say("Weights of a 70B-parameter model in int4, in GB (ignore scales)?",
                         "700 亿参数（70B）的模型用 int4 存权重，要多少 GB（不计缩放因子）？"),
                     answer=weight_memory_gb_reference(70e9, 4), unit="GB",
                     explanation=say("70e9 × 4 bits / 8 = 35e9 bytes.",
                                     "70e9 × 4 比特 / 8 = 35e9 字节。")),
        QuizQuestion(say("Batch-1 decode of a 7B fp16 model (14 GB) on a GPU with 3,350 GB/s: "
                         "the most tokens per second?",
                         "7B 的 fp16 模型（14 GB）在带宽 3,350 GB/s 的 GPU 上以批大小 1 解码："
                         "每秒最多多少个词元？"), answer=decode_bound_reference(14e9, 3350),
                     unit=say("tokens/s", "词元/秒"), tolerance=0.1,
                     explanation=say("Every step reads every weight once: bandwidth / weight "
                                     "bytes.", "每一步都把全部权重读一遍：带宽 / 权重字节数。")),
        QuizQuestion(say("Which phase is compute-bound on long prompts?",
                         "提示词很长时，哪个阶段是计算受限的？"),
                     choices=(say("prefill", "预填充"), say("decode", "解码"),
                              say("detokenization", "把词元还原成文本")), answer=0,
                     explanation=say("Prefill runs many tokens through each weight at once (high "
                                     "arithmetic intensity); decode reads every weight for one "
                                     "token.", "预填充让许多词元同时经过每个权重（算术强度高）；"
                                     "解码为了一个词元就要把每个权重读一遍。")),
        QuizQuestion(say("Greedy speculative decoding, compared with plain greedy decoding, "
                         "gives …", "贪心的推测解码与普通贪心解码相比，得到的是……"),
                     choices=(say("the same tokens", "相同的词元"),
                              say("slightly different tokens", "略有不同的词元"),
                              say("the draft model's tokens", "草稿模型的词元")), answer=0,
                     explanation=say("The target verifies every drafted token; only its own "
                                     "argmax is ever kept.",
                                     "目标模型逐个验证草稿词元，留下的永远只是它自己的 argmax。")),
        QuizQuestion(say("transformers applies top-k and top-p in which order?",
                         "transformers 按什么顺序应用 top-k 和 top-p？"),
                     choices=(say("top-p, then top-k", "先 top-p，再 top-k"),
                              say("top-k, then top-p", "先 top-k，再 top-p"),
                              say("at the same time", "同时进行")),
                     answer=1,
                     explanation=say("TopK then TopP (after temperature); top-p then sees the "
                                     "renormalised top-k distribution.",
                                     "先 TopK 再 TopP（都在温度之后）；top-p 看到的是 top-k 之后"
                                     "重新归一化的分布。")),
    ]


def quiz_widget(questions):
    """An ipywidgets quiz: one question at a time, Check reveals the answer, Next moves on."""
    import ipywidgets as widgets

    quiz = Quiz(questions)
    title = widgets.HTML()
    choices = widgets.RadioButtons(options=[], value=None, layout={"width": "auto"})
    number = widgets.Text(placeholder=say("your number", "你的答案（数）"),
                          layout={"width": "14em"})
    feedback = widgets.HTML(say("<i>Answer, then press Check.</i>", "<i>作答后点“检查”。</i>"))
    score = widgets.HTML()
    check = widgets.Button(description=say("Check", "检查"), button_style="primary")
    nxt = widgets.Button(description=say("Next question", "下一题"))

    def show():
        q = quiz.current
        title.value = f"<b>Q{quiz.index + 1}.</b> {q.prompt}"
        if q.numeric:
            number.value = ""
            number.layout.display = None
            choices.layout.display = "none"
        else:
            choices.options = list(q.choices)
            choices.value = None
            choices.layout.display = None
            number.layout.display = "none"
        score.value = f"<small>{quiz.status()}</small>"

    def on_check(_):
        response = number.value if quiz.current.numeric else choices.value
        ok, message = quiz.check(response)
        colour = "green" if ok else "#b00"
        feedback.value = f"<span style='color:{colour}'>{message}</span>"
        score.value = f"<small>{quiz.status()}</small>"

    def on_next(_):
        quiz.next()
        feedback.value = say("<i>Answer, then press Check. ({i}/{n})</i>",
                             "<i>作答后点“检查”。（{i}/{n}）</i>", i=quiz.index + 1,
                             n=len(questions))
        show()

    check.on_click(on_check)
    nxt.on_click(on_next)
    show()
    box = widgets.VBox([title, choices, number, widgets.HBox([check, nxt]), feedback, score])
    box.quiz = quiz
    return box
