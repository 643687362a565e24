"""Checkers for exercises/00_welcome.ipynb: the three ends of the inference path.

- `chat_prompt(messages)`: the one string a chat model reads, compared with minillm's ChatML
  (`minillm.tokenizer.chat.chatml`, SmolLM2's template in plain Python).
- `answer(model, tokenizer, messages, max_new_tokens)`: text in, text out, compared with the
  tokens greedy `generate()` gives on the same prompt.
- `decode_speed(token_times)`: compared with `minillm.measure.metrics.RequestMetrics`.
"""

from __future__ import annotations

from ...measure.metrics import RequestMetrics
from ...tokenizer.chat import SMOLLM_SYSTEM, chatml
from ._base import (CheckFailed, as_number, call, checker, expect, expect_raises, is_close,
                    matching_mistake, passed, short)

# --- 1 · the chat prompt ----------------------------------------------------------------------

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in one word."},
     {"role": "user", "content": "Capital of Italy?"}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "你好，世界！"}],
    [{"role": "user", "content": "Two lines:\nfirst\nsecond"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaces  "}],
]


def _chat_mistakes(cases):
    return [
        ("the prompt must end by opening the assistant's turn, `<|im_start|>assistant\\n`: "
         "that is what makes the model answer instead of carrying on the user's message",
         [chatml(m, False, SMOLLM_SYSTEM) for m in cases]),
        ("when the conversation has no system message, SmolLM2's template puts its default one "
         f"first: `<|im_start|>system\\n{SMOLLM_SYSTEM}<|im_end|>\\n`",
         [chatml(m, True, None) for m in cases]),
        ("add the default system message only when the conversation has none; a conversation "
         "that starts with its own system message keeps just that one",
         [chatml([{"role": "system", "content": SMOLLM_SYSTEM}] + m, True, None) for m in cases]),
        ("each message ends with `<|im_end|>` followed by a newline `\\n`",
         [chatml(m, True, SMOLLM_SYSTEM).replace("<|im_end|>\n", "<|im_end|>") for m in cases]),
    ]


def _first_difference(got: str, want: str) -> str:
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (f"they first differ at character {i}: yours has {got[i:i + 25]!r}, the template "
            f"{want[i:i + 25]!r}")


@checker
def check_chat_prompt(chat_prompt) -> None:
    """`chat_prompt(messages)` must give the ChatML string SmolLM2's template gives, with the
    assistant's turn opened at the end."""
    answers = []
    for messages in CONVERSATIONS:
        got = call(chat_prompt, messages, what=f"chat_prompt({short(messages, 70)})")
        expect(isinstance(got, str), f"chat_prompt({short(messages, 70)}) returned "
                                     f"{type(got).__name__}; return the prompt as one str")
        answers.append(got)
    wants = [chatml(m, True, SMOLLM_SYSTEM) for m in CONVERSATIONS]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("chat_prompt", len(CONVERSATIONS))
        return
    i = wrong[0]
    hint = matching_mistake(answers, _chat_mistakes(CONVERSATIONS), str.__eq__)
    raise CheckFailed(f"chat_prompt({short(CONVERSATIONS[i], 70)}) returned {answers[i]!r}, "
                      f"expected {wants[i]!r}; "
                      + (hint or _first_difference(answers[i], wants[i])))


# --- 2 · text in, text out --------------------------------------------------------------------

ANSWER_CASES = [
    ([{"role": "user", "content": "What is the capital of France?"}], 12),
    ([{"role": "user", "content": "Name three colours."}], 5),
    ([{"role": "system", "content": "You answer in French."},
      {"role": "user", "content": "How are you?"}], 9),
]


def _generate_ids(model, tokenizer, prompt: str, max_new_tokens: int):
    import torch

    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                             attention_mask=torch.ones_like(ids),
                             pad_token_id=tokenizer.eos_token_id)
    return ids[0].tolist(), out[0, ids.shape[1]:].tolist()


def _answer_mistakes(model, tokenizer, cases, runs):
    """The answers of typical mistakes; those that need another generation come last."""
    yield ("decode only the new tokens (the ids after the prompt's); you returned the prompt "
           "too", [tokenizer.decode(p + n, skip_special_tokens=True) for p, n in runs])
    yield ("the text still holds special tokens such as `<|im_end|>`: decode with "
           "`skip_special_tokens=True`", [tokenizer.decode(n) for _, n in runs])
    yield ("the model never saw the chat template: build the prompt with "
           "`tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
           "tokenize=False)` (or your chat_prompt)",
           [tokenizer.decode(_generate_ids(model, tokenizer, m[-1]["content"], k)[1],
                             skip_special_tokens=True) for m, k in cases])
    yield ("the prompt does not open the assistant's turn, so the model carries on the user's "
           "message: use add_generation_prompt=True",
           [tokenizer.decode(_generate_ids(model, tokenizer, chatml(m, False, SMOLLM_SYSTEM),
                                           k)[1], skip_special_tokens=True) for m, k in cases])


@checker
def check_answer(answer, model, tokenizer) -> None:
    """`answer(model, tokenizer, messages, max_new_tokens)` must return the text of the greedy
    answer: chat template, tokens, generate, then only the new tokens back to text."""
    answers = []
    for messages, k in ANSWER_CASES:
        what = f"answer(model, tokenizer, {short(messages, 60)}, {k})"
        got = call(answer, model, tokenizer, messages, k, what=what)
        expect(isinstance(got, str), f"{what} returned {type(got).__name__}; return the "
                                     "answer's text as a str (tokenizer.decode gives one)")
        answers.append(got)
    runs = [_generate_ids(model, tokenizer, chatml(m, True, SMOLLM_SYSTEM), k)
            for m, k in ANSWER_CASES]
    wants = [tokenizer.decode(n, skip_special_tokens=True) for _, n in runs]
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("answer", len(ANSWER_CASES))
        return
    i = wrong[0]
    messages, k = ANSWER_CASES[i]
    hint = None
    for text, wrong_answers in _answer_mistakes(model, tokenizer, ANSWER_CASES, runs):
        if answers == wrong_answers:
            hint = text
            break
    if hint is None and len(answers[i]) > len(wants[i]) and answers[i].startswith(wants[i]):
        hint = (f"it runs past max_new_tokens={k}: generate at most that many new tokens")
    raise CheckFailed(f"answer(model, tokenizer, {short(messages, 60)}, {k}) returned "
                      f"{answers[i]!r}; greedy decoding gives {wants[i]!r}. "
                      + (hint or "Use greedy decoding (do_sample=False) on the chat prompt and "
                                 "decode only the new tokens, skipping special tokens"))


# --- 3 · decode speed -------------------------------------------------------------------------

DECODE_CASES = [
    [0.50, 0.55, 0.60, 0.65, 0.70],
    [1.0, 1.1],
    [0.2, 0.3, 0.5, 0.6, 0.9, 1.0, 1.2],
    [12.0, 12.02, 12.05, 12.07, 12.1, 12.12, 12.15, 12.17, 12.2, 12.23, 12.25, 12.28],
    [3.0, 3.5, 3.6],
]


def _decode_mistakes(cases):
    return [
        ("it counted the first token, but the first token comes from prefill: count only the "
         "tokens after it", [len(t) / (t[-1] - t[0]) for t in cases]),
        ("that is seconds per token; decode speed is tokens per second, the inverse",
         [(t[-1] - t[0]) / (len(t) - 1) for t in cases]),
        ("it timed from 0 instead of from the first token: decode starts when the first token "
         "is out", [(len(t) - 1) / t[-1] for t in cases]),
    ]


@checker
def check_decode_speed(decode_speed) -> None:
    """`decode_speed(token_times)` must give decode tokens per second, leaving out the first token
    (it comes from prefill, not decode), as RequestMetrics.decode_tokens_per_second does."""
    answers, wants = [], []
    for times in DECODE_CASES:
        what = f"decode_speed({times})"
        answers.append(as_number(call(decode_speed, times, what=what), what))
        wants.append(RequestMetrics(0.0, tuple(times)).decode_tokens_per_second)
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not is_close(g, w)]
    if wrong:
        i = wrong[0]
        hint = matching_mistake(answers, _decode_mistakes(DECODE_CASES), is_close)
        raise CheckFailed(f"decode_speed({DECODE_CASES[i]}) returned {answers[i]:.6g}, expected "
                          f"{wants[i]:.6g} tokens/s"
                          + (f": {hint}" if hint else ": (tokens after the first) / (last time "
                                                      "- first time)"))
    for times in ([1.0], []):
        expect_raises(decode_speed, times, error=ValueError,
                      why=f"with {len(times)} token{'s' if len(times) != 1 else ''} there is no "
                          "decode step to time")
    passed("decode_speed", len(DECODE_CASES) + 2)
