"""Checkers for exercises/10_interview_qa.ipynb, and the chapter's self-check quiz.

The exercise asks three estimates an interviewer expects at a whiteboard, each checked against
its formula on several cases: the batch-1 decode bound of a model split by tensor parallelism,
the largest batch a KV pool holds, and the expected speed-up of speculative decoding
(`minillm.speculative.expected_tokens_per_pass`). GB here is 10^9 bytes, as GPU makers count.

The quiz (`build_quiz`, `Quiz`, `quiz_widget`) asks one question at a time, multiple-choice or
numeric (checked with a relative tolerance), reveals the answer and keeps a score. Its numeric
answers are computed from a model's config, never typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...model.config import ModelConfig
from ._base import CheckFailed, as_number, call, checker, is_close, matching_mistake, passed

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


# --- 1 · the decode bound of a tensor-parallel model ---------------------------------------------

TP_CASES = [  # (parameters, bytes per parameter, GPUs, bandwidth of one GPU in bytes/s)
    (70e9, 1, 4, 3.35e12), (70e9, 2, 8, 3.35e12), (8e9, 2, 1, 1.0e12), (405e9, 1, 8, 4.8e12),
    (135e6, 4, 1, 20e9), (70e9, 0.5, 2, 2.0e12)]


def tp_decode_bound_reference(n_params, bytes_per_param, n_gpus, bandwidth):
    """Tokens a second at batch 1: each GPU reads its 1/n_gpus of the weights every step, all
    GPUs at once (communication and the KV cache left out)."""
    return bandwidth / (n_params * bytes_per_param / n_gpus)


@checker
def check_tp_decode_bound(tp_decode_bound) -> None:
    """`tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth)`: the most tokens a second
    batch-1 decode reaches when tensor parallelism splits the weights over `n_gpus` GPUs."""
    answers = []
    for case in TP_CASES:
        what = "tp_decode_bound({}, {}, {}, {})".format(*(_shown(v) for v in case))
        answers.append(as_number(call(tp_decode_bound, *case, what=what), what))
    wants = [tp_decode_bound_reference(*case) for case in TP_CASES]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _close(g, w)]
    if not wrong:
        passed("tp_decode_bound", len(TP_CASES))
        return
    i = wrong[0]
    hint = matching_mistake(answers, [
        ("with tensor parallelism each GPU holds and reads only 1/n_gpus of the weights, and all "
         "GPUs read at the same time: divide the weight bytes by n_gpus",
         [b / (n * s) for n, s, g, b in TP_CASES]),
        ("bytes_per_param is already in bytes: do not multiply by 8 (that counts bits)",
         [tp_decode_bound_reference(*case) / 8 for case in TP_CASES]),
        ("that is seconds per token: the bound in tokens a second is its inverse",
         [1 / tp_decode_bound_reference(*case) for case in TP_CASES]),
        ("use bytes_per_param as given (1 for fp8, 0.5 for int4), not 2 bytes for every model",
         [tp_decode_bound_reference(n, 2, g, b) for n, s, g, b in TP_CASES]),
    ], _close)
    case = TP_CASES[i]
    raise CheckFailed("tp_decode_bound({}, {}, {}, {})".format(*(_shown(v) for v in case))
                      + f" returned {_shown(answers[i])}, expected {_shown(wants[i])} tokens/s"
                      + (f": {hint}" if hint else ": every step each GPU reads its share of the "
                         "weights, n_params x bytes_per_param / n_gpus bytes, at `bandwidth` "
                         "bytes a second"))


# --- 2 · the largest batch a KV pool holds -------------------------------------------------------

BATCH_CASES = [  # (pool bytes, config name, tokens per sequence, bytes per value)
    (80e9, "Llama-3-8B", 8192, 2), (80e9, "Llama-3-70B", 8192, 2), (80e9, "Llama-2-7B", 4096, 2),
    (24e9, "Llama-3-8B", 32768, 1), (1e9, "SmolLM2-135M", 8192, 2), (10_000, "a tiny model", 10, 4),
    (40e9, "Llama-3-70B", 4000, 1)]


def _per_sequence(config, tokens, bytes_per_value, *, heads="kv", factor=2):
    n = config.n_kv_heads if heads == "kv" else config.n_heads
    return factor * config.n_layers * n * config.head_dim * tokens * bytes_per_value


def max_batch_reference(pool_bytes, config, tokens, bytes_per_value) -> int:
    return int(pool_bytes // _per_sequence(config, tokens, bytes_per_value))


@checker
def check_max_batch(max_batch) -> None:
    """`max_batch(pool_bytes, config, tokens, bytes_per_value)`: how many sequences of `tokens`
    tokens fit, whole, in a KV pool of `pool_bytes` bytes."""
    answers = []
    for pool, name, tokens, size in BATCH_CASES:
        what = f"max_batch({_shown(pool)}, {name}'s config, {tokens}, {size})"
        got = call(max_batch, pool, PARAM_CONFIGS[name], tokens, size, what=what)
        value = as_number(got, what)
        if value != int(value):
            raise CheckFailed(f"{what} returned {got!r}; a batch is a whole number of "
                              "sequences: round down, a sequence that does not fit whole cannot "
                              "run")
        answers.append(int(value))
    cases = [(pool, PARAM_CONFIGS[name], tokens, size) for pool, name, tokens, size in BATCH_CASES]
    wants = [max_batch_reference(*case) for case in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("max_batch", len(cases))
        return
    i = wrong[0]
    hint = matching_mistake(answers, [
        ("the cache holds n_kv_heads heads per layer, not n_heads: grouped-query attention "
         "shares them", [int(p // _per_sequence(c, t, s, heads="q")) for p, c, t, s in cases]),
        ("each token stores a key AND a value: the factor 2",
         [int(p // _per_sequence(c, t, s, factor=1)) for p, c, t, s in cases]),
        ("round down: a sequence that does not fit whole cannot run",
         [math.ceil(p / _per_sequence(c, t, s)) for p, c, t, s in cases]),
    ], int.__eq__)
    pool, name, tokens, size = BATCH_CASES[i]
    raise CheckFailed(f"max_batch({_shown(pool)}, {name}'s config, {tokens}, {size}) returned "
                      f"{answers[i]}, expected {wants[i]}"
                      + (f": {hint}" if hint else ": one sequence takes 2 x n_layers x "
                         "n_kv_heads x head_dim x tokens x bytes_per_value bytes; how many fit "
                         "whole?"))


# --- 3 · the speed-up of speculative decoding ----------------------------------------------------

SPEC_CASES = [  # (acceptance rate, drafted tokens k, draft step cost / target step cost)
    (0.7, 4, 0.0), (0.7, 4, 0.05), (0.5, 3, 0.1), (0.9, 6, 0.02), (0.3, 2, 0.2), (1.0, 4, 0.05),
    (0.0, 5, 0.1), (0.8, 1, 0.0)]


def speculative_speedup_reference(alpha, k, draft_cost) -> float:
    from ...speculative.acceptance import expected_tokens_per_pass

    return expected_tokens_per_pass(alpha, k) / (1 + k * draft_cost)


@checker
def check_speculative_speedup(speculative_speedup) -> None:
    """`speculative_speedup(alpha, k, draft_cost)`: tokens a round over the round's time in
    target steps, with each of k drafted tokens accepted with probability alpha."""
    answers = []
    for alpha, k, cost in SPEC_CASES:
        what = f"speculative_speedup({alpha}, {k}, {cost})"
        answers.append(as_number(call(
            speculative_speedup, alpha, k, cost, what=what,
            if_raises="at alpha = 1 every draft is accepted: k + 1 tokens a round (the closed "
                      "form's 0 / 0)" if alpha == 1 else ""), what))
    wants = [speculative_speedup_reference(*case) for case in SPEC_CASES]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _close(g, w)]
    if not wrong:
        passed("speculative_speedup", len(SPEC_CASES))
        return
    i = wrong[0]
    mistakes = [
        ("a token is kept only if every drafted token before it was accepted: the chance of "
         "reaching the i-th is alpha^i, not alpha (1 + alpha + ... + alpha^k, not 1 + k x alpha)",
         [(1 + k * a) / (1 + k * c) for a, k, c in SPEC_CASES]),
        ("the round always ends with one token of the target's own (after a rejection, or the "
         "bonus token when all k pass): the sum runs from alpha^0 to alpha^k",
         [(speculative_speedup_reference(a, k, 0) - a ** k) / (1 + k * c)
          for a, k, c in SPEC_CASES]),
        ("the draft's k steps take time too: divide by 1 + k x draft_cost target steps",
         [speculative_speedup_reference(a, k, 0) for a, k, c in SPEC_CASES]),
    ]
    hint = matching_mistake(answers, mistakes, _close)
    alpha, k, cost = SPEC_CASES[i]
    raise CheckFailed(f"speculative_speedup({alpha}, {k}, {cost}) returned {_shown(answers[i])}, "
                      f"expected {_shown(wants[i])}"
                      + (f": {hint}" if hint else ": (1 + alpha + ... + alpha^k) tokens a round, "
                         "over 1 + k x draft_cost target steps"))


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
        return False, "No answer yet: choose or type one, then press Check."
    if question.numeric:
        try:
            value = float(str(response).replace(",", "").strip())
        except ValueError:
            return False, f"{response!r} is not a number."
        ok = math.isclose(value, question.answer, rel_tol=question.tolerance)
    else:
        if isinstance(response, str):
            if response not in question.choices:
                return False, f"{response!r} is not one of the choices."
            response = question.choices.index(response)
        ok = int(response) == question.answer
    verdict = "✅ Right." if ok else "❌ Not quite."
    return ok, f"{verdict} Answer: {question.answer_text()}. {question.explanation}"


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
        return (f"Question {self.index + 1} of {len(self.questions)} · score {self.score} / "
                f"{len(self.results)} answered")


def build_quiz(config) -> list[QuizQuestion]:
    """The chapter's quiz; numeric answers computed from `config` (a minillm ModelConfig)."""
    c = config
    kv_8k_fp16 = kv_cache_gb_reference(c.n_layers, c.n_kv_heads, c.head_dim, 8192, 1, 2)
    kv_mha = kv_cache_gb_reference(c.n_layers, c.n_heads, c.head_dim, 8192, 1, 2)
    per_token_kb = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 2 / 1e3
    return [
        QuizQuestion("Sampling with temperature T → 0 gives the same tokens as …",
                     choices=("beam search", "greedy decoding", "top-k with k = 50",
                              "uniform random choice"), answer=1,
                     explanation="Dividing the logits by a tiny T puts all probability on the "
                                 "largest logit: the argmax, which greedy picks."),
        QuizQuestion(f"KV cache of this model ({c.n_layers} layers, {c.n_kv_heads} KV heads of "
                     f"width {c.head_dim}) for one 8,192-token sequence in fp16, in GB?",
                     answer=kv_8k_fp16, unit="GB",
                     explanation="2 (K and V) × layers × kv_heads × head_dim × tokens × 2 bytes."),
        QuizQuestion(f"The same cache if every one of the {c.n_heads} query heads had its own "
                     "K/V head (no grouped-query attention), in GB?", answer=kv_mha, unit="GB",
                     explanation=f"{c.n_heads // c.n_kv_heads}× as much: GQA shares each K/V "
                                 "head among a group of query heads."),
        QuizQuestion("KV-cache kilobytes per token of this model in fp16 (1 kB = 1000 bytes)?",
                     answer=per_token_kb, unit="kB",
                     explanation="2 × layers × kv_heads × head_dim × 2 bytes."),
        QuizQuestion("Weights of a 70B-parameter model in int4, in GB (ignore scales)?",
                     answer=weight_memory_gb_reference(70e9, 4), unit="GB",
                     explanation="70e9 × 4 bits / 8 = 35e9 bytes."),
        QuizQuestion("Batch-1 decode of a 7B fp16 model (14 GB) on a GPU with 3,350 GB/s: the "
                     "most tokens per second?", answer=decode_bound_reference(14e9, 3350),
                     unit="tokens/s", tolerance=0.1,
                     explanation="Every step reads every weight once: bandwidth / weight bytes."),
        QuizQuestion("Which phase is compute-bound on long prompts?",
                     choices=("prefill", "decode", "detokenization"), answer=0,
                     explanation="Prefill runs many tokens through each weight at once (high "
                                 "arithmetic intensity); decode reads every weight for one token."),
        QuizQuestion("Greedy speculative decoding, compared with plain greedy decoding, gives …",
                     choices=("the same tokens", "slightly different tokens",
                              "the draft model's tokens"), answer=0,
                     explanation="The target verifies every drafted token; only its own argmax "
                                 "is ever kept."),
        QuizQuestion("transformers applies top-k and top-p in which order?",
                     choices=("top-p, then top-k", "top-k, then top-p", "at the same time"),
                     answer=1,
                     explanation="TopK then TopP (after temperature); top-p then sees the "
                                 "renormalised top-k distribution."),
    ]


def quiz_widget(questions):
    """An ipywidgets quiz: one question at a time, Check reveals the answer, Next moves on."""
    import ipywidgets as widgets

    quiz = Quiz(questions)
    title = widgets.HTML()
    choices = widgets.RadioButtons(options=[], value=None, layout={"width": "auto"})
    number = widgets.Text(placeholder="your number", layout={"width": "14em"})
    feedback = widgets.HTML("<i>Answer, then press Check.</i>")
    score = widgets.HTML()
    check = widgets.Button(description="Check", button_style="primary")
    nxt = widgets.Button(description="Next question")

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
        feedback.value = f"<i>Answer, then press Check. ({quiz.index + 1}/{len(questions)})</i>"
        show()

    check.on_click(on_check)
    nxt.on_click(on_next)
    show()
    box = widgets.VBox([title, choices, number, widgets.HBox([check, nxt]), feedback, score])
    box.quiz = quiz
    return box
