"""Checkers for exercises/10_interview_qa.ipynb, and the chapter's self-check quiz.

The exercise is back-of-the-envelope estimation, as an interviewer asks it: weight memory, KV-cache
memory, how many sequences fit, and the memory-bandwidth bound on decode speed. GB here is 10^9
bytes, as GPU makers count.

The quiz (`build_quiz`, `Quiz`, `quiz_widget`) asks one question at a time, multiple-choice or
numeric (checked with a relative tolerance), reveals the answer and keeps a score. Its numeric
answers are computed from a model's config, never typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._base import CheckFailed, call, expect, expect_close, passed

GB = 1e9
GIB = 2 ** 30


def _number(got, what):
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
        raise CheckFailed(f"{what} returned {got!r}; return a finite number")
    return float(got)


def _close(a, b, rel=1e-6):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


# --- 1 · weight memory ---------------------------------------------------------------------------

WEIGHT_CASES = [(7e9, 16), (70e9, 16), (7e9, 4), (70e9, 4), (135e6, 32), (13e9, 8)]


def weight_memory_gb_reference(n_params, bits_per_weight):
    return n_params * bits_per_weight / 8 / GB


def check_weight_memory_gb(weight_memory_gb) -> None:
    """`weight_memory_gb(n_params, bits_per_weight)`: GB (10^9 bytes) the weights take."""
    for n, bits in WEIGHT_CASES:
        what = f"weight_memory_gb({n:g}, {bits})"
        want = weight_memory_gb_reference(n, bits)
        got = _number(call(weight_memory_gb, n, bits), what)
        if _close(got, want * GB):
            raise CheckFailed(f"{what} returned {got:g}: that is bytes; divide by 1e9 for GB "
                              f"({want:g})")
        if _close(got, want * GB / GIB):
            raise CheckFailed(f"{what} returned {got:g}: you divided by 2**30 (GiB); this "
                              f"exercise counts GB as 1e9 bytes ({want:g})")
        if _close(got, want * 8):
            raise CheckFailed(f"{what} returned {got:g}: bits per weight are not bytes; divide "
                              f"by 8 ({want:g})")
        expect_close(got, want, what, rel=1e-6)
    passed("weight_memory_gb", len(WEIGHT_CASES))


# --- 2 · KV-cache memory -------------------------------------------------------------------------

# (n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value)
KV_CASES = [
    (32, 32, 128, 4096, 1, 2),    # Llama-2-7B, fp16, one 4k sequence
    (80, 8, 128, 4096, 8, 2),     # Llama-2-70B (grouped-query attention), batch 8
    (30, 3, 64, 8192, 1, 2),      # SmolLM2-135M at its full 8k context
    (30, 3, 64, 2048, 16, 4),     # SmolLM2-135M in fp32, 16 sequences
]


def kv_cache_gb_reference(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * batch * bytes_per_value / GB


def check_kv_cache_gb(kv_cache_gb) -> None:
    """`kv_cache_gb(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value)`."""
    for case in KV_CASES:
        what = f"kv_cache_gb{case}"
        want = kv_cache_gb_reference(*case)
        got = _number(call(kv_cache_gb, *case), what)
        batch = case[4]
        if _close(got, want / 2):
            raise CheckFailed(f"{what} returned {got:g}, half the answer: the cache holds keys "
                              f"AND values, so count 2 tensors per layer ({want:g})")
        if batch > 1 and _close(got, want / batch):
            raise CheckFailed(f"{what} returned {got:g}: that is one sequence; every sequence "
                              f"of the batch has its own cache (x {batch} = {want:g})")
        if _close(got, want * GB):
            raise CheckFailed(f"{what} returned {got:g}: that is bytes; divide by 1e9 ({want:g})")
        if _close(got, want * GB / GIB):
            raise CheckFailed(f"{what} returned {got:g}: you divided by 2**30 (GiB); use 1e9 "
                              f"({want:g})")
        expect_close(got, want, what, rel=1e-6)
    passed("kv_cache_gb", len(KV_CASES))


# --- 3 · how many sequences fit ------------------------------------------------------------------

# (gpu_memory_gb, weight_gb, kv_gb_per_sequence)
BATCH_CASES = [(80, 14, 2.147483648), (24, 14, 0.5), (80, 140, 1.0), (141, 35, 1.34217728)]


def max_batch_reference(gpu_memory_gb, weight_gb, kv_gb_per_sequence):
    return max(0, math.floor((gpu_memory_gb - weight_gb) / kv_gb_per_sequence))


def check_max_batch(max_batch) -> None:
    """`max_batch(gpu_memory_gb, weight_gb, kv_gb_per_sequence)`: whole sequences that fit."""
    for gpu, weights, kv in BATCH_CASES:
        what = f"max_batch({gpu}, {weights}, {kv})"
        want = max_batch_reference(gpu, weights, kv)
        got = call(max_batch, gpu, weights, kv)
        if isinstance(got, float) and not got.is_integer():
            raise CheckFailed(f"{what} returned {got}: a batch holds whole sequences; round "
                              f"down ({want})")
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"{what} returned {got!r}; return an int")
        if got == math.floor(gpu / kv) and got != want:
            raise CheckFailed(f"{what} returned {got}: the weights take {weights} GB first; "
                              f"only the rest holds KV caches ({want})")
        if got < 0:
            raise CheckFailed(f"{what} returned {got}: when the weights do not fit, no "
                              f"sequence does; return 0")
        expect(got == want, f"{what} returned {got}, expected {want}")
    passed("max_batch", len(BATCH_CASES))


# --- 4 · the bandwidth bound on decode -----------------------------------------------------------

# (weight_bytes, bandwidth_gb_per_s)
BOUND_CASES = [(14e9, 3350), (14e9, 900), (3.5e9, 3350), (140e9, 4800), (0.54e9, 50)]


def decode_bound_reference(weight_bytes, bandwidth_gb_per_s):
    return bandwidth_gb_per_s * GB / weight_bytes


def check_decode_bound(decode_tokens_per_s_bound) -> None:
    """`decode_tokens_per_s_bound(weight_bytes, bandwidth_gb_per_s)`: batch-1 tokens/s at most."""
    for n_bytes, bandwidth in BOUND_CASES:
        what = f"decode_tokens_per_s_bound({n_bytes:g}, {bandwidth})"
        want = decode_bound_reference(n_bytes, bandwidth)
        got = _number(call(decode_tokens_per_s_bound, n_bytes, bandwidth), what)
        if _close(got, 1 / want):
            raise CheckFailed(f"{what} returned {got:g}: that is seconds per token; tokens per "
                              f"second is bandwidth / bytes per token ({want:g})")
        if _close(got, bandwidth / n_bytes):
            raise CheckFailed(f"{what} returned {got:g}: the bandwidth is in GB/s; multiply by "
                              f"1e9 to get bytes per second ({want:g})")
        expect_close(got, want, what, rel=1e-6)
    passed("decode_tokens_per_s_bound", len(BOUND_CASES))


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
