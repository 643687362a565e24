"""Checkers for exercises/10_interview_qa.ipynb, and the chapter's self-check quiz.

The exercise answers three interview questions with a piece of the engine each, checked against
minillm: the sampling filters in the order `generate()` applies them (Q3, against
`minillm.decoding.build_processors`), a model's parameter count from its config (Q10, against a
`minillm.model.LlamaModel` built on the meta device), and its KV-cache bytes (Q13, against a real
`minillm.KVCache`). GB here is 10^9 bytes, as GPU makers count.

The quiz (`build_quiz`, `Quiz`, `quiz_widget`) asks one question at a time, multiple-choice or
numeric (checked with a relative tolerance), reveals the answer and keeps a score. Its numeric
answers are computed from a model's config, never typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...decoding import GenerationConfig
from ...decoding.processors import (TemperatureProcessor, TopKProcessor, TopPProcessor,
                                   build_processors)
from ...model.config import ModelConfig
from ._base import CheckFailed, as_int, call, checker, expect, matching_mistake, passed, short

GB = 1e9


# --- the formulas the lesson and the quiz use ----------------------------------------------------

def weight_memory_gb_reference(n_params, bits_per_weight):
    return n_params * bits_per_weight / 8 / GB


def kv_cache_gb_reference(n_layers, n_kv_heads, head_dim, tokens, batch, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * batch * bytes_per_value / GB


def decode_bound_reference(weight_bytes, bandwidth_gb_per_s):
    return bandwidth_gb_per_s * GB / weight_bytes


# --- 1 · Q3: the sampling filters, in generate()'s order -----------------------------------------

def _sampling_logits(seed, batch, vocab):
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * 2.5


SAMPLING_CASES = [  # (seed, batch, vocab, temperature, top_k, top_p)
    (0, 3, 20, 0.7, 5, 0.9), (1, 2, 30, 1.0, 0, 0.8), (2, 3, 20, 1.3, 10, 1.0),
    (3, 1, 12, 0.5, 3, 0.5), (4, 2, 20, 1.0, 50, 0.95), (5, 4, 50, 2.0, 8, 0.6),
    (6, 3, 40, 0.8, 20, 0.3), (7, 2, 16, 1.0, 0, 1.0)]


def _sampling_reference(logits, temperature, top_k, top_p):
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
    return build_processors(config)(None, logits)


def _chain(logits, temperature, top_k, top_p, order):
    steps = {"t": TemperatureProcessor(temperature) if temperature != 1.0 else None,
             "k": TopKProcessor(top_k) if top_k else None,
             "p": TopPProcessor(top_p) if top_p < 1.0 else None}
    for name in order:
        if steps[name] is not None:
            logits = steps[name](None, logits)
    return logits


def _same_scores(got, want) -> bool:
    if got.shape != want.shape or not torch.equal(torch.isneginf(got), torch.isneginf(want)):
        return False
    keep = ~torch.isneginf(want)
    return bool(torch.allclose(got[keep].float(), want[keep].float(), rtol=1e-5, atol=1e-6))


@checker
def check_sampling_filter(sampling_filter) -> None:
    """`sampling_filter(logits, temperature, top_k, top_p)`: the scores generate() samples from:
    temperature, then top-k (0: off), then top-p (1.0: off)."""
    cases = [(_sampling_logits(seed, b, v), t, k, p) for seed, b, v, t, k, p in SAMPLING_CASES]
    answers = []
    for logits, t, k, p in cases:
        what = (f"sampling_filter(logits of shape {tuple(logits.shape)}, temperature={t}, "
                f"top_k={k}, top_p={p})")
        got = call(sampling_filter, logits, t, k, p, what=what,
                   if_raises="top_k = 0 means no top-k filter" if k == 0 else
                   (f"top_k = {k} is more than the vocabulary ({logits.shape[-1]}): keep every "
                    "token" if k > logits.shape[-1] else ""))
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(logits.shape)
               and got.is_floating_point(),
               f"{what} returned {short(got)}; return the filtered scores, a float tensor shaped "
               "like the logits, removed tokens at -inf")
        answers.append(got.detach())
    wants = [_sampling_reference(*c) for c in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _same_scores(g, w)]
    if not wrong:
        passed("sampling_filter", len(cases))
        return
    i = wrong[0]
    hint = matching_mistake(answers, [
        ("you applied top-p before top-k, the order the source text gives; generate() applies "
         "top-k first, then top-p over what is left, and on these logits the order changes the "
         "result", [_chain(*c, "tpk") for c in cases]),
        ("divide by the temperature BEFORE the filters: top-p measures probabilities, and the "
         "temperature changes them", [_chain(*c, "kpt") for c in cases]),
        ("the temperature is missing: divide the logits by it first",
         [_chain(*c, "kp") for c in cases]),
        ("return the filtered scores (logits), not probabilities: generate() takes the softmax "
         "when it samples", [torch.softmax(w, -1) for w in wants]),
    ], _same_scores)
    logits, t, k, p = cases[i]
    raise CheckFailed(f"sampling_filter(logits of shape {tuple(logits.shape)}, temperature={t}, "
                      f"top_k={k}, top_p={p}) differs from generate()'s processors: "
                      + (hint or "temperature first, then top-k (skipped when 0), then top-p "
                                 "(skipped when 1.0)"))


# --- 2 · Q10: parameters from the config ---------------------------------------------------------

PARAM_CONFIGS = {
    "SmolLM2-135M": ModelConfig("llama", 49152, 576, 30, 9, 3, 64, 1536, tie_embeddings=True),
    "SmolLM2-360M": ModelConfig("llama", 49152, 960, 32, 15, 5, 64, 2560, tie_embeddings=True),
    "Llama-2-7B": ModelConfig("llama", 32000, 4096, 32, 32, 32, 128, 11008),
    "Llama-3-8B": ModelConfig("llama", 128256, 4096, 32, 32, 8, 128, 14336),
    "a tiny model": ModelConfig("llama", 100, 16, 2, 4, 2, 4, 40),
}


def parameter_count_reference(config: ModelConfig) -> int:
    """The parameters of minillm's LlamaModel for `config`, built on the meta device (no memory)."""
    from ...model import LlamaModel

    with torch.device("meta"):
        model = LlamaModel(config)
    return sum(p.numel() for p in model.parameters())


def _param_variant(c, *, head=None, norms=True, gqa=True, mlp_matrices=3):
    kv = c.n_kv_heads if gqa else c.n_heads
    attention = c.hidden_size * c.head_dim * (2 * c.n_heads + 2 * kv)
    layer = attention + mlp_matrices * c.hidden_size * c.intermediate_size
    layer += 2 * c.hidden_size if norms else 0
    tied = c.tie_embeddings if head is None else not head
    total = c.vocab_size * c.hidden_size + c.n_layers * layer + (c.hidden_size if norms else 0)
    return total + (0 if tied else c.vocab_size * c.hidden_size)


@checker
def check_count_parameters(count_parameters) -> None:
    """`count_parameters(config)`: the parameters of a Llama model with this config, as the
    model minillm builds from it has."""
    names = list(PARAM_CONFIGS)
    answers = []
    for name in names:
        what = f"count_parameters({name}'s config)"
        got = call(count_parameters, PARAM_CONFIGS[name], what=what)
        if isinstance(got, float) and not got.is_integer():
            raise CheckFailed(f"{what} returned {got!r}; a parameter count is a whole number")
        answers.append(as_int(got, what))
    wants = [parameter_count_reference(PARAM_CONFIGS[n]) for n in names]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("count_parameters", len(names))
        return
    i = wrong[0]
    configs = [PARAM_CONFIGS[n] for n in names]
    hint = matching_mistake(answers, [
        ("with tie_embeddings the LM head IS the embedding matrix: count it once",
         [_param_variant(c, head=True) for c in configs]),
        ("without tie_embeddings the LM head is a matrix of its own, vocab_size x hidden_size",
         [_param_variant(c, head=False) for c in configs]),
        ("the RMSNorm weights count too: two per layer and one at the end, hidden_size each",
         [_param_variant(c, norms=False) for c in configs]),
        ("k_proj and v_proj have n_kv_heads x head_dim rows, not n_heads x head_dim: grouped-"
         "query attention shares them", [_param_variant(c, gqa=False) for c in configs]),
        ("SwiGLU has three matrices, gate, up and down, each hidden_size x intermediate_size",
         [_param_variant(c, mlp_matrices=2) for c in configs]),
    ], int.__eq__)
    c = PARAM_CONFIGS[names[i]]
    raise CheckFailed(f"count_parameters({names[i]}'s config) returned {answers[i]:,}, the "
                      f"model has {wants[i]:,}" + (f": {hint}" if hint else
                                                   ": embedding + per layer (q, k, v, o, gate, up, "
                                                   "down, two norms) + final norm + LM head "
                                                   f"(tie_embeddings={c.tie_embeddings})"))


# --- 3 · Q13: the KV cache's bytes ---------------------------------------------------------------

KV_CASES = [  # (config name, tokens, batch, dtype)
    ("SmolLM2-135M", 8192, 1, torch.float16), ("SmolLM2-135M", 2048, 16, torch.float32),
    ("Llama-2-7B", 4096, 1, torch.float16), ("Llama-3-8B", 8192, 8, torch.bfloat16),
    ("a tiny model", 10, 3, torch.float32), ("a tiny model", 7, 2, torch.bfloat16),
    ("SmolLM2-360M", 1000, 4, torch.float32)]


def _kv_reference(config, tokens, batch, dtype):
    from ...generation.kv_cache import KVCache

    if config.n_layers * tokens * batch <= 10_000:  # small enough to allocate for real
        return KVCache(config.n_layers, batch, config.n_kv_heads, config.head_dim, tokens,
                       dtype=dtype).capacity_bytes
    size = torch.tensor([], dtype=dtype).element_size()
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens * batch * size


def _kv_variant(c, tokens, batch, dtype, *, heads="kv", factor=2, size=None, with_batch=True):
    size = torch.tensor([], dtype=dtype).element_size() if size is None else size
    n = c.n_kv_heads if heads == "kv" else c.n_heads
    return factor * c.n_layers * n * c.head_dim * tokens * (batch if with_batch else 1) * size


@checker
def check_kv_cache_bytes(kv_cache_bytes) -> None:
    """`kv_cache_bytes(config, tokens, batch, dtype)`: the bytes of the keys and values of
    `batch` sequences of `tokens` tokens, as a minillm KVCache holds them."""
    cases = [(PARAM_CONFIGS[name], tokens, batch, dtype) for name, tokens, batch, dtype in KV_CASES]
    answers = []
    for (name, tokens, batch, dtype), case in zip(KV_CASES, cases):
        what = f"kv_cache_bytes({name}'s config, tokens={tokens}, batch={batch}, {dtype})"
        got = call(kv_cache_bytes, *case, what=what)
        if isinstance(got, float) and not got.is_integer():
            raise CheckFailed(f"{what} returned {got!r}; bytes are a whole number")
        answers.append(as_int(got, what))
    wants = [_kv_reference(*c) for c in cases]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("kv_cache_bytes", len(cases))
        return
    i = wrong[0]
    hint = matching_mistake(answers, [
        ("the cache holds n_kv_heads heads per layer, not n_heads: that is what grouped-query "
         "attention saves", [_kv_variant(*c, heads="q") for c in cases]),
        ("half the answer: keys AND values, the factor 2", [_kv_variant(*c, factor=1)
                                                            for c in cases]),
        ("every sequence of the batch has its own cache: multiply by batch",
         [_kv_variant(*c, with_batch=False) for c in cases]),
        ("the bytes per value depend on dtype: torch.tensor([], dtype=dtype).element_size() "
         "(2 for float16 and bfloat16, 4 for float32)", [_kv_variant(*c, size=4) for c in cases]),
        ("element_size() is in bytes; do not multiply by 8",
         [8 * _kv_variant(*c) for c in cases]),
    ], int.__eq__)
    name, tokens, batch, dtype = KV_CASES[i]
    raise CheckFailed(f"kv_cache_bytes({name}'s config, tokens={tokens}, batch={batch}, {dtype}) "
                      f"returned {answers[i]:,}, expected {wants[i]:,}"
                      + (f": {hint}" if hint else ": 2 x n_layers x n_kv_heads x head_dim x "
                                                  "tokens x batch x bytes per value"))


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
