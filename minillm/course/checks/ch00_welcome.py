"""Checkers for exercises/00_welcome.ipynb: the three ends of the inference path.

- `chat_prompt(messages)`: the one string a chat model reads, compared with minillm's ChatML
  (`minillm.tokenizer.chat.chatml`, SmolLM2's template in plain Python).
- `answer(model, tokenizer, messages, max_new_tokens)`: text in, text out, compared with the
  tokens greedy `generate()` gives on the same prompt.
- `decode_speed(token_times)`: compared with `minillm.measure.metrics.RequestMetrics`.

Every message says both languages side by side (`say`), chosen by the notebook's set_language.
"""

from __future__ import annotations

import operator

from ...measure.metrics import RequestMetrics
from ...tokenizer.chat import SMOLLM_SYSTEM, chatml
from ..language import say
from ._base import (CheckFailed, as_number, call, checker, expect, expect_raises, first_failure,
                    is_close, matching_mistake, passed, short)

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
HIDDEN_CONVERSATIONS = [
    [{"role": "user", "content": "How many legs does a spider have?"}],
    [{"role": "system", "content": "You are a pirate.\nSpeak like one."},
     {"role": "user", "content": "Where is the treasure?"},
     {"role": "assistant", "content": "Arr, under the palm!"},
     {"role": "user", "content": "Which palm?"}],
    [{"role": "user", "content": "Écris « bonjour » 🙂"}],
    [{"role": "user", "content": "\ttab, then a blank line\n\nend"},
     {"role": "assistant", "content": "Done."}, {"role": "user", "content": ""}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "ok?"}],
]


def _chat_mistakes(cases):
    return [
        (say("the prompt must end by opening the assistant's turn, `<|im_start|>assistant\\n`: "
             "that is what makes the model answer instead of carrying on the user's message",
             "提示词必须以开启助手的轮次结尾，即 `<|im_start|>assistant\\n`：模型正是看到它才会"
             "作答，而不是接着用户的话往下写"),
         [chatml(m, False, SMOLLM_SYSTEM) for m in cases]),
        (say("when the conversation has no system message, SmolLM2's template puts its default "
             "one first: `<|im_start|>system\\n{system}<|im_end|>\\n`",
             "对话里没有系统消息时，SmolLM2 的模板会先放上它默认的那一条："
             "`<|im_start|>system\\n{system}<|im_end|>\\n`", system=SMOLLM_SYSTEM),
         [chatml(m, True, None) for m in cases]),
        (say("add the default system message only when the conversation has none; a "
             "conversation that starts with its own system message keeps just that one",
             "只有对话里没有系统消息时才加默认的那一条；以自己的系统消息开头的对话只保留"
             "它自己的"),
         [chatml([{"role": "system", "content": SMOLLM_SYSTEM}] + m, True, None) for m in cases]),
        (say("each message ends with `<|im_end|>` followed by a newline `\\n`",
             "每条消息都以 `<|im_end|>` 结尾，后面紧跟一个换行符 `\\n`"),
         [chatml(m, True, SMOLLM_SYSTEM).replace("<|im_end|>\n", "<|im_end|>") for m in cases]),
    ]


def _first_difference(got: str, want: str) -> str:
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return say("they first differ at character {i}: yours has {got!r}, the template {want!r}",
               "两者从第 {i} 个字符起开始不同：你的是 {got!r}，模板的是 {want!r}", i=i,
               got=got[i:i + 25], want=want[i:i + 25])


@checker
def check_chat_prompt(chat_prompt, *, hidden=False) -> None:
    """`chat_prompt(messages)` must give the ChatML string SmolLM2's template gives, with the
    assistant's turn opened at the end."""
    cases = HIDDEN_CONVERSATIONS if hidden else CONVERSATIONS
    answers = []
    for messages in cases:
        got = call(chat_prompt, messages, what=f"chat_prompt({short(messages, 70)})")
        expect(isinstance(got, str),
               say("chat_prompt({messages}) returned {kind}; return the prompt as one str",
                   "chat_prompt({messages}) 返回了 {kind}；请把提示词作为一个 str 返回",
                   messages=short(messages, 70), kind=type(got).__name__))
        answers.append(got)
    wants = [chatml(m, True, SMOLLM_SYSTEM) for m in cases]
    failure = first_failure("chat_prompt", answers, wants, operator.eq,
                            lambda: _chat_mistakes(cases))
    if failure is None:
        return
    i, hint = failure
    raise CheckFailed(say("chat_prompt({messages}) returned {got!r}, expected {want!r}; {hint}",
                          "chat_prompt({messages}) 返回了 {got!r}，应为 {want!r}；{hint}",
                          messages=short(cases[i], 70), got=answers[i], want=wants[i],
                          hint=hint or _first_difference(answers[i], wants[i])))


# --- 2 · text in, text out --------------------------------------------------------------------

ANSWER_CASES = [
    ([{"role": "user", "content": "What is the capital of France?"}], 12),
    ([{"role": "user", "content": "Name three colours."}], 5),
    ([{"role": "system", "content": "You answer in French."},
      {"role": "user", "content": "How are you?"}], 9),
]
HIDDEN_ANSWER_CASES = [  # about as many new tokens as ANSWER_CASES: the real model runs them
    ([{"role": "user", "content": "What is 2 plus 2?"}], 12),
    ([{"role": "system", "content": "You are a poet."},
      {"role": "user", "content": "Describe the sea."}], 6),
    ([{"role": "user", "content": "Hello!"},
      {"role": "assistant", "content": "Hi! How can I help you today?"},
      {"role": "user", "content": "Tell me a fact about cats."}], 8),
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
    yield (say("decode only the new tokens (the ids after the prompt's); you returned the "
               "prompt too",
               "只解码新生成的词元（提示词之后的那些 id）；你把提示词也一起返回了"),
           [tokenizer.decode(p + n, skip_special_tokens=True) for p, n in runs])
    yield (say("the text still holds special tokens such as `<|im_end|>`: decode with "
               "`skip_special_tokens=True`",
               "文本里还留着 `<|im_end|>` 这样的特殊词元：解码时要传 "
               "`skip_special_tokens=True`"),
           [tokenizer.decode(n) for _, n in runs])
    yield (say("the model never saw the chat template: build the prompt with "
               "`tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
               "tokenize=False)` (or your chat_prompt)",
               "模型根本没看到对话模板：请用 `tokenizer.apply_chat_template(messages, "
               "add_generation_prompt=True, tokenize=False)`（或者你的 chat_prompt）构造提示词"),
           [tokenizer.decode(_generate_ids(model, tokenizer, m[-1]["content"], k)[1],
                             skip_special_tokens=True) for m, k in cases])
    yield (say("the prompt does not open the assistant's turn, so the model carries on the "
               "user's message: use add_generation_prompt=True",
               "提示词没有开启助手的轮次，于是模型接着用户的话往下写：请传入 "
               "add_generation_prompt=True"),
           [tokenizer.decode(_generate_ids(model, tokenizer, chatml(m, False, SMOLLM_SYSTEM),
                                           k)[1], skip_special_tokens=True) for m, k in cases])


@checker
def check_answer(answer, model, tokenizer, *, hidden=False) -> None:
    """`answer(model, tokenizer, messages, max_new_tokens)` must return the text of the greedy
    answer: chat template, tokens, generate, then only the new tokens back to text."""
    cases = HIDDEN_ANSWER_CASES if hidden else ANSWER_CASES
    answers = []
    for messages, k in cases:
        what = f"answer(model, tokenizer, {short(messages, 60)}, {k})"
        got = call(answer, model, tokenizer, messages, k, what=what)
        expect(isinstance(got, str),
               say("{what} returned {kind}; return the answer's text as a str (tokenizer.decode "
                   "gives one)",
                   "{what} 返回了 {kind}；请把回答的文本作为 str 返回（tokenizer.decode 返回的"
                   "就是 str）", what=what, kind=type(got).__name__))
        answers.append(got)
    runs = [_generate_ids(model, tokenizer, chatml(m, True, SMOLLM_SYSTEM), k)
            for m, k in cases]
    wants = [tokenizer.decode(n, skip_special_tokens=True) for _, n in runs]
    failure = first_failure("answer", answers, wants, operator.eq)
    if failure is None:
        return
    i = failure[0]
    messages, k = cases[i]
    hint = None
    for text, wrong_answers in _answer_mistakes(model, tokenizer, cases, runs):
        if answers == wrong_answers:
            hint = text
            break
    if hint is None and len(answers[i]) > len(wants[i]) and answers[i].startswith(wants[i]):
        hint = say("it runs past max_new_tokens={k}: generate at most that many new tokens",
                   "它超过了 max_new_tokens={k}：新生成的词元最多只能有这么多个", k=k)
    raise CheckFailed(say("answer(model, tokenizer, {messages}, {k}) returned {got!r}; greedy "
                          "decoding gives {want!r}. {hint}",
                          "answer(model, tokenizer, {messages}, {k}) 返回了 {got!r}；"
                          "贪心解码得到的是 {want!r}。{hint}",
                          messages=short(messages, 60), k=k, got=answers[i], want=wants[i],
                          hint=hint or say(
                              "Use greedy decoding (do_sample=False) on the chat prompt and "
                              "decode only the new tokens, skipping special tokens",
                              "请对套用了对话模板的提示词做贪心解码（do_sample=False），"
                              "并且只解码新生成的词元，跳过特殊词元")))


# --- 3 · decode speed -------------------------------------------------------------------------

DECODE_CASES = [
    [0.50, 0.55, 0.60, 0.65, 0.70],
    [1.0, 1.1],
    [0.2, 0.3, 0.5, 0.6, 0.9, 1.0, 1.2],
    [12.0, 12.02, 12.05, 12.07, 12.1, 12.12, 12.15, 12.17, 12.2, 12.23, 12.25, 12.28],
    [3.0, 3.5, 3.6],
]
HIDDEN_DECODE_CASES = [
    [2.0, 2.04, 2.09, 2.13, 2.18, 2.22],
    [0.8, 1.3],
    [0.05, 0.45, 0.46, 0.47, 0.48, 0.49, 0.5, 0.51],
    [100.0, 100.25, 100.75, 101.0],
    [7.0, 7.001, 7.002, 7.0035],
]


def _decode_mistakes(cases):
    return [
        (say("it counted the first token, but the first token comes from prefill: count only "
             "the tokens after it",
             "它把第一个词元也算进去了，可第一个词元来自预填充：只数它之后的词元"),
         [len(t) / (t[-1] - t[0]) for t in cases]),
        (say("that is seconds per token; decode speed is tokens per second, the inverse",
             "这是每个词元花的秒数；解码速度是每秒词元数，正好是它的倒数"),
         [(t[-1] - t[0]) / (len(t) - 1) for t in cases]),
        (say("it timed from 0 instead of from the first token: decode starts when the first "
             "token is out",
             "它从 0 开始计时，而不是从第一个词元开始：第一个词元出来之后解码才开始"),
         [(len(t) - 1) / t[-1] for t in cases]),
    ]


@checker
def check_decode_speed(decode_speed, *, hidden=False) -> None:
    """`decode_speed(token_times)` must give decode tokens per second, leaving out the first token
    (it comes from prefill, not decode), as RequestMetrics.decode_tokens_per_second does."""
    cases = HIDDEN_DECODE_CASES if hidden else DECODE_CASES
    answers, wants = [], []
    for times in cases:
        what = f"decode_speed({times})"
        answers.append(as_number(call(decode_speed, times, what=what), what))
        wants.append(RequestMetrics(0.0, tuple(times)).decode_tokens_per_second)
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not is_close(g, w)]
    if wrong:
        i = wrong[0]
        hint = matching_mistake(answers, _decode_mistakes(cases), is_close)
        raise CheckFailed(say("decode_speed({times}) returned {got:.6g}, expected {want:.6g} "
                              "tokens/s: {hint}",
                              "decode_speed({times}) 返回了 {got:.6g}，应为每秒 {want:.6g} 个"
                              "词元：{hint}",
                              times=cases[i], got=answers[i], want=wants[i],
                              hint=hint or say("(tokens after the first) / (last time - first "
                                               "time)",
                                               "（第一个之后的词元数）/（最后时刻 - 最初时刻）")))
    for times in ([4.25], []) if hidden else ([1.0], []):
        expect_raises(decode_speed, times, error=ValueError,
                      why=say("with {n} token{s} there is no decode step to time",
                              "只有 {n} 个词元时，没有可以计时的解码步", n=len(times),
                              s="s" if len(times) != 1 else ""))
    passed("decode_speed", len(cases) + 2)
